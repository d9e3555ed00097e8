"""SQLite backend: the embedded default, one file per job state folder, WAL mode."""

from __future__ import annotations

import re
import sqlite3
import time
from pathlib import Path
from typing import Any

from stoker.clock import Clock
from stoker.errors import StoreError
from stoker.store import _sqlite_locks
from stoker.store._sqlstore import SqlStore
from stoker.store.records import WriteLock

_BUSY_TIMEOUT = 30.0  # seconds a statement waits for another connection's lock
_NOT_A_DATABASE = re.compile(r"not a database|malformed|disk I/O error")


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

    def __init__(
        self, path: str | Path, clock: Clock | None = None, busy_timeout: float = _BUSY_TIMEOUT
    ) -> None:
        self.path = Path(path)
        self.busy_timeout = busy_timeout
        super().__init__(f"sqlite:///{self.path}", clock)

    def _connect(self) -> Any:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(
                str(self.path),
                timeout=self.busy_timeout,
                isolation_level=None,
                check_same_thread=False,
            )
            _enable_wal(conn, self.busy_timeout)
            # FULL: every commit is fsynced before it returns. The store's decision (an epoch
            # DECIDED) must be on disk before any sink commits on the strength of it; with
            # NORMAL a power loss or OS crash could lose the decision after a sink committed,
            # and recovery would then abort parts whose twins are already visible.
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("PRAGMA foreign_keys=ON")
        except sqlite3.Error as e:
            raise StoreError(f"cannot open SQLite store at {self.path}: {e}") from e
        return conn

    def _is_db_error(self, err: BaseException) -> bool:
        return isinstance(err, sqlite3.Error)

    def _is_disconnect(self, err: BaseException) -> bool:
        # A closed connection, or a file that stopped being a database under it: drop it.
        if isinstance(err, sqlite3.ProgrammingError | sqlite3.InterfaceError):
            return True
        return (
            isinstance(err, sqlite3.DatabaseError) and _NOT_A_DATABASE.search(str(err)) is not None
        )

    def _is_unique_violation(self, err: BaseException) -> bool:
        return isinstance(err, sqlite3.IntegrityError) and "UNIQUE constraint" in str(err)

    def _store_error(self, err: BaseException) -> StoreError:
        text = str(err)
        if "locked" in text or "busy" in text:
            why = (
                f"is locked: another connection held its write lock for more than "
                f"{self.busy_timeout:g} s"
            )
        elif _NOT_A_DATABASE.search(text):
            why = "is not a database, or is damaged"
        elif isinstance(err, sqlite3.OperationalError):
            why = "is unavailable"
        else:
            why = "failed"
        return StoreError(f"SQLite store {self.path} {why} ({type(err).__name__}: {text})")

    def _begin(self, cur: Any, write: bool) -> None:
        # IMMEDIATE takes the write lock up front, so a read-then-write transaction cannot
        # deadlock against another writer; readers in WAL mode never block.
        cur.execute("BEGIN IMMEDIATE" if write else "BEGIN")

    def write_lock(self) -> WriteLock | None:
        return _sqlite_locks.write_lock(self.path)

    def _schema_version(self, cur: Any) -> int:
        row = cur.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations").fetchone()
        return int(row[0])
