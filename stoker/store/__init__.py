"""The store: durable metadata of jobs, attempts, epochs and sink transactions."""

from __future__ import annotations

from pathlib import Path

from stoker.clock import Clock
from stoker.errors import InvalidInput
from stoker.store._retention import PruneResult, RetentionPolicy
from stoker.store.base import Store
from stoker.store.fleet_records import (
    ClusterProcess,
    ClusterRecord,
    LeaderLease,
    ManagerRecord,
    RescaleRecord,
    StandbyRecord,
    UpgradeRecord,
)
from stoker.store.lineage_records import SavepointRestore
from stoker.store.records import (
    AttemptRecord,
    ControlEvent,
    ControlSnapshot,
    EpochRecord,
    FleetSnapshot,
    JobRecord,
    NewJob,
    Owner,
    RecoveryHold,
    SinkTxn,
    WriteLock,
)

__all__ = [
    "AttemptRecord",
    "ClusterProcess",
    "ClusterRecord",
    "ControlEvent",
    "ControlSnapshot",
    "EpochRecord",
    "FleetSnapshot",
    "JobRecord",
    "LeaderLease",
    "ManagerRecord",
    "NewJob",
    "Owner",
    "PruneResult",
    "RecoveryHold",
    "RescaleRecord",
    "RetentionPolicy",
    "SavepointRestore",
    "SinkTxn",
    "StandbyRecord",
    "Store",
    "UpgradeRecord",
    "WriteLock",
    "open_store",
]


def open_store(url: str | Path, clock: Clock | None = None) -> Store:
    """Open a store from a URL: ``sqlite:///path``, a plain file path, or ``postgresql://...``."""
    text = str(url)
    if text.startswith(("postgresql://", "postgres://")):
        from stoker.store.postgres import PostgresStore

        return PostgresStore(text, clock)
    if text.startswith("sqlite:///"):
        text = text[len("sqlite:///") :]
        if not text.startswith("/"):
            text = text  # relative path after sqlite:///
    elif "://" in text:
        raise InvalidInput(
            "store", f"unsupported store URL {text!r}: use sqlite:///PATH or postgresql://..."
        )
    from stoker.store.sqlite import SqliteStore

    return SqliteStore(text, clock)
