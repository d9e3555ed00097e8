"""Fixtures shared by the unit tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from stoker.store import Store, open_store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """An empty SQLite store in the test's folder, closed after the test. A module that needs
    jobs in it overrides this fixture with one that asks for it and adds them."""
    st = open_store(tmp_path / "store.db")
    try:
        yield st
    finally:
        st.close()
