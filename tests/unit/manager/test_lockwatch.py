"""The leader breaks an SQLite store's write lock held by a frozen or hung driver
(``stoker/manager/lockwatch.py``), with real processes holding a real store's lock.

A CI run met the fault: a driver SIGSTOPped inside a write transaction froze the whole manager
(every renewal, the leader's own, waited for the lock for good). The holder here is a real
process in a session of its own, as drivers are, holding ``BEGIN IMMEDIATE`` on the store's
file; time is a hand-moved clock, so no test waits for a TTL.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from stoker import procs
from stoker.manager.launcher import LocalProcessLauncher
from stoker.manager.lockwatch import StoreLockWatch
from stoker.store import Owner
from stoker.store.sqlite import SqliteStore
from tests.support import wait_for

HOLD = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
conn.execute("BEGIN IMMEDIATE")
conn.execute("UPDATE schema_migrations SET version = version")
print("held", flush=True)
time.sleep(600)
"""


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    st = SqliteStore(tmp_path / "store.db")
    yield st
    st.close()


@pytest.fixture
def holder(store: SqliteStore) -> Iterator[subprocess.Popen[str]]:
    """A process of its own session holding the store's write lock."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(store.path)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    yield proc
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _owner(pid: int) -> Owner:
    return Owner(host=procs.host_id(), pid=pid, pid_started=procs.process_start_marker(pid))


def _can_write(store: SqliteStore) -> bool:
    conn = sqlite3.connect(str(store.path), isolation_level=None, timeout=0.1)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        conn.close()


def _watch(store: SqliteStore, clock: Clock, ttl: float = 10.0) -> StoreLockWatch:
    return StoreLockWatch(store, LocalProcessLauncher().kill, ttl, lambda: True, monotonic=clock)


def test_the_store_names_the_process_holding_its_write_lock(
    store: SqliteStore, holder: subprocess.Popen[str]
) -> None:
    lock = store.write_lock()
    assert lock is not None and lock.pid == holder.pid
    os.killpg(holder.pid, signal.SIGKILL)
    holder.wait()
    assert store.write_lock() is None  # the kernel released a dead process's lock
    assert _can_write(store)


def test_a_driver_stopped_holding_the_lock_is_killed_after_half_a_ttl(
    store: SqliteStore, holder: subprocess.Popen[str]
) -> None:
    clock = Clock()
    watch = _watch(store, clock)
    watch.know([_owner(holder.pid)])
    os.killpg(holder.pid, signal.SIGSTOP)
    assert not _can_write(store)
    assert watch.look() is None  # first seen
    clock.now += 1.0
    assert watch.look() is None  # stopped: counted from here
    clock.now += 4.9
    assert watch.look() is None and holder.poll() is None
    clock.now += 0.2
    assert watch.look() == _owner(holder.pid)
    wait_for("the holder killed", lambda: holder.poll() is not None, 30)
    assert holder.returncode == -signal.SIGKILL
    assert _can_write(store) and watch.broken == 1


def test_a_driver_hung_in_a_transaction_for_a_ttl_is_killed(
    store: SqliteStore, holder: subprocess.Popen[str]
) -> None:
    clock = Clock()
    watch = _watch(store, clock)
    watch.know([_owner(holder.pid)])
    assert watch.look() is None
    clock.now += 9.9  # running, not stopped: a whole TTL without a commit is needed
    assert watch.look() is None and holder.poll() is None
    clock.now += 0.2
    assert watch.look() is not None
    wait_for("the holder killed", lambda: holder.poll() is not None, 30)
    assert _can_write(store)


def test_a_process_that_is_not_a_known_driver_is_named_never_killed(
    store: SqliteStore, holder: subprocess.Popen[str], caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    watch = _watch(store, clock)
    watch.know([_owner(os.getppid())])  # some other process: not the holder's group
    os.killpg(holder.pid, signal.SIGSTOP)
    for _ in range(3):
        assert watch.look() is None
        clock.now += 60.0
    assert holder.poll() is None and watch.broken == 0
    named = [r.message for r in caplog.records if "not a driver of this manager" in r.message]
    assert len(named) == 1 and str(holder.pid) in named[0]


def test_a_driver_whose_pid_was_reused_is_not_killed(
    store: SqliteStore, holder: subprocess.Popen[str]
) -> None:
    clock = Clock()
    watch = _watch(store, clock)
    stale = Owner(host=procs.host_id(), pid=holder.pid, pid_started="1")  # another start time
    watch.know([stale])
    os.killpg(holder.pid, signal.SIGSTOP)
    watch.look()
    clock.now += 60.0
    assert watch.look() is None and holder.poll() is None


def test_the_watch_ignores_its_own_process_and_a_free_lock(store: SqliteStore) -> None:
    clock = Clock()
    watch = _watch(store, clock)
    assert watch.look() is None  # nobody holds it
    conn = sqlite3.connect(str(store.path), isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        lock = store.write_lock()
        assert lock is not None and lock.pid == os.getpid()
        clock.now += 60.0
        assert watch.look() is None and watch.broken == 0
    finally:
        conn.execute("ROLLBACK")
        conn.close()
