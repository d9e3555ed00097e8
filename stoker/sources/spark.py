"""Any of Spark's own streaming sources (kafka, rate-micro-batch, ...), always unbounded."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from stoker.errors import SourceError

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
            raise SourceError("spark.format", "name a Spark streaming source format")

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
