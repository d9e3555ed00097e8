"""The store contract for the metrics totals (``counts()``): kept with the changes they count.

Run against SQLite and PostgreSQL alike (fixtures in conftest.py).
"""

from __future__ import annotations

import sqlite3

import psycopg

from stoker.store import RetentionPolicy, Store
from stoker.types import AttemptNo, ControlVersion, Epoch
from tests.integration.store.support import (
    JOB,
    OWNER_B,
    TTL,
    OpenStore,
    race,
    raw_rows,
    running_job,
)


def _commit(store: Store, epoch: int, attempt: int = 1) -> None:
    e, a = Epoch(epoch), AttemptNo(attempt)
    store.pin_epoch(JOB, e, a, ControlVersion(0))
    store.decide_epoch(JOB, e, a, rows_in=1, final=False)
    store.mark_epoch_committed(JOB, e)


def _raw_exec(url: str, *statements: str) -> None:
    if url.startswith("sqlite:///"):
        conn = sqlite3.connect(url[len("sqlite:///") :])
        try:
            for s in statements:
                conn.execute(s)
            conn.commit()
        finally:
            conn.close()
        return
    with psycopg.connect(url) as pconn:
        for s in statements:
            pconn.execute(s.encode())


def test_counts_start_at_zero(store: Store) -> None:
    assert store.counts() == {"attempts": 0, "epochs_committed": 0}


def test_counts_follow_attempts_and_commits(store: Store) -> None:
    running_job(store)
    for n in range(3):
        _commit(store, n)
    store.pin_epoch(JOB, Epoch(3), AttemptNo(1), ControlVersion(0))  # not committed
    store.start_attempt(JOB, OWNER_B, TTL, expected_current=AttemptNo(1), previous_dead=True)

    assert store.counts() == {"attempts": 2, "epochs_committed": 3}


def test_committing_an_epoch_again_counts_it_once(store: Store) -> None:
    running_job(store)
    _commit(store, 0)

    store.mark_epoch_committed(JOB, Epoch(0))  # a replay or recovery commits again
    store.mark_epoch_committed(JOB, Epoch(99))  # no such epoch

    assert store.counts()["epochs_committed"] == 1


def test_pruning_does_not_lower_the_counts(store: Store) -> None:
    running_job(store)
    for n in range(20):
        _commit(store, n)

    store.prune_epochs(JOB, RetentionPolicy(epochs=2))

    assert len(store.list_epochs(JOB)) == 2
    assert store.counts() == {"attempts": 1, "epochs_committed": 20}


def test_concurrent_commits_are_all_counted(store: Store, open_new: OpenStore) -> None:
    running_job(store)
    for n in range(8):
        store.pin_epoch(JOB, Epoch(n), AttemptNo(1), ControlVersion(0))
        store.decide_epoch(JOB, Epoch(n), AttemptNo(1), rows_in=1, final=False)
    stores = [open_new() for _ in range(8)]

    results = race(8, lambda i: stores[i].mark_epoch_committed(JOB, Epoch(i)))

    assert [r for r in results if isinstance(r, BaseException)] == []
    assert store.counts()["epochs_committed"] == 8


def test_the_migration_seeds_the_counts_from_existing_rows(
    store: Store, open_new: OpenStore, store_url: str
) -> None:
    running_job(store)
    for n in range(4):
        _commit(store, n)
    store.close()
    # The store as version 3 left it: no counters table.
    _raw_exec(
        store_url,
        "DROP TABLE counters",
        "ALTER TABLE jobs DROP COLUMN judged_by",  # migration 25, re-applied with 4
        "ALTER TABLE clusters DROP COLUMN host",  # migration 24, likewise
        "ALTER TABLE attempts DROP COLUMN cause",  # migration 23, likewise
        "ALTER TABLE epochs DROP COLUMN progress",  # migration 22, likewise
        "DROP INDEX jobs_unsettled",  # migration 21, likewise
        *(f"ALTER TABLE schema_migrations DROP COLUMN {c}" for c in ("kind", "stoker_version")),
        "DROP TABLE savepoint_restores",  # migration 19, re-applied with 4
        *(f"ALTER TABLE attempts DROP COLUMN {c}" for c in ("renewals", "lease_ttl")),  # 18
        *(f"ALTER TABLE leader_lease DROP COLUMN {c}" for c in ("renewals", "ttl")),  # likewise
        "DROP TABLE upgrades",  # migration 17, re-applied with 4
        "DROP TABLE standbys",  # migrations 16 and 17, likewise
        "DROP TABLE operations",  # migration 15, likewise
        "ALTER TABLE jobs DROP COLUMN settled",  # migration 14, likewise
        "DROP INDEX jobs_by_created",  # migration 13, likewise
        "ALTER TABLE epochs DROP COLUMN work_ms",  # migration 12, likewise
        "DROP INDEX jobs_by_state",  # migration 11, likewise
        "DROP TABLE recovery_holds",  # migration 10, likewise
        "DROP TABLE managers",  # migration 9, likewise
        "DROP TABLE rescales",  # migration 8, likewise
        "DROP INDEX epochs_by_commit",
        *(f"ALTER TABLE epochs DROP COLUMN {c}" for c in ("duration_ms", "backlog")),
        *(f"ALTER TABLE epochs DROP COLUMN {c}" for c in ("executors", "cores")),
        *(f"ALTER TABLE jobs DROP COLUMN {c}" for c in ("scaling", "executor_target")),
        "ALTER TABLE jobs DROP COLUMN resources",
        "ALTER TABLE jobs DROP COLUMN sinks",  # migration 5, likewise
        "DROP TABLE control_events",  # migration 6, likewise
        "ALTER TABLE control_versions DROP COLUMN state",
        "DROP TABLE clusters",  # migration 7, likewise
        "DROP INDEX jobs_by_app",
        "ALTER TABLE jobs DROP COLUMN app_id",
        "ALTER TABLE jobs DROP COLUMN kind",
        "ALTER TABLE attempts DROP COLUMN app_attempt",
        "DELETE FROM schema_migrations WHERE version >= 4",
    )

    reopened = open_new()

    assert reopened.counts() == {"attempts": 1, "epochs_committed": 4}
    assert raw_rows(store_url, "SELECT name, value FROM counters ORDER BY name") == [
        ("attempts", 1),
        ("epochs_committed", 4),
        ("rescales", 0),  # the rescale ids (migration 8)
    ]
