"""The Iceberg sink (issue 43 item 2) on real Iceberg tables in a real SQLite catalog (and one in
PostgreSQL), read back by pyiceberg's own reader (``table.scan().to_arrow()``).

The first tests drive the sink's protocol in the test's own process with a local Spark: epochs
prepared by Spark tasks, committed, committed again (a crash between the catalog's commit and
the store's record), aborted and recovered, a concurrent writer appending between prepare and
commit, update and complete modes, a new column refused. The later ones run real ``stoker
run`` drivers (generator -> Iceberg sink) SIGKILLed at the steps of the epoch protocol and
inside the sink's commit, frozen before the catalog's commit while another writer appends, and
with a task retried (``local[2,3]``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from stoker.errors import InvalidSink, SinkError
from stoker.sinks import descriptor_of, from_descriptor, iceberg
from stoker.sinks.base import SinkOwner
from stoker.store import open_store
from stoker.types import AttemptNo, Epoch, EpochState, JobId, JobState, TxnState, job_id
from tests.support import APPS, exactly_once, kill_group, start_driver, wait_for, wait_group_gone

pytest.importorskip("pyiceberg.catalog.sql")
from pyiceberg.catalog.sql import SqlCatalog

pytestmark = [pytest.mark.timeout(1500)]

OWNER = SinkOwner(JobId("ijob"), "uid1")
RUN = 420.0  # a cold Spark driver on two shared cores


# readers ---------------------------------------------------------------------------------------
def catalog_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'catalog.db'}"


def reader(url: str, warehouse: Path) -> Any:
    """pyiceberg's own catalog over the same database, as another program opens it."""
    return SqlCatalog(
        "default",
        uri=url.replace("postgresql://", "postgresql+psycopg://"),
        warehouse=warehouse.as_uri(),
    )


def ice_ids(url: str, warehouse: Path, table: str = "db.t") -> Counter[int]:
    """The ids pyiceberg's reader sees in the table's current snapshot."""
    t = reader(url, warehouse).load_table(table)
    return Counter(int(x) for x in t.scan().to_arrow().column("id").to_pylist())


def snapshot_files(url: str, warehouse: Path, table: str = "db.t") -> set[str]:
    """Every data file any snapshot of the table ever added (local paths)."""
    t = reader(url, warehouse).load_table(table)
    files = set()
    for s in t.snapshots():
        for m in s.manifests(t.io):
            for e in m.fetch_manifest_entry(t.io, discard_deleted=False):
                files.add(e.data_file.file_path.removeprefix("file://"))
    return files


def data_files(warehouse: Path) -> set[str]:
    """The Parquet data files under the warehouse (the staging folders left out)."""
    return {str(p) for p in warehouse.rglob("*.parquet") if "_stoker" not in p.parts}


def epochs_in(url: str, warehouse: Path, table: str = "db.t") -> list[int]:
    """The epochs of the snapshots that carry a stoker marker, oldest first."""
    t = reader(url, warehouse).load_table(table)
    return [
        int(s.summary["stoker.epoch"])
        for s in t.snapshots()
        if s.summary is not None and "stoker.epoch" in s.summary.additional_properties
    ]


# the protocol in-process -----------------------------------------------------------------------
def frame(spark: Any, ids: range, parts: int = 2) -> Any:
    from pyspark.sql import functions as F

    return spark.range(ids.start, ids.stop, 1, parts).select(
        "id", (F.col("id") % 3).cast("int").alias("bucket")
    )


def opened(url: str, table: str = "db.t", **kw: Any) -> Any:
    sink = iceberg(url, table, **kw)
    sink.validate(OWNER)
    sink.open(OWNER, Path("/nonexistent"))
    return sink


def test_epochs_commit_once_and_again_commit_nothing(spark: Any, tmp_path: Path) -> None:
    """The first epoch makes the table; each epoch is one snapshot with the marker; a commit
    done again (after a crash between the catalog's commit and the store's record) adds
    nothing; the files carry field ids; another uid's marker is apart."""
    import pyarrow.parquet as pq

    url, wh = catalog_url(tmp_path), tmp_path / "warehouse"
    sink = opened(url)
    d0 = sink.prepare(frame(spark, range(0, 100)), Epoch(0), AttemptNo(1))
    assert d0.rows == 100 and len(d0.parts) == 2 and len(d0.detail["files"]) == 2
    t = reader(url, wh).load_table("db.t")
    assert t.current_snapshot() is None  # made by the prepare, no snapshot: no row visible
    sink.commit(Epoch(0), AttemptNo(1), d0.detail)
    sink.commit(Epoch(0), AttemptNo(1), d0.detail)
    d1 = sink.prepare(frame(spark, range(100, 250), 3), Epoch(1), AttemptNo(1))
    sink.commit(Epoch(1), AttemptNo(1), d1.detail)
    sink.commit(Epoch(1), AttemptNo(1), d1.detail)
    exactly_once(ice_ids(url, wh), 250)
    assert epochs_in(url, wh) == [0, 1]
    t = reader(url, wh).load_table("db.t")
    summary = t.current_snapshot().summary
    assert summary["stoker.uid"] == "uid1" and summary["stoker.sink"] == "iceberg:db.t"
    assert summary.operation.value == "append"
    # Field ids in the files' own schema (not a name mapping): id is 1, bucket is 2.
    path = d1.detail["files"][0]["path"].removeprefix("file://")
    fields = pq.read_schema(path)
    assert [f.metadata[b"PARQUET:field_id"] for f in fields] == [b"1", b"2"]
    assert "schema.name-mapping.default" not in t.metadata.properties
    assert t.metadata.properties["commit.manifest-merge.enabled"] == "true"
    assert sink.committed_epochs(OWNER) == [1]
    assert sink.committed_epochs(SinkOwner(JobId("ijob"), "other")) == []
    assert data_files(wh) == snapshot_files(url, wh)
    assert not list((wh / "db" / "t" / "_stoker" / "uid1").iterdir())  # intents gone
    # Rebuilt from its descriptor (the job manager's cleanup): the same marker, nothing again.
    rebuilt = from_descriptor(descriptor_of(sink))
    rebuilt.open(OWNER, tmp_path)
    rebuilt.commit(Epoch(1), AttemptNo(1), d1.detail)
    assert epochs_in(url, wh) == [0, 1]


def test_abort_and_recovery_remove_files_no_snapshot_names(spark: Any, tmp_path: Path) -> None:
    """An attempt never decided (aborted, or left by a crash), and a decided epoch's leftover
    copy: their files go; the committed files never do; a later attempt's are untouched."""
    url, wh = catalog_url(tmp_path), tmp_path / "warehouse"
    sink = opened(url)
    kept = sink.prepare(frame(spark, range(0, 50)), Epoch(0), AttemptNo(1))
    sink.commit(Epoch(0), AttemptNo(1), kept.detail)
    committed = data_files(wh)
    sink.prepare(frame(spark, range(50, 60)), Epoch(1), AttemptNo(1))
    sink.abort(Epoch(1), AttemptNo(1))
    assert data_files(wh) == committed
    sink.prepare(frame(spark, range(50, 60)), Epoch(1), AttemptNo(2))
    flight = sink.prepare(frame(spark, range(50, 60)), Epoch(1), AttemptNo(3))
    decided = {0: 1}
    done = sink.recover(lambda e: decided.get(int(e)), up_to=AttemptNo(2))  # type: ignore[arg-type,return-value]
    assert done.aborted == [(1, 2)]
    left = data_files(wh) - committed
    assert left == {f["path"].removeprefix("file://") for f in flight.detail["files"]}
    exactly_once(ice_ids(url, wh), 50)


def test_manifests_are_merged_as_epochs_go_on(spark: Any, tmp_path: Path) -> None:
    """A table the sink made merges its manifests (here from 2 on, not 100): after 6 epochs
    the current snapshot lists at most 2 manifests; every epoch's files are found for the
    clean-up and recovery, every id once, the marker at the last epoch."""
    from stoker.sinks._iceberg_marker import epoch_files

    url, wh = catalog_url(tmp_path), tmp_path / "warehouse"
    sink = opened(url)
    recorded = []
    for e in range(6):
        d = sink.prepare(frame(spark, range(10 * e, 10 * (e + 1)), 1), Epoch(e), AttemptNo(1))
        recorded.append({f["path"] for f in d.detail["files"]})
        if e == 0:
            t = reader(url, wh).load_table("db.t")
            with t.transaction() as tx:
                tx.set_properties({"commit.manifest.min-count-to-merge": "2"})
        sink.commit(Epoch(e), AttemptNo(1), d.detail)
        sink.commit(Epoch(e), AttemptNo(1), d.detail)
    t = reader(url, wh).load_table("db.t")
    assert len(t.current_snapshot().manifests(t.io)) <= 2
    # What a clean-up of each epoch keeps: exactly its files, found in merged manifests too.
    assert [epoch_files(t, OWNER.uid, sink.name, e) for e in range(6)] == recorded
    exactly_once(ice_ids(url, wh), 60)
    assert sink.committed_epochs(OWNER) == [5]
    done = sink.recover(lambda e: AttemptNo(1))
    assert done.aborted == [] and done.strays == []
    assert data_files(wh) == snapshot_files(url, wh)
    exactly_once(ice_ids(url, wh), 60)


def test_spark_types_round_trip(spark: Any, tmp_path: Path) -> None:
    """Spark's types through the tasks' files (cast to the table's Arrow types, field ids on
    nested fields too) read back by pyiceberg as they were written, over two epochs (the
    second checked against the table the first made)."""
    url, wh = catalog_url(tmp_path), tmp_path / "warehouse"
    sink = opened(url)
    query = """SELECT id, CAST(id AS TINYINT) AS b, CAST(id AS SMALLINT) AS s,
        CAST(id AS FLOAT) / 2 AS f, CAST(id AS DECIMAL(10, 2)) / 4 AS d, id % 2 = 0 AS flag,
        CAST(id AS STRING) AS t, CAST(CAST(id AS STRING) AS BINARY) AS bin,
        DATE_ADD(DATE'2026-01-01', CAST(id AS INT)) AS day,
        TIMESTAMP'2026-01-01 00:00:00' + make_interval(0, 0, 0, 0, 0, 0, id) AS ts,
        array(id, id + 1) AS arr, named_struct('x', id, 'y', CAST(id AS STRING)) AS st,
        map('k', id) AS m
        FROM range({}, {}, 1, 2)"""
    for e in range(2):
        df = spark.sql(query.format(10 * e, 10 * (e + 1)))
        d = sink.prepare(df, Epoch(e), AttemptNo(1))
        sink.commit(Epoch(e), AttemptNo(1), d.detail)
    got = reader(url, wh).load_table("db.t").scan().to_arrow().sort_by("id").to_pylist()
    want = spark.sql(query.format(0, 20)).orderBy("id").toArrow().to_pylist()
    assert len(got) == 20
    for g, w in zip(got, want, strict=True):
        w["m"] = list(w["m"]) if isinstance(w["m"], dict) else w["m"]
        g["m"] = list(g["m"]) if isinstance(g["m"], dict) else g["m"]
        assert g == w, (g, w)


def test_a_concurrent_writer_between_prepare_and_commit(spark: Any, tmp_path: Path) -> None:
    """Another writer appends to the table after the epoch was prepared: the commit reads the
    table anew, the other writer's rows stay, the epoch's are in once."""
    url, wh = catalog_url(tmp_path), tmp_path / "warehouse"
    sink = opened(url)
    d0 = sink.prepare(frame(spark, range(0, 40)), Epoch(0), AttemptNo(1))
    sink.commit(Epoch(0), AttemptNo(1), d0.detail)
    d1 = sink.prepare(frame(spark, range(40, 80)), Epoch(1), AttemptNo(1))
    other = pa.table(
        {"id": pa.array([1000, 1001], pa.int64()), "bucket": pa.array([0, 1], pa.int32())}
    )
    reader(url, wh).load_table("db.t").append(other)
    sink.commit(Epoch(1), AttemptNo(1), d1.detail)
    sink.commit(Epoch(1), AttemptNo(1), d1.detail)
    ids = ice_ids(url, wh)
    assert ids[1000] == 1 and ids[1001] == 1
    del ids[1000], ids[1001]
    exactly_once(ids, 80)
    assert epochs_in(url, wh) == [0, 1]


def test_a_lost_file_is_an_error_and_nothing_is_committed(spark: Any, tmp_path: Path) -> None:
    url, wh = catalog_url(tmp_path), tmp_path / "warehouse"
    sink = opened(url)
    d0 = sink.prepare(frame(spark, range(0, 40)), Epoch(0), AttemptNo(1))
    Path(d0.detail["files"][0]["path"].removeprefix("file://")).unlink()
    with pytest.raises(SinkError, match="1 of them are gone"):
        sink.commit(Epoch(0), AttemptNo(1), d0.detail)
    assert reader(url, wh).load_table("db.t").current_snapshot() is None


def test_a_new_column_is_refused_unless_merge(spark: Any, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    url, wh = catalog_url(tmp_path), tmp_path / "warehouse"
    sink = opened(url)
    d0 = sink.prepare(frame(spark, range(0, 30)), Epoch(0), AttemptNo(1))
    sink.commit(Epoch(0), AttemptNo(1), d0.detail)
    grown = frame(spark, range(30, 60)).withColumn("extra", F.lit("x"))
    before = data_files(wh)
    with pytest.raises(InvalidSink, match=r"adds column\(s\) extra .*schema_mode='merge'"):
        opened(url).check_output(grown)
    with pytest.raises(InvalidSink, match="schema_mode='merge'"):
        sink.prepare(grown, Epoch(1), AttemptNo(1))
    assert data_files(wh) == before  # nothing written
    assert reader(url, wh).load_table("db.t").schema().column_names == ["id", "bucket"]
    merging = opened(url, schema_mode="merge")
    d1 = merging.prepare(grown, Epoch(1), AttemptNo(1))
    merging.commit(Epoch(1), AttemptNo(1), d1.detail)
    table = reader(url, wh).load_table("db.t").scan().to_arrow()
    assert table.num_rows == 60 and "extra" in table.column_names
    assert table.column("extra").null_count == 30
    with pytest.raises(InvalidSink, match=r"bucket \(int32 in the table, string in the output\)"):
        opened(url).check_output(frame(spark, range(0, 3)).withColumn("bucket", F.lit("b")))


def test_complete_replaces_the_table_in_one_snapshot(spark: Any, tmp_path: Path) -> None:
    url, wh = catalog_url(tmp_path), tmp_path / "warehouse"
    whole = opened(url)
    whole.accept_output_mode("complete")
    for e in range(3):
        d = whole.prepare(frame(spark, range(0, 10 * (e + 1))), Epoch(e), AttemptNo(1))
        whole.commit(Epoch(e), AttemptNo(1), d.detail)
        whole.commit(Epoch(e), AttemptNo(1), d.detail)
    exactly_once(ice_ids(url, wh), 30)
    assert epochs_in(url, wh) == [0, 1, 2]
    t = reader(url, wh).load_table("db.t")
    assert t.current_snapshot().summary.operation.value == "overwrite"
    # The older snapshots still read as they were (time travel).
    first = t.snapshots()[0].snapshot_id
    assert t.scan(snapshot_id=first).to_arrow().num_rows == 10


def test_update_mode_upserts_on_the_key_once(spark: Any, tmp_path: Path) -> None:
    """``output_mode='update'``: each epoch upserted on the key (pyiceberg's copy-on-write
    upsert, the marker on its snapshots); two rows of a key in one epoch give the last; a
    commit done again changes nothing; the prepared files never enter the table."""
    from pyspark.sql import functions as F

    url, wh = catalog_url(tmp_path), tmp_path / "warehouse"
    sink = opened(url, key="k")
    sink.accept_output_mode("update")
    with pytest.raises(InvalidSink, match=r"key columns \['k'\]"):
        sink.check_output(frame(spark, range(0, 3)))

    def epoch(ids: range, value: int) -> Any:
        k = F.col("id") % 10
        return frame(spark, ids, 1).select(k.alias("k"), F.lit(value).alias("v"), "id")

    for e, (ids, value) in enumerate([(range(0, 10), 1), (range(5, 25), 2), (range(0, 3), 3)]):
        d = sink.prepare(epoch(ids, value), Epoch(e), AttemptNo(1))
        sink.commit(Epoch(e), AttemptNo(1), d.detail)
        sink.commit(Epoch(e), AttemptNo(1), d.detail)
    table = reader(url, wh).load_table("db.t").scan().to_arrow()
    rows = {r["k"]: (r["v"], r["id"]) for r in table.to_pylist()}
    assert table.num_rows == 10
    # Epoch 1 held ids 5..24 in one partition, in order: the last id of key k is 20 + k for
    # k < 5, 10 + k above; epoch 2 wrote keys 0..2 again.
    expected = {k: (3, k) if k < 3 else (2, 20 + k if k < 5 else 10 + k) for k in range(10)}
    assert rows == expected
    assert sink.committed_epochs(OWNER) == [2]
    assert not any("stoker-uid1" in f for f in snapshot_files(url, wh))
    assert not any("stoker-uid1" in f for f in data_files(wh))


def test_a_postgresql_catalog(spark: Any, tmp_path: Path, pg_dsn: str) -> None:
    """The catalog in PostgreSQL (through psycopg 3), the warehouse a folder: the same epochs,
    the marker, a commit done again; the password never in what the sink shows."""
    from stoker.redact import redact_answer

    wh = tmp_path / "shared-warehouse"
    sink = opened(pg_dsn, warehouse=str(wh))
    for e in range(2):
        d = sink.prepare(frame(spark, range(50 * e, 50 * (e + 1))), Epoch(e), AttemptNo(1))
        sink.commit(Epoch(e), AttemptNo(1), d.detail)
        sink.commit(Epoch(e), AttemptNo(1), d.detail)
    exactly_once(ice_ids(pg_dsn, wh), 100)
    assert sink.committed_epochs(OWNER) == [1]
    secret = iceberg(pg_dsn.replace("@", ":s3cr3t@", 1), "db.t", warehouse=str(wh))
    assert "s3cr3t" not in secret.describe() + secret.target() + secret.name
    assert "s3cr3t" not in json.dumps(redact_answer(descriptor_of(secret)))


def test_a_restore_behind_the_table_is_refused_even_to_rewrite(tmp_path: Path) -> None:
    """A savepoint of epoch 2 while the table's marker for the uid holds epoch 5: the restored
    job (same uid, so the same marker) would have its commits of epochs 3..5 skipped, so the
    restore is refused, also with --rewrite-output-after-savepoint."""
    from stoker.errors import InvalidInput
    from stoker.pipeline import Pipeline
    from stoker.runtime.restore_checks import outputs_ahead
    from stoker.sinks._iceberg_marker import marker

    url, wh = catalog_url(tmp_path), tmp_path / "warehouse"
    sink = iceberg(url, "db.t")
    cat = reader(url, wh)
    cat.create_namespace("db")
    table = cat.create_table("db.t", schema=pa.schema([pa.field("id", pa.int64())]))
    table.append(
        pa.table({"id": pa.array([1], pa.int64())}),
        snapshot_properties=marker(OWNER.uid, sink.name, 5, 1),
    )
    assert sink.committed_epochs(OWNER) == [5]
    p = Pipeline("ijob").sink(sink)
    for rewrite in (False, True):
        with pytest.raises(InvalidInput, match="never commits an epoch its table's snapshot"):
            outputs_ahead({"epoch": 2}, tmp_path / "sp", p, OWNER, rewrite)
    assert outputs_ahead({"epoch": 5}, tmp_path / "sp", p, OWNER, False) == ()


# real drivers ----------------------------------------------------------------------------------
JOB = "iids"


def iids_env(tmp_path: Path, total: int, per_epoch: int, **extra: str) -> dict[str, str]:
    return {
        "IIDS_CATALOG": catalog_url(tmp_path),
        "IIDS_TABLE": "db.t",
        "IIDS_TOTAL": str(total),
        "IIDS_PER_EPOCH": str(per_epoch),
        "IIDS_JOB": JOB,
        "STOKER_FAULT": "",  # never inherit a fault plan from the environment running pytest
        **extra,
    }


def tail(log: Path, lines: int = 40) -> str:
    try:
        text = log.read_text(errors="replace").splitlines()
    except OSError:
        return f"(no log at {log})"
    return f"--- last {lines} lines of {log} ---\n" + "\n".join(text[-lines:])


def start_iids(state: Path, env: dict[str, str], log: Path, *args: str) -> subprocess.Popen[bytes]:
    return start_driver(
        APPS / "iceberg_ids_app.py", "-D", f"stoker.state_dir={state}", *args, env=env, log=log
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


def assert_done(
    tmp_path: Path,
    state: Path,
    total: int,
    log: Path,
    others: int = 0,
    url: str | None = None,
    wh: Path | None = None,
) -> None:
    """Each id once for pyiceberg's reader (``others`` more rows of another writer); no data
    file outside the snapshots; the job FINISHED, every epoch COMMITTED, each in one snapshot
    of the table, no sink part PREPARED. The catalog is ``url`` (the test's SQLite one by
    default), the warehouse ``wh``."""
    url, wh = url or catalog_url(tmp_path), wh or tmp_path / "warehouse"
    ids = ice_ids(url, wh)
    for extra in range(10_000, 10_000 + others):
        assert ids.pop(extra, 0) == 1, f"the other writer's row {extra}"
    try:
        exactly_once(ids, total)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{tail(log)}") from None
    assert data_files(wh) == snapshot_files(url, wh), data_files(wh) ^ snapshot_files(url, wh)
    st = open_store(state / "store.db")
    try:
        job = st.get_job(job_id(JOB))
        assert job.state == JobState.FINISHED, f"{job.state}: {job.last_error}\n{tail(log)}"
        recs = st.list_epochs(job.job_id, limit=10_000)
        assert all(e.state == EpochState.COMMITTED for e in recs), recs
        assert st.list_txns(job.job_id, TxnState.PREPARED) == []
        with_rows = sorted(e.epoch for e in recs if (e.rows_in or 0) > 0)
        assert epochs_in(url, wh) == with_rows, (epochs_in(url, wh), recs)
    finally:
        st.close()


def test_generator_to_iceberg_exactly_once_across_driver_kills(tmp_path: Path) -> None:
    """One job, one driver per step, each SIGKILLed (its whole process group) at its step of
    the next epoch: epoch 0 prepared and undecided; decided, nothing in the table; the
    snapshot's manifests written but the catalog not yet committed; the catalog committed but
    not the store's record of it. A last driver runs to the end: every id once for pyiceberg's
    reader, each epoch in one snapshot, no file outside the snapshots."""
    state = tmp_path / "state"
    env = iids_env(tmp_path, total=1000, per_epoch=200)
    steps = ["after_prepare", "after_decide", "iceberg_before_catalog", "iceberg_after_commit"]
    for i, step in enumerate(steps):
        log = tmp_path / f"driver-{i}.log"
        finish(start_iids(state, {**env, "STOKER_FAULT": f"{step}:{i}"}, log), log, -9)
        assert f"injected crash at {step} epoch {i}" in log.read_text(errors="replace"), tail(log)
    log = tmp_path / "driver-last.log"
    finish(start_iids(state, env, log), log, 0)
    assert_done(tmp_path, state, 1000, log)


def test_a_retried_task_leaves_no_file_in_the_table(tmp_path: Path) -> None:
    """``local[2,3]``: the first attempt of a task dies right after writing its data file;
    Spark's retry writes its own, which is the one committed; the dead copy's file is deleted
    by the commit and never named by a snapshot."""
    state = tmp_path / "state"
    env = iids_env(tmp_path, total=600, per_epoch=200)
    log = tmp_path / "driver.log"
    proc = start_iids(
        state,
        {**env, "STOKER_FAULT": "task_after_prepare:1:0"},
        log,
        "-D",
        "stoker.master=local[2,3]",
    )
    finish(proc, log, 0)
    assert "injected worker death after writing Iceberg files" in log.read_text(errors="replace")
    st = open_store(state / "store.db")
    try:
        rec = st.get_epoch(job_id(JOB), Epoch(1))
        assert rec is not None and rec.decided_by is not None
        txn = st.get_txn(job_id(JOB), Epoch(1), "iceberg:db.t", rec.decided_by)
        assert txn is not None
        retried = [p for p in txn.detail["parts"] if p["partition"] == 0]
        assert retried and retried[0]["task_attempt_number"] == 1, txn.detail["parts"]
    finally:
        st.close()
    assert_done(tmp_path, state, 600, log)


def stopped(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] == "T"
    except OSError:
        return False


def wait_frozen_before_catalog(proc: subprocess.Popen[bytes], log: Path, epoch: int) -> None:
    """Until the driver has stopped itself (``sigstop_iceberg_before_catalog:<epoch>``) with
    the epoch's snapshot built, right before the catalog's commit."""
    wait_for(
        lambda: f"the driver frozen before epoch {epoch}'s catalog commit\n{tail(log)}",
        lambda: (
            f"injected sigstop at iceberg_before_catalog epoch {epoch}"
            in log.read_text(errors="replace")
            and stopped(proc.pid)
        ),
        RUN,
        0.2,
    )


def test_a_writer_commits_while_the_driver_is_about_to(tmp_path: Path) -> None:
    """The driver is frozen (SIGSTOP of its group) with epoch 2's snapshot built against the
    table as it read it, right before the catalog's commit; another program appends to the
    table meanwhile; let go, the driver's commit fails (CommitFailedException), it reads the
    marker again and commits the epoch once on top of the other writer's snapshot."""
    state = tmp_path / "state"
    env = iids_env(tmp_path, total=1000, per_epoch=200)
    log = tmp_path / "driver.log"
    proc = start_iids(state, {**env, "STOKER_FAULT": "sigstop_iceberg_before_catalog:2"}, log)
    try:
        wait_frozen_before_catalog(proc, log, 2)
        other = pa.table(
            {"id": pa.array([10_000, 10_001], pa.int64()), "bucket": pa.array([0, 1], pa.int32())}
        )
        reader(catalog_url(tmp_path), tmp_path / "warehouse").load_table("db.t").append(other)
        os.killpg(proc.pid, signal.SIGCONT)
        finish(proc, log, 0)
    finally:
        if proc.poll() is None:
            kill_group(proc)
    assert "epoch 2 commit lost to a concurrent writer" in log.read_text(errors="replace")
    assert_done(tmp_path, state, 1000, log, others=2)


def test_a_column_the_pipeline_adds_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    """A job wrote the table; a new job whose output has one more column is refused at its
    start with exit 2, naming schema_mode='merge', and the table is as it was."""
    state = tmp_path / "state"
    log = tmp_path / "driver-1.log"
    finish(start_iids(state, iids_env(tmp_path, total=200, per_epoch=100), log), log, 0)
    url, wh = catalog_url(tmp_path), tmp_path / "warehouse"
    snapshots = epochs_in(url, wh)
    files = data_files(wh)
    log2 = tmp_path / "driver-2.log"
    env = iids_env(tmp_path, total=200, per_epoch=100, IIDS_EXTRA="1", IIDS_JOB="iids2")
    finish(start_iids(tmp_path / "state2", env, log2), log2, 2)
    text = log2.read_text(errors="replace")
    assert "adds column(s) extra" in text and "schema_mode='merge'" in text, tail(log2)
    assert epochs_in(url, wh) == snapshots
    assert data_files(wh) == files
    assert reader(url, wh).load_table("db.t").schema().column_names == ["id", "bucket"]


def test_the_catalogs_postgresql_down_at_the_commit(tmp_path: Path) -> None:
    """The catalog in a PostgreSQL server of the test's own. The driver is frozen right before
    epoch 2's catalog commit, the server crashes (immediate stop), the driver is let go: its
    commit fails on the dead connection and waits the outage out, trying again (each try
    reads the marker first) until the server is back with its data on the same port; then the
    decided epoch is committed once, in the same attempt, and the job goes on to the end.
    Every id once, each epoch in one snapshot, no file outside them. Before: the attempt
    failed at the first refused connection and `stoker run` ended FAILED (exit 8)."""
    from tests.chaos.nemesis import BouncingPostgres

    server = BouncingPostgres().start()
    try:
        url = server.create_database("iceberg_catalog")
        wh = tmp_path / "pg-warehouse"
        state = tmp_path / "state"
        env = iids_env(
            tmp_path, total=1000, per_epoch=200, IIDS_CATALOG=url, IIDS_WAREHOUSE=str(wh)
        )
        log = tmp_path / "driver.log"
        proc = start_iids(state, {**env, "STOKER_FAULT": "sigstop_iceberg_before_catalog:2"}, log)
        try:
            wait_frozen_before_catalog(proc, log, 2)
            server.crash()
            os.killpg(proc.pid, signal.SIGCONT)
            waiting = "epoch 2: the Iceberg catalog cannot be reached"
            wait_for(
                lambda: f"epoch 2's commit to wait for the catalog\n{tail(log)}",
                lambda: waiting in log.read_text(errors="replace"),
                RUN,
                0.5,
            )
            assert proc.poll() is None, tail(log)
            server.come_back()
            finish(proc, log, 0)
        finally:
            if proc.poll() is None:
                kill_group(proc)
        assert_done(tmp_path, state, 1000, log, url=url, wh=wh)
        st = open_store(state / "store.db")
        try:
            assert len(st.list_attempts(job_id(JOB))) == 1  # waited out, no attempt failed
        finally:
            st.close()
    finally:
        server.stop()


def test_keep_snapshots_bounds_the_tables_snapshots_as_the_job_goes(
    spark: Any, tmp_path: Path
) -> None:
    """With ``keep_snapshots=2`` the table never holds more than 3 snapshots after a commit
    (expired each time the ancestry reaches 4); every row is read once, the marker still
    found, an epoch committed again adds nothing."""
    url, wh = catalog_url(tmp_path), tmp_path / "warehouse"
    sink = opened(url, keep_snapshots=2)
    held = []
    detail: Any = None
    for e in range(8):
        detail = sink.prepare(frame(spark, range(e * 10, e * 10 + 10)), Epoch(e), AttemptNo(1))
        sink.commit(Epoch(e), AttemptNo(1), detail.detail)
        held.append(len(reader(url, wh).load_table("db.t").snapshots()))
    assert max(held) <= 3 and held[-1] <= 3, held
    sink.commit(Epoch(7), AttemptNo(1), detail.detail)  # after a crash: nothing again
    exactly_once(ice_ids(url, wh), 80)
    assert sink.committed_epochs(OWNER) == [7]
    assert epochs_in(url, wh)[-1] == 7
