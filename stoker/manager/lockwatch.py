"""The leader breaks the store's write lock when a driver froze or hung holding it.

An SQLite store is one file every driver on the host writes: each lease renewal, each epoch's
decision. A driver stopped (SIGSTOP, a debugger) or hung inside a write transaction keeps the
lock for as long as it is stopped, and nothing on SQLite's side ends that transaction: every
other driver's renewals wait, their leases lapse one after the other, and the leader itself
cannot renew its own lease or judge anyone. A CI run met it: a driver SIGSTOPped at an unlucky
moment froze the whole manager for good.

The leader watches who holds the lock (:meth:`~stoker.store.base.Store.write_lock`) on a thread
of its own (its supervisor's thread is the one waiting for the lock) and SIGKILLs the holder's
process group, as a lapsed lease would have it killed, when

- the holder is a driver or standby the leader knows (a live attempt's or standby's owner, or a
  driver it started): nothing else is ever killed, only named in the log; and
- it has been *stopped* (``T`` in ``/proc``) while holding the lock for half a lease TTL: its
  own lease lapses anyway, and the others' must not lapse behind it; or it held the lock
  for a whole TTL while the store's log did not change (hung, not slow: a long transaction of a
  live process that commits nothing for a TTL has already made every other lease lapse).

The kernel releases a dead process's locks and SQLite rolls its open transaction back, so the
store is as the last commit left it: whatever the killed driver had not committed, it had not
decided. Its attempt is then judged as any driver that is gone.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from stoker import procs
from stoker.store import Owner, Store, WriteLock

log = logging.getLogger("stoker.lockwatch")

EVERY = 0.25  # seconds between looks (a read of /proc/locks)


@dataclass
class _Held:
    pid: int
    since: float  # monotonic seconds when this pid was first seen holding the lock
    mark: tuple[int, int]  # the WAL's mark when it last changed under this holder
    changed: float  # monotonic seconds of that change
    stopped_since: float | None = None
    named: bool = False  # a holder that is not a driver: logged once


class StoreLockWatch:
    """One look at a time (:meth:`look`), or a thread of looks while ``leading()`` says so."""

    def __init__(
        self,
        store: Store,
        kill: Callable[[Owner], None],
        lease_ttl: float,
        leading: Callable[[], bool],
        every: float = EVERY,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self._kill = kill
        self.ttl = lease_ttl
        self._leading = leading
        self._every = every
        self._mono = monotonic
        self._owners: frozenset[Owner] = frozenset()
        self._held: _Held | None = None
        self.broken = 0  # holders killed
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="stoker-lockwatch", daemon=True)

    def know(self, owners: Iterable[Owner]) -> None:
        """The drivers and standbys the leader saw live last (replaced whole, atomically)."""
        self._owners = frozenset(o for o in owners if o.pid and procs.is_this_host(o.host))

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.wait(self._every):
            try:
                if self._leading():
                    self.look()
                else:
                    self._held = None
            except Exception:  # never let a look end the watch
                log.exception("looking at the store's write lock failed")

    def look(self) -> Owner | None:
        """One look at the lock; the owner killed, if this look killed one."""
        lock = self.store.write_lock()
        now = self._mono()
        if lock is None or lock.pid == os.getpid():
            self._held = None
            return None
        held = self._held
        if held is None or held.pid != lock.pid:
            self._held = _Held(lock.pid, now, lock.wal_mark, now)
            return None
        return self._judge(held, lock, now)

    def _judge(self, held: _Held, lock: WriteLock, now: float) -> Owner | None:
        if lock.wal_mark != held.mark:
            held.mark, held.changed = lock.wal_mark, now
        st = procs.stat(held.pid)
        if st is None:
            self._held = None  # gone: the kernel has released its locks
            return None
        stopped = st.state in ("T", "t")
        if not stopped:
            held.stopped_since = None
        elif held.stopped_since is None:
            held.stopped_since = now
        frozen = held.stopped_since is not None and now - held.stopped_since >= self.ttl / 2
        hung = now - held.changed >= self.ttl
        if not (frozen or hung):
            return None
        owner = self._owner_of(st)
        how = "stopped" if frozen else "without a commit"
        if owner is None:
            if not held.named:
                held.named = True
                log.warning(
                    "the store's write lock has been held %.1fs (%s) by pid %d (%s), not a "
                    "driver of this manager: every job's writes wait for it",
                    now - held.since,
                    how,
                    held.pid,
                    " ".join(procs.cmdline(held.pid) or [])[:200],
                )
            return None
        log.warning(
            "the store's write lock has been held %.1fs (%s) by pid %d of the driver pid %d: "
            "killed, as a lapsed lease would have it, so that every other lease can be renewed",
            now - held.since,
            how,
            held.pid,
            owner.pid,
        )
        self._kill(owner)
        self.broken += 1
        self._held = None
        return owner

    def _owner_of(self, st: procs.ProcStat) -> Owner | None:
        """The known driver whose process group the holder is in (the driver, or a process it
        started), if it is that driver's (started no earlier than it)."""
        for o in self._owners:
            if st.pid == o.pid or st.pgid == o.pid:
                mine = procs.stat(o.pid)
                if mine is not None and mine.started == o.pid_started:
                    return o
        return None
