"""Savepoint lineage: which job each savepoint was restored into, under which uid, and when."""

from __future__ import annotations

from typing import Protocol

from stoker.store.lineage_records import SavepointRestore
from stoker.types import JobId


class LineageStore(Protocol):
    """The restores of savepoints (migration 0019), kept in the savepoint's job's store and in
    the restored job's own. One uid goes on from a savepoint once."""

    def record_restore(self, restore: SavepointRestore) -> tuple[SavepointRestore, bool]:
        """Insert ``restore`` unless the savepoint has a restore under its uid already: the
        stored row and whether this call inserted it (False: the row that was there, perhaps
        another job's)."""
        ...

    def restores_of_savepoint(self, savepoint: str) -> list[SavepointRestore]:
        """Every restore of the savepoint keyed ``savepoint``, oldest first."""
        ...

    def restores_of_uid(self, uid: str) -> list[SavepointRestore]:
        """Every restore that made a job of ``uid``, oldest first."""
        ...

    def restores_from_job(self, job_id: JobId, uid: str) -> list[SavepointRestore]:
        """Every restore of a savepoint of job ``job_id`` (its record of ``uid``), oldest
        first."""
        ...
