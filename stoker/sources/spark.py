"""Any of Spark's own streaming sources (kafka, rate-micro-batch, ...), always unbounded.

Exactly once needs a source that can replay: after a crash, Spark runs the epoch in flight
again with the offsets its checkpoint logged, and the source must give the same rows for them.
The formats known to do so are :data:`REPLAYABLE`; any other (a format stoker does not know)
is refused when the pipeline is checked, unless the user takes at least once on purpose
(``at_least_once=True``), which the job then shows (its spec's ``at_least_once_sources``, the
source's description, ``stoker status``). Spark's ``socket`` is refused even then (:data:`NEVER`:
it cannot restart under its own checkpoint); :mod:`stoker.sources.textsocket` reads a socket
replayably instead.

Their backlog comes from the query's progress where the source reports one: Kafka's latest
offsets (or its ``avgOffsetsBehindLatest`` metric), see :func:`kafka_backlog`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stoker.errors import InvalidSource

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from stoker.sources.base import SourceContext

log = logging.getLogger("stoker.sources.spark")

_FILES = "Spark's file source: each epoch's files are listed in the checkpoint and read again"
# The formats Spark's file source reads (avro when its package is there).
_FILE_FORMATS = [
    "json",
    "csv",
    "parquet",
    "orc",
    "text",
    "avro",
    "xml",
    "binaryfile",
    "libsvm",
    "image",
]
# Spark's format names (matched without case, as Spark matches them) that replay an epoch.
REPLAYABLE: dict[str, str] = {
    "rate": "its rows are a function of the offsets",
    "rate-micro-batch": "its rows are a function of the offsets",
    "kafka": "reads the logged offsets again (while the topic retains them)",
    "delta": "reads the logged table versions again",
    "iceberg": "reads the logged snapshots again",
    **dict.fromkeys(_FILE_FORMATS, _FILES),
}
# Formats Spark (or stoker) ships that are refused, and why; any other unknown name is
# refused as not known to replay.
REFUSED: dict[str, str] = {
    "socket": "it reads a TCP socket, which keeps nothing once read",
    "console": "it is a sink, not a source",
    "noop": "it is a sink, not a source",
    "jdbc": "it has no streaming reader",
    "hive": "it reads Hive tables only, not as a stream",
    "statestore": "it reads a checkpoint's state as a batch, not as a stream",
    "state-metadata": "it reads a checkpoint's state as a batch, not as a stream",
    "stoker_files": "it is stoker's own: use sources.files(...)",
    "stoker_generator": "it is stoker's own: use sources.generator(...)",
}


# Formats refused even at least once, and what to use instead: they cannot run again at all
# under their own checkpoint.
NEVER: dict[str, str] = {
    "socket": (
        "at_least_once=True does not help it, as Spark's socket source cannot restart under "
        "its own checkpoint (its offsets start again at 0 below the logged ones, and the "
        'restart fails for good: "Offsets committed out of order"). Use sources.socket(host, '
        "port) instead: the same lines and columns (include_timestamp=True for Spark's "
        "includeTimestamp), kept in the job's state folder as they arrive, so an epoch "
        "replayed after a crash reads them again"
    ),
}


def replay_refusal(fmt: str) -> str | None:
    """Why a Spark source of format ``fmt`` is refused for exactly once; None if it
    replays."""
    name = fmt.strip().lower()
    if name in REPLAYABLE:
        return None
    why = REFUSED.get(name)
    if why is None:
        known = ", ".join(sorted(REPLAYABLE))
        why = f"it is not known to replay (those that do: {known})"
    return (
        f"format {fmt!r} cannot replay an epoch after a crash ({why}), so exactly once is "
        "impossible: a restart would commit the epoch again without the rows it read. Pass "
        "at_least_once=True to sources.spark(...) to run it without that guarantee (the "
        "job shows it), or read the data through a replayable source"
    )


@dataclass(frozen=True)
class SparkSource:
    """A built-in Spark streaming source given by format and options.

    ``at_least_once``: run a format that cannot replay (see :data:`REPLAYABLE`), knowing that
    a crash may lose or repeat the rows of the epoch in flight."""

    format: str
    options: dict[str, str] = field(default_factory=dict)
    schema: str | None = None
    at_least_once: bool = False

    bounded = False

    def describe(self) -> str:
        if self.at_least_once:
            return f"spark({self.format!r}, at_least_once=True)"
        return f"spark({self.format!r})"

    def validate(self) -> None:
        if not self.format or not isinstance(self.format, str):
            raise InvalidSource("spark.format", "name a Spark streaming source format")
        if not isinstance(self.at_least_once, bool):
            raise InvalidSource(
                "spark.at_least_once", f"must be True or False, got {self.at_least_once!r}"
            )
        never = NEVER.get(self.format.strip().lower())
        if never is not None:
            raise InvalidSource("spark.format", f"format {self.format!r} is refused: {never}")
        refusal = replay_refusal(self.format)
        if refusal is not None and not self.at_least_once:
            raise InvalidSource("spark.format", refusal)

    def open(
        self,
        spark: SparkSession,
        sid: str,
        state_dir: Path,
        context: SourceContext | None = None,
    ) -> DataFrame:
        if self.at_least_once and replay_refusal(self.format) is not None:
            log.warning(
                "source %s: %s runs at least once (at_least_once=True): it cannot replay an "
                "epoch after a crash, so that epoch's rows may be lost or written twice",
                sid,
                self.describe(),
            )
        reader = spark.readStream.format(self.format).options(**self.options)
        if self.schema:
            reader = reader.schema(self.schema)
        return reader.load()


def kafka_backlog(end: Any, latest: Any, metrics: Mapping[str, Any] | None = None) -> int | None:
    """Records a Kafka source had beyond an epoch's end, from the query's progress.

    ``end`` and ``latest`` are Kafka's offsets (``{"topic": {"partition": offset}}``): the sum
    over the partitions of latest minus end. Without ``latest``, Kafka's own metric
    ``avgOffsetsBehindLatest`` times the partitions in ``end``. None when neither is there
    (not a Kafka offset, or a Kafka version without the metrics).
    """
    ends = _kafka_offsets(end)
    if ends is None:
        return None
    latests = _kafka_offsets(latest)
    if latests is not None:
        return sum(max(0, latests[k] - v) for k, v in ends.items() if k in latests)
    avg = (metrics or {}).get("avgOffsetsBehindLatest")
    try:
        return None if avg is None else max(0, round(float(avg) * len(ends)))
    except (TypeError, ValueError):
        return None


def kafka_partition_backlog(end: Any, latest: Any) -> dict[str, int] | None:
    """:func:`kafka_backlog` per partition (``{"topic/partition": records}``), from Kafka's
    offsets only; None when either is not a Kafka offset."""
    ends, latests = _kafka_offsets(end), _kafka_offsets(latest)
    if ends is None or latests is None:
        return None
    return {
        f"{t}/{p}": max(0, latests[(t, p)] - o) for (t, p), o in ends.items() if (t, p) in latests
    }


def _kafka_offsets(value: Any) -> dict[tuple[str, str], int] | None:
    """``{(topic, partition): offset}`` from Kafka's offset JSON; None for any other shape."""
    if not isinstance(value, dict) or not value:
        return None
    out: dict[tuple[str, str], int] = {}
    for topic, parts in value.items():
        if not isinstance(parts, dict):
            return None
        for part, off in parts.items():
            if isinstance(off, bool) or not isinstance(off, int):
                return None
            out[(str(topic), str(part))] = off
    return out
