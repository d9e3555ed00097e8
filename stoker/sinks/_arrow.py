"""What the table sinks' writer plans share: the Arrow schema of an epoch's output as their
writer tasks get it, and the run of a writer plan."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame


def output_arrow_schema(df: DataFrame) -> pa.Schema:
    """``df``'s schema in Arrow, timestamps zoned in the session's time zone (pyspark asks for
    one, and refuses a timestamp column without it)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    zone = df.sparkSession.conf.get("spark.sql.session.timeZone") or "UTC"
    return to_arrow_schema(df.schema, timezone=zone)


def collect_parts(out: DataFrame) -> tuple[list[Any], int]:
    """Run a writer plan: the rows its tasks returned and its partition count, the count read
    from the plan the collect ran (``out.rdd`` would plan the query a second time)."""
    results = out.collect()
    return results, int(out._jdf.queryExecution().executedPlan().execute().getNumPartitions())
