"""The savepoint's control state is carried to a restored job once: not again over the
operator's later changes after retention pruned the carried events (real SQLite store)."""

from __future__ import annotations

from pathlib import Path

from stoker import JobState, Pipeline, sinks, sources
from stoker.control import events
from stoker.runtime import restore, restore_control
from stoker.sinks.base import SinkOwner
from stoker.store import Owner, RetentionPolicy, Store, open_store
from stoker.types import (
    AttemptNo,
    ControlVersion,
    Epoch,
    JobId,
    TxnState,
)

JOB = JobId("new")
OWNER = Owner(host="host-a", pid=101, pid_started="boot-1")


def _epoch(st: Store, epoch: int) -> None:
    """One epoch through the store's protocol, as the runtime drives it."""
    e, a = Epoch(epoch), AttemptNo(1)
    st.pin_epoch(JOB, e, a, ControlVersion(st.control_snapshot(JOB).version))
    st.record_txn(JOB, e, "out", a, TxnState.PREPARED, {})
    st.decide_epoch(JOB, e, a, rows_in=1, final=False)
    st.record_txn(JOB, e, "out", a, TxnState.COMMITTED, {})
    st.mark_epoch_committed(JOB, e)


def test_carried_control_is_not_sent_again_after_retention_pruned_it(tmp_path: Path) -> None:
    folder = tmp_path / "sp"
    manifest = {
        "job_id": "old",
        "uid": "u1",
        "epoch": 4,
        "control_id": "c0ffee",
        "state": {"overrides": {"label": "from-savepoint"}, "trigger_s": 0.3},
    }
    plan = restore.Restore(
        folder, manifest, SinkOwner(JOB, "u1"), SinkOwner(JobId("old"), "u1"), done=False
    )
    restored = restore.Restored(plan, copied=True)
    p = Pipeline("new", config={"label": "declared"})
    p.source(sources.generator(total=10, max_rows_per_epoch=5))
    p.sink(sinks.files(str(tmp_path / "out")))

    st = open_store(tmp_path / "store.db")
    try:
        st.create_job(JOB, "new", p.spec(), {"label": "declared"}, uid="u1")
        st.start_attempt(JOB, OWNER, 10.0, expected_current=AttemptNo(0))
        st.set_job_state(JOB, JobState.RUNNING)
        carried = restore_control.carry_control(st, JOB, restored, p)
        assert len(carried) == 2  # the override and the trigger
        _epoch(st, 5)  # the job's first epoch applies and commits them
        # The operator changes both; later epochs run; retention prunes the carried events.
        for body in (
            {"kind": "config", "set": {"label": "operator"}},
            {"kind": "trigger", "interval": 2.0},
        ):
            kind, norm = events.validate(body, p.spec())
            st.add_control(JOB, kind, norm, sender="ops")
        for e in (6, 7, 8):
            _epoch(st, e)
        st.prune_epochs(JOB, RetentionPolicy(epochs=1, keep_control_events=0))
        left = st.list_controls(JOB, limit=100)
        assert not [e for e in left if e.sender == "savepoint"], "pruned"

        # The job resumes (a restart, a new attempt): it comes here again with the savepoint.
        assert restore_control.carry_control(st, JOB, restored, p) == []
        snap = st.control_snapshot(JOB)
        assert snap.config["label"] == "operator" and snap.trigger_s == 2.0
        assert not [e for e in st.list_controls(JOB, limit=100) if e.sender == "savepoint"]
    finally:
        st.close()


def test_carried_control_is_sent_again_while_no_epoch_ran(tmp_path: Path) -> None:
    """A crash between the carry and the first epoch: the next attempt carries again, and the
    request ids give back the same events."""
    manifest = {"job_id": "old", "uid": "u1", "epoch": 4, "control_id": "c0ffee"}
    manifest["state"] = {"overrides": {"label": "from-savepoint"}}
    plan = restore.Restore(
        tmp_path / "sp", manifest, SinkOwner(JOB, "u1"), SinkOwner(JobId("old"), "u1"), False
    )
    restored = restore.Restored(plan, copied=True)
    p = Pipeline("new", config={"label": "declared"})
    p.source(sources.generator(total=10, max_rows_per_epoch=5))
    p.sink(sinks.files(str(tmp_path / "out")))
    st = open_store(tmp_path / "store.db")
    try:
        st.create_job(JOB, "new", p.spec(), {"label": "declared"}, uid="u1")
        st.set_job_state(JOB, JobState.RUNNING)
        first = restore_control.carry_control(st, JOB, restored, p)
        assert first and restore_control.carry_control(st, JOB, restored, p) == first
    finally:
        st.close()
