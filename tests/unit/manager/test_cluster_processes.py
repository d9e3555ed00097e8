"""A cluster's recorded JVMs, signalled and stopped as process groups: here on plain child
processes (no Spark), each the leader of its own group as a JVM stoker starts is."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from stoker import procs
from stoker.errors import ClusterError, InvalidInput
from stoker.manager.clusters import remove_worker, stop_processes
from stoker.manager.clusters.jvm import group_left
from stoker.procs import host_id
from stoker.store import ClusterProcess

# A group leader with a child in its group (a worker and its executor); with IGNORE, both
# shrug off SIGTERM (a worker that hangs in its shutdown).
_LEADER = (
    "import signal, subprocess, sys, time\n"
    "if sys.argv[1] == 'ignore':\n"
    "    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "child = subprocess.Popen([sys.executable, '-c', sys.argv[2], sys.argv[1]])\n"
    "print(child.pid, flush=True)\n"
    "time.sleep(300)\n"
)
_CHILD = (
    "import signal, sys, time\n"
    "if sys.argv[1] == 'ignore':\n"
    "    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "time.sleep(300)\n"
)


def _record(pid: int, tmp_path: Path, **changes: object) -> ClusterProcess:
    rec = ClusterProcess(
        role="worker",
        id="worker-1",
        host=host_id(),
        address="127.0.0.2",
        pid=pid,
        pid_started=procs.process_start_marker(pid),
        port=0,
        web_port=0,
        log=str(tmp_path / "worker-1.log"),
        cores=1,
        memory="512m",
    )
    return replace(rec, **changes)  # type: ignore[arg-type]


def _start(mode: str) -> tuple[subprocess.Popen[str], int]:
    leader = subprocess.Popen(
        [sys.executable, "-c", _LEADER, mode, _CHILD],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert leader.stdout is not None
    return leader, int(leader.stdout.readline())


@pytest.fixture
def worker() -> Iterator[tuple[subprocess.Popen[str], int]]:
    leader, child = _start("plain")
    try:
        yield leader, child
    finally:
        _kill(leader)


@pytest.fixture
def stubborn() -> Iterator[tuple[subprocess.Popen[str], int]]:
    leader, child = _start("ignore")
    try:
        yield leader, child
    finally:
        _kill(leader)


def _kill(leader: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(leader.pid, signal.SIGKILL)
    leader.wait()


def _gone(pid: int) -> bool:
    """No such process, or only its exit status is left (an orphan's, for init to collect)."""
    st = procs.stat(pid)
    return st is None or st.zombie


def test_the_group_left_is_the_recorded_leader_and_its_members(
    worker: tuple[subprocess.Popen[str], int], tmp_path: Path
) -> None:
    leader, child = worker
    rec = _record(leader.pid, tmp_path)
    assert sorted(group_left(rec)) == sorted([leader.pid, child])
    # Not provably ours: another start time at that pid (a reused pid), another host, no
    # start time.
    assert group_left(replace(rec, pid_started=str(int(rec.pid_started) - 1))) == []
    assert group_left(replace(rec, host="another-host")) == []
    assert group_left(replace(rec, pid_started="unknown")) == []


def test_stop_never_signals_a_process_that_is_not_the_recorded_one(tmp_path: Path) -> None:
    sleeper = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        record = _record(sleeper.pid, tmp_path)
        older = replace(record, pid_started=str(int(record.pid_started) - 1))
        stop_processes([older], timeout=1.0)
        assert sleeper.poll() is None, "a reused pid was signalled"
        elsewhere = replace(record, host="another-host")
        with pytest.raises(ClusterError, match="another host"):
            stop_processes([elsewhere], timeout=1.0)
        assert sleeper.poll() is None
        stop_processes([record], timeout=5.0)
        assert sleeper.wait(timeout=5) == -signal.SIGTERM
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
            sleeper.wait()


def test_stop_kills_a_group_that_outlives_sigterm_and_says_so_in_its_log(
    stubborn: tuple[subprocess.Popen[str], int], tmp_path: Path
) -> None:
    leader, child = stubborn
    rec = _record(leader.pid, tmp_path)
    stop_processes([rec], timeout=1.0)
    assert leader.wait(timeout=30) == -signal.SIGKILL
    assert procs.group_pids(leader.pid) == [] and _gone(child)
    assert "still running 1 s after SIGTERM: SIGKILL" in Path(rec.log).read_text()


def test_remove_worker_without_grace_kills_its_group_and_returns_the_rest(
    worker: tuple[subprocess.Popen[str], int], tmp_path: Path
) -> None:
    leader, child = worker
    rec = _record(leader.pid, tmp_path)
    master = replace(rec, role="master", id="master", address="127.0.0.1", pid=1)
    with pytest.raises(InvalidInput, match="no worker 'worker-9'"):
        remove_worker("http://127.0.0.1:1", [master, rec], "worker-9", graceful=False)
    left = remove_worker("http://127.0.0.1:1", [master, rec], "127.0.0.2", graceful=False)
    assert left == [master]
    assert leader.wait(timeout=30) == -signal.SIGKILL
    assert procs.group_pids(leader.pid) == [] and _gone(child)
