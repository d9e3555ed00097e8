"""Whether a lease lapsed, judged without comparing wall clocks.

A lease row carries a renewal counter and its holder's TTL besides the expiry its holder wrote
by its own wall clock. The expiry is for people; nothing is decided on it, because a clock step
(NTP, a VM migrated or resumed) or a skew between two hosts moves it by any amount: a +30 s
step seen by every process made the leader kill healthy drivers within one tick, and a manager
whose clock ran behind made every new attempt fail at its start.

An observer (the leader's supervisor watching drivers, a standby manager watching the leader, a
driver about to take a job over) instead remembers what it last saw of a lease and when, on its
*own* monotonic clock: the lease lapsed once the same value has been seen for a whole TTL. This
is how Chubby, etcd and Kubernetes' leader election judge a lease. The holder, for its part,
stops acting once a TTL has passed on its monotonic clock since it *sent* its last successful
renewal, which is never later than when an observer saw that renewal: the holder gives up
before any observer takes over, whatever the wall clocks say. Monotonic clocks of two processes
may run at slightly different rates; a margin covers that.

A new observer knows nothing yet: it waits a whole TTL from its first look before it calls a
lease lapsed (a leader after a failover, a driver started beside a holder on another host).
A holder whose process is seen gone on this host needs no waiting; callers check that first.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TypeVar

V = TypeVar("V", bound=Hashable)

# Monotonic clocks of two hosts run at rates that differ by less than this share: twice the
# most NTP ever slews a clock (500 ppm). The observer waits this much longer than the TTL. (The
# holder gives up a TTL after it *sent* its last renewal, the observer counts from when it *saw*
# it: with equal rates the holder is always first.)
DRIFT_MARGIN = 0.001

# The TTL of a lease whose row does not say it (written by a driver of an older release): the
# drivers' default (stoker.settings), the longest any of them used.
FALLBACK_TTL = 30.0


@dataclass
class _Sighting:
    value: Hashable
    since: float  # monotonic seconds when ``value`` was first seen
    touched: float  # monotonic seconds of the last look
    changes: int = 0  # how often the value changed under this observer's watch


class LeaseWatch:
    """An observer's memory of leases: ``lapsed(key, value, ttl)`` for each look.

    ``key`` names the lease (a job's attempt, the leader row); ``value`` is whatever changes
    on each renewal (:attr:`~stoker.store.AttemptRecord.lease_seen`). Not thread-safe: one
    owner (the supervisor's thread) looks.
    """

    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._mono = monotonic
        self._seen: dict[Hashable, _Sighting] = {}
        self._pruned = monotonic()

    def lapsed(self, key: Hashable, value: Hashable, ttl: float) -> bool:
        """Whether ``key``'s lease has shown ``value`` for longer than ``ttl`` (plus the drift
        margin) by this observer's clock. A new key or a changed value starts the count."""
        now = self._mono()
        s = self._seen.get(key)
        if s is None or s.value != value:
            self._seen[key] = _Sighting(value, now, now, 0 if s is None else s.changes + 1)
            self._prune(now, ttl)
            return False
        s.touched = now
        return now - s.since > ttl * (1 + DRIFT_MARGIN)

    def renewed(self, key: Hashable) -> bool:
        """Whether this observer has seen ``key``'s value change (its holder renewed it) since
        it first looked: the holder is alive by what this observer saw itself."""
        s = self._seen.get(key)
        return s is not None and s.changes > 0

    def unseen_for(self, key: Hashable) -> float:
        """Seconds since ``key``'s current value was first seen (0 for an unknown key)."""
        s = self._seen.get(key)
        return 0.0 if s is None else self._mono() - s.since

    def forget(self, key: Hashable) -> None:
        self._seen.pop(key, None)

    def clear(self) -> None:
        """Forget everything (a leader that lost its lease starts over when it leads again)."""
        self._seen.clear()

    def _prune(self, now: float, ttl: float) -> None:
        """Drop keys nobody looked at for a while (ended attempts), so the memory follows the
        live leases, not every lease ever seen."""
        horizon = max(60.0, 10 * ttl)
        if now - self._pruned < horizon:
            return
        self._pruned = now
        for k in [k for k, s in self._seen.items() if now - s.touched > horizon]:
            del self._seen[k]


def wait_for_lapse(
    look: Callable[[], V | None],
    ttl: float,
    *,
    monotonic: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> V | None:
    """Watch one lease until it lapses or is seen renewed: ``look()`` reads what changes on each
    renewal (None: the lease ended, nothing to wait for). Returns the value that stayed the same
    for a whole TTL, or None if the lease was renewed or ended meanwhile (its holder is alive,
    or let it go). Blocks for up to about ``ttl``: for a driver about to take a job over from a
    holder it cannot see (another host)."""
    watch = LeaseWatch(monotonic)
    first = look()
    if first is None:
        return None
    watch.lapsed("lease", first, ttl)
    step = max(0.05, min(1.0, ttl / 10))
    while True:
        sleep(step)
        value = look()
        if value != first:
            return None
        if watch.lapsed("lease", value, ttl):
            return value
