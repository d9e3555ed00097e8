"""Which stoker may use a store (issue 39 item 5): its schema version against the code's.

Run against SQLite and PostgreSQL alike. A "newer stoker" is the real store with one more
migration of the test's own (``_future``): the same migration machinery, a migration this
checkout does not ship. Rows of a newer stoker's migrations are written as that stoker writes
them (version, time, kind, its version).
"""

from __future__ import annotations

import re
from typing import Any

import pytest

import stoker
from stoker.clock import ManualClock
from stoker.errors import MigrationRefused, StoreTooNew, exit_code
from stoker.store import Store, _schema, _sql, open_store
from stoker.store.postgres import PostgresStore
from stoker.store.sqlite import SqliteStore
from tests.integration.store.support import CONFIG, JOB, SPEC, T0, OpenStore, raw_execute, raw_rows

NEWEST = _sql.migrations()[-1][0]
FUTURE = NEWEST + 1


def _future(url: str, clock: ManualClock, kind: str) -> Store:
    """The store as a newer stoker opens it: one more migration, of ``kind``."""
    script = f"-- kind: {kind}\nCREATE TABLE future_{kind} (a BIGINT);\n"
    base: Any = PostgresStore if url.startswith("postgresql") else SqliteStore

    class Newer(base):
        def _migrations(self) -> list[tuple[int, str]]:
            return [*super()._migrations(), (FUTURE, script)]

    target = url if base is PostgresStore else url[len("sqlite:///") :]
    return Newer(target, clock)


def _versions(url: str) -> list[tuple[Any, ...]]:
    return raw_rows(url, "SELECT version, kind, stoker_version FROM schema_migrations ORDER BY 1")


def test_every_migration_from_0020_says_its_kind() -> None:
    kinds = {n: _schema.kind_of(n, s) for n, s in _sql.migrations()}
    assert all(kinds[n] in _schema.KINDS for n in kinds if n >= _schema.VERSIONED_FROM)
    assert kinds[_schema.VERSIONED_FROM] == "expand"  # the stoker before it keeps working
    with pytest.raises(ValueError, match="migration 0021 has no '-- kind"):
        _schema.kind_of(21, "CREATE TABLE t (a BIGINT);")
    with pytest.raises(ValueError, match="kind 'shrink' is not one of expand, contract"):
        _schema.kind_of(21, "-- kind: shrink\nCREATE TABLE t (a BIGINT);")


def test_each_migration_records_its_kind_and_the_stoker_that_applied_it(
    store: Store, store_url: str
) -> None:
    rows = _versions(store_url)
    assert [r[0] for r in rows] == list(range(1, NEWEST + 1))
    assert all(r[2] == stoker.__version__ for r in rows)  # this checkout made the store
    assert rows[_schema.VERSIONED_FROM - 1][1] == "expand"
    assert all(r[1] is None for r in rows[: _schema.VERSIONED_FROM - 1])


def test_a_store_with_a_contract_migration_this_stoker_lacks_is_refused_naming_both_versions(
    store: Store, store_url: str, clock: ManualClock, open_new: OpenStore
) -> None:
    store.create_job(JOB, "orders", SPEC, CONFIG)
    newer = _future(store_url, clock, "contract")
    newer.close()
    raw_execute(
        store_url, f"UPDATE schema_migrations SET stoker_version = '9.1.0' WHERE version = {FUTURE}"
    )
    before = _versions(store_url)

    for _ in range(2):  # the same answer every time: not an outage that passes
        with pytest.raises(StoreTooNew) as e:
            open_new()
        text = str(e.value)
        assert f"schema version {FUTURE}" in text
        assert f"this stoker ({stoker.__version__}, schema {NEWEST})" in text
        assert f"migration {FUTURE} (contract, applied by stoker 9.1.0" in text
        assert "Run stoker 9.1.0 or later against this store; nothing was changed" in text
        assert "unavailable" not in text and "retry" not in text
        assert (e.value.store_version, e.value.known, e.value.written_by) == (
            FUTURE,
            NEWEST,
            "9.1.0",
        )
        assert exit_code(e.value) == 2

    assert _versions(store_url) == before
    assert store.get_job(JOB).name == "orders"  # a store opened before goes on as it was


def test_a_contract_row_without_a_recorded_version_says_so(store: Store, store_url: str) -> None:
    raw_execute(
        store_url,
        "INSERT INTO schema_migrations (version, applied_at, kind) "
        f"VALUES ({FUTURE + 5}, {T0}, NULL)",
    )
    with pytest.raises(
        StoreTooNew,
        match=re.escape(
            f"migration {FUTURE + 5} (kind not recorded, applied by a stoker that did not "
            "record its version"
        ),
    ):
        open_store(store_url, ManualClock(T0))


def test_a_store_ahead_by_expand_migrations_only_is_used_as_it_is(
    store: Store, store_url: str, clock: ManualClock, open_new: OpenStore
) -> None:
    _future(store_url, clock, "expand").close()
    older = open_new()  # this checkout, one migration behind the store

    created, _ = older.create_job(JOB, "orders", SPEC, CONFIG)
    assert older.get_job(JOB) == created
    assert [r[:2] for r in _versions(store_url)[-2:]] == [(NEWEST, "expand"), (FUTURE, "expand")]


def test_a_contract_migration_waits_until_no_older_manager_runs(
    store: Store, store_url: str, clock: ManualClock
) -> None:
    store.heartbeat_manager("manager-old", "http://10.0.0.1:8080")
    lease = store.acquire_leadership("manager-old", "http://10.0.0.1:8080", ttl=10.0)
    assert lease is not None
    store.heartbeat_manager("manager-standby", "http://10.0.0.2:8080")

    with pytest.raises(MigrationRefused) as e:
        _future(store_url, clock, "contract")
    text = str(e.value)
    assert f"must apply migration {FUTURE} (contract" in text
    assert (
        f"the leader manager-old at http://10.0.0.1:8080 (stoker {stoker.__version__}, "
        f"schema {NEWEST})" in text
    )
    assert "a standby manager-standby at http://10.0.0.2:8080" in text
    assert "stop those managers (SIGTERM; the drivers they started keep running)" in text
    assert exit_code(e.value) == 2
    assert max(r[0] for r in _versions(store_url)) == NEWEST  # nothing applied
    assert raw_rows(store_url, "SELECT COUNT(*) FROM jobs") == [(0,)]

    # The operator stops them: the leader resigns, both rows go.
    store.resign_leadership("manager-old", lease.token)
    store.forget_manager("manager-old")
    store.forget_manager("manager-standby")
    newer = _future(store_url, clock, "contract")
    assert max(r[0] for r in _versions(store_url)) == FUTURE
    newer.heartbeat_manager("manager-new", "http://10.0.0.3:8080")
    rows = raw_rows(store_url, "SELECT stoker_version, schema_version FROM managers")
    assert rows == [(stoker.__version__, FUTURE)]
    newer.close()
    with pytest.raises(StoreTooNew):  # and the older stoker no longer opens it
        open_store(store_url, clock)


def test_an_older_leader_that_records_no_version_blocks_a_contract_migration(
    store: Store, store_url: str, clock: ManualClock
) -> None:
    """A stoker from before 0020 writes its heartbeat without versions; its lapsed lease (a
    killed manager) blocks nothing once a TTL has passed beyond it."""
    raw_execute(
        store_url,
        "INSERT INTO managers (holder, address, started_at, seen_at) "
        f"VALUES ('manager-0', 'http://old:1', {T0}, {T0})",
    )
    assert store.acquire_leadership("manager-0", "http://old:1", ttl=10.0) is not None

    with pytest.raises(
        MigrationRefused,
        match=re.escape(
            "the leader manager-0 at http://old:1 (a stoker from before schema 20, which records "
            "no version)"
        ),
    ):
        _future(store_url, clock, "contract")

    clock.advance(35.0)  # lapsed a TTL ago, unseen for 3 TTLs: the manager is gone
    _future(store_url, clock, "contract").close()
    assert max(r[0] for r in _versions(store_url)) == FUTURE


def test_an_expand_migration_is_applied_under_an_older_leader(
    store: Store, store_url: str, clock: ManualClock
) -> None:
    raw_execute(
        store_url,
        "INSERT INTO managers (holder, address, started_at, seen_at) "
        f"VALUES ('manager-0', 'http://old:1', {T0}, {T0})",
    )
    assert store.acquire_leadership("manager-0", "http://old:1", ttl=10.0) is not None

    _future(store_url, clock, "expand").close()

    assert _versions(store_url)[-1] == (FUTURE, "expand", stoker.__version__)
    assert store.get_leader() is not None  # the older leader leads on
