"""The per-job recovery hold in SQL: taken when free, lapsed, already ours or its holder gone."""

from __future__ import annotations

from stoker.store._sqlbase import SqlBase
from stoker.store.records import Owner, RecoveryHold
from stoker.types import AttemptNo, JobId


def _holder(hold: RecoveryHold) -> dict[str, object]:
    o = hold.owner
    return {
        "job_id": hold.job_id,
        "attempt": hold.attempt,
        "host": o.host,
        "pid": o.pid,
        "pid_started": o.pid_started,
    }


class RecoveryHoldMixin(SqlBase):
    """Implements :class:`stoker.store.protocols.runs.RecoveryHoldStore`."""

    def take_recovery_hold(
        self,
        job_id: JobId,
        attempt: AttemptNo,
        owner: Owner,
        ttl: float,
        gone: RecoveryHold | None = None,
    ) -> RecoveryHold:
        now = self.clock.now()
        me = _holder(RecoveryHold(job_id, attempt, owner, now + ttl))
        # A holder nobody can be (attempt 0 does not exist) when no one was seen gone.
        was = _holder(gone) if gone is not None else {**me, "attempt": 0}
        with self._tx() as cur:
            self._x(cur, "insert_recovery_hold", **me, expires_at=now + ttl)
            self._x(
                cur,
                "take_recovery_hold",
                **me,
                expires_at=now + ttl,
                now=now,
                gone_attempt=was["attempt"],
                gone_host=was["host"],
                gone_pid=was["pid"],
                gone_pid_started=was["pid_started"],
            )
            row = self._x(cur, "get_recovery_hold", job_id=job_id).fetchone()
        return RecoveryHold.from_row(row)

    def renew_recovery_hold(self, hold: RecoveryHold, ttl: float) -> bool:
        now = self.clock.now()
        with self._tx() as cur:
            n = self._x(cur, "renew_recovery_hold", **_holder(hold), expires_at=now + ttl).rowcount
        return bool(n == 1)

    def release_recovery_hold(self, hold: RecoveryHold) -> None:
        with self._tx() as cur:
            self._x(cur, "release_recovery_hold", **_holder(hold))

    def get_recovery_hold(self, job_id: JobId) -> RecoveryHold | None:
        with self._tx(write=False) as cur:
            row = self._x(cur, "get_recovery_hold", job_id=job_id).fetchone()
        return None if row is None else RecoveryHold.from_row(row)
