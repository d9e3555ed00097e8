"""The PostgreSQL sink's commit and recovery rules, on a real PostgreSQL server without Spark.

Parts are prepared by hand exactly as a Spark task prepares them (rows by COPY, the marker
row, ``PREPARE TRANSACTION <gid>``), so each rule is checked on its own: commit commits exactly
the recorded set, rolls back every other part of the epoch and the leftovers of earlier
epochs, raises when a recorded part is lost, and is idempotent; recovery rolls back the rest.
"""

from __future__ import annotations

from pathlib import Path

import psycopg
import pyarrow as pa
import pytest
from psycopg import sql

from stoker.errors import SinkError
from stoker.sinks._pg_parts import GID_MAX, make_gid, uid_hash
from stoker.sinks._pg_task import _copy_and_mark, _Task
from stoker.sinks.base import SinkOwner
from stoker.sinks.postgres import PostgresSink
from stoker.types import AttemptNo, Epoch, JobId
from tests.support import pg_ids, pg_prepared

JOB = JobId("job-1")
UID = "u" * 32


@pytest.fixture
def sink(pg_dsn: str, tmp_path: Path) -> PostgresSink:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE ids (id BIGINT)")
        conn.execute("CREATE TABLE other (id BIGINT)")
    s = PostgresSink(pg_dsn, "ids", create_table=False)
    s.validate(SinkOwner(JOB, UID))
    s.open(SinkOwner(JOB, UID), tmp_path)
    return s


def prepare(s: PostgresSink, epoch: int, attempt: int, part: int, task: int, ids: list[int]) -> str:
    """Prepare one part as a task attempt would; return its gid."""
    t = _Task(s.dsn, s.table, ("id",), JOB, UID, epoch, attempt, s._tag)
    gid = t.gid(part, task)
    batch = pa.RecordBatch.from_pylist([{"id": i} for i in ids])
    with psycopg.connect(s.dsn) as conn:
        _copy_and_mark(conn, t, gid, part, [batch])
        conn.execute(sql.SQL("PREPARE TRANSACTION {}").format(sql.Literal(gid)))
    return gid


def ids(dsn: str) -> list[int]:
    return sorted(pg_ids(dsn, "ids").elements())


def test_commit_commits_exactly_the_recorded_set_and_rolls_back_strays(
    sink: PostgresSink, pg_dsn: str
) -> None:
    kept0 = prepare(sink, 3, 1, 0, 10, [0, 1])
    lost_copy = prepare(sink, 3, 1, 1, 11, [2, 3])  # a speculative copy whose result Spark lost
    kept1 = prepare(sink, 3, 1, 1, 12, [2, 3])  # ... and the copy whose result it kept
    dead = prepare(sink, 3, 1, 2, 13, [4])  # a retried task's first attempt, prepared then died
    kept2 = prepare(sink, 3, 1, 2, 14, [4])
    zombie_old = prepare(sink, 2, 1, 0, 5, [99])  # a zombie's late part of a committed epoch
    fenced = prepare(sink, 3, 0, 0, 1, [98])  # a fenced attempt's part of the same epoch
    later = prepare(sink, 4, 1, 0, 20, [5])  # the next epoch: not this commit's business
    other = PostgresSink(pg_dsn, "other", create_table=False)
    other.open(SinkOwner(JOB, UID), Path("."))
    other_part = prepare(other, 3, 1, 1, 11, [7])  # another sink of the job, same epoch

    sink.commit(Epoch(3), AttemptNo(1), {"gids": [kept0, kept1, kept2]})

    assert ids(pg_dsn) == [0, 1, 2, 3, 4]
    left = set(pg_prepared(pg_dsn))
    assert left == {later, other_part}
    assert not left & {lost_copy, dead, zombie_old, fenced}

    # Idempotent: a second commit (a crash mid-commit, a replay) finds the markers.
    sink.commit(Epoch(3), AttemptNo(1), {"gids": [kept0, kept1, kept2]})
    assert ids(pg_dsn) == [0, 1, 2, 3, 4]
    assert set(pg_prepared(pg_dsn)) == {later, other_part}


def test_commit_of_a_part_committed_before_a_crash_finishes_the_rest(
    sink: PostgresSink, pg_dsn: str
) -> None:
    a = prepare(sink, 1, 1, 0, 1, [0])
    b = prepare(sink, 1, 1, 1, 2, [1])
    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # the crashed commit got this far
        conn.execute(sql.SQL("COMMIT PREPARED {}").format(sql.Literal(a)))
    sink.commit(Epoch(1), AttemptNo(1), {"gids": [a, b]})
    assert ids(pg_dsn) == [0, 1]
    assert pg_prepared(pg_dsn) == []


def test_commit_raises_when_a_recorded_part_is_lost_and_commits_nothing(
    sink: PostgresSink, pg_dsn: str
) -> None:
    a = prepare(sink, 1, 1, 0, 1, [0])
    b = prepare(sink, 1, 1, 1, 2, [1])
    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # someone rolled the winner back
        conn.execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(b)))
    with pytest.raises(SinkError, match="neither prepared nor committed") as e:
        sink.commit(Epoch(1), AttemptNo(1), {"gids": [a, b]})
    assert b in str(e.value)
    assert ids(pg_dsn) == []
    assert pg_prepared(pg_dsn) == [a]

    never = make_gid(JOB, 1, 1, 2, 3, sink._tag, uid_hash(UID))  # recorded, never prepared
    with pytest.raises(SinkError, match="lost"):
        sink.commit(Epoch(1), AttemptNo(1), {"gids": [a, never]})
    assert pg_prepared(pg_dsn) == [a]


def test_commit_without_a_recorded_set_raises(sink: PostgresSink, pg_dsn: str) -> None:
    a = prepare(sink, 1, 1, 0, 1, [0])
    with pytest.raises(SinkError, match="names no prepared parts"):
        sink.commit(Epoch(1), AttemptNo(1), {})
    assert pg_prepared(pg_dsn) == [a]


def test_recover_rolls_back_every_part_left(sink: PostgresSink, pg_dsn: str) -> None:
    undecided = prepare(sink, 5, 2, 0, 1, [0])
    stray = prepare(sink, 4, 2, 0, 7, [1])  # a copy of decided epoch 4's task (attempt 2)
    other_attempt = prepare(sink, 4, 1, 0, 3, [2])
    decided = {Epoch(4): AttemptNo(2)}
    done = sink.recover(lambda e: decided.get(e))
    assert ids(pg_dsn) == []
    assert pg_prepared(pg_dsn) == []
    assert sorted(done.aborted) == [(4, 1), (5, 2)]
    assert done.strays == [stray]
    assert done.committed == []
    assert {undecided, other_attempt}.isdisjoint(done.strays)


def test_recover_up_to_an_attempt_leaves_a_later_attempts_parts_prepared(
    sink: PostgresSink, pg_dsn: str
) -> None:
    left = prepare(sink, 5, 1, 0, 1, [0])  # attempt 1's undecided leftover
    in_flight = prepare(sink, 5, 2, 0, 2, [1])  # attempt 2 is preparing epoch 5 now
    done = sink.recover(lambda e: None, up_to=AttemptNo(1))
    assert done.aborted == [(5, 1)] and done.strays == []
    assert pg_prepared(pg_dsn) == [in_flight]
    assert left not in pg_prepared(pg_dsn)


def test_gid_fits_postgres_for_the_longest_job_id(sink: PostgresSink) -> None:
    gid = make_gid("j" * 100, 2**63 - 1, 2**31 - 1, 2**31 - 1, 2**63 - 1, sink._tag, uid_hash(UID))
    assert len(gid.encode()) <= GID_MAX


def test_max_writers_default_and_bounds(pg_dsn: str) -> None:
    owner = SinkOwner(JOB, UID)
    s = PostgresSink(pg_dsn, "ids")
    s.validate(owner)
    assert s.writers() == 64 // 4  # the throwaway server has max_prepared_transactions = 64
    PostgresSink(pg_dsn, "ids", max_writers=32).validate(owner)
    with pytest.raises(SinkError, match="max_writers") as e:
        PostgresSink(pg_dsn, "ids", max_writers=33).validate(owner)
    msg = str(e.value)
    assert "max_prepared_transactions = 64" in msg and "at most 32" in msg
    for bad in (0, -1, "4", 2.5, True):
        with pytest.raises(SinkError, match="whole number"):
            PostgresSink(pg_dsn, "ids", max_writers=bad).validate(owner)  # type: ignore[arg-type]
