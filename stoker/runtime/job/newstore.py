"""An SQLite store a run is about to make, and how to take it back.

``stoker run`` of a pipeline Spark cannot analyse is refused before its job is recorded, yet
the store had been opened (made, on a first run) for the sources' context: the state folder
was left with an empty ``store.db`` (a newcomer walk found it). Bad input changes nothing: what
the run made for a store that ends up holding nothing is removed again.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

_SIDE_FILES = ("", "-wal", "-shm", "-journal")


@dataclass(frozen=True)
class NewStore:
    """A store file that did not exist, and the folders above it that did not either."""

    path: Path
    folders: tuple[Path, ...]  # innermost first

    def remove(self) -> None:
        """The store's files, then each folder made for it that is empty; nothing else."""
        for suffix in _SIDE_FILES:
            with contextlib.suppress(FileNotFoundError):
                Path(f"{self.path}{suffix}").unlink()
        for folder in self.folders:
            try:
                folder.rmdir()  # only when empty: a folder something else wrote into stays
            except OSError:
                return


def new_sqlite_store(store_url: str | Path) -> NewStore | None:
    """The store at ``store_url`` if it is an SQLite file not made yet; None otherwise (it
    exists, or it is a PostgreSQL store: a server's, never made by a run)."""
    text = str(store_url)
    if text.startswith(("postgresql://", "postgres://")):
        return None
    path = Path(text.removeprefix("sqlite:///")).absolute()
    if path.exists():
        return None
    folders = []
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        folders.append(parent)
        parent = parent.parent
    return NewStore(path, tuple(folders))
