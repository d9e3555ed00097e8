"""The Delta sink (issue 43 item 1) on real Delta tables, read back by deltalake's own reader and
by DuckDB (over the files the log names).

The first tests drive the sink's protocol in the test's own process with a local Spark: epochs
prepared by Spark tasks, committed, committed again (a crash between the Delta commit and the
store's record), aborted and recovered, a concurrent writer appending between prepare and
commit, a table created by the first epoch, a new column refused. The later ones run real
``stoker run`` drivers (generator -> Delta sink) SIGKILLed at the steps of the epoch protocol
and right after the Delta commit, and with a task retried (``local[2,8]``).
"""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from stoker.errors import InvalidSink, SinkError
from stoker.sinks import delta, descriptor_of, from_descriptor
from stoker.sinks.base import SinkOwner
from stoker.store import open_store
from stoker.types import AttemptNo, Epoch, EpochState, JobId, JobState, TxnState, job_id
from tests.support import APPS, exactly_once, kill_group, start_driver, wait_group_gone

deltalake = pytest.importorskip("deltalake")

pytestmark = [pytest.mark.timeout(1500)]

OWNER = SinkOwner(JobId("djob"), "uid1")
RUN = 420.0  # a cold Spark driver on two shared cores


# readers ---------------------------------------------------------------------------------------
def delta_ids(root: Path) -> Counter[int]:
    """The ids a Delta reader sees in the table (deltalake's reader)."""
    table = deltalake.DeltaTable(str(root)).to_pyarrow_table(columns=["id"])
    return Counter(int(x) for x in table.column("id").to_pylist())


def duckdb_ids(root: Path) -> Counter[int]:
    """The same through DuckDB, over the files the log names (its own Parquet reader)."""
    duckdb = pytest.importorskip("duckdb")
    files = deltalake.DeltaTable(str(root)).file_uris()
    if not files:
        return Counter()
    rows = duckdb.sql(f"SELECT id FROM read_parquet({files!r})").fetchall()
    return Counter(int(r[0]) for r in rows)


def logged_files(root: Path) -> set[str]:
    """Every data file any entry of the table's log ever added (relative paths)."""
    import urllib.parse

    added = set()
    for entry in sorted((root / "_delta_log").glob("*.json")):
        for line in entry.read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                added.add(urllib.parse.unquote(action["add"]["path"]))
    return added


def data_files(root: Path) -> set[str]:
    return {
        str(p.relative_to(root))
        for p in root.rglob("*.parquet")
        if not p.relative_to(root).parts[0].startswith("_")
    }


# the protocol in-process -----------------------------------------------------------------------
def frame(spark: Any, ids: range, parts: int = 2) -> Any:
    from pyspark.sql import functions as F

    return spark.range(ids.start, ids.stop, 1, parts).select(
        "id", (F.col("id") % 3).cast("int").alias("bucket")
    )


def opened(root: Path, **kw: Any) -> Any:
    sink = delta(str(root), **kw)
    sink.validate(OWNER)
    sink.open(OWNER, root.parent)
    return sink


def test_epochs_commit_once_and_again_commit_nothing(spark: Any, tmp_path: Path) -> None:
    """The first epoch creates the table (partitioned); each epoch is one Delta commit with
    the txn marker; a commit done again (after a crash between the Delta commit and the
    store's record) adds nothing; another uid's marker is apart."""
    root = tmp_path / "t"
    sink = opened(root, partition_by="bucket")
    d0 = sink.prepare(frame(spark, range(0, 100)), Epoch(0), AttemptNo(1))
    assert d0.rows == 100 and len(d0.parts) == 2
    assert not (root / "_delta_log").exists()  # prepared: nothing any reader sees
    delta(str(root), partition_by="bucket").validate(OWNER)  # a restart after a crash here
    sink.commit(Epoch(0), AttemptNo(1), d0.detail)
    sink.commit(Epoch(0), AttemptNo(1), d0.detail)
    d1 = sink.prepare(frame(spark, range(100, 250), 3), Epoch(1), AttemptNo(1))
    sink.commit(Epoch(1), AttemptNo(1), d1.detail)
    sink.commit(Epoch(1), AttemptNo(1), d1.detail)
    table = deltalake.DeltaTable(str(root))
    assert table.version() == 1
    assert table.metadata().partition_columns == ["bucket"]
    assert table.transaction_version(sink.app_id("uid1")) == 1
    exactly_once(delta_ids(root), 250)
    exactly_once(duckdb_ids(root), 250)
    assert sink.committed_epochs(OWNER) == [1]
    assert sink.committed_epochs(SinkOwner(JobId("djob"), "other")) == []
    assert data_files(root) == logged_files(root)
    assert not list((root / "_stoker" / "uid1").iterdir())  # intents gone with the commits
    # Rebuilt from its descriptor (the job manager's cleanup): the same app id, nothing again.
    rebuilt = from_descriptor(descriptor_of(sink))
    rebuilt.open(OWNER, tmp_path)
    rebuilt.commit(Epoch(1), AttemptNo(1), d1.detail)
    assert deltalake.DeltaTable(str(root)).version() == 1


def test_a_timestamp_column_is_written_as_delta_takes_it(spark: Any, tmp_path: Path) -> None:
    """Almost every event-time job has one: pyspark 4.3 asks for a time zone to turn a
    timestamp into Arrow, and the sink's schema check failed before anything was written."""
    from pyspark.sql import functions as F

    root = tmp_path / "t"
    sink = opened(root)
    df = spark.range(0, 10, 1, 2).select("id", F.timestamp_seconds(F.col("id") * 60).alias("at"))
    d0 = sink.prepare(df, Epoch(0), AttemptNo(1))
    sink.commit(Epoch(0), AttemptNo(1), d0.detail)
    table = deltalake.DeltaTable(str(root)).to_pyarrow_table()
    assert sorted(table.column("id").to_pylist()) == list(range(10))
    assert pa.types.is_timestamp(table.schema.field("at").type)
    at = {r["id"]: r["at"] for r in table.to_pylist()}
    assert int(at[3].timestamp()) == 180


def test_names_mapinarrow_reads_as_paths_are_written_as_named(spark: Any, tmp_path: Path) -> None:
    """The writer tasks take plain names as they are and rename the others by position (a
    dot reads as a struct path in ``mapInArrow``, names differing only in case clash); the
    table gets the output's own names either way, over epochs with both kinds."""
    from pyspark.sql import functions as F

    root = tmp_path / "t"
    sink = opened(root, schema_mode="merge")
    d0 = sink.prepare(frame(spark, range(0, 20)), Epoch(0), AttemptNo(1))
    sink.commit(Epoch(0), AttemptNo(1), d0.detail)
    odd = frame(spark, range(20, 40)).select(
        "id", "bucket", (F.col("id") * 2).alias("x.y"), F.lit(1).alias("Id_2")
    )
    d1 = sink.prepare(odd, Epoch(1), AttemptNo(1))
    sink.commit(Epoch(1), AttemptNo(1), d1.detail)
    table = deltalake.DeltaTable(str(root)).to_pyarrow_table()
    assert table.column_names == ["id", "bucket", "x.y", "Id_2"]
    doubled = {r["id"]: r["x.y"] for r in table.to_pylist() if r["id"] >= 20}
    assert doubled == {i: 2 * i for i in range(20, 40)}
    exactly_once(delta_ids(root), 40)


def test_abort_and_recovery_remove_files_no_log_names(spark: Any, tmp_path: Path) -> None:
    """An attempt never decided (aborted, or left by a crash), and a decided epoch's leftover
    copy: their files go; the committed files never do."""
    root = tmp_path / "t"
    sink = opened(root)
    kept = sink.prepare(frame(spark, range(0, 50)), Epoch(0), AttemptNo(1))
    sink.commit(Epoch(0), AttemptNo(1), kept.detail)
    committed = data_files(root)
    sink.prepare(frame(spark, range(50, 60)), Epoch(1), AttemptNo(1))
    sink.abort(Epoch(1), AttemptNo(1))
    assert data_files(root) == committed
    # Left by crashes: epoch 1 of attempt 2 (undecided), epoch 1 of attempt 3 (in flight).
    sink.prepare(frame(spark, range(50, 60)), Epoch(1), AttemptNo(2))
    flight = sink.prepare(frame(spark, range(50, 60)), Epoch(1), AttemptNo(3))
    decided = {0: 1}
    done = sink.recover(lambda e: decided.get(int(e)), up_to=AttemptNo(2))  # type: ignore[arg-type,return-value]
    assert done.aborted == [(1, 2)]
    left = data_files(root) - committed
    assert left == {a["path"] for a in flight.detail["adds"]}
    exactly_once(delta_ids(root), 50)


def test_a_concurrent_writer_between_prepare_and_commit(spark: Any, tmp_path: Path) -> None:
    """Another writer appends to the table after the epoch was prepared: the commit is retried
    on the new log version (delta-rs' conflict check), the other writer's rows stay, the
    epoch's are in once."""
    root = tmp_path / "t"
    sink = opened(root)
    d0 = sink.prepare(frame(spark, range(0, 40)), Epoch(0), AttemptNo(1))
    sink.commit(Epoch(0), AttemptNo(1), d0.detail)
    d1 = sink.prepare(frame(spark, range(40, 80)), Epoch(1), AttemptNo(1))
    other = pa.table(
        {"id": pa.array([1000, 1001], pa.int64()), "bucket": pa.array([0, 1], pa.int32())}
    )
    deltalake.write_deltalake(str(root), other, mode="append")
    sink.commit(Epoch(1), AttemptNo(1), d1.detail)
    sink.commit(Epoch(1), AttemptNo(1), d1.detail)
    ids = delta_ids(root)
    assert ids[1000] == 1 and ids[1001] == 1
    del ids[1000], ids[1001]
    exactly_once(ids, 80)
    assert deltalake.DeltaTable(str(root)).version() == 2


def test_a_lost_file_is_an_error_and_nothing_is_committed(spark: Any, tmp_path: Path) -> None:
    root = tmp_path / "t"
    sink = opened(root)
    d0 = sink.prepare(frame(spark, range(0, 40)), Epoch(0), AttemptNo(1))
    (root / d0.detail["adds"][0]["path"]).unlink()
    with pytest.raises(SinkError, match="1 of them are gone"):
        sink.commit(Epoch(0), AttemptNo(1), d0.detail)
    assert not (root / "_delta_log").exists()


def test_a_new_column_is_refused_unless_merge_and_complete_replaces(
    spark: Any, tmp_path: Path
) -> None:
    from pyspark.sql import functions as F

    root = tmp_path / "t"
    sink = opened(root)
    d0 = sink.prepare(frame(spark, range(0, 30)), Epoch(0), AttemptNo(1))
    sink.commit(Epoch(0), AttemptNo(1), d0.detail)
    grown = frame(spark, range(30, 60)).withColumn("extra", F.lit("x"))
    before = data_files(root)
    with pytest.raises(InvalidSink, match=r"adds column\(s\) extra .*schema_mode='merge'"):
        sink.check_output(grown)
    with pytest.raises(InvalidSink, match="schema_mode='merge'"):
        sink.prepare(grown, Epoch(1), AttemptNo(1))
    assert data_files(root) == before  # nothing written
    merging = opened(root, schema_mode="merge")
    d1 = merging.prepare(grown, Epoch(1), AttemptNo(1))
    merging.commit(Epoch(1), AttemptNo(1), d1.detail)
    table = deltalake.DeltaTable(str(root)).to_pyarrow_table()
    assert table.num_rows == 60 and "extra" in table.column_names
    assert table.column("extra").null_count == 30
    # complete: each epoch replaces the table's rows in its one commit
    whole = opened(tmp_path / "c")
    whole.accept_output_mode("complete")
    for e in range(3):
        d = whole.prepare(frame(spark, range(0, 10 * (e + 1))), Epoch(e), AttemptNo(1))
        whole.commit(Epoch(e), AttemptNo(1), d.detail)
    exactly_once(delta_ids(tmp_path / "c"), 30)
    with pytest.raises(InvalidSink, match="needs it"):
        delta(str(tmp_path / "u")).accept_output_mode("update")


def test_update_mode_merges_on_the_key_once(spark: Any, tmp_path: Path) -> None:
    """``output_mode='update'``: each epoch MERGEd on the key in its one commit (the marker
    with it); two rows of a key in one epoch give the last; a commit done again changes
    nothing; the prepared files never enter the log and are gone after the commit."""
    from pyspark.sql import functions as F

    root = tmp_path / "t"
    sink = opened(root, key="k", partition_by="bucket")
    sink.accept_output_mode("update")
    with pytest.raises(InvalidSink, match=r"key columns \['k'\]"):
        sink.check_output(frame(spark, range(0, 3)))

    def epoch(ids: range, value: int, parts: int = 2) -> Any:
        # A key's rows all in one bucket (so in one file, in order of id).
        k = F.col("id") % 10
        return frame(spark, ids, parts).select(
            k.alias("k"), (k % 3).cast("int").alias("bucket"), F.lit(value).alias("v"), "id"
        )

    for e, (ids, value) in enumerate([(range(0, 10), 1), (range(5, 25), 2), (range(0, 3), 3)]):
        d = sink.prepare(epoch(ids, value, 1), Epoch(e), AttemptNo(1))
        sink.commit(Epoch(e), AttemptNo(1), d.detail)
        sink.commit(Epoch(e), AttemptNo(1), d.detail)
    table = deltalake.DeltaTable(str(root))
    rows = {r["k"]: (r["v"], r["id"]) for r in table.to_pyarrow_table().to_pylist()}
    assert table.to_pyarrow_table().num_rows == 10
    # Epoch 1 held ids 5..24 in one partition, in order: the last id of key k is 20 + k for
    # k < 5, 10 + k above; epoch 2 wrote keys 0..2 again.
    expected = {k: (3, k) if k < 3 else (2, 20 + k if k < 5 else 10 + k) for k in range(10)}
    assert rows == expected
    assert table.transaction_version(sink.app_id("uid1")) == 2
    assert sink.committed_epochs(OWNER) == [2]
    assert data_files(root) <= logged_files(root)
    assert not any("stoker-uid1" in f for f in logged_files(root))


def test_bad_input_is_named(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(InvalidSink, match="is not a folder"):
        delta(str(tmp_path / "f")).validate(OWNER)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "data.csv").write_text("x")
    with pytest.raises(InvalidSink, match="holds no Delta table"):
        delta(str(tmp_path / "d")).validate(OWNER)
    with pytest.raises(InvalidSink, match="schema_mode"):
        delta(str(tmp_path / "e"), schema_mode="overwrite").validate(OWNER)


# real drivers ----------------------------------------------------------------------------------
JOB = "dids"


def dids_env(out: Path, total: int, per_epoch: int, **extra: str) -> dict[str, str]:
    return {
        "DIDS_OUT": str(out),
        "DIDS_TOTAL": str(total),
        "DIDS_PER_EPOCH": str(per_epoch),
        "DIDS_JOB": JOB,
        "STOKER_FAULT": "",  # never inherit a fault plan from the environment running pytest
        **extra,
    }


def tail(log: Path, lines: int = 40) -> str:
    try:
        text = log.read_text(errors="replace").splitlines()
    except OSError:
        return f"(no log at {log})"
    return f"--- last {lines} lines of {log} ---\n" + "\n".join(text[-lines:])


def start_dids(state: Path, env: dict[str, str], log: Path, *args: str) -> subprocess.Popen[bytes]:
    return start_driver(
        APPS / "delta_ids_app.py", "-D", f"stoker.state_dir={state}", *args, env=env, log=log
    )


def finish(proc: subprocess.Popen[bytes], log: Path, expect: int) -> None:
    """Wait for the driver to end by itself with ``expect`` (-9: the injected SIGKILL)."""
    try:
        rc = proc.wait(timeout=RUN)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        pytest.fail(f"driver still running after {RUN:.0f}s\n{tail(log)}")
    wait_group_gone(proc.pid)
    assert rc == expect, f"driver ended with rc {rc}, expected {expect}\n{tail(log)}"


def assert_done(state: Path, out: Path, total: int, log: Path) -> None:
    """Each id once for Delta readers; no data file outside the log; the job FINISHED, every
    epoch COMMITTED once in the table (its txn marker), no sink part PREPARED."""
    try:
        exactly_once(delta_ids(out), total)
        exactly_once(duckdb_ids(out), total)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{tail(log)}") from None
    assert data_files(out) == logged_files(out), data_files(out) ^ logged_files(out)
    st = open_store(state / "store.db")
    try:
        job = st.get_job(job_id(JOB))
        assert job.state == JobState.FINISHED, f"{job.state}: {job.last_error}\n{tail(log)}"
        recs = st.list_epochs(job.job_id, limit=10_000)
        assert all(e.state == EpochState.COMMITTED for e in recs), recs
        assert st.list_txns(job.job_id, TxnState.PREPARED) == []
        table = deltalake.DeltaTable(str(out))
        app = f"stoker:{job.uid}:delta:{out.resolve()}"
        assert table.transaction_version(app) == max(e.epoch for e in recs)
        # One Delta commit per epoch with rows, nothing twice.
        epochs_in_log = [
            h for h in table.history() if h.get("operation") in ("WRITE", "CREATE TABLE")
        ]
        assert len(epochs_in_log) == len([e for e in recs if (e.rows_in or 0) > 0]), (
            epochs_in_log,
            recs,
        )
    finally:
        st.close()


def test_generator_to_delta_exactly_once_across_driver_kills(tmp_path: Path) -> None:
    """One job, one driver per step, each SIGKILLed (its whole process group) at its step of
    the next epoch: epoch 0 prepared and undecided (its files never enter the log; there is no
    table yet); decided, nothing in the log; the Delta commit in the log but not the store's
    record of it. A last driver runs to the end: every id once for deltalake's reader and
    DuckDB, each epoch committed once, no file outside the log."""
    state, out = tmp_path / "state", tmp_path / "table"
    env = dids_env(out, total=1000, per_epoch=200, DIDS_PARTITION_BY="bucket")
    steps = ["after_prepare", "after_decide", "delta_after_log"]
    # The first kill before the table exists: the next start finds only prepared files.
    for i, step in enumerate(steps):
        log = tmp_path / f"driver-{i}.log"
        finish(start_dids(state, {**env, "STOKER_FAULT": f"{step}:{i}"}, log), log, -9)
        assert f"injected crash at {step} epoch {i}" in log.read_text(errors="replace"), tail(log)
    log = tmp_path / "driver-last.log"
    finish(start_dids(state, env, log), log, 0)
    assert_done(state, out, 1000, log)


def test_a_retried_task_leaves_no_file_in_the_log(tmp_path: Path) -> None:
    """``local[2,8]``: the first attempt of a task dies right after writing its Delta files;
    Spark's retry writes its own, which are the ones committed; the dead copy's files are
    deleted by the commit and never named by the log."""
    state, out = tmp_path / "state", tmp_path / "table"
    env = dids_env(out, total=600, per_epoch=200)
    log = tmp_path / "driver.log"
    proc = start_dids(
        state,
        {**env, "STOKER_FAULT": "task_after_prepare:1:0"},
        log,
        "-D",
        "stoker.master=local[2,8]",
    )
    finish(proc, log, 0)
    assert "injected worker death after writing Delta files" in log.read_text(errors="replace")
    st = open_store(state / "store.db")
    try:
        rec = st.get_epoch(job_id(JOB), Epoch(1))
        assert rec is not None and rec.decided_by is not None
        txn = st.get_txn(job_id(JOB), Epoch(1), f"delta:{out.resolve()}", rec.decided_by)
        assert txn is not None
        retried = [p for p in txn.detail["parts"] if p["partition"] == 0]
        assert retried and retried[0]["task_attempt_number"] == 1, txn.detail["parts"]
    finally:
        st.close()
    assert_done(state, out, 600, log)


def test_a_restore_behind_the_table_is_refused_even_to_rewrite(tmp_path: Path) -> None:
    """A savepoint of epoch 2 while the table's marker for the uid holds epoch 5: the restored
    job (same uid, so the same app id) would have its commits of epochs 3..5 skipped, so the
    restore is refused, also with --rewrite-output-after-savepoint."""
    from deltalake.transaction import CommitProperties, Transaction

    from stoker.errors import InvalidInput
    from stoker.pipeline import Pipeline
    from stoker.runtime.restore_checks import outputs_ahead

    root = tmp_path / "t"
    sink = delta(str(root))
    rows = pa.table({"id": pa.array([1], pa.int64())})
    marker = CommitProperties(app_transactions=[Transaction(sink.app_id(OWNER.uid), 5)])
    deltalake.write_deltalake(str(root), rows, commit_properties=marker)
    assert sink.committed_epochs(OWNER) == [5]
    p = Pipeline("djob").sink(sink)
    for rewrite in (False, True):
        with pytest.raises(InvalidInput, match="never commits an epoch its table's txn marker"):
            outputs_ahead({"epoch": 2}, tmp_path / "sp", p, OWNER, rewrite)
    assert outputs_ahead({"epoch": 5}, tmp_path / "sp", p, OWNER, False) == ()


def test_the_log_is_checkpointed_as_epochs_go_on(tmp_path: Path) -> None:
    """Parts written as a Spark task writes them (no Spark here), 101 epochs committed: delta-rs
    writes a log checkpoint every 100 commits (``delta.checkpointInterval``; the 100th commit
    is version 99), so that opening the table reads one Parquet checkpoint and a few JSON
    entries, not every commit."""
    from stoker.sinks._delta_schema import schema_json
    from stoker.sinks._delta_task import DeltaTask, write_files

    root = tmp_path / "t"
    sink = opened(root)
    schema = pa.schema([pa.field("id", pa.int64(), False)])
    for e in range(101):
        t = DeltaTask(str(root), OWNER.uid, e, 1, ("id",), ())
        adds = write_files(t, 0, 1000 + e, pa.table({"id": pa.array([e], pa.int64())}))
        sink.commit(Epoch(e), AttemptNo(1), {"adds": adds, "schema": schema_json(schema)})
    last = json.loads((root / "_delta_log" / "_last_checkpoint").read_text())
    assert last["version"] == 99, last
    assert (root / "_delta_log" / "00000000000000000099.checkpoint.parquet").is_file()
    exactly_once(delta_ids(root), 101)
    assert sink.committed_epochs(OWNER) == [100]


def test_a_column_the_pipeline_adds_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    """A job wrote the table; a new job whose output has one more column is refused at its
    start with exit 2, naming schema_mode='merge', and the table is as it was."""
    state, out = tmp_path / "state", tmp_path / "table"
    log = tmp_path / "driver-1.log"
    finish(start_dids(state, dids_env(out, total=200, per_epoch=100), log), log, 0)
    version = deltalake.DeltaTable(str(out)).version()
    files = data_files(out)
    log2 = tmp_path / "driver-2.log"
    env = dids_env(out, total=200, per_epoch=100, DIDS_EXTRA="1", DIDS_JOB="dids2")
    finish(start_dids(tmp_path / "state2", env, log2), log2, 2)
    text = log2.read_text(errors="replace")
    assert "adds column(s) extra" in text and "schema_mode='merge'" in text, tail(log2)
    assert deltalake.DeltaTable(str(out)).version() == version
    assert data_files(out) == files
