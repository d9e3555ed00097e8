"""What each epoch cost and left behind, recorded with the epoch: the scaler's signals.

After every epoch the driver's supervise loop reads the query's progress (Spark keeps the
recent ones: ``query.recentProgress``; no JVM listener is needed) and records with the epoch
(``Store.set_epoch_metrics``): how long Spark took for it (``durationMs.triggerExecution``),
the backlog its sources had beyond its end, the executors and cores the job's driver had
at its end (from the :class:`~stoker.runtime.resources.ResourceWatch`), and the progress's
rates, phases, sources and stateful operators for the dashboard
(:mod:`stoker.runtime.progress_summary`).

Backlog, per source, from the progress's end and latest offsets: stoker's generator (rows),
files source (files) and Kafka source (records: last stable offsets) report their latest
offset themselves (``reportLatestOffset``);
Kafka reports its own (and offsets-behind metrics). A source that reports nothing counts as
unknown; an epoch's backlog is the sum over the sources that report one, None when none does.

Recording is best effort: a failure is logged and the job goes on; a metric missing from an
epoch only makes the scaler's view coarser.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from stoker.runtime.progress_summary import summarize
from stoker.sources._files_reader import backlog as files_backlog
from stoker.sources._kafka_reader import KAFKA
from stoker.sources._kafka_reader import backlog as stoker_kafka_backlog
from stoker.sources._kafka_reader import partition_backlog as stoker_kafka_partitions
from stoker.sources.base import SID
from stoker.sources.generator import backlog as generator_backlog
from stoker.sources.spark import kafka_backlog, kafka_partition_backlog
from stoker.types import Epoch, JobId

if TYPE_CHECKING:
    from pyspark.sql.streaming import StreamingQuery

    from stoker.store import Store

log = logging.getLogger("stoker.metrics")

# An epoch whose progress Spark has not posted this long after it ended is given up on (a
# progress can be missed: the query restarted, or ended with it).
GIVE_UP_S = 10.0
LOOK_S = 0.1  # at most this often a look at the query's progress while one is awaited


class _Timed(Protocol):
    epoch: int
    work_s: float | None


def _offset(value: Any) -> Any:
    """An offset as the progress holds it (JSON text, or already parsed) as a value."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return None
    return value


def source_backlog(source: Mapping[str, Any]) -> int | None:
    """The backlog one source of a progress reports beyond the epoch's end; None: unknown."""
    end, latest = _offset(source.get("endOffset")), _offset(source.get("latestOffset"))
    if isinstance(end, dict) and SID in end:
        if not isinstance(latest, dict) or latest.get(SID) != end.get(SID):
            return None
        try:
            if "next" in end and "next" in latest:
                return generator_backlog(end, latest)
            if "seq" in end and "seq" in latest:
                return files_backlog(end, latest)
            if KAFKA in end and KAFKA in latest:
                return stoker_kafka_backlog(end, latest)
        except (TypeError, ValueError):
            return None
        return None
    metrics = source.get("metrics")
    return kafka_backlog(end, latest, metrics if isinstance(metrics, Mapping) else None)


# Partitions whose backlog an epoch's summary keeps, over all its sources (the furthest behind
# of each, shared out evenly), and the characters of a partition's name kept: the summary must
# stay well under the store's bound of a progress (MAX_PROGRESS_BYTES) whatever the topics.
MAX_PARTITIONS = 48
MAX_PARTITION_NAME = 80


def source_partitions(source: Mapping[str, Any]) -> dict[str, int] | None:
    """The backlog of each partition of a Kafka source (stoker's or Spark's) beyond the
    epoch's end, ``{"topic/partition": records}``; None for a source without partitions or
    when its latest offsets are unknown."""
    end, latest = _offset(source.get("endOffset")), _offset(source.get("latestOffset"))
    if isinstance(end, dict) and SID in end:
        if isinstance(latest, dict) and latest.get(SID) == end.get(SID) and KAFKA in end:
            try:
                return stoker_kafka_partitions(end, latest) if KAFKA in latest else None
            except (TypeError, ValueError):
                return None
        return None
    return kafka_partition_backlog(end, latest)


def with_backlogs(summary: dict[str, Any], progress: Mapping[str, Any]) -> dict[str, Any]:
    """``summary`` (:func:`summarize`'s) with each source's backlog beyond the epoch's end
    (``backlog``) and, for a partitioned one, its partitions' (``partitions``: the
    ``MAX_PARTITIONS`` furthest behind, ``partitionsLeftOut``: how many more there are), so that
    ``stoker status``, the dashboard and ``/metrics`` show where a backlog is."""
    spark_sources = [s for s in progress.get("sources") or [] if isinstance(s, Mapping)]
    entries = summary.get("sources") or []
    each = MAX_PARTITIONS // max(1, len(entries))
    for entry, source in zip(entries, spark_sources, strict=False):
        if (total := source_backlog(source)) is not None:
            entry["backlog"] = total
        parts = source_partitions(source)
        if parts and each > 0:
            top = sorted(parts.items(), key=lambda kv: (-kv[1], kv[0]))
            entry["partitions"] = {_partition_name(name): n for name, n in sorted(top[:each])}
            if len(top) > each:
                entry["partitionsLeftOut"] = len(top) - each
    return summary


def _partition_name(name: str) -> str:
    if len(name) <= MAX_PARTITION_NAME:
        return name
    topic, _, part = name.rpartition("/")
    keep = MAX_PARTITION_NAME - len(part) - 4
    return f"{topic[:keep]}.../{part}"


def progress_backlog(progress: Mapping[str, Any]) -> int | None:
    """An epoch's backlog: the sum over its sources that report one; None if none does."""
    known = [b for s in progress.get("sources") or [] if (b := source_backlog(s)) is not None]
    return sum(known) if known else None


def ran_batch(progress: Mapping[str, Any]) -> bool:
    """Whether a progress is of an epoch that ran (not of a trigger that found no data:
    Spark reports those too, under the next epoch's id, with no ``addBatch``)."""
    return "addBatch" in (progress.get("durationMs") or {})


def epoch_duration_ms(progress: Mapping[str, Any]) -> float | None:
    value = (progress.get("durationMs") or {}).get("triggerExecution")
    return None if value is None else float(value)


class EpochMetrics:
    """Records each epoch's metrics once Spark has posted its progress."""

    def __init__(
        self,
        store: Store,
        job: JobId,
        resources: Callable[[], Mapping[str, Any] | None] = lambda: None,
        *,
        give_up_s: float = GIVE_UP_S,
        source_names: Sequence[str] = (),
    ) -> None:
        self.store = store
        self.job = job
        self.resources = resources
        self.give_up_s = give_up_s
        self.source_names = tuple(source_names)  # the pipeline's, for the progress summary
        self.reported = -1  # the newest epoch recorded (or given up on)
        self._waiting_since: float | None = None
        self._looked = 0.0
        self._failed = False

    def poll(self, query: StreamingQuery, timings: Sequence[_Timed]) -> None:
        """Record every epoch that ended since the last call and has its progress posted.
        Cheap when no epoch ended: no call into Spark."""
        if not timings:
            return
        newest = int(timings[-1].epoch)
        if newest <= self.reported:
            return
        now = time.monotonic()
        if now - self._looked < LOOK_S:
            return
        self._looked = now
        try:
            self._poll(query, newest, timings)
        except Exception as e:  # the job goes on; a failure is logged once until it clears
            if not self._failed:
                log.warning("job %s: recording epoch metrics failed: %s", self.job, e)
            self._failed = True
            self._give_up_after(newest)
        else:
            self._failed = False

    def _poll(self, query: StreamingQuery, newest: int, timings: Sequence[_Timed]) -> None:
        last = query.lastProgress
        if last is None or int(last["batchId"]) < newest or not ran_batch(last):
            self._give_up_after(newest)  # not posted yet: the next call looks again
            return
        progresses: list[Mapping[str, Any]] = [last]
        if int(last["batchId"]) > self.reported + 1:
            # Several epochs ended since the last look: their progresses are in the recent ones.
            progresses = list(query.recentProgress)
        self.record(progresses, newest, _work(timings))

    def record(
        self,
        progresses: Sequence[Mapping[str, Any]],
        newest: int,
        work: Mapping[int, float] | None = None,
    ) -> None:
        """Record the epochs in ``(reported, newest]`` that ``progresses`` hold (the last
        progress of an epoch that ran wins); ``work``: the seconds each epoch's sinks wrote."""
        by_epoch: dict[int, Mapping[str, Any]] = {}
        for p in progresses:
            epoch = int(p["batchId"])
            if self.reported < epoch <= newest and ran_batch(p):
                by_epoch[epoch] = p
        res = self.resources() or {}
        executors, cores = res.get("executors"), res.get("cores")
        for epoch in sorted(by_epoch):
            p = by_epoch[epoch]
            self.store.set_epoch_metrics(
                self.job,
                Epoch(epoch),
                duration_ms=epoch_duration_ms(p),
                backlog=progress_backlog(p),
                executors=executors if isinstance(executors, int) else None,
                cores=cores if isinstance(cores, int) else None,
                work_ms=None if (w := (work or {}).get(epoch)) is None else w * 1000.0,
                progress=with_backlogs(summarize(p, self.source_names), p),
            )
        self.reported = max([self.reported, *by_epoch]) if by_epoch else self.reported
        if self.reported >= newest:
            self._waiting_since = None

    def _give_up_after(self, newest: int) -> None:
        now = time.monotonic()
        if self._waiting_since is None:
            self._waiting_since = now
        elif now - self._waiting_since > self.give_up_s:
            log.debug("job %s: no progress for epochs up to %d: not recorded", self.job, newest)
            self.reported = newest
            self._waiting_since = None

    def flush(self, query: StreamingQuery | None, timings: Sequence[_Timed]) -> None:
        """At the end of the attempt: record what the last progresses hold, once."""
        if query is None or not timings or int(timings[-1].epoch) <= self.reported:
            return
        try:
            self.record(list(query.recentProgress), int(timings[-1].epoch), _work(timings))
        except Exception as e:
            log.warning("job %s: recording the last epochs' metrics failed: %s", self.job, e)


def _work(timings: Sequence[_Timed]) -> dict[int, float]:
    """The epochs' write times by epoch (replays have none); the processor keeps the newest
    few hundred only."""
    return {int(t.epoch): t.work_s for t in timings if t.work_s is not None}


__all__ = [
    "EpochMetrics",
    "epoch_duration_ms",
    "progress_backlog",
    "ran_batch",
    "source_backlog",
    "source_partitions",
    "with_backlogs",
]
