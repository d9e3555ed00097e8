"""stoker.procs, the one /proc reader: on this very process and on children it starts."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from stoker import procs
from stoker.procs import host_id
from stoker.store import Owner

# A child that starts a grandchild in its own process group, prints its pid, then sleeps.
_PARENT = (
    "import subprocess, sys, time\n"
    "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
    "print(c.pid, flush=True)\n"
    "time.sleep(60)\n"
)


@pytest.fixture
def group() -> Iterator[tuple[subprocess.Popen[str], int]]:
    """A child leading a new process group, with a grandchild in that group: (child, its
    grandchild's pid). Killed at the end, group and all."""
    child = subprocess.Popen(
        [sys.executable, "-c", _PARENT],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert child.stdout is not None
        grandchild = int(child.stdout.readline())
        yield child, grandchild
    finally:
        os.killpg(child.pid, 9)
        child.wait()


def test_stat_of_this_process() -> None:
    me = procs.stat(os.getpid())
    assert me is not None
    assert me.pid == os.getpid()
    assert me.ppid == os.getppid()
    assert me.pgid == os.getpgrp()
    assert me.state in ("R", "S") and not me.zombie
    assert me.started.isdigit()
    assert procs.process_start_marker(os.getpid()) == me.started


def test_stat_of_no_process() -> None:
    gone = _a_gone_pid()
    assert procs.stat(gone) is None
    assert procs.cmdline(gone) is None
    assert procs.process_start_marker(gone) == procs.UNKNOWN


def test_a_child_its_group_and_its_argv(group: tuple[subprocess.Popen[str], int]) -> None:
    child, grandchild = group
    st = procs.stat(child.pid)
    assert st is not None
    assert st.ppid == os.getpid() and st.pgid == child.pid  # the leader of a new group
    below = procs.stat(grandchild)
    assert below is not None and below.ppid == child.pid and below.pgid == child.pid
    assert procs.group_pids(child.pid) == sorted([child.pid, grandchild])
    # Members started before a given time are not counted: a reused group id's strangers.
    assert procs.group_pids(child.pid, started_since=int(below.started) + 10**9) == []
    argv = procs.cmdline(child.pid)
    assert argv is not None and argv[:2] == [sys.executable, "-c"] and argv[2] == _PARENT
    assert child.pid in procs.pids() and grandchild in procs.pids()
    assert {child.pid, grandchild} <= {s.pid for s in procs.all_stats()}


def test_a_zombie_is_not_a_live_member() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    deadline = time.monotonic() + 30
    while (st := procs.stat(child.pid)) is not None and not st.zombie:
        assert time.monotonic() < deadline, "the child did not exit"
        time.sleep(0.05)
    assert st is not None and st.zombie  # exited, not yet collected
    assert procs.cmdline(child.pid) == []
    assert procs.group_pids(child.pid) == []
    child.wait()
    assert procs.stat(child.pid) is None


def test_memory_total() -> None:
    total = procs.memory_total_mb()
    assert total is not None and total > 0


def test_owner_identity() -> None:
    me = procs.this_owner()
    assert me == Owner(host_id(), os.getpid(), procs.process_start_marker(os.getpid()))
    assert not procs.owner_is_dead(me)
    assert procs.owner_is_dead(Owner(host_id(), _a_gone_pid(), "1"))
    assert procs.owner_is_dead(Owner(me.host, me.pid, str(int(me.pid_started) + 1)))  # reused
    assert not procs.owner_is_dead(Owner("another-host", _a_gone_pid(), "1"))


def _a_gone_pid() -> int:
    """The pid of a child that has exited and been collected."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_host_is_its_name_boot_and_pid_namespace_or_what_the_operator_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 21 item 10: two containers that share a host name (and a machine id from their
    image) are two hosts; so are two boots of one machine."""
    monkeypatch.delenv(procs.HOST_ID_ENV, raising=False)
    made = procs._make_host_id()
    name, boot, pidns = made.split("/")
    assert name == socket.gethostname() and len(boot) == 8
    assert pidns == os.readlink("/proc/self/ns/pid").partition("[")[2].rstrip("]")
    assert procs.host_id() == made and procs.is_this_host(made)
    monkeypatch.setenv(procs.HOST_ID_ENV, "rack-7.node-3")
    assert procs._make_host_id() == "rack-7.node-3"
    monkeypatch.setenv(procs.HOST_ID_ENV, "two words")
    with pytest.raises(ValueError, match="STOKER_HOST_ID"):
        procs._make_host_id()


def test_a_process_recorded_on_another_host_is_never_judged_dead_adopted_or_killed() -> None:
    """A live process here whose record names another host (same name, another container or
    boot): its pid means nothing here, so it is not dead, not still running as ours, and a
    kill leaves it alone; the lease decides for it."""
    from stoker.manager.launcher import LocalProcessLauncher

    child = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        marker = procs.process_start_marker(child.pid)
        name = socket.gethostname()
        for other in (f"{name}/00000000/1", f"{name}/deadbeef/{procs.host_id().split('/')[-1]}"):
            foreign = Owner(other, child.pid, marker)
            assert not procs.owner_is_dead(foreign)
            launcher = LocalProcessLauncher()
            assert not launcher.still_running(foreign)
            launcher.kill(foreign)
            assert child.poll() is None, "a process of another host was killed"
        mine = Owner(procs.host_id(), child.pid, marker)
        assert LocalProcessLauncher().still_running(mine)
    finally:
        child.kill()
        child.wait()
