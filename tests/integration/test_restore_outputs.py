"""A restore from a savepoint whose job went on after it, or has not settled: real Spark, real
PostgreSQL, real SQLite.

- A savepoint without ``--stop``, the job goes on to its end, a new job from the savepoint:
  refused, naming the PostgreSQL sink and the epochs it holds after the savepoint; with
  ``rewrite_output_after_savepoint`` it runs, says the rows are written again, and writes them.
- An old job that has ended but whose decided epoch is not committed yet: refused, naming it.
- An old job on a PostgreSQL store whose URL has a password (the savepoint records it hidden):
  looked at through the URL the operator gives, never skipped, the password never shown.
"""

from __future__ import annotations

import json
import logging
import re
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

import stoker
from stoker import InvalidInput, JobState, Pipeline, sinks, sources
from stoker.control import events
from stoker.runtime import restore, savepoint
from stoker.store import Owner, open_store
from stoker.types import (
    AttemptNo,
    AttemptState,
    ControlStatus,
    ControlVersion,
    Epoch,
    EpochState,
    JobId,
    TxnState,
    job_id,
)
from tests.support import pg_ids, pg_prepared, wait_for
from tests.support.background import BackgroundRun

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

TRIGGER = "100ms"
TOTAL, PER_EPOCH = 1200, 100
OWNER = Owner(host="host-a", pid=101, pid_started="boot-1")


def _pg_pipeline(name: str, dsn: str) -> Pipeline:
    p = Pipeline(name)
    p.source(sources.generator(total=TOTAL, max_rows_per_epoch=PER_EPOCH))
    return p.sink(sinks.postgres(dsn, table="ids"))


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


# 1. output after the savepoint in PostgreSQL -----------------------------------------------------


def test_restore_from_a_savepoint_the_job_ran_past_is_refused_unless_rewrite_is_asked(
    spark: SparkSession, tmp_path: Path, pg_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    a_state, b_state = tmp_path / "a", tmp_path / "b"
    a = BackgroundRun(
        pipeline=_pg_pipeline("pg-a", pg_dsn),
        job_id="pg-a",
        state_dir=a_state,
        trigger=TRIGGER,
        spark=spark,
    )
    wait_for("two epochs of job a", lambda: len(_committed(a_state, "pg-a")) >= 2, 240, 0.1)
    st = open_store(a_state / "store.db")
    try:
        kind, body = events.validate({"kind": "savepoint"}, st.get_job(job_id("pg-a")).spec)
        ev, _ = st.add_control(job_id("pg-a"), kind, body, sender="test")
    finally:
        st.close()
    ra = a.join()  # the savepoint does not stop it: it goes on to its end
    assert ra.state == JobState.FINISHED
    st = open_store(a_state / "store.db")
    try:
        done = st.get_control(job_id("pg-a"), ev.control_id)
    finally:
        st.close()
    assert done.status == ControlStatus.COMMITTED, done.reason
    cut, folder = int(done.result["epoch"]), Path(done.result["path"])
    # The last epoch with rows (a final epoch without any may write no part at all).
    last = max(e.epoch for e in _epochs(a_state, "pg-a") if e.rows_in)
    assert last > cut, "job a was to go on after its savepoint"
    before = sum(e.rows_in or 0 for e in _epochs(a_state, "pg-a") if e.epoch <= cut)
    assert 0 < before < TOTAL and pg_ids(pg_dsn, "ids") == Counter(range(TOTAL))

    # A new job from it: refused before anything is written, naming the sink and the epochs.
    with pytest.raises(InvalidInput) as bad:
        stoker.run(
            _pg_pipeline("pg-b", pg_dsn), job_id="pg-b", state_dir=b_state, from_savepoint=folder
        )
    msg = str(bad.value)
    assert bad.value.field == "from_savepoint"
    held = re.search(r"sink 'postgres:ids' holds epochs (\d+)\.\.(\d+)", msg)
    assert held is not None, msg
    assert int(held.group(1)) == cut + 1 and int(held.group(2)) in (last, ra.last_epoch), msg
    assert f"after the savepoint's epoch {cut}" in msg and "--rewrite-output-after-savepoint" in msg
    assert not b_state.exists() and pg_ids(pg_dsn, "ids") == Counter(range(TOTAL))

    # Asked for explicitly: the job runs, says so, and the rows after the savepoint come again.
    with caplog.at_level(logging.WARNING, logger="stoker.savepoint"):
        rb = stoker.run(
            _pg_pipeline("pg-b", pg_dsn),
            job_id="pg-b",
            state_dir=b_state,
            trigger=TRIGGER,
            spark=spark,
            from_savepoint=folder,
            rewrite_output_after_savepoint=True,
        )
    assert rb.state == JobState.FINISHED
    said = [r.getMessage() for r in caplog.records if "written to it again" in r.getMessage()]
    assert said and f"holds epochs {held.group(1)}..{held.group(2)}" in said[0], said
    ids = pg_ids(pg_dsn, "ids")
    assert set(ids) == set(range(TOTAL))
    assert sorted(i for i, n in ids.items() if n == 2) == list(range(before, TOTAL))
    assert max(ids.values()) == 2 and pg_prepared(pg_dsn) == []


# 2. the old job has ended but is not resolved ----------------------------------------------------


def _savepoint_of(folder: Path, out: Path, store: str, job: str = "old") -> Path:
    """A savepoint folder of job ``job`` (uid u1) at epoch 2 with one files sink."""
    (folder / "checkpoint").mkdir(parents=True)
    manifest = {
        "format": savepoint.FORMAT,
        "job_id": job,
        "uid": "u1",
        "epoch": 2,
        "control_version": 1,
        "config": {},
        "state": {},
        "pipeline": {"name": job, "sources": ["generator(total=10, max_rows_per_epoch=5)"]},
        "sinks": [{"name": f"files:{out}", "kind": "files"}],
        "inputs": [],
        "store": store,
        "state_dir": str(folder.parent / "old-state"),
        "control_id": "c0ffee",
    }
    (folder / savepoint.MANIFEST).write_text(json.dumps(manifest))
    return folder


def _gen(out: Path) -> Pipeline:
    p = Pipeline("new")
    p.source(sources.generator(total=10, max_rows_per_epoch=5))
    return p.sink(sinks.files(str(out)))


def _check(folder: Path, root: Path, out: Path) -> restore.Restore:
    return restore.check(folder, root, JobId("new"), _gen(out), root / "store.db", None)


def test_restore_waits_for_the_old_jobs_decided_epoch_to_be_resolved(tmp_path: Path) -> None:
    old, out, root = tmp_path / "old-store.db", tmp_path / "out", tmp_path / "new"
    jid, a = JobId("old"), AttemptNo(1)
    st = open_store(old)
    try:
        st.create_job(jid, "old", {}, {}, uid="u1")
        st.start_attempt(jid, OWNER, 10.0, expected_current=AttemptNo(0))
        version = st.control_snapshot(jid).version
        for e in (1, 2, 3):  # 1, 2 committed; 3 decided, then the driver died
            st.pin_epoch(jid, Epoch(e), a, ControlVersion(version))
            st.record_txn(jid, Epoch(e), f"files:{out}", a, TxnState.PREPARED, {})
            st.decide_epoch(jid, Epoch(e), a, rows_in=5, final=False)
            if e < 3:
                st.record_txn(jid, Epoch(e), f"files:{out}", a, TxnState.COMMITTED, {})
                st.mark_epoch_committed(jid, Epoch(e))
        st.finish_attempt(jid, a, AttemptState.FAILED, JobState.FAILED, "killed")
    finally:
        st.close()
    sp = _savepoint_of(tmp_path / "sp", out, f"sqlite:///{old}")

    with pytest.raises(InvalidInput) as bad:
        _check(sp, root, out)
    msg = str(bad.value)
    assert bad.value.field == "from_savepoint"
    assert "has ended (FAILED) but its outputs are not resolved yet" in msg, msg
    assert "epoch(s) 3 DECIDED and not committed" in msg
    assert f"files:{out} epoch 3 attempt 1" in msg and "stoker.runtime.cleanup --job old" in msg
    assert not root.exists()

    # Resolved (what the janitor's recovery does): the restore goes ahead.
    st = open_store(old)
    try:
        st.record_txn(jid, Epoch(3), f"files:{out}", a, TxnState.COMMITTED, {})
        st.mark_epoch_committed(jid, Epoch(3))
        st.set_resolved(jid)
    finally:
        st.close()
    assert _check(sp, root, out).previous.job_id == "old"


# 3. the old job's store has a password ------------------------------------------------------------


def test_a_savepoint_of_a_job_on_a_password_store_is_checked_without_showing_the_password(
    tmp_path: Path, pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The throwaway server trusts local connections: any password connects.
    secret = "s3cret-pw"
    url = pg_dsn.replace("@", f":{secret}@", 1)
    out, root = tmp_path / "out", tmp_path / "new"
    jid = JobId("old")
    st = open_store(url)
    try:
        st.create_job(jid, "old", {}, {}, uid="u1")
        st.set_job_state(jid, JobState.RUNNING)
    finally:
        st.close()
    monkeypatch.delenv("STOKER_SAVEPOINT_STORE_URL", raising=False)
    sp = _savepoint_of(tmp_path / "sp", out, url.replace(secret, "***"))

    # The new job runs on another store, no URL given: refused (the old job is not skipped).
    with pytest.raises(InvalidInput) as bad:
        _check(sp, root, out)
    msg = str(bad.value)
    assert "STOKER_SAVEPOINT_STORE_URL" in msg and secret not in msg, msg
    # Given by the operator: the old job is seen, still running.
    monkeypatch.setenv("STOKER_SAVEPOINT_STORE_URL", url)
    with pytest.raises(InvalidInput) as bad:
        _check(sp, root, out)
    assert "'old' is still RUNNING" in str(bad.value) and secret not in str(bad.value)
    # Another store's URL given: named without its password.
    monkeypatch.setenv("STOKER_SAVEPOINT_STORE_URL", url + "_other")
    with pytest.raises(InvalidInput) as bad:
        _check(sp, root, out)
    assert "names another store" in str(bad.value) and secret not in str(bad.value)
    # The new job on the same store: its own URL has the password.
    monkeypatch.delenv("STOKER_SAVEPOINT_STORE_URL")
    with pytest.raises(InvalidInput) as bad:
        restore.check(sp, root, JobId("new"), _gen(out), url, None)
    assert "'old' is still RUNNING" in str(bad.value)

    st = open_store(url)
    try:
        st.set_job_state(jid, JobState.FAILED)
        st.set_resolved(jid)
    finally:
        st.close()
    monkeypatch.setenv("STOKER_SAVEPOINT_STORE_URL", url)
    assert _check(sp, root, out).previous.job_id == "old"
    assert not root.exists()
