"""Savepoint lineage (issue 40, item 1): real Spark, real PostgreSQL, real SQLite.

A savepoint goes on in one job. What an outside review proved, each found here first:

1. One savepoint restored twice into one PostgreSQL table (the first restored job had failed
   its first epoch): the second restore ran, and the first, started again, replayed every
   epoch after the savepoint. Now the second is refused naming the first; a fork (``--fork``,
   a uid of its own) is allowed once the first has ended, to a table of its own only.
2. The savepoint's own job ``--restart``ed after its savepoint was restored elsewhere wrote the
   epochs after the savepoint again (the PostgreSQL sink had no handover). Now refused naming
   the restored job, by the store and by the table's owner row.
3. A restore into the same job id on another state folder (another SQLite store) skipped the
   check of the old record: two live records of one id and one uid. Now refused.
4. A savepoint whose job's SQLite store is not on this host: the old job's check was skipped
   without a word. Now refused naming the store, unless the user says to go on without it.
5. A savepoint taken at a bounded job's final epoch: the restored job stayed RUNNING with no
   epoch, for ever. Now refused, saying the savepoint's job had finished.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

import stoker
from stoker import InvalidInput, JobState, Pipeline, lineage, sinks, sources
from stoker.control import events
from stoker.errors import OwnedElsewhere
from stoker.runtime import restore, savepoint
from stoker.sinks.base import SinkOwner
from stoker.store import open_store
from stoker.types import ControlStatus, EpochState, JobId, job_id
from tests.support import APPS, REPO, exactly_once, pg_ids, pg_prepared, stoker_cmd, wait_for
from tests.support.background import BackgroundRun

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from stoker.runtime.context import EpochContext

TRIGGER = "100ms"
TOTAL, PER_EPOCH = 1200, 100


def _pipeline(name: str, dsn: str, table: str = "ids", **kw: Any) -> Pipeline:
    p = Pipeline(name)
    p.source(sources.generator(total=kw.pop("total", TOTAL), max_rows_per_epoch=PER_EPOCH))
    if "transform" in kw:
        p.transform(kw.pop("transform"))
    return p.sink(sinks.postgres(dsn, table=table))


def _epochs(state: Path, jid: str) -> list[Any]:
    if not (state / "store.db").exists():
        return []
    st = open_store(state / "store.db")
    try:
        return st.list_epochs(job_id(jid), limit=1000)
    except stoker.JobNotFound:
        return []
    finally:
        st.close()


def _committed(state: Path, jid: str) -> list[int]:
    return sorted(e.epoch for e in _epochs(state, jid) if e.state == EpochState.COMMITTED)


def _savepoint(state: Path, jid: str, stop: bool) -> str:
    return _control(state, jid, {"kind": "savepoint", "stop": stop})


def _control(state: Path, jid: str, body: dict[str, Any]) -> str:
    st = open_store(state / "store.db")
    try:
        kind, norm = events.validate(body, st.get_job(job_id(jid)).spec)
        ev, _ = st.add_control(job_id(jid), kind, norm, sender="test")
        return ev.control_id
    finally:
        st.close()


def _event(state: Path, jid: str, control_id: str) -> Any:
    st = open_store(state / "store.db")
    try:
        return st.get_control(job_id(jid), control_id)
    finally:
        st.close()


def _stopped_with_savepoint(
    spark: SparkSession, state: Path, jid: str, dsn: str, **kw: Any
) -> tuple[Path, int]:
    """Job ``jid`` run until two epochs committed, then stopped with a savepoint: the
    savepoint's folder and epoch."""
    run = BackgroundRun(
        pipeline=_pipeline(jid, dsn, **kw), job_id=jid, state_dir=state, trigger=TRIGGER,
        spark=spark,
    )  # fmt: skip
    wait_for(f"two epochs of {jid}", lambda: len(_committed(state, jid)) >= 2, 240, 0.1)
    sp = _savepoint(state, jid, stop=True)
    assert run.join().state == JobState.FINISHED
    ev = _event(state, jid, sp)
    assert ev.status == ControlStatus.COMMITTED, ev.reason
    return Path(ev.result["path"]), int(ev.result["epoch"])


def _rows_up_to(state: Path, jid: str, epoch: int) -> int:
    return sum(e.rows_in or 0 for e in _epochs(state, jid) if e.epoch <= epoch)


# 1. one savepoint, two restores ----------------------------------------------------------------


def test_a_savepoint_restored_twice_is_refused_and_a_fork_writes_a_table_of_its_own(
    spark: SparkSession, tmp_path: Path, pg_dsn: str
) -> None:
    a_state, b_state, c_state = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    folder, cut = _stopped_with_savepoint(spark, a_state, "lin-a", pg_dsn)
    before = _rows_up_to(a_state, "lin-a", cut)
    assert 0 < before < TOTAL and pg_ids(pg_dsn, "ids") == Counter(range(before))

    # b, restored from it, fails its first epoch (a bug in its new code).
    broken = tmp_path / "broken"
    broken.write_text("")

    def buggy(df: DataFrame, ctx: EpochContext) -> DataFrame:
        if broken.exists():
            raise RuntimeError("a bug in the new code")
        return df

    def b_run() -> Any:
        return stoker.run(
            _pipeline("lin-b", pg_dsn, transform=buggy), job_id="lin-b", state_dir=b_state,
            trigger=TRIGGER, spark=spark, from_savepoint=folder,
        )  # fmt: skip

    with pytest.raises(Exception, match="a bug in the new code"):
        b_run()
    assert _committed(b_state, "lin-b") == [] and pg_ids(pg_dsn, "ids") == Counter(range(before))

    # c from the same savepoint into the same table: refused, naming b and the ways out.
    def c_run(table: str = "ids", **kw: Any) -> Any:
        return stoker.run(
            _pipeline("lin-c", pg_dsn, table=table), job_id="lin-c", state_dir=c_state,
            trigger=TRIGGER, spark=spark, from_savepoint=folder, **kw,
        )  # fmt: skip

    with pytest.raises(InvalidInput) as bad:
        c_run()
    msg = str(bad.value)
    assert bad.value.field == "from_savepoint"
    assert "was restored before into job 'lin-b'" in msg, msg
    assert "--fork" in msg and str(b_state) in msg, msg
    assert not c_state.exists() and pg_ids(pg_dsn, "ids") == Counter(range(before))

    # The command line: the same refusal, exit 2, before Spark starts.
    cli_state = tmp_path / "cli"
    proc = subprocess.run(
        stoker_cmd(
            "run",
            str(APPS / "ids_app.py"),
            "--job-id",
            "lin-d",
            "--from-savepoint",
            str(folder),
            "-D",
            f"stoker.state_dir={cli_state}",
        ),
        env={
            **os.environ,
            "IDS_OUT": str(tmp_path / "cli-out"),
            "IDS_PG_DSN": pg_dsn,
            "IDS_PG_TABLE": "ids",
            "IDS_TOTAL": str(TOTAL),
            "IDS_PER_EPOCH": str(PER_EPOCH),
        },
        capture_output=True,
        text=True,
        cwd=str(REPO),
        timeout=180,
    )
    assert proc.returncode == 2, proc.stderr
    assert "was restored before into job 'lin-b'" in proc.stderr, proc.stderr
    assert not cli_state.exists()

    # A fork gets a uid of its own, and so its outputs: into b's table it is refused.
    with pytest.raises(InvalidInput) as bad:
        c_run(fork=True)
    msg = str(bad.value)
    assert "postgres:ids" in msg and "'lin-b'" in msg and "a fork writes" in msg, msg
    assert not c_state.exists()

    # To a table of its own, it runs: every id after the savepoint's, once.
    rc = c_run(table="ids_c", fork=True)
    assert rc.state == JobState.FINISHED
    assert pg_ids(pg_dsn, "ids_c") == Counter(range(before, TOTAL))
    st = open_store(c_state / "store.db")
    try:
        c_uid = st.get_job(JobId("lin-c")).uid
    finally:
        st.close()
    st = open_store(a_state / "store.db")
    try:
        a_uid = st.get_job(JobId("lin-a")).uid
        restores = {(r.job_id, r.uid, r.fork) for r in st.restores_from_job(JobId("lin-a"), a_uid)}
    finally:
        st.close()
    assert c_uid != a_uid
    assert restores == {("lin-b", a_uid, False), ("lin-c", c_uid, True)}

    # b fixed and started again: it resumes (restored before) and every id is once in its table.
    broken.unlink()
    rb = b_run()
    assert rb.state == JobState.FINISHED
    exactly_once(pg_ids(pg_dsn, "ids"), TOTAL)
    assert pg_prepared(pg_dsn) == []


# 2. the savepoint's own job, restarted ----------------------------------------------------------


def test_the_savepoints_job_restarted_after_its_restore_is_refused_naming_the_restored_job(
    spark: SparkSession, tmp_path: Path, pg_dsn: str
) -> None:
    a_state, b_state = tmp_path / "a", tmp_path / "b"
    folder, _cut = _stopped_with_savepoint(spark, a_state, "own-a", pg_dsn)
    rb = stoker.run(
        _pipeline("own-b", pg_dsn), job_id="own-b", state_dir=b_state, trigger=TRIGGER,
        spark=spark, from_savepoint=folder,
    )  # fmt: skip
    assert rb.state == JobState.FINISHED
    exactly_once(pg_ids(pg_dsn, "ids"), TOTAL)

    # a restarted: its checkpoint is at the savepoint's epoch; b wrote every epoch after it.
    with pytest.raises(InvalidInput) as bad:
        stoker.run(
            _pipeline("own-a", pg_dsn), job_id="own-a", state_dir=a_state, trigger=TRIGGER,
            spark=spark, restart=True,
        )  # fmt: skip
    msg = str(bad.value)
    assert "'own-b'" in msg and "restored" in msg, msg
    exactly_once(pg_ids(pg_dsn, "ids"), TOTAL)

    # The table itself says so too (a run of a that its store cannot stop): its owner row for
    # own-a was handed over to own-b at the restore, as a files sink's marker is.
    st = open_store(a_state / "store.db")
    try:
        a_uid = st.get_job(JobId("own-a")).uid
    finally:
        st.close()
    sink = sinks.postgres(pg_dsn, table="ids")
    with pytest.raises(OwnedElsewhere) as owned:
        sink.validate(SinkOwner(JobId("own-a"), a_uid))
    assert "handed over" in str(owned.value) and "'own-b'" in str(owned.value), owned.value


# 3. a restore into the same job id elsewhere ----------------------------------------------------


def test_a_restore_into_the_same_job_id_on_another_store_checks_the_live_record(
    spark: SparkSession, tmp_path: Path, pg_dsn: str
) -> None:
    a_state, a2_state, out = tmp_path / "a", tmp_path / "a2", tmp_path / "out"
    # The pipeline of tests/apps/ids_app.py (a files and a PostgreSQL sink), long enough to
    # be live while the second start is tried.
    p = Pipeline("same")
    p.source(sources.generator(total=100_000, max_rows_per_epoch=PER_EPOCH))
    p.sink(sinks.files(str(out)))
    p.sink(sinks.postgres(pg_dsn, table="ids"))
    run = BackgroundRun(pipeline=p, job_id="same", state_dir=a_state, trigger=TRIGGER, spark=spark)
    try:
        wait_for("two epochs", lambda: len(_committed(a_state, "same")) >= 2, 240, 0.1)
        # Paused (live, its lease held, no epoch after the savepoint): no output after the
        # savepoint refuses the start, only the live record can.
        for body in ({"kind": "pause"}, {"kind": "savepoint", "stop": False}):
            sent = _control(a_state, "same", body)
            wait_for(
                f"{body['kind']} committed",
                lambda sent=sent: (
                    _event(a_state, "same", sent).status
                    in (ControlStatus.COMMITTED, ControlStatus.REJECTED)
                ),
                240,
                0.1,
            )
        ev = _event(a_state, "same", sent)
        assert ev.status == ControlStatus.COMMITTED, ev.reason
        assert _committed(a_state, "same")[-1] == ev.result["epoch"]

        # The same id from the savepoint in another state folder (its own SQLite store), as
        # another host would start it: the live record of that id in the savepoint's store
        # is looked at, and refuses. Before, this started a second live job of one id and uid.
        proc = subprocess.run(
            stoker_cmd(
                "run",
                str(APPS / "ids_app.py"),
                "--job-id",
                "same",
                "--from-savepoint",
                ev.result["path"],
                "-D",
                f"stoker.state_dir={a2_state}",
            ),
            env={
                **os.environ,
                "IDS_JOB": "same",
                "IDS_OUT": str(out),
                "IDS_PG_DSN": pg_dsn,
                "IDS_PG_TABLE": "ids",
                "IDS_TOTAL": "100000",
                "IDS_PER_EPOCH": str(PER_EPOCH),
            },
            capture_output=True,
            text=True,
            cwd=str(REPO),
            timeout=120,
        )
        assert proc.returncode == 2, proc.stderr
        assert "the savepoint's job 'same' is still RUNNING" in proc.stderr, proc.stderr
        assert str(a_state / "store.db") in proc.stderr, proc.stderr
        assert not a2_state.exists()
    finally:
        st = open_store(a_state / "store.db")
        try:
            st.request_cancel(job_id("same"))
        finally:
            st.close()
        run.wait()


# 4. the savepoint's store is not here -----------------------------------------------------------


def test_a_savepoints_store_that_cannot_be_opened_refuses_the_restore_unless_told(
    spark: SparkSession, tmp_path: Path, pg_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    a_state, b_state = tmp_path / "a", tmp_path / "b"
    folder, _cut = _stopped_with_savepoint(spark, a_state, "far-a", pg_dsn)
    gone = tmp_path / "elsewhere"
    gone.mkdir()
    for f in a_state.glob("store.db*"):  # on another host, say
        f.rename(gone / f.name)

    def b_run(**kw: Any) -> Any:
        return stoker.run(
            _pipeline("far-b", pg_dsn), job_id="far-b", state_dir=b_state, trigger=TRIGGER,
            spark=spark, from_savepoint=folder, **kw,
        )  # fmt: skip

    with pytest.raises(InvalidInput) as bad:
        b_run()
    msg = str(bad.value)
    assert str(a_state / "store.db") in msg and "cannot be opened" in msg, msg
    assert "'far-a'" in msg and "--ignore-unreachable-stores" in msg, msg
    assert not b_state.exists()

    # Told to go on without it: the start says what it did not check, and runs.
    with caplog.at_level(logging.WARNING, logger="stoker.savepoint"):
        rb = b_run(ignore_unreachable_stores=True)
    assert rb.state == JobState.FINISHED
    said = [r.getMessage() for r in caplog.records if "not checked" in r.getMessage()]
    assert said and str(a_state / "store.db") in said[0], said
    exactly_once(pg_ids(pg_dsn, "ids"), TOTAL)


# 5. a savepoint at a bounded job's final epoch --------------------------------------------------


def test_a_savepoint_at_a_bounded_jobs_final_epoch_is_refused_as_finished(
    spark: SparkSession, tmp_path: Path, pg_dsn: str
) -> None:
    a_state, b_state = tmp_path / "a", tmp_path / "b"

    def slow(df: DataFrame, ctx: EpochContext) -> DataFrame:
        time.sleep(2.0)  # on the driver: the savepoint asked for meanwhile waits for the epoch
        return df

    total = 2 * PER_EPOCH  # epoch 1 reads the last rows: the final epoch
    run = BackgroundRun(
        pipeline=_pipeline("fin-a", pg_dsn, total=total, transform=slow), job_id="fin-a",
        state_dir=a_state, trigger=TRIGGER, spark=spark,
    )  # fmt: skip
    wait_for(
        "epoch 1 in flight", lambda: any(e.epoch == 1 for e in _epochs(a_state, "fin-a")), 240, 0.1
    )
    sp = _savepoint(a_state, "fin-a", stop=True)
    assert run.join().state == JobState.FINISHED
    ev = _event(a_state, "fin-a", sp)
    assert ev.status == ControlStatus.COMMITTED and ev.result["epoch"] == 1, ev
    assert [e.final for e in _epochs(a_state, "fin-a") if e.epoch == 1] == [True]
    assert pg_ids(pg_dsn, "ids") == Counter(range(total))

    b = BackgroundRun(
        pipeline=_pipeline("fin-b", pg_dsn, total=total), job_id="fin-b", state_dir=b_state,
        trigger=TRIGGER, spark=spark, from_savepoint=Path(ev.result["path"]),
    )  # fmt: skip
    b.wait(120)
    assert isinstance(b.error, InvalidInput), b.error or b.result
    msg = str(b.error)
    assert "job 'fin-a' had finished" in msg and "final epoch 1" in msg, msg
    assert not b_state.exists() and pg_ids(pg_dsn, "ids") == Counter(range(total))


# 6. every start of a restored job checks the lineage (no Spark) ---------------------------------


def _fake_savepoint(folder: Path, store: str, out: Path) -> Path:
    """A savepoint folder of job 'old' (uid u1) at epoch 2 with one files sink."""
    (folder / "checkpoint").mkdir(parents=True)
    manifest = {
        "format": savepoint.FORMAT,
        "job_id": "old",
        "uid": "u1",
        "epoch": 2,
        "control_version": 1,
        "config": {},
        "state": {},
        "pipeline": {"name": "old", "sources": ["generator(total=10, max_rows_per_epoch=5)"]},
        "sinks": [{"name": f"files:{out}", "kind": "files"}],
        "inputs": [],
        "store": store,
        "state_dir": str(folder.parent / "old-state"),
        "control_id": "c0ffee",
    }
    (folder / savepoint.MANIFEST).write_text(json.dumps(manifest))
    return folder


def _gen(name: str, out: Path) -> Pipeline:
    p = Pipeline(name)
    p.source(sources.generator(total=10, max_rows_per_epoch=5))
    return p.sink(sinks.files(str(out)))


def test_a_resumed_restore_and_a_plain_start_of_it_check_the_lineage(tmp_path: Path) -> None:
    old_url = f"sqlite:///{tmp_path / 'old' / 'store.db'}"
    out, root = tmp_path / "out", tmp_path / "new"
    st = open_store(old_url)
    try:
        st.create_job(JobId("old"), "old", {}, {}, uid="u1")
        st.set_job_state(JobId("old"), JobState.FAILED)
        st.set_resolved(JobId("old"))
    finally:
        st.close()
    sp = _fake_savepoint(tmp_path / "sp", old_url, out)
    new = open_store(root / "store.db")
    try:
        done = restore.restore(sp, root, new, JobId("new"), _gen("new", out))
        assert done.copied and done.owner == SinkOwner(JobId("new"), "u1")
        # Consumed: the savepoint's job's store and the new job's own name the new job.
        assert [(r.job_id, r.uid) for r in new.restores_of_uid("u1")] == [("new", "u1")]
        new.create_job(JobId("new"), "new", {}, {}, uid="u1")
        job = new.get_job(JobId("new"))
    finally:
        new.close()
    st = open_store(old_url)
    try:
        assert [r.job_id for r in st.restores_from_job(JobId("old"), "u1")] == ["new"]
        # Another job of uid u1 appears in the savepoint's job's store, live (what a restore
        # of another savepoint of 'old' made before this version refused it).
        st.create_job(JobId("rogue"), "rogue", {}, {}, uid="u1")
        st.set_job_state(JobId("rogue"), JobState.RUNNING)
        rogue = st.restores_from_job(JobId("old"), "u1")[0]
        st.record_restore(
            replace(rogue, savepoint="old/u1/other", job_id=JobId("rogue"), store=old_url,
                    state_dir=str(tmp_path / "rogue"), restored_at=rogue.restored_at + 1)
        )  # fmt: skip
    finally:
        st.close()

    # The resumed restore (the same --from-savepoint again) is refused, naming it...
    new = open_store(root / "store.db")
    try:
        with pytest.raises(InvalidInput) as bad:
            restore.restore(sp, root, new, JobId("new"), _gen("new", out))
    finally:
        new.close()
    assert "as does job 'rogue'" in str(bad.value) and "has not ended" in str(bad.value)
    # ...and so is a start without it, even once the savepoint's folder is gone (the state
    # folder's note keeps what the check needs).
    shutil.rmtree(sp)
    with pytest.raises(InvalidInput) as bad:
        restore.check_plain_start(root, JobId("new"), _gen("new", out), root / "store.db", job)
    assert "as does job 'rogue'" in str(bad.value), bad.value

    st = open_store(old_url)
    try:
        st.set_job_state(JobId("rogue"), JobState.FAILED)
        st.set_resolved(JobId("rogue"))
    finally:
        st.close()
    restore.check_plain_start(root, JobId("new"), _gen("new", out), root / "store.db", job)

    # The savepoint's job, started again, is refused: its outputs went on in 'new'.
    st = open_store(old_url)
    try:
        old = st.get_job(JobId("old"))
        with pytest.raises(InvalidInput) as bad:
            lineage.refuse_taken_over(st, old, str(tmp_path / "old-state"), [f"files:{out}"])
        assert "was restored into job 'new'" in str(bad.value), bad.value
        # A pipeline of it that writes elsewhere is not refused (a fork's outputs are its own).
        lineage.refuse_taken_over(st, old, str(tmp_path / "old-state"), ["files:/elsewhere"])
    finally:
        st.close()
