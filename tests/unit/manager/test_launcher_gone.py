"""Whether a live attempt's driver is gone, as the leader asks each tick for every live driver
(issue 39 item 3): real processes, killed with real signals."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from stoker.manager.launcher import LocalProcessLauncher, this_host
from stoker.procs import process_start_marker
from stoker.store import Owner
from stoker.types import AttemptNo, job_id

SLEEP = [sys.executable, "-c", "import time; time.sleep(600)"]


def test_a_driver_killed_right_after_it_was_seen_alive_is_gone_at_once() -> None:
    """Seen alive a moment ago (its start marker matched): its death is still seen on the
    next question, not a second later."""
    proc = subprocess.Popen(SLEEP)
    try:
        owner = Owner(this_host(), proc.pid, process_start_marker(proc.pid))
        launcher = LocalProcessLauncher()
        assert not launcher.is_gone(owner)
        assert not launcher.is_gone(owner)  # within VERIFY_EVERY: its pid only
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        assert launcher.is_gone(owner)
    finally:
        proc.kill()
        proc.wait(timeout=30)


def test_a_live_pid_of_another_process_is_gone() -> None:
    """The pid lives, but its start marker is not the driver's: the pid was reused."""
    proc = subprocess.Popen(SLEEP)
    try:
        launcher = LocalProcessLauncher()
        assert launcher.is_gone(Owner(this_host(), proc.pid, "not-its-start"))
    finally:
        proc.kill()
        proc.wait(timeout=30)


def test_a_driver_started_here_is_gone_once_it_exited(tmp_path: Path) -> None:
    launcher = LocalProcessLauncher()
    first = launcher.start(job_id("a"), AttemptNo(1), SLEEP, {}, tmp_path / "a.log", tmp_path)
    second = launcher.start(job_id("b"), AttemptNo(1), SLEEP, {}, tmp_path / "b.log", tmp_path)
    try:
        assert not launcher.is_gone(first) and not launcher.is_gone(second)
        launcher.kill(first)
        proc = launcher._pids[first.pid]
        proc.wait(timeout=30)  # exited, not yet reaped by the launcher
        assert launcher.is_gone(first)
        assert not launcher.is_gone(second)
    finally:
        launcher.kill(second)
        launcher.kill(first)
