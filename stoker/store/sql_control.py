"""Config and control versions of a job in SQL."""

from __future__ import annotations

import json
from typing import Any

from stoker.errors import JobNotFound
from stoker.store._sqlbase import SqlBase
from stoker.store.records import ControlSnapshot
from stoker.types import ControlVersion, JobId


class ControlMixin(SqlBase):
    """Implements :class:`stoker.store.protocols.ControlStore`."""

    def control_snapshot(
        self, job_id: JobId, version: ControlVersion | None = None
    ) -> ControlSnapshot:
        with self._tx(write=False) as cur:
            if version is None:
                row = self._x(cur, "get_job", job_id=job_id).fetchone()
                if row is None:
                    raise JobNotFound(job_id)
                version = ControlVersion(int(row[5]))
            crow = self._x(cur, "get_control_version", job_id=job_id, version=version).fetchone()
        if crow is None:
            raise JobNotFound(f"{job_id} (control version {version})")
        return ControlSnapshot(ControlVersion(int(crow[0])), json.loads(crow[1]))

    def declare_defaults(self, job_id: JobId, defaults: dict[str, Any]) -> ControlSnapshot:
        now = self.clock.now()
        with self._tx() as cur:
            version = int(self._locked_job(cur, job_id).control_version)
            crow = self._x(cur, "get_control_version", job_id=job_id, version=version).fetchone()
            current = json.loads(crow[1])
            if current == defaults:
                return ControlSnapshot(ControlVersion(version), current)
            new = version + 1
            self._x(
                cur,
                "insert_control_version",
                job_id=job_id,
                version=new,
                config=json.dumps(defaults, sort_keys=True),
                reason="declared defaults changed",
                now=now,
            )
            self._x(cur, "set_control_version", job_id=job_id, version=new, now=now)
        return ControlSnapshot(ControlVersion(new), dict(defaults))
