"""The leader prunes ended jobs' epoch records under the server's policy: real SQLite store,
manual clock, no driver process."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from stoker.clock import ManualClock
from stoker.manager import Supervisor, SupervisorConfig, retention
from stoker.store import Owner, RetentionPolicy, Store, open_store
from stoker.types import AttemptNo, AttemptState, ControlVersion, Epoch, JobId, JobState, job_id
from tests.support import stoker_cmd

# Not an app job: the janitor (which would start cleanup processes) leaves it alone.
SPEC = {"kind": "local"}


def _job_with_epochs(store: Store, jid: JobId, n: int) -> None:
    store.create_job(jid, str(jid), SPEC, {})
    store.start_attempt(jid, Owner("here", 1, "x"), 30.0, AttemptNo(0))
    for e in range(n):
        store.pin_epoch(jid, Epoch(e), AttemptNo(1), ControlVersion(0))
        store.decide_epoch(jid, Epoch(e), AttemptNo(1), rows_in=1, final=e == n - 1)
        store.mark_epoch_committed(jid, Epoch(e))


def test_the_leader_prunes_ended_jobs_only(tmp_path: Path) -> None:
    clock = ManualClock()
    store = open_store(tmp_path / "store.db", clock)
    cfg = SupervisorConfig(
        state_dir=tmp_path, store_url=store.url, retention=RetentionPolicy(epochs=3)
    )
    sup = Supervisor(store, cfg)
    ended, live = job_id("ended"), job_id("live")
    _job_with_epochs(store, ended, 10)
    store.finish_attempt(ended, AttemptNo(1), AttemptState.FINISHED, JobState.FINISHED)
    _job_with_epochs(store, live, 10)
    try:
        sup.step()

        assert [e.epoch for e in store.list_epochs(ended)] == [9, 8, 7]
        assert len(store.list_epochs(live)) == 10  # its driver prunes it, by its own conf
        assert store.counts()["epochs_committed"] == 20
    finally:
        store.close()


def test_the_leader_prunes_a_few_ended_jobs_a_tick_and_each_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 39 item 3: a tick's share of the walk is bounded (here: nothing left of its
    budget after one job, so one job a tick), and a job pruned to the end under a count-only
    policy is not pruned again by the next walks (no write per job a minute)."""
    monkeypatch.setattr(retention, "BUDGET", 0.0)
    store = open_store(tmp_path / "store.db", ManualClock())
    ids = [job_id(f"ended-{n}") for n in range(3)]
    for jid in ids:
        _job_with_epochs(store, jid, 5)
        store.finish_attempt(jid, AttemptNo(1), AttemptState.FINISHED, JobState.FINISHED)
    keeper = retention.Retention(store, RetentionPolicy(epochs=2), every=0.0)
    pruned = []
    try:
        for _ in ids:
            pruned.append(keeper.sweep())
            assert keeper._walking or len(pruned) == len(ids)
        assert pruned == [3, 3, 3]
        assert all(len(store.list_epochs(j)) == 2 for j in ids)
        calls: list[JobId] = []
        prune = store.prune_epochs
        monkeypatch.setattr(store, "prune_epochs", lambda j, *a: calls.append(j) or prune(j, *a))
        for _ in ids:
            keeper.sweep()
        assert calls == []  # pruned to the end: the next walk writes nothing
    finally:
        store.close()


def test_without_a_policy_the_leader_keeps_everything(tmp_path: Path) -> None:
    store = open_store(tmp_path / "store.db", ManualClock())
    sup = Supervisor(store, SupervisorConfig(state_dir=tmp_path, store_url=store.url))
    jid = job_id("ended")
    _job_with_epochs(store, jid, 5)
    store.finish_attempt(jid, AttemptNo(1), AttemptState.FINISHED, JobState.FINISHED)
    try:
        sup.step()

        assert len(store.list_epochs(jid)) == 5
    finally:
        store.close()


def test_a_bad_server_retention_option_is_named_and_nothing_is_created(tmp_path: Path) -> None:
    state = tmp_path / "server-state"
    for option, value in (
        ("--retention-time", "soon"),
        ("--retention-epochs", "0"),
        ("--retention-jobs", "-1d"),
    ):
        done = subprocess.run(
            stoker_cmd("server", "--state-dir", str(state), option, value),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode != 0
        assert option in done.stderr, done.stderr
    assert not state.exists()


def test_ended_records_the_manager_ran_are_deleted_with_their_folders(tmp_path: Path) -> None:
    """Issue 21 item 9: ``stoker server --retention-jobs``. A lone job the manager ran and an
    application with its job go, records and folders (state, logs), once ended past the window
    and resolved; a job `stoker run` made in its own folder, a live one, an unresolved one and
    one ended within the window stay, and so does everything outside the state folder."""
    from stoker.manager.submit import ASSIGNED_STATE_DIR
    from stoker.types import JobKind

    clock = ManualClock()
    store = open_store(tmp_path / "store.db", clock)
    state = tmp_path / "state"
    cfg = SupervisorConfig(
        state_dir=state, store_url=store.url, retention_jobs=3600.0, retention_every=0.0
    )
    sup = Supervisor(store, cfg)

    def made(jid: str, spec_kind: str, **kw: object) -> Path:
        folder = state / ("apps" if spec_kind == "application" else "jobs") / jid
        (folder / "checkpoint").mkdir(parents=True)
        (state / "logs" / jid).mkdir(parents=True)
        (state / "logs" / jid / "attempt-1.log").write_text("x")
        spec = {"kind": spec_kind, ASSIGNED_STATE_DIR: str(folder)}
        store.create_job(job_id(jid), jid, spec, {}, **kw)  # type: ignore[arg-type]
        return folder

    lone = made("lone", "app")
    app = made("shop", "application", kind=JobKind.APPLICATION)
    (state / "logs" / "shop.orders").mkdir(parents=True)
    store.create_job(job_id("shop.orders"), "orders", {"kind": "in_app"}, {}, app_id=job_id("shop"))
    unresolved = made("unresolved", "app")
    live = made("live", "app")
    local = tmp_path / "mine"
    (local / "checkpoint").mkdir(parents=True)
    store.create_job(job_id("local"), "local", {"state_dir": str(local)}, {})
    for jid in ("lone", "shop", "shop.orders", "unresolved", "local"):
        store.set_job_state(job_id(jid), JobState.CANCELED)
    for jid in ("lone", "shop.orders", "local"):
        store.set_resolved(job_id(jid))
    late = made("late", "app")
    try:
        clock.advance(3000)
        store.set_job_state(job_id("late"), JobState.CANCELED)  # ends within the window
        store.set_resolved(job_id("late"))
        clock.advance(1000)
        sup.retention.sweep()

        left = sorted(j.job_id for j in store.list_jobs(kind=None))
        assert left == ["late", "live", "local", "unresolved"]
        assert not lone.exists() and not app.exists()
        assert not (state / "logs" / "lone").exists()
        assert not (state / "logs" / "shop.orders").exists()
        assert all(f.exists() for f in (unresolved, live, late, local / "checkpoint"))
        assert not list(state.glob("*/.deleting-*"))
    finally:
        store.close()
