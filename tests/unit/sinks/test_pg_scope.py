"""Whose prepared parts a PostgreSQL sink takes for its own: scoped by job id, the table as
the server resolves it (schema and all), and the uid of the job's record.

Parts are prepared by hand exactly as a Spark task prepares them (see
``test_postgres_sink.py``), for two jobs of one id with different uids (two state folders, each
with its own store) and for two sinks whose tables share a name in two schemas.
"""

from __future__ import annotations

import re
from pathlib import Path

import psycopg
import pyarrow as pa
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from stoker import sinks, sources
from stoker.errors import InvalidPipeline, InvalidSink, SinkError
from stoker.pipeline import Pipeline
from stoker.sinks._pg_parts import GID_MAX, Scope, make_gid, parse_gid, uid_hash
from stoker.sinks._pg_task import _copy_and_mark, _Task
from stoker.sinks.base import SinkOwner
from stoker.sinks.postgres import PostgresSink
from stoker.types import AttemptNo, Epoch, JobId
from tests.support import pg_ids, pg_prepared

JOB = JobId("job-1")
FIRST, SECOND = SinkOwner(JOB, "a" * 32), SinkOwner(JOB, "b" * 32)


# gids, without a server --------------------------------------------------------------------------
def test_the_gid_names_the_uid_and_fits_postgres_for_the_longest_job_id() -> None:
    gid = make_gid("j" * 100, 2**63 - 1, 2**31 - 1, 2**31 - 1, 2**63 - 1, "0" * 8, uid_hash("u"))
    assert len(gid.encode()) <= GID_MAX
    p = parse_gid(gid)
    assert p is not None and (p.job, p.tag, p.owner) == ("j" * 100, "0" * 8, uid_hash("u"))


def test_a_scope_holds_its_own_uid_and_table_and_legacy_gids_by_the_old_tag() -> None:
    mine, theirs = uid_hash(FIRST.uid), uid_hash(SECOND.uid)
    scope = Scope(JOB, "1" * 8, mine, "2" * 8)

    def holds(gid: str) -> bool:
        p = parse_gid(gid)
        assert p is not None, gid
        return scope.holds(p)

    assert holds(make_gid(JOB, 1, 1, 0, 5, "1" * 8, mine))
    assert not holds(make_gid(JOB, 1, 1, 0, 5, "1" * 8, theirs))  # another uid
    assert not holds(make_gid(JOB, 1, 1, 0, 5, "3" * 8, mine))  # another table
    assert not holds(make_gid("job-2", 1, 1, 0, 5, "1" * 8, mine))  # another job
    # Gids of earlier versions name no uid: the job's own by the old tag, or naming no sink.
    assert holds(f"stoker:{JOB}:1:1:0:5:{'2' * 8}")
    assert holds(f"stoker:{JOB}:1:1:0")
    assert not holds(f"stoker:{JOB}:1:1:0:5:{'1' * 8}")
    foreign = parse_gid(make_gid(JOB, 1, 1, 0, 5, "1" * 8, theirs))
    assert foreign is not None and scope.foreign(foreign)


# two jobs of one id on one table -------------------------------------------------------------
def _sink(dsn: str, owner: SinkOwner, tmp_path: Path, table: str = "ids") -> PostgresSink:
    s = PostgresSink(dsn, table, create_table=False)
    s.validate(owner)
    s.open(owner, tmp_path)
    return s


def prepare(s: PostgresSink, owner: SinkOwner, epoch: int, part: int, task: int) -> str:
    """One part of (epoch, attempt 1) prepared as a task of ``owner``'s job would; its ids are
    ``task`` and ``task + 1000``."""
    t = _Task(s.dsn, s.table, ("id",), owner.job_id, owner.uid, epoch, 1, s._tag)
    gid = t.gid(part, task)
    batch = pa.RecordBatch.from_pylist([{"id": task}, {"id": task + 1000}])
    with psycopg.connect(s.dsn) as conn:
        _copy_and_mark(conn, t, gid, part, [batch])
        conn.execute(sql.SQL("PREPARE TRANSACTION {}").format(sql.Literal(gid)))
    return gid


@pytest.fixture
def ids_table(pg_dsn: str) -> str:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE ids (id BIGINT)")
    return pg_dsn


def test_a_second_uid_of_the_job_id_is_refused_while_the_first_owns_the_table(
    ids_table: str, tmp_path: Path
) -> None:
    first = _sink(ids_table, FIRST, tmp_path)
    decided = prepare(first, FIRST, 3, 0, 10)

    second = PostgresSink(ids_table, "ids", create_table=False)
    for step in (lambda: second.validate(SECOND), lambda: second.open(SECOND, tmp_path)):
        with pytest.raises(InvalidSink) as e:
            step()
        msg = str(e.value)
        assert e.value.field == "postgres.table"
        assert f"job {JOB!r} (uid {FIRST.uid})" in msg and f"(uid {SECOND.uid})" in msg
        assert '"public"."ids"' in msg and "DELETE FROM" in msg, msg
    # The refused job touched nothing; the first commits its decided part.
    assert pg_prepared(ids_table) == [decided]
    first.commit(Epoch(3), AttemptNo(1), {"gids": [decided]})
    assert sorted(pg_ids(ids_table, "ids")) == [10, 1010]
    # The owner itself opens again (a resume) without a word.
    _sink(ids_table, FIRST, tmp_path)


def test_parts_of_another_uid_survive_commit_abort_and_recovery(
    ids_table: str, tmp_path: Path
) -> None:
    first = _sink(ids_table, FIRST, tmp_path)
    kept = prepare(first, FIRST, 3, 0, 10)
    stray = prepare(first, FIRST, 3, 0, 11)  # a retried copy of the kept task
    # Another uid's parts in the same table (a job of the same id that wrote it before its
    # owner row existed): never this job's to commit or roll back.
    theirs = {prepare(first, SECOND, e, 0, 20 + e) for e in (2, 3, 4)}

    first.commit(Epoch(3), AttemptNo(1), {"gids": [kept]})
    assert set(pg_prepared(ids_table)) == theirs
    assert stray not in pg_prepared(ids_table)
    first.abort(Epoch(4), AttemptNo(1))
    done = first.recover(lambda e: AttemptNo(1) if e <= 3 else None)
    assert set(pg_prepared(ids_table)) == theirs
    assert done.aborted == [] and done.strays == []
    assert sorted(pg_ids(ids_table, "ids")) == [10, 1010]


def test_a_released_table_is_claimed_by_the_next_uid_and_the_old_parts_rolled_back(
    ids_table: str, tmp_path: Path
) -> None:
    first = _sink(ids_table, FIRST, tmp_path)
    left = prepare(first, FIRST, 3, 0, 10)
    with pytest.raises(InvalidSink) as e:
        PostgresSink(ids_table, "ids", create_table=False).validate(SECOND)
    release = re.search(r"release the table with: (DELETE FROM [^;]+);", str(e.value))
    assert release is not None, str(e.value)
    with psycopg.connect(ids_table, autocommit=True) as conn:  # the way out the error names
        conn.execute(release.group(1))

    second = _sink(ids_table, SECOND, tmp_path)
    assert pg_prepared(ids_table) == []  # the released uid's part: nobody would commit it
    mine = prepare(second, SECOND, 0, 0, 1)
    second.commit(Epoch(0), AttemptNo(1), {"gids": [mine]})
    assert sorted(pg_ids(ids_table, "ids")) == [1, 1001]
    # The first job, had it gone on, stops at its next commit.
    with pytest.raises(SinkError, match="no longer written for job"):
        first.commit(Epoch(3), AttemptNo(1), {"gids": [left]})


# two tables of one name ------------------------------------------------------------------------
def _in_schema(dsn: str, schema: str) -> str:
    return make_conninfo(dsn, options=f"-c search_path={schema}")


@pytest.fixture
def two_schemas(pg_dsn: str) -> tuple[str, str]:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for schema in ("s1", "s2"):
            conn.execute(f"CREATE SCHEMA {schema}")
            conn.execute(f"CREATE TABLE {schema}.ids (id BIGINT)")
    return _in_schema(pg_dsn, "s1"), _in_schema(pg_dsn, "s2")


def test_parts_of_two_tables_of_one_name_never_roll_each_other_back(
    two_schemas: tuple[str, str], tmp_path: Path
) -> None:
    dsn1, dsn2 = two_schemas
    a, b = _sink(dsn1, FIRST, tmp_path), _sink(dsn2, FIRST, tmp_path)
    assert a._tag != b._tag
    pa_ = prepare(a, FIRST, 1, 0, 10)
    pb = prepare(b, FIRST, 1, 0, 20)

    a.commit(Epoch(1), AttemptNo(1), {"gids": [pa_]})
    assert pg_prepared(dsn1) == [pb]
    b.commit(Epoch(1), AttemptNo(1), {"gids": [pb]})
    assert sorted(pg_ids(dsn1, "ids")) == [10, 1010]
    assert sorted(pg_ids(dsn2, "ids")) == [20, 1020]
    assert pg_prepared(dsn1) == []


def test_two_sinks_of_a_pipeline_on_one_table_are_refused_at_validate(
    two_schemas: tuple[str, str], pg_dsn: str
) -> None:
    dsn1, _ = two_schemas
    # The same table, written unqualified through the search path and schema-qualified.
    p = Pipeline(JOB).source(sources.generator(total=1))
    p.sink(sinks.postgres(dsn1, "ids")).sink(sinks.postgres(pg_dsn, "s1.ids"))
    p.validate()
    for s in p.sinks:
        s.validate(FIRST)
    with pytest.raises(InvalidPipeline) as e:
        p.check_targets()
    assert e.value.field == "sinks[1]"
    assert "'postgres:ids'" in str(e.value) and "'postgres:s1.ids'" in str(e.value)
    assert '"s1"."ids"' in str(e.value)
