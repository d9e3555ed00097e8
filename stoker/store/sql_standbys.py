"""Standby drivers in SQL (migrations 0016, 0017): per job and role (its own standby, an
upgrade's), WARMING -> READY -> TAKEN (``STANDBYS``). The manager records a standby when it
starts one; the standby renews its own lease (and says when it is READY); the leader hands it
an attempt (TAKEN) and removes the row once that attempt runs, the standby is gone, or the job
ended. Upgrades (migration 0017): PENDING -> SWAPPED -> CONFIRMED | ROLLED_BACK, or REFUSED;
the moves that change the job's code change its spec in the same transaction."""

from __future__ import annotations

import json
from typing import Any

from stoker.errors import InvalidTransition, JobNotFound
from stoker.store._sqlbase import SqlBase, owner_params
from stoker.store.fleet_records import StandbyRecord, UpgradeRecord
from stoker.store.records import Owner
from stoker.types import AttemptNo, JobId, StandbyRole, UpgradeState

ROLE = StandbyRole.STANDBY


class StandbysMixin(SqlBase):
    """Implements :class:`stoker.store.protocols.fleet.StandbyStore` and ``UpgradeStore``."""

    def add_standby(
        self,
        job_id: JobId,
        owner: Owner,
        log_path: str,
        lease_ttl: float,
        role: StandbyRole = ROLE,
        spec_key: str = "",
    ) -> StandbyRecord:
        now = self.clock.now()
        with self._tx() as cur:
            n = self._x(
                cur,
                "insert_standby",
                job_id=job_id,
                role=str(role),
                **owner_params(owner),
                log_path=log_path,
                now=now,
                lease_expires_at=now + lease_ttl,
                spec_key=spec_key,
            ).rowcount
            row = self._x(cur, "get_standby", job_id=job_id, role=str(role)).fetchone()
        if n != 1:
            what = "a standby" if role == StandbyRole.STANDBY else f"an {role} standby"
            raise InvalidTransition(f"job {job_id!r} has {what} already (pid {row[3]})")
        return StandbyRecord.from_row(row)

    def get_standby(self, job_id: JobId, role: StandbyRole = ROLE) -> StandbyRecord | None:
        with self._tx(write=False) as cur:
            row = self._x(cur, "get_standby", job_id=job_id, role=str(role)).fetchone()
        return None if row is None else StandbyRecord.from_row(row)

    def list_standbys(self) -> list[StandbyRecord]:
        with self._tx(write=False) as cur:
            rows = self._x(cur, "list_standbys").fetchall()
        return [StandbyRecord.from_row(r) for r in rows]

    def renew_standby(
        self,
        job_id: JobId,
        owner: Owner,
        lease_ttl: float,
        ready: bool = False,
        role: StandbyRole = ROLE,
    ) -> StandbyRecord | None:
        now = self.clock.now()
        with self._tx() as cur:
            self._x(
                cur,
                "renew_standby",
                job_id=job_id,
                role=str(role),
                **owner_params(owner),
                lease_expires_at=now + lease_ttl,
                ready=1 if ready else 0,
                now=now,
            )
            row = self._x(cur, "get_standby", job_id=job_id, role=str(role)).fetchone()
        if row is None:
            return None
        rec = StandbyRecord.from_row(row)
        return rec if rec.owner == owner else None

    def take_standby(
        self, job_id: JobId, attempt: AttemptNo, role: StandbyRole = ROLE
    ) -> StandbyRecord | None:
        with self._tx() as cur:
            n = self._x(
                cur,
                "take_standby",
                job_id=job_id,
                role=str(role),
                attempt=attempt,
                now=self.clock.now(),
            ).rowcount
            row = (
                self._x(cur, "get_standby", job_id=job_id, role=str(role)).fetchone()
                if n == 1
                else None
            )
        return None if row is None else StandbyRecord.from_row(row)

    def remove_standby(
        self, job_id: JobId, owner: Owner | None = None, role: StandbyRole = ROLE
    ) -> bool:
        with self._tx() as cur:
            if owner is None:
                n = self._x(cur, "remove_standby", job_id=job_id, role=str(role)).rowcount
            else:
                n = self._x(
                    cur,
                    "remove_standby_of",
                    job_id=job_id,
                    role=str(role),
                    **owner_params(owner),
                ).rowcount
        return bool(n)

    # upgrades ------------------------------------------------------------------------------
    def add_upgrade(
        self,
        job_id: JobId,
        upgrade_id: str,
        old_spec: dict[str, Any],
        new_spec: dict[str, Any],
        watch_epochs: int,
        watch_seconds: float,
        checks: dict[str, Any],
    ) -> UpgradeRecord:
        with self._tx() as cur:
            self._locked_job(cur, job_id)  # JobNotFound; and upgrades of one job in turn
            live = self._x(cur, "live_upgrade", job_id=job_id).fetchone()
            if live is not None:
                raise InvalidTransition(
                    f"job {job_id!r} has an upgrade in progress ({live[0]}, {live[2]})"
                )
            self._x(
                cur,
                "insert_upgrade",
                upgrade_id=upgrade_id,
                job_id=job_id,
                old_spec=_dump(old_spec),
                new_spec=_dump(new_spec),
                watch_epochs=int(watch_epochs),
                watch_seconds=float(watch_seconds),
                checks=_dump(checks),
                now=self.clock.now(),
            )
            row = self._x(cur, "get_upgrade", upgrade_id=upgrade_id).fetchone()
        return UpgradeRecord.from_row(row)

    def get_upgrade(self, upgrade_id: str) -> UpgradeRecord | None:
        with self._tx(write=False) as cur:
            row = self._x(cur, "get_upgrade", upgrade_id=upgrade_id).fetchone()
        return None if row is None else UpgradeRecord.from_row(row)

    def live_upgrade(self, job_id: JobId) -> UpgradeRecord | None:
        with self._tx(write=False) as cur:
            row = self._x(cur, "live_upgrade", job_id=job_id).fetchone()
        return None if row is None else UpgradeRecord.from_row(row)

    def live_upgrades(self) -> list[UpgradeRecord]:
        with self._tx(write=False) as cur:
            rows = self._x(cur, "live_upgrades").fetchall()
        return [UpgradeRecord.from_row(r) for r in rows]

    def list_upgrades(self, job_id: JobId, limit: int = 100) -> list[UpgradeRecord]:
        with self._tx(write=False) as cur:
            rows = self._x(cur, "list_upgrades", job_id=job_id, limit=int(limit)).fetchall()
        return [UpgradeRecord.from_row(r) for r in rows]

    def upgrade_stopping(self, upgrade_id: str, attempt: AttemptNo) -> UpgradeRecord | None:
        with self._tx() as cur:
            n = self._x(
                cur,
                "upgrade_stopping",
                upgrade_id=upgrade_id,
                attempt=attempt,
                now=self.clock.now(),
            ).rowcount
            row = self._x(cur, "get_upgrade", upgrade_id=upgrade_id).fetchone() if n else None
        return None if row is None else UpgradeRecord.from_row(row)

    def swap_upgrade(self, upgrade_id: str) -> UpgradeRecord | None:
        """PENDING -> SWAPPED, the job's spec becoming the new one in the same transaction."""
        now = self.clock.now()
        with self._tx() as cur:
            row = self._x(cur, "get_upgrade", upgrade_id=upgrade_id).fetchone()
            if row is None:
                return None
            up = UpgradeRecord.from_row(row)
            self._locked_job(cur, up.job_id)
            if not self._x(cur, "upgrade_swapped", upgrade_id=upgrade_id, now=now).rowcount:
                return None
            self._x(cur, "set_job_spec", job_id=up.job_id, spec=_dump(up.new_spec), now=now)
            row = self._x(cur, "get_upgrade", upgrade_id=upgrade_id).fetchone()
        return UpgradeRecord.from_row(row)

    def upgrade_swap_attempt(self, upgrade_id: str, attempt: AttemptNo) -> bool:
        with self._tx() as cur:
            n = self._x(
                cur, "upgrade_swap_attempt", upgrade_id=upgrade_id, attempt=attempt
            ).rowcount
        return bool(n)

    def end_upgrade(
        self, upgrade_id: str, state: UpgradeState, detail: str | None = None
    ) -> UpgradeRecord | None:
        """SWAPPED -> CONFIRMED; SWAPPED -> ROLLED_BACK with the job's spec back to the old
        one in the same transaction; PENDING -> REFUSED. None when the upgrade is elsewhere."""
        source = {
            UpgradeState.CONFIRMED: UpgradeState.SWAPPED,
            UpgradeState.ROLLED_BACK: UpgradeState.SWAPPED,
            UpgradeState.REFUSED: UpgradeState.PENDING,
        }.get(state)
        if source is None:
            raise InvalidTransition(f"an upgrade does not end {state}")
        now = self.clock.now()
        with self._tx() as cur:
            row = self._x(cur, "get_upgrade", upgrade_id=upgrade_id).fetchone()
            if row is None:
                return None
            up = UpgradeRecord.from_row(row)
            if state == UpgradeState.ROLLED_BACK:
                try:
                    self._locked_job(cur, up.job_id)
                except JobNotFound:
                    return None
            n = self._x(
                cur,
                "upgrade_ended",
                upgrade_id=upgrade_id,
                state=str(state),
                from_state=str(source),
                detail=detail,
                now=now,
            ).rowcount
            if not n:
                return None
            if state == UpgradeState.ROLLED_BACK:
                self._x(cur, "set_job_spec", job_id=up.job_id, spec=_dump(up.old_spec), now=now)
            row = self._x(cur, "get_upgrade", upgrade_id=upgrade_id).fetchone()
        return UpgradeRecord.from_row(row)


def _dump(value: Any) -> str:
    return json.dumps(value, sort_keys=True)
