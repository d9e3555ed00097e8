"""The Arrow schema of an epoch's output as the table sinks' writer tasks get it."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame


def output_arrow_schema(df: DataFrame) -> pa.Schema:
    """``df``'s schema in Arrow, timestamps zoned in the session's time zone (pyspark asks for
    one, and refuses a timestamp column without it)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    zone = df.sparkSession.conf.get("spark.sql.session.timeZone") or "UTC"
    return to_arrow_schema(df.schema, timezone=zone)
