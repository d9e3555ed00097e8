"""Spark's generated column names through the PostgreSQL sink, real Spark and real PostgreSQL
(issue 41 item 3).

``df.select(F.col("session.start").cast("long"))`` names its column ``CAST(session.start AS
BIGINT)``: dots, parentheses and spaces, which Spark reads as a path when the name is used as
a column reference, and which PostgreSQL takes as they are only between double quotes. Such
names are written end to end, in every mode. A name PostgreSQL would cut to 63 bytes (so two
names that PostgreSQL would make one) is refused before anything is written, naming the
column and what to do: alias it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import psycopg
import pytest
from pyspark.sql import functions as F

import stoker
from stoker import JobState, Pipeline, sinks, sources
from stoker.errors import InvalidSink, exit_code
from stoker.store import open_store
from tests.support import pg_prepared

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

START = "CAST(session.start AS BIGINT)"  # what Spark names the cast of a struct's field
ODD = 'the "odd". name'
TOTAL = 30


def _sessions(df: DataFrame) -> DataFrame:
    """The shape of Spark's sessionization example: a struct, then fields of it cast."""
    s = df.select(
        F.struct(F.col("id").alias("start"), (F.col("id") + 5).alias("end")).alias("session")
    )
    return s.select(
        F.col("session.start").cast("long"),
        (F.col("session.end") - F.col("session.start")).alias("durationMs"),
        F.lit("x").alias(ODD),
    )


def _columns(dsn: str, table: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attnum > 0 "
            "AND NOT attisdropped ORDER BY attnum",
            (f"public.{table}",),
        ).fetchall()
    return [str(r[0]) for r in rows]


@pytest.mark.parametrize("mode", ["append", "update"])
def test_spark_generated_names_are_written_end_to_end(
    spark: SparkSession, tmp_path: Path, pg_dsn: str, mode: str
) -> None:
    gen = sources.generator(total=TOTAL, max_rows_per_epoch=10)
    assert _sessions(spark.range(1)).columns == [START, "durationMs", ODD]
    key = [START] if mode == "update" else None
    p = Pipeline("sessions", output_mode=mode).source(gen).transform(lambda df: _sessions(df))
    p.sink(sinks.postgres(pg_dsn, "sessions", key=key))
    result = stoker.run(p, state_dir=tmp_path / "state", trigger="100ms", spark=spark)
    assert result.state == JobState.FINISHED, result
    assert _columns(pg_dsn, "sessions") == [START, "durationMs", ODD]
    with psycopg.connect(pg_dsn) as conn:
        rows = conn.execute(
            f'SELECT "{START}", "durationMs", "the ""odd"". name" FROM sessions ORDER BY 1'
        ).fetchall()
    assert rows == [(i, 5, "x") for i in range(TOTAL)]
    assert pg_prepared(pg_dsn) == []


@pytest.mark.parametrize(
    ("names", "said"),
    [
        (["a" * 64], "a" * 64),
        # Cut to 63 bytes, both would be one column.
        (["m" * 63 + "_first", "m" * 63 + "_second"], "m" * 63 + "_second"),
        (["é" * 32], "é" * 32),  # 32 characters, 64 bytes
    ],
)
def test_a_name_postgresql_would_cut_is_refused_before_anything_is_written(
    spark: SparkSession, tmp_path: Path, pg_dsn: str, names: list[str], said: str
) -> None:
    gen = sources.generator(total=TOTAL, max_rows_per_epoch=10)

    def long_names(df: DataFrame) -> DataFrame:
        return df.select("id", *(F.col("id").alias(n) for n in names))

    p = Pipeline("long").source(gen).transform(lambda df: long_names(df))
    p.sink(sinks.postgres(pg_dsn, "long"))
    with pytest.raises(InvalidSink) as e:
        stoker.run(p, state_dir=tmp_path / "state", trigger="100ms", spark=spark)
    assert exit_code(e.value) == 2
    text = str(e.value)
    assert said in text and "63 bytes" in text and "alias" in text, text
    assert _columns(pg_dsn, "long") == []  # no table: nothing was written
    assert pg_prepared(pg_dsn) == []
    st = open_store(f"sqlite:///{tmp_path / 'state' / 'store.db'}")
    try:
        assert st.list_jobs() == []  # refused before the job was recorded
    finally:
        st.close()


def test_the_names_check_also_guards_the_first_prepare() -> None:
    """The same refusal where an epoch's prepare meets the output first (the check run was
    skipped: a transform that fails on an empty batch), before the table is made."""
    from stoker.sinks._pg_modes import STAGE_COLUMNS
    from stoker.sinks._pg_server import check_output_columns

    check_output_columns([START, ODD, "x" * 63], ["x" * 63], STAGE_COLUMNS, "s")
    for columns, reserved, said in [
        (["é" * 32], (), "longer than the 63 bytes"),
        (["id", "id"], (), "'id' of sink 's' is there twice"),
        (["stoker_epoch"], STAGE_COLUMNS, "a column of the sink's stage table"),
        ([""], (), "not a name PostgreSQL takes"),
    ]:
        with pytest.raises(InvalidSink, match=said) as e:
            check_output_columns(columns, None, reserved, "s")
        assert "alias" in str(e.value)
    with pytest.raises(InvalidSink, match="key column"):
        check_output_columns(["a"], ["b"], (), "s")
