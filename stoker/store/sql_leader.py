"""Leadership of the job managers in SQL: one lease row with a growing token; and a heartbeat
row per manager, so that the standbys can be shown beside the leader."""

from __future__ import annotations

import math

from stoker.errors import InvalidInput
from stoker.store import _schema
from stoker.store._sqlbase import SqlBase
from stoker.store.fleet_records import LeaderLease, ManagerRecord

# A manager not seen for this long (it was killed, or its host went away) loses its row on the
# next heartbeat of any manager: far beyond any freshness window a reader asks for.
MANAGERS_FORGOTTEN_AFTER = 3600.0


class LeaderMixin(SqlBase):
    """Implements :class:`stoker.store.protocols.fleet.LeaderStore`."""

    def acquire_leadership(
        self,
        holder: str,
        address: str,
        ttl: float,
        lapsed: tuple[str, int, int, float] | None = None,
    ) -> LeaderLease | None:
        """Take (or keep) the leader lease; None if another holds it.

        It is taken when free (never held, or resigned), already ``holder``'s, or lapsed:
        ``lapsed`` is the lease's :attr:`~stoker.store.LeaderLease.seen` that the caller saw
        unchanged for a whole TTL on its own monotonic clock (stoker.leases), and the row, read
        locked in this transaction, still shows it. No wall clock is compared: a clock step
        or a skew between the managers' hosts hands nothing over."""
        now = self.clock.now()
        with self._tx() as cur:
            self._x(
                cur, "insert_leader", holder=holder, address=address, expires_at=now + ttl, ttl=ttl
            )
            row = self._x(cur, "lock_leader").fetchone()
            current = LeaderLease.from_row(row)
            free = current.resigned or current.holder == holder
            if not free and (lapsed is None or current.seen != tuple(lapsed)):
                return None
            self._x(
                cur, "take_leader", holder=holder, address=address, expires_at=now + ttl, ttl=ttl
            )
            row = self._x(cur, "get_leader").fetchone()
        lease = LeaderLease.from_row(row)
        return lease if lease.holder == holder else None

    def renew_leadership(self, holder: str, token: int, ttl: float) -> bool:
        now = self.clock.now()
        with self._tx() as cur:
            n = self._x(
                cur, "renew_leader", holder=holder, token=token, expires_at=now + ttl, ttl=ttl
            ).rowcount
        return bool(n == 1)

    def resign_leadership(self, holder: str, token: int) -> None:
        with self._tx() as cur:
            self._x(cur, "resign_leader", holder=holder, token=token, now=self.clock.now())

    def get_leader(self) -> LeaderLease | None:
        with self._tx(write=False) as cur:
            row = self._x(cur, "get_leader").fetchone()
        return None if row is None else LeaderLease.from_row(row)

    # the managers' heartbeats (not a lease: nothing is decided on them) --------------------
    def heartbeat_manager(self, holder: str, address: str) -> None:
        now = self.clock.now()
        with self._tx() as cur:
            self._x(
                cur,
                "heartbeat_manager",
                holder=holder,
                address=address,
                now=now,
                stoker_version=_schema.stoker_version(),
                schema_version=self._migrations()[-1][0],
            )
            self._x(cur, "prune_managers", before=now - MANAGERS_FORGOTTEN_AFTER)

    def forget_manager(self, holder: str) -> None:
        with self._tx() as cur:
            self._x(cur, "forget_manager", holder=holder)

    def list_managers(self, fresh_for: float) -> list[ManagerRecord]:
        if (
            isinstance(fresh_for, bool)
            or not isinstance(fresh_for, int | float)
            or not math.isfinite(fresh_for)
            or fresh_for <= 0
        ):
            raise InvalidInput("fresh_for", f"expects seconds > 0, got {fresh_for!r}")
        since = self.clock.now() - fresh_for
        with self._tx(write=False) as cur:
            rows = self._x(cur, "list_managers", since=since).fetchall()
        return [ManagerRecord.from_row(r) for r in rows]
