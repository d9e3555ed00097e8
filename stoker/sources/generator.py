"""A deterministic generator: column ``id`` with 0..total-1 (or without end), as a Spark source.

The offset is the next id to produce; a replay of an epoch reads the same ids because Spark
logs the offset range before the epoch runs.

An epoch's ids are split into ``partitions`` ranges; by default one per core the job's
executors have (:func:`stoker.sources._control.partitions_for`), so an executor that joins gets
work from the next epoch. A replay may be split differently (the cores changed meanwhile): the
ids are the same, since they are a function of the logged range alone, and the sinks key their
prepared parts by epoch, attempt and Spark task, never by how the input was split.

Backlog: ``reportLatestOffset`` gives what could be read now, ignoring the per-epoch limit (a
rate-paced generator: the ids produced by the rate so far; a bounded one without a rate: its
total); Spark puts it in the query's progress next to the epoch's end, and :func:`backlog`
turns the two into a row count.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from stoker.errors import InvalidSource
from stoker.sources._control import (
    CV,
    ReaderControl,
    hush_if_spark_hung_up,
    limit_of,
    partitions_for,
)
from stoker.sources.base import FINISHED, SID, SourceContext

if TYPE_CHECKING:
    from collections.abc import Iterator

    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

FORMAT = "stoker_generator"


class _Range(InputPartition):
    def __init__(self, start: int, end: int) -> None:
        self.start = start
        self.end = end


class _GeneratorReader(DataSourceStreamReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.sid = options["sid"]
        self.total = int(options["total"]) if options.get("total") else None
        self.rate = float(options["rows_per_second"]) if options.get("rows_per_second") else None
        self.max_rows = (
            int(options["max_rows_per_epoch"]) if options.get("max_rows_per_epoch") else 0
        )
        # None: one partition per core present (see partitions_for).
        self.parts = max(1, int(options["partitions"])) if options.get("partitions") else None
        self._clock: float | None = None  # rate budget: rows are produced since this instant
        self._rate_in_force: float | None = None
        self._pos: dict[str, Any] | None = None  # the offset of the last latestOffset
        self.control = ReaderControl(
            options.get("store_url"), options.get("job_id"), options.get("pace_s")
        )

    def initialOffset(self) -> dict[str, Any]:
        # Not finished even for total=0: the flip to finished is itself an offset change, so
        # Spark runs an epoch for it and the job can end through the normal commit path.
        return {SID: self.sid, "next": 0, FINISHED: False}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_rows) if self.max_rows else ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        self._pos = start
        if start.get(FINISHED):
            return start  # a finished source never reads again, whatever control says
        nxt = int(start["next"])
        plan = self.control.plan(start)
        if plan.hold:
            return start
        if plan.empty:
            return {**start, CV: plan.version}
        end = self.total if self.total is not None else nxt + 10_000_000
        rate = limit_of(plan, "rows_per_second", self.rate)
        if rate != self._rate_in_force:
            # A new rate counts from now; rows produced at the old one and not read yet stay
            # owed (a backlog does not vanish because the rate changed).
            now = time.monotonic()
            if self._clock is not None and self._rate_in_force and rate:
                owed = max(0.0, (now - self._clock) * self._rate_in_force)
                self._clock = now - owed / rate
            else:
                self._clock = None
            self._rate_in_force = rate
        if rate is not None:
            now = time.monotonic()
            if self._clock is None:
                self._clock = now
            produced = int((now - self._clock) * rate)
            end = min(end, nxt + produced)
        max_rows = limit_of(plan, "max_rows_per_epoch", self.max_rows or None)
        if max_rows:
            end = min(end, nxt + int(max_rows))
        elif isinstance(limit, ReadMaxRows) and "max_rows_per_epoch" not in plan.limits:
            end = min(end, nxt + limit.max_rows)
        end = max(end, nxt)
        if rate is not None and self._clock is not None and end > nxt:
            self._clock += (end - nxt) / rate
        finished = self.total is not None and end >= self.total
        offset: dict[str, Any] = {SID: self.sid, "next": end, FINISHED: finished}
        if plan.version is not None:
            offset[CV] = plan.version
        self._pos = offset
        return offset

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """The ids available now, whatever one epoch may take: with a rate, those produced so
        far; bounded without one, all of them. None when that is unbounded (an endless
        generator without a rate) or no offset was planned yet."""
        pos = self._pos
        if pos is None:
            return None
        if pos.get(FINISHED):
            return {SID: self.sid, "next": int(pos["next"]), FINISHED: True}
        if self._rate_in_force is not None:
            if self._clock is None:
                return None
            produced = int((time.monotonic() - self._clock) * self._rate_in_force)
            latest = int(pos["next"]) + max(0, produced)
        elif self.total is not None:
            latest = self.total
        else:
            return None
        if self.total is not None:
            latest = min(latest, self.total)
        return {SID: self.sid, "next": latest, FINISHED: False}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        return split_range(int(start["next"]), int(end["next"]), self._parts())

    def _parts(self) -> int:
        return partitions_for(self.parts, None if self.parts else self.control.cores())

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        assert isinstance(partition, _Range)
        chunk = 65_536
        for lo in range(partition.start, partition.end, chunk):
            hi = min(partition.end, lo + chunk)
            yield pa.RecordBatch.from_arrays([pa.array(range(lo, hi), pa.int64())], names=["id"])

    def stop(self) -> None:
        hush_if_spark_hung_up()


def split_range(a: int, b: int, parts: int) -> list[InputPartition]:
    """Ids ``a..b-1`` in ``min(parts, b - a)`` contiguous ranges whose sizes differ by one
    at most."""
    if b <= a:
        return []
    n = min(b - a, max(1, parts))
    size, extra = divmod(b - a, n)
    out: list[InputPartition] = []
    lo = a
    for k in range(n):
        hi = lo + size + (1 if k < extra else 0)
        out.append(_Range(lo, hi))
        lo = hi
    return out


def backlog(end: dict[str, Any], latest: dict[str, Any]) -> int:
    """Rows available beyond an epoch's end: ``latest`` (what ``reportLatestOffset`` said)
    minus ``end`` (the epoch's end offset), never negative."""
    return max(0, int(latest["next"]) - int(end["next"]))


class GeneratorDataSource(DataSource):
    """Spark data source behind :func:`stoker.sources.generator`."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return "id long"

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return _GeneratorReader(dict(self.options))


@dataclass(frozen=True)
class GeneratorSource:
    """Ids 0..total-1 (bounded) or endless ids (``total=None``), optionally rate limited."""

    total: int | None = None
    rows_per_second: float | None = None
    max_rows_per_epoch: int | None = None
    partitions: int | None = None  # None: one per core the job's executors have

    @property
    def bounded(self) -> bool:
        return self.total is not None

    def describe(self) -> str:
        return (
            f"generator(total={self.total}, rows_per_second={self.rows_per_second}, "
            f"max_rows_per_epoch={self.max_rows_per_epoch})"
        )

    def validate(self) -> None:
        if self.total is not None and (not isinstance(self.total, int) or self.total < 0):
            raise InvalidSource("generator.total", f"must be an integer >= 0, got {self.total!r}")
        if self.rows_per_second is not None and not self.rows_per_second > 0:
            raise InvalidSource(
                "generator.rows_per_second", f"must be > 0, got {self.rows_per_second!r}"
            )
        if self.max_rows_per_epoch is not None and (
            not isinstance(self.max_rows_per_epoch, int) or self.max_rows_per_epoch < 1
        ):
            raise InvalidSource(
                "generator.max_rows_per_epoch",
                f"must be an integer >= 1, got {self.max_rows_per_epoch!r}",
            )
        if self.total is None and self.rows_per_second is None and not self.max_rows_per_epoch:
            raise InvalidSource(
                "generator",
                "an endless generator needs rows_per_second or max_rows_per_epoch",
            )
        if self.partitions is not None and (
            not isinstance(self.partitions, int)
            or isinstance(self.partitions, bool)
            or self.partitions < 1
        ):
            raise InvalidSource(
                "generator.partitions",
                f"must be an integer >= 1 (or None: one per core), got {self.partitions!r}",
            )

    def open(
        self,
        spark: SparkSession,
        sid: str,
        state_dir: Path,
        context: SourceContext | None = None,
    ) -> DataFrame:
        opts = {"sid": sid, "partitions": "" if self.partitions is None else str(self.partitions)}
        if self.total is not None:
            opts["total"] = str(self.total)
        if self.rows_per_second is not None:
            opts["rows_per_second"] = repr(float(self.rows_per_second))
        if self.max_rows_per_epoch:
            opts["max_rows_per_epoch"] = str(self.max_rows_per_epoch)
        if context is not None:
            # Control (rate limit, pause) is read from the job's store at each trigger.
            opts["job_id"] = context.job_id
            opts["store_url"] = context.store_url
            if context.pace_s is not None:
                opts["pace_s"] = repr(float(context.pace_s))
        return spark.readStream.format(FORMAT).options(**opts).load()
