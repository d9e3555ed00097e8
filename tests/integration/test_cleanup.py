"""The janitor's cleanup process resolves an ended job from the sink descriptors recorded in the
store: no application file is loaded, no user code runs, no Spark starts.

Real PostgreSQL (parts prepared by hand as a Spark task prepares them), a real files sink, a
real SQLite store and ``python -m stoker.runtime.cleanup`` as a real subprocess.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
from psycopg import sql

from stoker.manager.janitor import Janitor, JanitorConfig
from stoker.procs import host_id
from stoker.sinks import FilesSink, PostgresSink, descriptor_of
from stoker.sinks._files_owner import MARKER, Claim, read_claim
from stoker.sinks._pg_task import _copy_and_mark, _Task
from stoker.sinks.base import SinkOwner
from stoker.store import Owner, Store, open_store
from stoker.types import (
    AttemptNo,
    AttemptState,
    ControlVersion,
    Epoch,
    EpochState,
    JobId,
    JobState,
    TxnState,
)
from tests.support import pg_ids, pg_prepared, wait_for

JOB = JobId("clean")
UID = "c" * 32

# What the app would do if anything ran it: leave a marker (at import and in main).
APP = """\
from pathlib import Path

Path({marker!r}).write_text("imported")


def main():
    Path({marker!r}).write_text("main ran")
"""


def _prepare_pg(s: PostgresSink, epoch: int, attempt: int, ids: list[int]) -> dict[str, Any]:
    """One part prepared as a task prepares it; the detail the runtime records for it."""
    t = _Task(s.dsn, s.table, ("id",), JOB, UID, epoch, attempt, s._tag)
    gid = t.gid(0, 100 + epoch)
    batch = pa.RecordBatch.from_pylist([{"id": i} for i in ids])
    with psycopg.connect(s.dsn) as conn:
        _copy_and_mark(conn, t, gid, 0, [batch])
        conn.execute(sql.SQL("PREPARE TRANSACTION {}").format(sql.Literal(gid)))
    part = {"id": gid, "partition": 0, "task_attempt": 100 + epoch, "rows": len(ids)}
    return {"gids": [gid], "parts": [part]}


def _stage_files(s: FilesSink, epoch: int, attempt: int) -> dict[str, Any]:
    staged = s._staged(Epoch(epoch), AttemptNo(attempt))
    staged.mkdir(parents=True)
    (staged / "part-0.json").write_text(f'{{"id": {epoch}}}\n')
    return {"staged": str(staged)}


def _ended_job_with_leftovers(
    st: Store, pg_dsn: str, out: Path, state: Path, extra: list[dict[str, Any]]
) -> tuple[PostgresSink, FilesSink]:
    """Epoch 0 decided by attempt 1 and epoch 1 only prepared, in both sinks; the job FAILED."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE ids (id BIGINT)")
    pg = PostgresSink(pg_dsn, "ids", create_table=False)
    files = FilesSink(str(out), format="json")
    owner = SinkOwner(JOB, UID)
    st.create_job(JOB, "clean", {"kind": "app"}, {}, uid=UID)
    att = st.start_attempt(JOB, Owner("elsewhere", 1, "1"), 30.0, AttemptNo(0))
    for sink in (pg, files):
        sink.validate(owner)
        sink.open(owner, state)
    # What the runner records after opening its sinks.
    st.set_job_sinks(JOB, [descriptor_of(pg), descriptor_of(files), *extra])
    for e in (0, 1):
        st.pin_epoch(JOB, Epoch(e), att.attempt, ControlVersion(0))
        detail = _prepare_pg(pg, e, att.attempt, [10 * e + 1, 10 * e + 2])
        st.record_txn(JOB, Epoch(e), pg.name, att.attempt, TxnState.PREPARED, detail)
        detail = _stage_files(files, e, att.attempt)
        st.record_txn(JOB, Epoch(e), files.name, att.attempt, TxnState.PREPARED, detail)
    st.decide_epoch(JOB, Epoch(0), att.attempt, 2, False)
    # Epoch 2: the driver died inside the files sink's prepare, its part staged but not yet
    # recorded (chaos seed 23): only the sink's own scan of its staging folder finds it.
    st.pin_epoch(JOB, Epoch(2), att.attempt, ControlVersion(0))
    _stage_files(files, 2, att.attempt)
    st.finish_attempt(JOB, att.attempt, AttemptState.FAILED, JobState.FAILED, "killed")
    return pg, files


def _app_and_store(root: Path) -> tuple[Path, str]:
    """The app file (which leaves ``app-ran`` if anything ran it) and the store's URL."""
    app = root / "app.py"
    app.write_text(APP.format(marker=str(root / "app-ran")))
    return app, f"sqlite:///{root / 'store.db'}"


def _cleanup(url: str, state: Path, app: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "STOKER_STORE_URL": url}
    return subprocess.run(
        [
            *(sys.executable, "-m", "stoker.runtime.cleanup", "--job", str(JOB)),
            *("--store", "sqlite:///(redacted)", "--state-dir", str(state)),
            *("--", str(app)),  # what an older manager passed: must not be run
        ],
        cwd=str(app.parent),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cleanup_resolves_from_recorded_descriptors_without_running_the_app(
    tmp_path: Path, pg_dsn: str
) -> None:
    out, state, marker = tmp_path / "out", tmp_path / "state", tmp_path / "app-ran"
    app = tmp_path / "app.py"
    app.write_text(APP.format(marker=str(marker)))
    url = f"sqlite:///{tmp_path / 'store.db'}"
    st = open_store(url)
    try:
        _ended_job_with_leftovers(st, pg_dsn, out, state, [])
        assert len(pg_prepared(pg_dsn)) == 2
    finally:
        st.close()

    p = _cleanup(url, state, app)

    assert p.returncode == 0, p.stdout + p.stderr
    assert "stoker cleanup: job clean resolved" in p.stderr
    assert not marker.exists()  # no user code ran
    assert pg_prepared(pg_dsn) == []
    assert sorted(pg_ids(pg_dsn, "ids").elements()) == [1, 2]  # epoch 0 only
    assert sorted(x.name for x in out.glob("epoch=*")) == ["epoch=0"]
    assert list((out / "_staging").iterdir()) == []
    st = open_store(url)
    try:
        assert st.get_job(JOB).resolved_at is not None
        assert st.get_epoch(JOB, Epoch(0)).state == EpochState.COMMITTED  # type: ignore[union-attr]
        txns = {(t.epoch, t.sink): t.state for t in st.list_txns(JOB)}
        assert set(txns.values()) <= {TxnState.COMMITTED, TxnState.ABORTED}
        assert txns[(Epoch(1), "postgres:ids")] == TxnState.ABORTED
        # Never decided: a restart of the job would replay it under the same number.
        assert st.get_epoch(JOB, Epoch(2)).state == EpochState.PINNED  # type: ignore[union-attr]
    finally:
        st.close()


def test_a_sink_without_descriptor_is_named_and_left_the_rest_resolved(
    tmp_path: Path, pg_dsn: str
) -> None:
    out, state, marker = tmp_path / "out", tmp_path / "state", tmp_path / "app-ran"
    app = tmp_path / "app.py"
    app.write_text(APP.format(marker=str(marker)))
    url = f"sqlite:///{tmp_path / 'store.db'}"
    mine = {"kind": None, "name": "mine", "class": "app.MySink"}
    st = open_store(url)
    try:
        _ended_job_with_leftovers(st, pg_dsn, out, state, [mine])
        st.record_txn(JOB, Epoch(0), "mine", AttemptNo(1), TxnState.PREPARED, {})
    finally:
        st.close()

    p = _cleanup(url, state, app)

    assert p.returncode == 0, p.stdout + p.stderr
    assert "cannot resolve sink 'mine' (app.MySink)" in p.stderr
    assert not marker.exists()
    assert pg_prepared(pg_dsn) == []
    assert sorted(pg_ids(pg_dsn, "ids").elements()) == [1, 2]
    assert sorted(x.name for x in out.glob("epoch=*")) == ["epoch=0"]
    st = open_store(url)
    try:
        # The sink left out still holds its part: the epoch stays DECIDED for the next recovery.
        assert st.get_epoch(JOB, Epoch(0)).state == EpochState.DECIDED  # type: ignore[union-attr]
        assert st.get_txn(JOB, Epoch(0), "mine", AttemptNo(1)).state == TxnState.PREPARED  # type: ignore[union-attr]
    finally:
        st.close()


def test_a_job_whose_sinks_were_never_opened_is_resolved_with_nothing_done(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "app-ran"
    app = tmp_path / "app.py"
    app.write_text(APP.format(marker=str(marker)))
    url = f"sqlite:///{tmp_path / 'store.db'}"
    st = open_store(url)
    try:
        st.create_job(JOB, "clean", {"kind": "app"}, {})
        st.set_job_state(JOB, JobState.FAILED, "never ran")
    finally:
        st.close()

    p = _cleanup(url, tmp_path / "state", app)

    assert p.returncode == 0, p.stdout + p.stderr
    assert "nothing to resolve" in p.stderr
    assert not marker.exists()
    st = open_store(url)
    try:
        assert st.get_job(JOB).resolved_at is not None
    finally:
        st.close()


def test_a_folder_handed_over_to_a_new_job_is_left_to_it(tmp_path: Path, pg_dsn: str) -> None:
    """Issue 23 item 10: a restore from a savepoint hands the ended job's files folder over to
    the new job (the marker names it). A cleanup of the old job run after that (a manager's
    restart) used to fail with exit 2 on the marker, and be retried for ever; the folder is the
    new owner's: left alone, named, the rest resolved."""
    out, state = tmp_path / "out", tmp_path / "state"
    app, url = _app_and_store(tmp_path)
    with contextlib.closing(open_store(url)) as st:
        _ended_job_with_leftovers(st, pg_dsn, out, state, [])
    first = _cleanup(url, state, app)
    assert first.returncode == 0, first.stderr
    # What restore._hand_over_outputs writes: the same uid, the new job's id.
    claim = read_claim(out)
    assert claim is not None
    handed = Claim(job_id="fork", uid=claim.uid, claimed_at=claim.claimed_at + 1)
    (out / MARKER).write_text(json.dumps(handed.to_json()))
    before = sorted(str(p.relative_to(out)) for p in out.rglob("*"))

    again = _cleanup(url, state, app)

    assert again.returncode == 0, again.stderr
    assert "sink 'files:" in again.stderr and "is not this job's any more" in again.stderr
    assert "belongs to job 'fork'" in again.stderr
    assert "stoker cleanup: job clean resolved" in again.stderr
    assert read_claim(out) == handed
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == before
    assert pg_prepared(pg_dsn) == []


def test_a_settled_job_is_not_cleaned_again_by_a_restarted_manager(tmp_path: Path) -> None:
    """Issue 23 item 10: the janitor resolved an ended job once every process of it was gone;
    a new janitor (the manager restarted, or another leader) starts no cleanup for it. A new
    end of the job is owed a cleanup again."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    st = open_store(url)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    owner = Owner(host_id(), gone.pid, "1")
    try:
        st.create_job(JOB, "clean", {"kind": "app"}, {})
        att = st.start_attempt(JOB, owner, 30.0, AttemptNo(0))
        st.finish_attempt(JOB, att.attempt, AttemptState.FAILED, JobState.FAILED, "killed")
        cfg = JanitorConfig(every=0.0)
        first = Janitor(st, tmp_path, url, cfg)
        first.step()
        assert first.busy(JOB)  # its cleanup runs
        wait_for("the first cleanup", lambda: (first.step(), not first.busy(JOB))[1], 120)
        log_file = tmp_path / "logs" / JOB / "cleanup.log"
        assert "nothing to resolve" in log_file.read_text()
        assert st.list_unsettled_jobs(60.0) == []

        restarted = Janitor(st, tmp_path, url, cfg)
        restarted.step()
        assert not restarted.busy(JOB)

        # The job runs again and ends: its new end is owed a resolution.
        att = st.start_attempt(JOB, owner, 30.0, att.attempt, restart=True)
        st.finish_attempt(JOB, att.attempt, AttemptState.FAILED, JobState.FAILED, "again")
        restarted.step()
        assert restarted.busy(JOB)
        wait_for(
            "the new end's cleanup", lambda: (restarted.step(), not restarted.busy(JOB))[1], 120
        )
    finally:
        st.close()
