"""Who holds an SQLite store's write lock, as the kernel tells (Linux ``/proc/locks``).

In WAL mode a writer holds an exclusive POSIX lock on one byte of the ``-shm`` file
(``WAL_WRITE_LOCK``, the first of the lock bytes at offset 120) for as long as its write
transaction is open. A process that stops (SIGSTOP) or hangs inside one blocks every other
writer of the store: every driver's lease renewal, the leader's own. Nothing on SQLite's side
ever ends such a transaction (PostgreSQL's server has timeouts for it), so the manager asks
here who holds the lock and decides what to do about it (``stoker.manager.lockwatch``).

The ``-shm`` file is only ``stat``-ed, never opened: closing any descriptor of a file drops
every POSIX lock this process holds on it, the store's own connections' included.
"""

from __future__ import annotations

import os
from pathlib import Path

from stoker.store.records import WriteLock

_WAL_WRITE_LOCK = 120  # the byte of the -shm file a writer locks (SQLite's WALINDEX_LOCK_OFFSET)
_PROC_LOCKS = Path("/proc/locks")


def _device_key(st: os.stat_result) -> str:
    # /proc/locks names a file "MAJOR:MINOR:INODE", major and minor in (at least 2-digit) hex.
    return f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"


def write_lock(db: Path, proc_locks: Path = _PROC_LOCKS) -> WriteLock | None:
    """The process holding ``db``'s write lock now, and a mark of the WAL that changes with
    each commit; None when nobody holds it or it cannot be told (no ``-shm`` file yet, not
    Linux)."""
    try:
        key = _device_key(os.stat(f"{db}-shm"))
        text = proc_locks.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        # "7: POSIX  ADVISORY  WRITE 4903 fe:00:9977969 120 120"; a process blocked waiting
        # has a "7: -> POSIX ..." line (SQLite polls rather than blocks, but be exact).
        f = line.split()
        if len(f) < 8 or f[1] != "POSIX" or f[3] != "WRITE" or f[5] != key:
            continue
        if not (int(f[6]) <= _WAL_WRITE_LOCK <= _lock_end(f[7])):
            continue
        try:
            pid = int(f[4])
        except ValueError:
            continue
        return WriteLock(pid=pid, wal_mark=_wal_mark(db))
    return None


def _lock_end(text: str) -> int:
    return 1 << 62 if text == "EOF" else int(text)


def _wal_mark(db: Path) -> tuple[int, int]:
    """What a commit changes: the WAL's size and modification time (a commit appends frames;
    a checkpoint that restarts it rewrites from the start)."""
    try:
        st = os.stat(f"{db}-wal")
    except OSError:
        return (-1, -1)
    return (st.st_size, st.st_mtime_ns)
