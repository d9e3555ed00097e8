"""SQLite durability settings: every connection the store opens has them."""

from __future__ import annotations

from pathlib import Path

from stoker.clock import ManualClock
from stoker.store.sqlite import SqliteStore

_FULL = 2  # what PRAGMA synchronous reads back for FULL


def test_every_pooled_sqlite_connection_commits_with_synchronous_full(
    sqlite_path: Path, clock: ManualClock
) -> None:
    store = SqliteStore(sqlite_path, clock)
    store.pool_size = 3  # make the pool open three connections, held together below
    try:
        with (
            store._tx(write=False) as a,
            store._tx(write=False) as b,
            store._tx(write=False) as c,
        ):
            seen = [
                (cur.execute("PRAGMA synchronous").fetchone()[0], cur.connection)
                for cur in (a, b, c)
            ]
            modes = [cur.execute("PRAGMA journal_mode").fetchone()[0] for cur in (a, b, c)]
    finally:
        store.close()

    assert [level for level, _ in seen] == [_FULL, _FULL, _FULL]
    assert len({id(conn) for _, conn in seen}) == 3  # three connections, not one thrice
    assert modes == ["wal", "wal", "wal"]
