"""A job run without a manager, canceled while its driver is gone (chaos, seed 172: the driver
SIGKILLed 2 s before `stoker cancel`): nobody carried the cancel out, the job stayed
CANCELING, and every start of the same command was refused as "being canceled" (40 starts).
The next start now ends it CANCELED and is refused as the start of an ended job; --restart
runs it again. A cancel whose driver lives is left to that driver."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from stoker.errors import DuplicateJob, JobTerminal
from stoker.manager.jobs import cancel
from stoker.procs import process_start_marker, this_owner
from stoker.runtime.attempt import start_attempt
from stoker.store import Owner, open_store
from stoker.types import AttemptNo, AttemptState, JobState, job_id

JID = job_id("orphan")


def _gone_owner() -> Owner:
    """The owner record of a real process of this host that has exited."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    marker = process_start_marker(p.pid)
    p.kill()
    p.wait()
    me = this_owner()
    return Owner(host=me.host, pid=p.pid, pid_started=marker)


def test_a_cancel_whose_driver_is_gone_is_carried_out_by_the_next_start(tmp_path: Path) -> None:
    store = open_store(tmp_path / "store.db")
    try:
        store.create_job(JID, "orphan", {"sinks": []}, {})
        store.start_attempt(JID, _gone_owner(), 600.0, AttemptNo(0))  # lease still valid
        assert cancel(store, JID).state == JobState.CANCELING

        with pytest.raises(JobTerminal):
            start_attempt(store, JID, lease_ttl=30.0)
        job = store.get_job(JID)
        assert job.state == JobState.CANCELED
        first = store.get_attempt(JID, AttemptNo(1))
        assert first is not None and first.state == AttemptState.FAILED
        assert "gone while the job was being canceled" in (first.error or "")

        again = start_attempt(store, JID, lease_ttl=30.0, restart=True)  # --restart
        assert again.attempt == 2 and store.get_job(JID).state == JobState.RUNNING
    finally:
        store.close()


def test_a_cancel_whose_driver_lives_is_left_to_it(tmp_path: Path) -> None:
    store = open_store(tmp_path / "store.db")
    try:
        store.create_job(JID, "orphan", {"sinks": []}, {})
        store.start_attempt(JID, this_owner(), 600.0, AttemptNo(0))  # this process: alive
        cancel(store, JID)
        with pytest.raises(DuplicateJob, match="being canceled"):
            start_attempt(store, JID, lease_ttl=30.0)
        assert store.get_job(JID).state == JobState.CANCELING
        first = store.get_attempt(JID, AttemptNo(1))
        assert first is not None and first.state == AttemptState.RUNNING
    finally:
        store.close()
