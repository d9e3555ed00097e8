"""The leader prunes ended jobs' epoch records under the server's policy: real SQLite store,
manual clock, no driver process."""

from __future__ import annotations

import subprocess
from pathlib import Path

from stoker.clock import ManualClock
from stoker.manager import Supervisor, SupervisorConfig
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
    for option, value in (("--retention-time", "soon"), ("--retention-epochs", "0")):
        done = subprocess.run(
            stoker_cmd("server", "--state-dir", str(state), option, value),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode != 0
        assert option in done.stderr, done.stderr
    assert not state.exists()
