"""Fixtures shared by the whole suite. Keep each one small; group them by what they provide."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.pg import ThrowawayPostgres

# PostgreSQL ------------------------------------------------------------------------------------
_db_numbers = itertools.count(1)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[ThrowawayPostgres]:
    """One throwaway PostgreSQL server for the whole session, started on first use."""
    with ThrowawayPostgres() as server:
        yield server


@pytest.fixture
def pg_dsn(pg_server: ThrowawayPostgres) -> Iterator[str]:
    """A fresh, empty database of its own for one test; dropped (connections and all) after."""
    name = f"t{os.getpid()}_{next(_db_numbers)}"
    yield pg_server.create_database(name)
    pg_server.drop_database(name)


# SQLite ----------------------------------------------------------------------------------------
@pytest.fixture
def sqlite_path(tmp_path: Path) -> Path:
    """Where a test's SQLite store file goes (not created yet)."""
    return tmp_path / "store.db"
