"""Database errors leave the store as :class:`StoreError`, never as the driver's own.

Each failure is real: a lock held by another SQLite connection, a file overwritten with
something that is not a database, a PostgreSQL session terminated by the server, a server
stopped. A unique violation that means something (an attempt number taken) becomes its domain
error instead.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg
import pytest

from stoker.clock import ManualClock
from stoker.errors import DuplicateJob, StoreError
from stoker.store import Store, open_store
from stoker.store.sqlite import SqliteStore
from stoker.types import AttemptNo
from tests.integration.store.support import CONFIG, JOB, OTHER, OWNER, SPEC, TTL, raw_execute
from tests.pg import ThrowawayPostgres


def test_sqlite_lock_held_too_long_is_a_store_error(sqlite_path: Path, clock: ManualClock) -> None:
    store = SqliteStore(sqlite_path, clock, busy_timeout=0.2)
    holder = sqlite3.connect(sqlite_path, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        with pytest.raises(StoreError, match=r"is locked: .*0\.2 s") as err:
            store.create_job(JOB, "orders", SPEC, CONFIG)
        assert isinstance(err.value.__cause__, sqlite3.OperationalError)
        holder.execute("ROLLBACK")

        # Nothing was written, and the store works again once the lock is gone.
        assert store.create_job(JOB, "orders", SPEC, CONFIG)[1] is True
    finally:
        holder.close()
        store.close()


def test_sqlite_file_overwritten_under_an_open_store_is_a_store_error(
    sqlite_path: Path, clock: ManualClock
) -> None:
    store = open_store(sqlite_path, clock)
    try:
        store.create_job(JOB, "orders", SPEC, CONFIG)
        # Everything into the main file, then that file overwritten: no longer a database.
        with sqlite3.connect(sqlite_path) as other:
            other.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        sqlite_path.write_bytes(b"not a database " * 4096)

        for _ in range(2):  # the pooled connection, then a fresh one
            with pytest.raises(StoreError, match="not a database") as err:
                store.create_job(OTHER, "other", SPEC, CONFIG)
            assert isinstance(err.value.__cause__, sqlite3.DatabaseError)
    finally:
        store.close()


def test_sqlite_store_on_a_file_that_is_not_a_database_does_not_open(
    sqlite_path: Path, clock: ManualClock
) -> None:
    sqlite_path.write_text("job_id,state\njob-1,RUNNING\n")

    with pytest.raises(StoreError, match="not a database"):
        open_store(sqlite_path, clock)
    assert sqlite_path.read_text() == "job_id,state\njob-1,RUNNING\n"


def test_postgres_session_terminated_is_a_store_error_then_reconnects(
    pg_dsn: str, clock: ManualClock
) -> None:
    store = open_store(pg_dsn, clock)
    try:
        store.create_job(JOB, "orders", SPEC, CONFIG)
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )

        with pytest.raises(StoreError, match="unavailable") as err:
            store.get_job(JOB)
        assert isinstance(err.value.__cause__, psycopg.OperationalError)
        # The dead connection left the pool: the next call opens a new one.
        assert store.get_job(JOB).name == "orders"
    finally:
        store.close()


def test_postgres_server_stopped_is_a_store_error(clock: ManualClock) -> None:
    server = ThrowawayPostgres().start()
    try:
        store = open_store(server.dsn, clock)
        store.create_job(JOB, "orders", SPEC, CONFIG)
    finally:
        server.stop()

    with pytest.raises(StoreError, match="unavailable") as err:
        store.get_job(JOB)  # on the pooled connection, whose server is gone
    assert isinstance(err.value.__cause__, psycopg.OperationalError)
    with pytest.raises(StoreError, match="cannot connect"):
        store.get_job(JOB)  # a new connection, refused
    store.close()


def test_an_attempt_number_taken_is_a_duplicate_not_a_store_error(
    store: Store, store_url: str
) -> None:
    store.create_job(JOB, "orders", SPEC, CONFIG)
    # A row for attempt 1 that the job does not know of (written around the store).
    raw_execute(
        store_url,
        "INSERT INTO attempts (job_id, attempt, state, host, pid, pid_started, "
        f"lease_expires_at, started_at) VALUES ('{JOB}', 1, 'FAILED', 'h', 1, 'b', 0, 0)",
    )

    with pytest.raises(DuplicateJob, match="attempt 1 exists already"):
        store.start_attempt(JOB, OWNER, TTL, expected_current=AttemptNo(0))
    assert store.get_job(JOB).current_attempt == 0  # rolled back
