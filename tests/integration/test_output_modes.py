"""Output modes end to end, real Spark and real PostgreSQL: a running count per key in
``update`` mode upserted on its key (also across a crash), in ``complete`` mode replacing the
table and swapping the files sink's current snapshot."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg
import pyarrow.parquet as pq
import pytest

import stoker
from stoker import JobState, Pipeline, sinks, sources
from tests.support import APPS, pg_prepared, start_driver, wait_for, wait_group_gone
from tests.support.background import BackgroundRun

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

TRIGGER = "100ms"
TOTAL, PER_EPOCH = 300, 100


def _counts(df: DataFrame) -> DataFrame:
    """A running count per key: a streaming aggregation without a watermark."""
    return df.groupBy((df.id % 10).alias("k")).count()


def _pipeline(mode: str, *outs: stoker.sinks.TwoPhaseSink) -> Pipeline:
    gen = sources.generator(total=TOTAL, max_rows_per_epoch=PER_EPOCH)
    p = Pipeline("counts", output_mode=mode).source(gen, map=_counts)
    for sink in outs:
        p.sink(sink)
    return p


def _table(dsn: str) -> dict[int, int]:
    """The table as key -> count; a key in two rows (a changelog, snapshots) fails."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute('SELECT k, "count" FROM counts').fetchall()
    by_key = dict(rows)
    assert len(by_key) == len(rows), f"keys in more than one row: {sorted(rows)}"
    return by_key


def _stage_left(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        names = conn.execute(
            "SELECT tablename FROM pg_tables WHERE tablename LIKE 'stoker_stage_%'"
        ).fetchall()
        return sum(int(conn.execute(f"SELECT count(*) FROM {n}").fetchone()[0]) for (n,) in names)


FINAL = {k: TOTAL // 10 for k in range(10)}


def test_update_mode_upserts_one_row_per_key_with_its_final_count(
    spark: SparkSession, tmp_path: Path, pg_dsn: str
) -> None:
    p = _pipeline("update", sinks.postgres(pg_dsn, "counts", key=["k"]))
    result = stoker.run(p, state_dir=tmp_path / "state", trigger=TRIGGER, spark=spark)
    assert result.state == JobState.FINISHED
    assert _table(pg_dsn) == FINAL  # one row per key, not a changelog of 3 epochs
    assert _stage_left(pg_dsn) == 0
    assert pg_prepared(pg_dsn) == []


def test_complete_mode_replaces_the_table_and_swaps_the_current_snapshot(
    spark: SparkSession, tmp_path: Path, pg_dsn: str
) -> None:
    out = tmp_path / "out"
    p = _pipeline("complete", sinks.postgres(pg_dsn, "counts"), sinks.files(str(out)))
    result = stoker.run(p, state_dir=tmp_path / "state", trigger=TRIGGER, spark=spark)
    assert result.state == JobState.FINISHED
    assert _table(pg_dsn) == FINAL  # the last epoch's result, not 3 snapshots
    current = pq.read_table(out / "current").to_pylist()
    assert {int(r["k"]): int(r["count"]) for r in current} == FINAL
    assert len(current) == 10
    assert len(list(out.glob("epoch=*"))) <= 2  # older snapshots pruned
    assert _stage_left(pg_dsn) == 0


# A crash after prepare is in every lane (the protocol chain of test_crash); this form, the
# update mode's upserts, in the whole suite.
@pytest.mark.variant
@pytest.mark.timeout(1200)
def test_a_crash_after_prepare_in_update_mode_still_gives_the_final_counts(
    tmp_path: Path, pg_dsn: str
) -> None:
    """The driver dies right after the prepare of epoch 1 (its parts prepared, not decided);
    the restart rolls them back, replays the epoch from Spark's state and upserts: the table
    holds each key's final count once."""
    state = tmp_path / "state"
    env = {
        "COUNTS_PG_DSN": pg_dsn,
        "COUNTS_TOTAL": str(TOTAL),
        "COUNTS_PER_EPOCH": str(PER_EPOCH),
        "COUNTS_MODE": "update",
    }
    app, args = APPS / "counts_app.py", ("-D", f"stoker.state_dir={state}")
    log1, log2 = tmp_path / "driver-1.log", tmp_path / "driver-2.log"
    first = start_driver(app, *args, env={**env, "STOKER_FAULT": "after_prepare:1"}, log=log1)
    assert first.wait(timeout=600) == -9, log1.read_text(errors="replace")[-3000:]
    wait_group_gone(first.pid)
    assert pg_prepared(pg_dsn), "the crash left epoch 1's parts prepared"
    second = start_driver(app, *args, env={**env, "STOKER_FAULT": ""}, log=log2)
    assert second.wait(timeout=600) == 0, log2.read_text(errors="replace")[-3000:]
    wait_group_gone(second.pid)
    assert _table(pg_dsn) == FINAL
    assert pg_prepared(pg_dsn) == []
    assert _stage_left(pg_dsn) == 0


# Issue 23 items 2 and 3: the streaming part has a name, and the per-epoch transform is checked
# before the job is recorded.
def test_the_streaming_part_keeps_running_totals_across_epochs(
    spark: SparkSession, tmp_path: Path
) -> None:
    """``p.stream(fn)`` runs on the whole stream: the totals run across the epochs (the
    per-epoch transform would count each epoch on its own)."""
    out = tmp_path / "out"
    gen = sources.generator(total=TOTAL, max_rows_per_epoch=PER_EPOCH)
    p = Pipeline("totals", output_mode="complete").source(gen).stream(_counts)
    p.sink(sinks.files(str(out)))
    result = stoker.run(p, state_dir=tmp_path / "state", trigger=TRIGGER, spark=spark)
    assert result.state == JobState.FINISHED and result.epochs >= 3, result
    current = pq.read_table(out / "current").to_pylist()
    assert {int(r["k"]): int(r["count"]) for r in current} == FINAL


def test_a_transform_spark_cannot_analyse_is_bad_input_before_the_job_exists(
    spark: SparkSession, tmp_path: Path
) -> None:
    from stoker.errors import InvalidPipeline
    from stoker.store import open_store

    gen = sources.generator(total=TOTAL, max_rows_per_epoch=PER_EPOCH)
    p = Pipeline("typo").source(gen).transform(lambda df, ctx: df.select("idd"))
    p.sink(sinks.files(str(tmp_path / "out")))
    with pytest.raises(InvalidPipeline) as e:
        stoker.run(p, state_dir=tmp_path / "state", trigger=TRIGGER, spark=spark)
    assert e.value.field == "transform"
    assert "`idd` cannot be resolved" in str(e.value) and "`id`" in str(e.value)
    assert not (tmp_path / "out").exists()
    st = open_store(f"sqlite:///{tmp_path / 'state' / 'store.db'}")
    try:
        assert st.list_jobs() == []  # nothing recorded: the fixed file runs as it is
    finally:
        st.close()
    # The fixed pipeline runs without a restart.
    p.transform(lambda df, ctx: df.select("id"))
    result = stoker.run(p, state_dir=tmp_path / "state", trigger=TRIGGER, spark=spark)
    assert result.state == JobState.FINISHED


def test_an_aggregation_in_the_per_epoch_transform_is_warned_about_once(
    spark: SparkSession, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    gen = sources.generator(total=TOTAL, max_rows_per_epoch=PER_EPOCH)
    p = Pipeline("perepoch").source(gen).transform(lambda df, ctx: _counts(df))
    p.sink(sinks.files(str(tmp_path / "out")))
    with caplog.at_level("WARNING", logger="stoker.runner"):
        result = stoker.run(p, state_dir=tmp_path / "state", trigger=TRIGGER, spark=spark)
    assert result.state == JobState.FINISHED
    said = [r.getMessage() for r in caplog.records if "within each epoch only" in r.getMessage()]
    assert len(said) == 1, said
    assert "aggregates" in said[0] and "p.stream(fn)" in said[0]
    assert "output_mode='update'" in said[0]


def test_a_table_without_an_output_column_is_bad_input_with_the_alter_to_run(
    spark: SparkSession, tmp_path: Path, pg_dsn: str
) -> None:
    """A PostgreSQL table the user made lacks a column the pipeline writes: every retry would
    fail the same way, so it is bad input (InvalidSink, exit 2: not retried), named with the
    statement that fixes it; nothing is written. Run as said, the same job runs to its end."""
    from stoker.errors import InvalidSink

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE counts (k bigint PRIMARY KEY)")
    p = _pipeline("update", sinks.postgres(pg_dsn, "counts", key=["k"], create_table=False))
    with pytest.raises(InvalidSink) as e:
        stoker.run(p, state_dir=tmp_path / "state", trigger=TRIGGER, spark=spark)
    assert "has no column count" in str(e.value), e.value
    alter = re.search(r"ALTER TABLE [^)]*", str(e.value)).group()  # type: ignore[union-attr]
    assert alter == 'ALTER TABLE "public"."counts" ADD COLUMN "count" BIGINT', alter
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM counts").fetchone() == (0,)
        assert pg_prepared(pg_dsn) == []
        conn.execute(alter)
    result = stoker.run(p, state_dir=tmp_path / "state", trigger=TRIGGER, spark=spark)
    assert result.state == JobState.FINISHED
    assert _table(pg_dsn) == FINAL


# Issue 41 item 2: new code adds an output column; a staged sink (a replace, an upsert) takes
# it into its stage as the table takes it, not only into the table.
def _grow_pipeline(indir: Path, dsn: str, mode: str, extra: bool) -> Pipeline:
    def stream(df: DataFrame) -> DataFrame:
        out = df.groupBy((df.id % 10).alias("k")).count()
        return out.withColumn("twice", out["count"] * 2) if extra else out

    src = sources.files(str(indir), "json", "id long")
    p = Pipeline("grow", output_mode=mode).source(src).stream(stream)
    return p.sink(sinks.postgres(dsn, "grow", key=["k"] if mode == "update" else None))


def _put_ids(folder: Path, name: str, ids: range) -> None:
    tmp = folder / f".{name}"
    tmp.write_text("".join(f'{{"id": {i}}}\n' for i in ids))
    tmp.rename(folder / name)


def _grown(dsn: str, columns: str) -> list[tuple[int, ...]]:
    with psycopg.connect(dsn) as conn:
        try:
            return conn.execute(f"SELECT {columns} FROM grow ORDER BY k").fetchall()
        except (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedColumn):
            return []


def _run_until(
    run: BackgroundRun, spark: SparkSession, what: str, cond: Callable[[], bool]
) -> None:
    """Wait for ``cond`` while the job runs (its end before it fails the wait at once), then
    stop the job's query as a user's stop would, and check that the run ended cleanly."""

    def done() -> bool:
        if run.ended():
            raise AssertionError(f"the job ended before {what}: {run.error or run.result}")
        return cond()

    try:
        wait_for(what, done, 180, every=0.2)
    finally:
        for q in spark.streams.active:
            if q.name == "stoker_grow":
                q.stop()
        run.wait()
    assert run.error is None, run.error


@pytest.mark.parametrize("mode", ["complete", "update"])
def test_a_column_new_code_adds_is_written_through_the_stage(
    spark: SparkSession, tmp_path: Path, pg_dsn: str, mode: str
) -> None:
    """A job in complete (or update) mode is stopped; run again with a pipeline that adds a
    column (same job, same table), its epochs write, and the new column is in the table with
    its values (the table and its stage both got it)."""
    indir, state = tmp_path / "in", tmp_path / "state"
    indir.mkdir()
    _put_ids(indir, "f0.json", range(20))
    first = _grow_pipeline(indir, pg_dsn, mode, extra=False)
    run = BackgroundRun(pipeline=first, state_dir=state, trigger=TRIGGER, spark=spark)
    want = [(k, 2) for k in range(10)]
    _run_until(run, spark, "the first counts", lambda: _grown(pg_dsn, 'k, "count"') == want)

    _put_ids(indir, "f1.json", range(20, 40))
    second = _grow_pipeline(indir, pg_dsn, mode, extra=True)
    run = BackgroundRun(
        pipeline=second, state_dir=state, trigger=TRIGGER, spark=spark, restart=True
    )
    want2 = [(k, 4, 8) for k in range(10)]
    _run_until(
        run,
        spark,
        "the counts with the new column",
        lambda: _grown(pg_dsn, 'k, "count", twice') == want2,
    )
    assert _stage_left(pg_dsn) == 0
    assert pg_prepared(pg_dsn) == []
