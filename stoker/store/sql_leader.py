"""Leadership of the job managers in SQL: one lease row with a growing token."""

from __future__ import annotations

from stoker.store._sqlbase import SqlBase
from stoker.store.records import LeaderLease


class LeaderMixin(SqlBase):
    """Implements :class:`stoker.store.protocols.LeaderStore`."""

    def acquire_leadership(self, holder: str, address: str, ttl: float) -> LeaderLease | None:
        """Take (or keep) the leader lease if it is free or ours; None if another holds it."""
        now = self.clock.now()
        with self._tx() as cur:
            self._x(cur, "insert_leader", holder=holder, address=address, expires_at=now + ttl)
            self._x(
                cur,
                "take_leader",
                holder=holder,
                address=address,
                expires_at=now + ttl,
                now=now,
            )
            row = self._x(cur, "get_leader").fetchone()
        lease = LeaderLease.from_row(row)
        return lease if lease.holder == holder and lease.expires_at > now else None

    def renew_leadership(self, holder: str, token: int, ttl: float) -> bool:
        now = self.clock.now()
        with self._tx() as cur:
            n = self._x(
                cur, "renew_leader", holder=holder, token=token, expires_at=now + ttl, now=now
            ).rowcount
        return bool(n == 1)

    def resign_leadership(self, holder: str, token: int) -> None:
        with self._tx() as cur:
            self._x(cur, "resign_leader", holder=holder, token=token, now=self.clock.now())

    def get_leader(self) -> LeaderLease | None:
        with self._tx(write=False) as cur:
            row = self._x(cur, "get_leader").fetchone()
        return None if row is None else LeaderLease.from_row(row)
