"""Standby drivers in SQL (migration 0016): one per job, WARMING -> READY -> TAKEN
(``STANDBYS``). The manager records a standby when it starts one; the standby renews its own
lease (and says when it is READY); the leader hands it an attempt (TAKEN) and removes the row
once that attempt runs, the standby is gone, or the job ended."""

from __future__ import annotations

from stoker.errors import InvalidTransition
from stoker.store._sqlbase import SqlBase, owner_params
from stoker.store.fleet_records import StandbyRecord
from stoker.store.records import Owner
from stoker.types import AttemptNo, JobId


class StandbysMixin(SqlBase):
    """Implements :class:`stoker.store.protocols.fleet.StandbyStore`."""

    def add_standby(
        self, job_id: JobId, owner: Owner, log_path: str, lease_ttl: float
    ) -> StandbyRecord:
        now = self.clock.now()
        with self._tx() as cur:
            n = self._x(
                cur,
                "insert_standby",
                job_id=job_id,
                **owner_params(owner),
                log_path=log_path,
                now=now,
                lease_expires_at=now + lease_ttl,
            ).rowcount
            row = self._x(cur, "get_standby", job_id=job_id).fetchone()
        if n != 1:
            raise InvalidTransition(f"job {job_id!r} has a standby already (pid {row[3]})")
        return StandbyRecord.from_row(row)

    def get_standby(self, job_id: JobId) -> StandbyRecord | None:
        with self._tx(write=False) as cur:
            row = self._x(cur, "get_standby", job_id=job_id).fetchone()
        return None if row is None else StandbyRecord.from_row(row)

    def list_standbys(self) -> list[StandbyRecord]:
        with self._tx(write=False) as cur:
            rows = self._x(cur, "list_standbys").fetchall()
        return [StandbyRecord.from_row(r) for r in rows]

    def renew_standby(
        self, job_id: JobId, owner: Owner, lease_ttl: float, ready: bool = False
    ) -> StandbyRecord | None:
        now = self.clock.now()
        with self._tx() as cur:
            self._x(
                cur,
                "renew_standby",
                job_id=job_id,
                **owner_params(owner),
                lease_expires_at=now + lease_ttl,
                ready=1 if ready else 0,
                now=now,
            )
            row = self._x(cur, "get_standby", job_id=job_id).fetchone()
        if row is None:
            return None
        rec = StandbyRecord.from_row(row)
        return rec if rec.owner == owner else None

    def take_standby(self, job_id: JobId, attempt: AttemptNo) -> StandbyRecord | None:
        with self._tx() as cur:
            n = self._x(
                cur, "take_standby", job_id=job_id, attempt=attempt, now=self.clock.now()
            ).rowcount
            row = self._x(cur, "get_standby", job_id=job_id).fetchone() if n == 1 else None
        return None if row is None else StandbyRecord.from_row(row)

    def remove_standby(self, job_id: JobId, owner: Owner | None = None) -> bool:
        with self._tx() as cur:
            if owner is None:
                n = self._x(cur, "remove_standby", job_id=job_id).rowcount
            else:
                n = self._x(
                    cur,
                    "remove_standby_of",
                    job_id=job_id,
                    **owner_params(owner),
                ).rowcount
        return bool(n)
