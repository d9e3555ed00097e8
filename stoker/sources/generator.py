"""A deterministic generator: column ``id`` with 0..total-1 (or without end), as a Spark source.

The offset is the next id to produce; a replay of an epoch reads the same ids because Spark
logs the offset range before the epoch runs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from stoker.errors import SourceError
from stoker.sources._control import CV, ReaderControl, limit_of
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
        self.parts = max(1, int(options.get("partitions", "2")))
        self._clock: float | None = None  # rate budget: rows are produced since this instant
        self._rate_in_force: float | None = None
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
            self._rate_in_force, self._clock = rate, None  # a new rate counts from now
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
        return offset

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        a, b = int(start["next"]), int(end["next"])
        if b <= a:
            return []
        step = max(1, -(-(b - a) // self.parts))
        return [_Range(i, min(b, i + step)) for i in range(a, b, step)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        assert isinstance(partition, _Range)
        chunk = 65_536
        for lo in range(partition.start, partition.end, chunk):
            hi = min(partition.end, lo + chunk)
            yield pa.RecordBatch.from_arrays([pa.array(range(lo, hi), pa.int64())], names=["id"])


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
    partitions: int = 2

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
            raise SourceError("generator.total", f"must be an integer >= 0, got {self.total!r}")
        if self.rows_per_second is not None and not self.rows_per_second > 0:
            raise SourceError(
                "generator.rows_per_second", f"must be > 0, got {self.rows_per_second!r}"
            )
        if self.max_rows_per_epoch is not None and (
            not isinstance(self.max_rows_per_epoch, int) or self.max_rows_per_epoch < 1
        ):
            raise SourceError(
                "generator.max_rows_per_epoch",
                f"must be an integer >= 1, got {self.max_rows_per_epoch!r}",
            )
        if self.total is None and self.rows_per_second is None and not self.max_rows_per_epoch:
            raise SourceError(
                "generator",
                "an endless generator needs rows_per_second or max_rows_per_epoch",
            )
        if not isinstance(self.partitions, int) or self.partitions < 1:
            raise SourceError("generator.partitions", f"must be >= 1, got {self.partitions!r}")

    def open(
        self,
        spark: SparkSession,
        sid: str,
        state_dir: Path,
        context: SourceContext | None = None,
    ) -> DataFrame:
        opts = {"sid": sid, "partitions": str(self.partitions)}
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
