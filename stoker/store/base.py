"""The store protocol: every piece of durable metadata goes through it.

It is the union of one protocol per concept (``protocols/``). Both backends (SQLite,
PostgreSQL) implement it with the same SQL (``sql/queries.sql``) and pass the same contract
tests (``tests/integration/store/``).
"""

from __future__ import annotations

from typing import Protocol

from stoker.clock import Clock
from stoker.store.protocols.fleet import (
    ClusterStore,
    LeaderStore,
    OperationStore,
    ScalingStore,
    StandbyStore,
    UpgradeStore,
)
from stoker.store.protocols.jobs import ControlStore, JobStore
from stoker.store.protocols.lineage import LineageStore
from stoker.store.protocols.runs import (
    AttemptStore,
    EpochStore,
    RecoveryHoldStore,
    RetentionStore,
    TxnStore,
)
from stoker.store.records import WriteLock


class Store(
    JobStore,
    AttemptStore,
    RecoveryHoldStore,
    EpochStore,
    TxnStore,
    ControlStore,
    LeaderStore,
    RetentionStore,
    ClusterStore,
    ScalingStore,
    OperationStore,
    StandbyStore,
    UpgradeStore,
    LineageStore,
    Protocol,
):
    """Durable metadata: jobs and applications, attempts, control versions, epochs, sink
    transactions, clusters, scaling, operations, standby drivers, upgrades, and the restores
    of savepoints (their lineage)."""

    url: str
    clock: Clock

    def close(self) -> None: ...

    def write_lock(self) -> WriteLock | None:
        """Who holds the store's write lock now, as this host's kernel tells: a process
        frozen inside a write transaction blocks every writer (SQLite on Linux). None when
        nobody does, or when it cannot be told (PostgreSQL: its server ends such sessions)."""
        ...
