"""``stoker status`` after a ``kill -9`` of the driver (issue 41 item 6): the attempt stays
RUNNING in the store until its lease ends; status says the driver's process is gone on this
host rather than showing ``RUNNING pid N`` for a pid that no longer runs. A job that ended
shows its attempt's end, not a lease that means nothing any more, and its last epoch that was
never committed as such (a newcomer walk read both as still running)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from stoker.procs import host_id, process_start_marker, this_owner
from stoker.store import Owner, open_store
from stoker.types import AttemptNo, AttemptState, ControlVersion, Epoch, JobState, job_id
from tests.support import REPO, stoker_cmd


def _status(url: str) -> str:
    p = subprocess.run(
        stoker_cmd("status", "j", "--store", url),
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    return p.stdout


def _running(url: str, owner: Owner) -> None:
    store = open_store(url)
    try:
        jid = job_id("j")
        store.create_job(jid, "j", {"sinks": []}, {})
        store.start_attempt(jid, owner, 600.0, AttemptNo(0))
    finally:
        store.close()


def test_a_killed_drivers_attempt_says_its_process_is_gone(tmp_path: Path) -> None:
    driver = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    owner = Owner(host=host_id(), pid=driver.pid, pid_started=process_start_marker(driver.pid))
    driver.kill()  # kill -9
    driver.wait()
    url = f"sqlite:///{tmp_path / 'store.db'}"
    _running(url, owner)
    out = _status(url)
    assert f"RUNNING pid {driver.pid}" in out, out
    assert f"driver   gone: pid {driver.pid} no longer runs on this host" in out, out


def test_a_live_driver_is_not_called_gone(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    _running(url, this_owner())  # this test's process: alive while status runs
    assert "gone" not in _status(url)


def test_a_failed_job_shows_its_attempts_end_and_its_uncommitted_epoch_as_such(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    _running(url, this_owner())
    store = open_store(url)
    try:
        jid = job_id("j")
        store.pin_epoch(jid, Epoch(0), AttemptNo(1), ControlVersion(0))
        store.finish_attempt(jid, AttemptNo(1), AttemptState.FAILED, JobState.FAILED, "boom")
    finally:
        store.close()
    out = _status(url)
    line = next(x for x in out.splitlines() if x.startswith("attempt "))
    assert "FAILED" in line and "on this host" in line and ", ended " in line, out
    assert "lease" not in out and host_id() not in out, out
    assert "last epoch 0 PINNED: not committed when the job ended" in out, out
