"""The Iceberg sink's snapshot expiry (``keep_snapshots``; stoker/sinks/_iceberg_expire.py) on
real pyiceberg tables in an SQLite catalog, no Spark: beyond the newest N, never the newest
snapshot of any stoker marker or one after it, nothing while the ancestry is short; the marker
still found and every row still read after it; the argument checked. The sink expiring as a
job goes: tests/integration/test_iceberg_sink.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from stoker import sinks
from stoker.errors import InvalidSink
from stoker.sinks import descriptor_of, from_descriptor

pytest.importorskip("pyiceberg.catalog.sql")
from pyiceberg.catalog.sql import SqlCatalog

from stoker.sinks._iceberg_expire import expirable, expire
from stoker.sinks._iceberg_marker import marker, newest_epoch

SINK = "iceberg:db.t"


def _table(tmp_path: Path) -> Any:
    cat = SqlCatalog(
        "default",
        uri=f"sqlite:///{tmp_path / 'catalog.db'}",
        warehouse=(tmp_path / "wh").as_uri(),
    )
    cat.create_namespace("db")
    return cat.create_table("db.t", schema=pa.schema([pa.field("id", pa.int64())]))


def _append(table: Any, i: int, uid: str | None) -> Any:
    props = marker(uid, SINK, i, 1) if uid is not None else {}
    table.append(pa.table({"id": pa.array([i], pa.int64())}), snapshot_properties=props)
    return table


def _chain(table: Any) -> list[int]:
    from pyiceberg.table.snapshots import ancestors_of

    return [s.snapshot_id for s in ancestors_of(table.current_snapshot(), table.metadata)]


def test_the_newest_n_are_kept_and_the_rest_expired_without_losing_a_row_or_the_marker(
    tmp_path: Path,
) -> None:
    table = _table(tmp_path)
    for i in range(5):
        _append(table, i, "uid-a")
    assert expirable(table, 3) == []  # 5 < 2 * 3: nothing yet
    _append(table, 5, "uid-a")
    chain = _chain(table)
    assert expirable(table, 3) == chain[3:]
    assert expire(table, 3, SINK) == 3
    table = table.refresh()
    assert _chain(table) == chain[:3] and len(table.snapshots()) == 3
    assert newest_epoch(table, "uid-a", SINK) == 5
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == list(range(6))


def test_the_newest_snapshot_of_every_marker_and_all_after_it_stay(tmp_path: Path) -> None:
    table = _table(tmp_path)
    _append(table, 0, "uid-b")  # another job's only (so newest) snapshot, oldest of all
    a_newest = _append(table, 1, "uid-a").current_snapshot().snapshot_id
    for i in range(2, 8):
        _append(table, i, None)  # a writer without a marker
    assert expirable(table, 2) == []  # B's newest is the oldest: everything after it stays
    for i in range(8, 14):
        table = _append(table, i, "uid-b")  # B moves on
    chain = _chain(table)  # newest first: B 13..8, the unmarked 7..2, A's 1, B's 0
    assert chain.index(a_newest) == 12
    # A's newest, far back in a busy table, holds the chain from the current one to it.
    assert expirable(table, 2) == chain[13:]  # B's first snapshot alone
    assert expire(table, 2, SINK) == 1
    table = table.refresh()
    assert newest_epoch(table, "uid-a", SINK) == 1
    assert newest_epoch(table, "uid-b", SINK) == 13
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == list(range(14))


def test_branch_heads_and_tags_are_never_expired(tmp_path: Path) -> None:
    table = _table(tmp_path)
    for i in range(6):
        _append(table, i, "uid-a")
    chain = _chain(table)
    table.manage_snapshots().create_tag(chain[4], "audit").commit()
    table = table.refresh()
    assert expirable(table, 2) == [chain[2], chain[3], chain[5]]


def test_keep_snapshots_must_be_a_whole_number_of_at_least_one(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    for bad in (0, -1, True, 2.5, "3"):
        with pytest.raises(InvalidSink, match="at least 1") as e:
            sinks.iceberg(url, "db.t", keep_snapshots=bad)  # type: ignore[arg-type]
        assert e.value.field == "iceberg.keep_snapshots"
    sink = sinks.iceberg(url, "db.t", keep_snapshots=10)
    assert from_descriptor(descriptor_of(sink)).keep_snapshots == 10  # type: ignore[attr-defined]
    assert "keep_snapshots" not in descriptor_of(sinks.iceberg(url, "db.t"))
