"""The leader lease of the job managers, and each manager's heartbeat.

Every manager runs a supervisor; only the one holding the lease acts. The lease is a record of
the store with a holder, a renewal counter and a fencing token that grows on every takeover:
each store write the leader makes as the leader (starting an attempt) carries the token, so a
leader that was replaced without noticing cannot act any more. A dead leader is replaced within
about ``ttl`` seconds: the holder renews every third of it.

No wall clock decides who leads (stoker.leases): a standby takes the lease once it has seen the
row unrenewed for a whole TTL on its own monotonic clock, and the holder keeps leading while its
renewals go through. A clock step or a skew between the managers' hosts changes nothing.
"""

from __future__ import annotations

import logging
import time

from stoker.errors import StokerError
from stoker.leases import LeaseWatch
from stoker.store import Store

log = logging.getLogger("stoker.supervisor")


class LeaderLease:
    """One manager's hold on the leader lease (acquire, renew, resign) and its heartbeat."""

    def __init__(self, store: Store, holder: str, address: str, ttl: float) -> None:
        self.store = store
        self.holder = holder
        self.address = address
        self.ttl = ttl
        self.token: int | None = None  # the fencing token while this manager leads
        self._renewed = 0.0  # time.monotonic() of the last acquire or renewal
        self._beat = float("-inf")  # time.monotonic() of the last heartbeat recorded
        # What this manager saw of another's lease, and since when (the store's monotonic clock).
        self._watch = LeaseWatch(store.clock.monotonic)

    @property
    def held(self) -> bool:
        return self.token is not None

    @property
    def fence(self) -> tuple[str, int]:
        """(holder, token): what a write made as the leader carries. Only while held."""
        assert self.token is not None
        return self.holder, self.token

    def heartbeat(self) -> None:
        """Say in the store that this manager is alive, leader or standby (the web UI and
        ``GET /v1/managers`` list the managers from it), as often as a leader renews its lease.

        Not every tick: a standby's tick already writes (it tries for the lease), and each
        write to an SQLite store is fsynced under its one write lock, which the drivers'
        epoch decisions wait for. A heartbeat decides nothing, so one that fails costs only
        a warning: the election goes on.
        """
        now = time.monotonic()
        if now - self._beat < self.ttl / 3:
            return
        try:
            self.store.heartbeat_manager(self.holder, self.address)
        except StokerError as e:
            log.warning("%s could not record its heartbeat: %s", self.holder, e)
            return
        self._beat = now

    def hold(self) -> bool:
        """Acquire the lease, or renew it when a third of its time has gone; whether this
        manager leads now."""
        now = time.monotonic()
        if self.token is not None:
            if now - self._renewed < self.ttl / 3:
                return True
            if self.store.renew_leadership(self.holder, self.token, self.ttl):
                self._renewed = now
                return True
            log.warning("%s lost the leader lease (token %d)", self.holder, self.token)
            self.token = None
            return False
        current = self.store.get_leader()
        lapsed = None
        if current is not None and not current.resigned and current.holder != self.holder:
            # Another's lease: taken only once seen unrenewed for a whole TTL (the longer of
            # its holder's and ours) by this manager's monotonic clock.
            ttl = max(self.ttl, current.ttl or self.ttl)
            if not self._watch.lapsed("leader", current.seen, ttl):
                return False
            lapsed = current.seen
            log.warning(
                "%s: the leader lease of %s (token %d) was not renewed for %.1fs: taking it",
                self.holder,
                current.holder,
                current.token,
                self._watch.unseen_for("leader"),
            )
        lease = self.store.acquire_leadership(self.holder, self.address, self.ttl, lapsed)
        if lease is None:
            return False
        self._watch.clear()
        self.token = lease.token
        self._renewed = now
        log.info("%s leads with token %d", self.holder, lease.token)
        return True

    def confirm(self) -> bool:
        """Whether this manager still leads, read from the store now (not from when it last
        renewed): a long task asks between two pieces of its work. A lease found taken by
        another, or with another token, is lost here."""
        if self.token is None:
            return False
        current = self.store.get_leader()
        if (
            current is None
            or current.resigned
            or current.holder != self.holder
            or current.token != self.token
        ):
            log.warning("%s lost the leader lease (token %d)", self.holder, self.token)
            self.token = None
            return False
        return True

    def lost(self) -> None:
        """The store refused a write made as the leader: this manager leads no more."""
        self.token = None

    def resign(self) -> None:
        """Give the lease up (a standby takes over at once, not after ``ttl``) and leave the
        list of managers at once, instead of when the heartbeat goes stale."""
        if self.token is not None:
            self.store.resign_leadership(self.holder, self.token)
            self.token = None
        try:
            self.store.forget_manager(self.holder)
        except StokerError as e:
            log.warning("%s could not remove its heartbeat: %s", self.holder, e)
