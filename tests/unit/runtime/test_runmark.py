"""runtime/runmark.py: a second run of a state folder refused at once while a live, running
process holds its mark; a frozen or dead holder refuses nothing (the store decides then).
The holders are real processes."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from stoker.errors import DuplicateJob
from stoker.runtime.runmark import RunMark
from tests.support.core import wait_for

HOLD = """\
import sys, time
from pathlib import Path
from stoker.runtime.runmark import RunMark
mark = RunMark(Path(sys.argv[1]), "j")
mark.take()
if sys.argv[2:] == ["hung"]:
    mark._stop.set()  # its touching thread stops, as in a hung process
if sys.argv[2:] == ["started"]:
    mark.started()  # its attempt is in the store
print("held", flush=True)
time.sleep(600)
"""


def hold(state: Path, *extra: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(state), *extra], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline() == "held\n"
    return proc


def end(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGCONT)
    proc.kill()
    proc.wait()


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    proc = hold(tmp_path / "state")
    try:
        yield proc
    finally:
        end(proc)


def test_a_live_holder_refuses_a_second_run_naming_it(
    tmp_path: Path, holder: subprocess.Popen[str]
) -> None:
    with pytest.raises(DuplicateJob, match=f"another stoker run \\(pid {holder.pid}\\) runs it"):
        RunMark(tmp_path / "state", "j").take()
    assert not (tmp_path / "state").exists()  # a refused run leaves nothing in the folder


def test_a_frozen_holder_refuses_nothing_and_a_dead_one_leaves_its_mark_free(
    tmp_path: Path, holder: subprocess.Popen[str]
) -> None:
    os.kill(holder.pid, signal.SIGSTOP)
    wait_for("the holder stopped", lambda: _state(holder.pid) in ("T", "t"), 30)
    RunMark(tmp_path / "state", "j").take()  # a takeover stays possible: the store decides
    os.kill(holder.pid, signal.SIGCONT)
    holder.kill()
    holder.wait()
    mine = RunMark(tmp_path / "state", "j")
    mine.take()  # the kernel dropped the dead holder's lock: this run holds it now
    try:
        other = subprocess.run(
            [sys.executable, "-c", HOLD, str(tmp_path / "state")],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert other.returncode != 0 and f"(pid {os.getpid()})" in other.stderr, other.stderr
    finally:
        mine.release()
    assert not mine.path.exists()  # let go: nothing piles up under the temp dir


def test_a_holder_that_stopped_touching_its_mark_refuses_nothing(tmp_path: Path) -> None:
    import stoker.runtime.runmark as runmark

    hung = hold(tmp_path / "state", "hung")
    try:
        old = time.time() - 2 * runmark.FRESH_S
        os.utime(runmark.mark_path(tmp_path / "state"), (old, old))
        RunMark(tmp_path / "state", "j").take()  # not refused: the store decides
    finally:
        end(hung)


def test_a_holder_whose_attempt_started_leaves_the_answer_to_the_store(tmp_path: Path) -> None:
    running = hold(tmp_path / "state", "started")
    try:
        RunMark(tmp_path / "state", "j").take()  # the store's lease refuses, or lets it take over
    finally:
        end(running)


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().rsplit(")", 1)[1].split()[0]
