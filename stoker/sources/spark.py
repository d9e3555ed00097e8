"""Any of Spark's own streaming sources (kafka, rate-micro-batch, ...), always unbounded.

Their backlog comes from the query's progress where the source reports one: Kafka's latest
offsets (or its ``avgOffsetsBehindLatest`` metric), see :func:`kafka_backlog`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stoker.errors import InvalidSource

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from stoker.sources.base import SourceContext


@dataclass(frozen=True)
class SparkSource:
    """A built-in Spark streaming source given by format and options."""

    format: str
    options: dict[str, str] = field(default_factory=dict)
    schema: str | None = None

    bounded = False

    def describe(self) -> str:
        return f"spark({self.format!r})"

    def validate(self) -> None:
        if not self.format or not isinstance(self.format, str):
            raise InvalidSource("spark.format", "name a Spark streaming source format")

    def open(
        self,
        spark: SparkSession,
        sid: str,
        state_dir: Path,
        context: SourceContext | None = None,
    ) -> DataFrame:
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
