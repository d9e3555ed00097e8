"""stoker.runtime.job.newstore: what a refused first run made for its SQLite store is taken
back, and nothing that existed before or that something else wrote."""

from __future__ import annotations

from pathlib import Path

from stoker.runtime.job.newstore import new_sqlite_store
from stoker.store import open_store


def test_a_store_and_the_folders_made_for_it_are_removed(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'state' / 'job' / 'store.db'}"
    made = new_sqlite_store(url)
    assert made is not None
    open_store(url).close()
    made.remove()
    assert list(tmp_path.iterdir()) == []


def test_a_folder_something_else_wrote_into_stays(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'state' / 'job' / 'store.db'}"
    made = new_sqlite_store(url)
    assert made is not None
    open_store(url).close()
    (tmp_path / "state" / "other").mkdir()
    made.remove()
    assert sorted(p.name for p in (tmp_path / "state").iterdir()) == ["other"]


def test_a_store_that_exists_or_a_server_is_never_taken(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    open_store(path).close()
    assert new_sqlite_store(f"sqlite:///{path}") is None
    assert new_sqlite_store(path) is None
    assert new_sqlite_store("postgresql://u@h/db") is None
