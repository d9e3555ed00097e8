"""The PostgreSQL sink's upsert (a key: update mode) and replace (complete mode), on a real
PostgreSQL server without Spark: parts are prepared by hand as a Spark task prepares them
(rows by COPY into the sink's stage, a head row, the marker row, ``PREPARE TRANSACTION``)."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pyarrow as pa
import pytest
from psycopg import sql
from pyspark.sql.types import LongType, StructField, StructType

from stoker.errors import InvalidSink
from stoker.sinks._pg_task import _copy_and_mark, _Task
from stoker.sinks.base import SinkOwner
from stoker.sinks.postgres import PostgresSink
from stoker.types import AttemptNo, Epoch, JobId
from tests.support import pg_prepared

JOB = JobId("counts")
UID = "u" * 32
OWNER = SinkOwner(JOB, UID)
SCHEMA = StructType([StructField("k", LongType()), StructField("n", LongType())])
ONE = AttemptNo(1)


def _sink(dsn: str, tmp_path: Path, mode: str, key: list[str] | None) -> PostgresSink:
    s = PostgresSink(dsn, "counts", key=tuple(key) if key else None)
    s.accept_output_mode(mode)
    s.validate(OWNER)
    s.open(OWNER, tmp_path)
    s._ensure_table(SCHEMA)  # what the first prepare does
    return s


@pytest.fixture
def upsert(pg_dsn: str, tmp_path: Path) -> PostgresSink:
    return _sink(pg_dsn, tmp_path, "update", ["k"])


@pytest.fixture
def replace(pg_dsn: str, tmp_path: Path) -> PostgresSink:
    return _sink(pg_dsn, tmp_path, "complete", None)


def prepare(s: PostgresSink, epoch: int, part: int, task: int, rows: list[tuple[int, int]]) -> str:
    """Prepare one part as a writer task does; return its gid."""
    assert s._where is not None
    t = _Task(s.dsn, s._where, ("k", "n"), JOB, UID, epoch, ONE, s._tag, s._stage())
    gid = t.gid(part, task)
    batch = pa.RecordBatch.from_pylist(
        [{"k": k, "n": n} for k, n in rows],
        schema=pa.schema([("k", pa.int64()), ("n", pa.int64())]),
    )
    with psycopg.connect(s.dsn) as conn:
        _copy_and_mark(conn, t, gid, part, [batch])
        conn.execute(sql.SQL("PREPARE TRANSACTION {}").format(sql.Literal(gid)))
    return gid


def table(dsn: str) -> dict[int, int]:
    with psycopg.connect(dsn) as conn:
        return dict(conn.execute("SELECT k, n FROM counts").fetchall())


def staged_rows(s: PostgresSink) -> int:
    with psycopg.connect(s.dsn) as conn:
        q = sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(*s._stage()))
        return int(conn.execute(q).fetchone()[0])


def commit(s: PostgresSink, epoch: int, *gids: str) -> None:
    s.commit(Epoch(epoch), ONE, {"gids": list(gids)})


# upsert ----------------------------------------------------------------------------------------


def test_an_upsert_keeps_one_row_per_key_with_its_last_value(
    upsert: PostgresSink, pg_dsn: str
) -> None:
    a = prepare(upsert, 0, 0, 1, [(1, 1), (2, 1)])
    b = prepare(upsert, 0, 1, 2, [(2, 5), (3, 1)])  # key 2 in two parts of one epoch
    commit(upsert, 0, a, b)
    assert table(pg_dsn) == {1: 1, 2: 5, 3: 1}  # the last written part wins
    c = prepare(upsert, 1, 0, 3, [(1, 7)])
    commit(upsert, 1, c)
    assert table(pg_dsn) == {1: 7, 2: 5, 3: 1}
    assert staged_rows(upsert) == 0
    commit(upsert, 1, c)  # a replay of the commit: nothing changes
    assert table(pg_dsn) == {1: 7, 2: 5, 3: 1}


def test_copies_of_a_task_holding_the_same_keys_never_wait_on_each_other(
    upsert: PostgresSink, pg_dsn: str
) -> None:
    """A retried task's first attempt (prepared, then its worker died) holds the same keys as
    the retry: both prepare (no row is locked by a part), the stray is rolled back."""
    dead = prepare(upsert, 0, 0, 1, [(1, 100)])
    kept = prepare(upsert, 0, 0, 2, [(1, 1)])
    commit(upsert, 0, kept)
    assert table(pg_dsn) == {1: 1}
    assert dead not in pg_prepared(pg_dsn)


def test_a_crash_between_commit_prepared_and_the_upsert_is_finished_by_commit_again(
    upsert: PostgresSink, pg_dsn: str
) -> None:
    a = prepare(upsert, 0, 0, 1, [(1, 1)])
    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # the crashed commit got this far
        conn.execute(sql.SQL("COMMIT PREPARED {}").format(sql.Literal(a)))
    assert table(pg_dsn) == {}
    commit(upsert, 0, a)  # recovery: the store still says PREPARED
    assert table(pg_dsn) == {1: 1}


def test_validate_refuses_an_existing_table_without_a_unique_key(
    pg_dsn: str, tmp_path: Path
) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE counts (k BIGINT, n BIGINT)")
        conn.execute("CREATE TABLE pairs (a BIGINT, b BIGINT, n BIGINT, UNIQUE (b, a))")
    s = PostgresSink(pg_dsn, "counts", key=("k",))
    s.accept_output_mode("update")
    with pytest.raises(InvalidSink) as info:
        s.validate(OWNER)
    assert info.value.field == "postgres.key"
    assert "ALTER TABLE public.counts ADD PRIMARY KEY (k)" in info.value.message
    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # validate wrote nothing
        made = "SELECT count(*) FROM pg_tables WHERE tablename LIKE 'stoker_stage%'"
        assert conn.execute(made).fetchone() == (0,)
    pairs = PostgresSink(pg_dsn, "pairs", key=("a", "b"))
    pairs.accept_output_mode("update")
    pairs.validate(OWNER)  # a unique index on the key's columns, in any order


# replace ---------------------------------------------------------------------------------------


def test_a_replace_leaves_exactly_the_epochs_rows(replace: PostgresSink, pg_dsn: str) -> None:
    a = prepare(replace, 0, 0, 1, [(1, 1), (2, 1)])
    b = prepare(replace, 0, 1, 2, [(3, 1)])
    commit(replace, 0, a, b)
    assert table(pg_dsn) == {1: 1, 2: 1, 3: 1}
    c = prepare(replace, 1, 0, 3, [(1, 2)])
    d = prepare(replace, 1, 1, 4, [])  # a part with no rows: the epoch is still whole
    commit(replace, 1, c, d)
    assert table(pg_dsn) == {1: 2}
    commit(replace, 1, c, d)  # applied already: not replaced with nothing
    assert table(pg_dsn) == {1: 2}
    e = prepare(replace, 2, 0, 5, [])
    commit(replace, 2, e)  # an empty result empties the table
    assert table(pg_dsn) == {}
