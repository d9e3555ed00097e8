"""A Kafka source's Spark stream reader: the offsets of each epoch, planned in the reader's
own process on the driver's host, and the tasks that read them.

An offset is ``{"sid", "finished": false, "cv", "kafka": {topic: {partition: next}}}``, with
``"from"`` where the epoch reads a partition from elsewhere than the previous end (a
partition new to the source: from its beginning; a skip past deleted records) and
``"skipped"`` (the records skipped for data loss so far, when any). Spark logs it before the
epoch runs, so a replay reads the same records: ``partitions`` is a function of the two
offsets alone.

Each plan asks the brokers, in one request each, for the partitions the source reads (named
topics, or those matching the pattern), their earliest offsets and their last stable offsets
(read_committed: the first offset whose transaction is undecided; the high watermark under
read_uncommitted). An epoch ends at the last stable offset, or earlier where a limit (the
source's ``max_records_per_epoch``, control's ``max_rows_per_epoch`` or ``rows_per_second``)
apportions fewer records, in proportion to what each partition has.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from stoker.errors import InvalidSource
from stoker.sources._control import CV, ReaderControl, hush_if_spark_hung_up, limit_of
from stoker.sources._kafka_client import (
    OPTION_PREFIX,
    TP,
    Brokers,
    decode_starting,
    flat,
    load_start,
    nest,
    resolve_start,
    save_start,
)
from stoker.sources._kafka_read import loss_message, read_range
from stoker.sources.base import FINISHED, SID

if TYPE_CHECKING:
    from collections.abc import Iterator

    import pyarrow as pa

_log = logging.getLogger("stoker.sources.kafka")
KAFKA = "kafka"  # the offset's key for the positions
FROM = "from"
SKIPPED = "skipped"
RATE_BURST_S = 5.0  # a rate limit saves up at most this many seconds of records while idle


class _Slice(InputPartition):
    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end


class _KafkaReader(DataSourceStreamReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.sid = options["sid"]
        self.bootstrap = options["bootstrap_servers"]
        topics = options.get("topics") or ""
        self.topics = json.loads(topics) if topics else None
        self.pattern = options.get("pattern") or None
        self.starting = decode_starting(options["starting_offsets"])
        self.max_records = int(options.get("max_records_per_epoch") or 0)
        self.isolation = options.get("isolation") or "read_committed"
        self.fail_on_data_loss = options.get("fail_on_data_loss", "true") == "true"
        self.start_path = Path(options["start_path"]) if options.get("start_path") else None
        self.client = {
            k[len(OPTION_PREFIX) :]: v for k, v in options.items() if k.startswith(OPTION_PREFIX)
        }
        self.control = ReaderControl(
            options.get("store_url"), options.get("job_id"), options.get("pace_s")
        )
        self._brokers: Brokers | None = None
        self._latest: dict[TP, int] | None = None  # last stable offsets seen at the last plan
        self._rate_clock: float | None = None

    # planning (the reader's process) ---------------------------------------------------------
    def _b(self) -> Brokers:
        if self._brokers is None:
            self._brokers = Brokers(self.bootstrap, self.client, self.isolation)
        return self._brokers

    def initialOffset(self) -> dict[str, Any]:
        # Spark asks again after a restart that comes before the first commit: the first
        # answer is kept in the state folder, so "latest" (or a timestamp) means the same.
        start = load_start(self.start_path) if self.start_path is not None else None
        if start is None:
            b = self._b()
            start = resolve_start(b, b.assigned(self.topics, self.pattern), self.starting)
            if self.start_path is not None:
                save_start(self.start_path, start)
        return {SID: self.sid, FINISHED: False, KAFKA: nest(start)}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_records) if self.max_records else ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        plan = self.control.plan(start)
        if plan.hold:
            return start
        if plan.empty:
            return {**start, CV: plan.version}
        b = self._b()
        have = flat(start.get(KAFKA))
        tps = b.assigned(self.topics, self.pattern)
        gone = sorted(set(have) - tps)
        for t, p in gone:
            _log.warning("source %s: topic %r partition %d is no longer read", self.sid, t, p)
        earliest = b.offsets(tps, "earliest")
        latest = b.offsets(tps, "latest")
        self._latest = latest
        begin: dict[TP, int] = {}
        moved: dict[TP, int] = {}
        skipped = int(start.get(SKIPPED) or 0)
        for tp in sorted(tps):
            low = earliest[tp]
            if tp not in have:
                begin[tp] = moved[tp] = low  # new to the source: from its beginning
                if low > 0:
                    _log.info(
                        "source %s: topic %r partition %d is read from offset %d, its earliest",
                        self.sid,
                        tp[0],
                        tp[1],
                        low,
                    )
                continue
            pos = have[tp]
            if pos < low:
                message = loss_message(tp[0], tp[1], pos, low, self.fail_on_data_loss)
                if self.fail_on_data_loss:
                    raise InvalidSource("kafka.fail_on_data_loss", message)
                _log.warning("source %s: %s", self.sid, message)
                skipped += low - pos
                begin[tp] = moved[tp] = low
            else:
                begin[tp] = pos
        avail = {tp: max(0, latest[tp] - o) for tp, o in begin.items()}
        cap = self._cap(plan, limit, sum(avail.values()))
        take = apportion(avail, cap)
        end = {tp: o + take[tp] for tp, o in begin.items()}
        if not moved and end == have and not gone and start.get(CV) == plan.version:
            return start  # nothing new: no epoch
        offset: dict[str, Any] = {SID: self.sid, FINISHED: False, KAFKA: nest(end)}
        if moved:
            offset[FROM] = nest(moved)
        if skipped:
            offset[SKIPPED] = skipped
        if plan.version is not None:
            offset[CV] = plan.version
        return offset

    def _cap(self, plan: Any, limit: ReadLimit, available: int) -> int | None:
        """How many records this epoch may take, None: all."""
        caps: list[int] = []
        max_rows = limit_of(plan, "max_rows_per_epoch", self.max_records or None)
        if max_rows:
            caps.append(int(max_rows))
        elif isinstance(limit, ReadMaxRows) and "max_rows_per_epoch" not in plan.limits:
            caps.append(int(limit.max_rows))
        rate = limit_of(plan, "rows_per_second", None)
        if rate:
            now = time.monotonic()
            if self._rate_clock is None:
                self._rate_clock = now
            self._rate_clock = max(self._rate_clock, now - RATE_BURST_S)
            budget = int((now - self._rate_clock) * float(rate))
            caps.append(budget)
            self._rate_clock += min(budget, available) / float(rate)
        else:
            self._rate_clock = None
        return min(caps) if caps else None

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """The last stable offsets seen at the last plan (what could be read now)."""
        if self._latest is None:
            return None
        return {SID: self.sid, FINISHED: False, KAFKA: nest(self._latest)}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        have = flat(start.get(KAFKA))
        moved = flat(end.get(FROM))
        out: list[InputPartition] = []
        for (t, p), stop in sorted(flat(end.get(KAFKA)).items()):
            begin = moved.get((t, p), have.get((t, p), stop))
            if stop > begin:
                out.append(_Slice(t, p, begin, stop))
        return out

    # reading (the executors) -----------------------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _Slice)
        yield from read_range(
            self.bootstrap,
            self.client,
            self.isolation,
            partition.topic,
            partition.partition,
            partition.start,
            partition.end,
            self.fail_on_data_loss,
        )

    def commit(self, end: dict[str, Any]) -> None:
        pass  # positions live in Spark's offset log; nothing is committed to Kafka

    def stop(self) -> None:
        hush_if_spark_hung_up()
        self.control.close_quietly()


def apportion(avail: dict[TP, int], cap: int | None) -> dict[TP, int]:
    """Records each partition gives to an epoch: all of ``avail`` when ``cap`` is None or
    enough, else ``cap`` shared in proportion to what each has (the remainder to those with
    the most left), never more than a partition has."""
    total = sum(avail.values())
    if cap is None or total <= cap:
        return dict(avail)
    cap = max(0, cap)
    share = {tp: n * cap // total for tp, n in avail.items()}
    rest = cap - sum(share.values())
    for tp in sorted(avail, key=lambda x: (share[x] - avail[x], x)):
        if rest <= 0:
            break
        if share[tp] < avail[tp]:
            share[tp] += 1
            rest -= 1
    return share


def backlog(end: dict[str, Any], latest: dict[str, Any]) -> int:
    """Records the brokers had beyond an epoch's end: the sum over its partitions of the last
    stable offset (``latest``, what ``reportLatestOffset`` said) minus the end, never
    negative."""
    ends, lasts = flat(end.get(KAFKA)), flat(latest.get(KAFKA))
    return sum(max(0, lasts[tp] - o) for tp, o in ends.items() if tp in lasts)


def partition_backlog(end: dict[str, Any], latest: dict[str, Any]) -> dict[str, int]:
    """:func:`backlog` per partition, as ``{"topic/partition": records}``."""
    ends, lasts = flat(end.get(KAFKA)), flat(latest.get(KAFKA))
    return {f"{t}/{p}": max(0, lasts[(t, p)] - o) for (t, p), o in ends.items() if (t, p) in lasts}
