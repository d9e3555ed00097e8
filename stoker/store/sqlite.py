"""SQLite backend: the embedded default, one file per job state folder, WAL mode."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

from stoker.clock import Clock
from stoker.errors import StoreError
from stoker.store._sqlstore import SqlStore

_BUSY_TIMEOUT = 30.0  # seconds a statement waits for another connection's lock


def _enable_wal(conn: sqlite3.Connection, timeout: float) -> None:
    """Switch the file to WAL mode (a no-op once it is).

    The switch needs an exclusive lock, and SQLite reports "database is locked" at once instead
    of calling the busy handler when another connection holds one, which happens when several
    processes open a new store together (two managers starting): seen in 10% of 8-way races.
    So it is retried here, for as long as any statement would wait.
    """
    deadline = time.monotonic() + timeout
    delay = 0.001
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


class SqliteStore(SqlStore):
    """Store in an SQLite file. Several processes may share it (WAL, busy timeout)."""

    dialect = "sqlite"

    def __init__(self, path: str | Path, clock: Clock | None = None) -> None:
        self.path = Path(path)
        super().__init__(f"sqlite:///{self.path}", clock)

    def _connect(self) -> Any:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(
                str(self.path),
                timeout=_BUSY_TIMEOUT,
                isolation_level=None,
                check_same_thread=False,
            )
            _enable_wal(conn, _BUSY_TIMEOUT)
            # NORMAL in WAL mode: a commit survives a process crash (what we guard against);
            # only an OS crash may lose the newest transactions.
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
        except sqlite3.Error as e:
            raise StoreError(f"cannot open SQLite store at {self.path}: {e}") from e
        return conn

    def _begin(self, cur: Any, write: bool) -> None:
        # IMMEDIATE takes the write lock up front, so a read-then-write transaction cannot
        # deadlock against another writer; readers in WAL mode never block.
        cur.execute("BEGIN IMMEDIATE" if write else "BEGIN")

    def _schema_version(self, cur: Any) -> int:
        row = cur.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations").fetchone()
        return int(row[0])
