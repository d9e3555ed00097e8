"""Spark's refusal of an output mode, with a hint that follows Spark's rules (issue 41 item 6):
a session window refused in ``update`` mode is told to use ``append`` or ``complete``, not
``update``. Real Spark: the refusal is Spark's own checker's, on the query's analysed plan
(the check stoker runs before a job is recorded)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from stoker.errors import InvalidPipeline
from stoker.runtime.job.query import check_output_mode

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def _events(spark: SparkSession) -> DataFrame:
    return spark.readStream.format("rate").load().withWatermark("timestamp", "10 seconds")


def _refusal(stream: DataFrame, mode: str) -> str:
    with pytest.raises(InvalidPipeline) as info:
        check_output_mode(stream, mode)
    assert info.value.field == "output_mode"
    return info.value.message


def test_a_session_window_refused_in_update_mode_is_told_append_or_complete(
    spark: SparkSession,
) -> None:
    from pyspark.sql import functions as F

    # Spark's StructuredSessionization example, in the mode the user tried.
    events = _events(spark)
    sessions = events.groupBy(F.session_window("timestamp", "5 seconds")).count()
    msg = _refusal(sessions, "update")
    assert "session window" in msg, msg
    assert "output_mode='append'" in msg and "'complete'" in msg, msg
    assert "needs Pipeline(..., output_mode='update')" not in msg, msg
    check_output_mode(sessions, "append")  # what the hint says is taken


def test_an_aggregation_without_a_watermark_is_told_update_or_complete(
    spark: SparkSession,
) -> None:
    counts = spark.readStream.format("rate").load().groupBy("value").count()
    msg = _refusal(counts, "append")
    assert "output_mode='update') or 'complete'" in msg, msg
    check_output_mode(counts, "update")


def test_complete_without_an_aggregation_is_told_append_or_update(spark: SparkSession) -> None:
    msg = _refusal(_events(spark), "complete")
    assert "output_mode='append') or 'update'" in msg, msg
