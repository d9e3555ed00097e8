"""The store contract for opening and migrating a store.

Run against SQLite and PostgreSQL alike (fixtures in conftest.py). Time is a
:class:`~stoker.clock.ManualClock`; leases lapse because the test moves the clock.
"""

from __future__ import annotations

from pathlib import Path

from stoker.clock import ManualClock
from stoker.store import Store, _sql, open_store
from stoker.types import job_id
from tests.integration.store.support import CONFIG, JOB, SPEC, T0, OpenStore, race, raw_rows


def test_reopening_the_store_migrates_nothing_twice(
    store: Store, open_new: OpenStore, store_url: str
) -> None:
    created, _ = store.create_job(JOB, "orders", SPEC, CONFIG)
    second = open_new()  # while the first is still open
    store.close()
    third = open_new()

    assert second.get_job(JOB) == created
    assert third.get_job(JOB) == created
    numbers = [n for n, _ in _sql.migrations()]
    assert numbers == list(range(1, len(numbers) + 1))
    rows = raw_rows(store_url, "SELECT version, applied_at FROM schema_migrations ORDER BY 1")
    assert rows == [(n, T0) for n in numbers]


def test_concurrent_first_opens_migrate_once(open_new: OpenStore, store_url: str) -> None:
    results = race(8, lambda i: open_new())

    assert [r for r in results if isinstance(r, BaseException)] == []
    numbers = [n for n, _ in _sql.migrations()]
    rows = raw_rows(store_url, "SELECT version FROM schema_migrations ORDER BY 1")
    assert rows == [(n,) for n in numbers]


def test_sqlite_files_opened_by_8_at_once_open_every_time(tmp_path: Path) -> None:
    """Switching a new file to WAL fails at once with "database is locked" (no busy handler)
    while another connection holds a lock; one race in ten hit it before the retry."""
    for n in range(50):
        url = f"sqlite:///{tmp_path / f'race-{n}.db'}"
        results = race(8, lambda i, url=url: open_store(url, ManualClock(T0)))
        assert [r for r in results if isinstance(r, BaseException)] == []
        for r in results:
            r.close()  # type: ignore[union-attr]


def test_open_store_accepts_a_plain_path_for_sqlite(sqlite_path: Path) -> None:
    s = open_store(sqlite_path, ManualClock(T0))
    try:
        s.create_job(JOB, "orders", SPEC, CONFIG)
        assert s.url == f"sqlite:///{sqlite_path}"
    finally:
        s.close()
    again = open_store(f"sqlite:///{sqlite_path}", ManualClock(T0))
    try:
        assert again.get_job(JOB).name == "orders"
    finally:
        again.close()


def test_a_job_made_before_uids_gets_one_that_stays(tmp_path: Path) -> None:
    """A store written by the version before migration 3: its jobs get a stable uid, so their
    output folders are still recognised as theirs on the next run (not refused as another's)."""
    import sqlite3

    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TABLE schema_migrations (version BIGINT PRIMARY KEY, applied_at DOUBLE PRECISION)"
    )
    for number, script in _sql.migrations():
        if number > 2:
            break
        for statement in _sql.split_statements(script):
            conn.execute(statement)
        conn.execute("INSERT INTO schema_migrations VALUES (?, 0)", (number,))
    conn.execute(
        "INSERT INTO jobs (job_id, name, state, spec, created_at, updated_at) "
        "VALUES ('old-job', 'old', 'FINISHED', '{}', 123.5, 123.5)"
    )
    conn.commit()
    conn.close()

    first = open_store(path, ManualClock(T0))
    uid = first.get_job(job_id("old-job")).uid
    first.close()
    again = open_store(path, ManualClock(T0))

    assert uid.startswith("legacy:old-job:")
    assert again.get_job(job_id("old-job")).uid == uid
    again.close()
