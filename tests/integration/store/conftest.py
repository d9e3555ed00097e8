"""Fixtures of the store contract: every test runs on SQLite and on PostgreSQL.

Concurrency tests give every thread a store (a connection) of its own and line the threads up
on a barrier so that they really race.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from stoker.clock import ManualClock
from stoker.store import Store, open_store
from tests.integration.store.support import T0, OpenStore


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_url(backend: str, request: pytest.FixtureRequest) -> str:
    if backend == "sqlite":
        return f"sqlite:///{request.getfixturevalue('sqlite_path')}"
    return str(request.getfixturevalue("pg_dsn"))


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def open_new(store_url: str, clock: ManualClock) -> Iterator[OpenStore]:
    """Opens another store (own connection) on the test's database; all closed at the end."""
    opened: list[Store] = []
    lock = threading.Lock()

    def _open() -> Store:
        s = open_store(store_url, clock)
        with lock:
            opened.append(s)
        return s

    yield _open
    for s in opened:
        s.close()


@pytest.fixture
def store(open_new: OpenStore) -> Store:
    return open_new()
