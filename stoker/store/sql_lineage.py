"""Savepoint lineage in SQL (migration 0019): the restores of savepoints, inserted once per
(savepoint, uid)."""

from __future__ import annotations

from stoker.store._sqlbase import SqlBase
from stoker.store.lineage_records import SavepointRestore
from stoker.types import JobId


class LineageMixin(SqlBase):
    """Implements :class:`stoker.store.protocols.lineage.LineageStore`."""

    def record_restore(self, restore: SavepointRestore) -> tuple[SavepointRestore, bool]:
        with self._tx() as cur:
            n = self._x(cur, "insert_savepoint_restore", **restore.params()).rowcount
            row = self._x(
                cur, "get_savepoint_restore", savepoint=restore.savepoint, uid=restore.uid
            ).fetchone()
        return SavepointRestore.from_row(row), bool(n == 1)

    def restores_of_savepoint(self, savepoint: str) -> list[SavepointRestore]:
        with self._tx(write=False) as cur:
            rows = self._x(cur, "savepoint_restores_of_savepoint", savepoint=savepoint).fetchall()
        return [SavepointRestore.from_row(r) for r in rows]

    def restores_of_uid(self, uid: str) -> list[SavepointRestore]:
        with self._tx(write=False) as cur:
            rows = self._x(cur, "savepoint_restores_of_uid", uid=uid).fetchall()
        return [SavepointRestore.from_row(r) for r in rows]

    def restores_from_job(self, job_id: JobId, uid: str) -> list[SavepointRestore]:
        with self._tx(write=False) as cur:
            rows = self._x(
                cur, "savepoint_restores_from_job", from_job_id=job_id, from_uid=uid
            ).fetchall()
        return [SavepointRestore.from_row(r) for r in rows]
