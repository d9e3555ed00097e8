"""What a PostgreSQL sink's Spark task runs on an executor: one transaction for its partition
(``COPY`` of the rows, the part's marker row), ended by ``PREPARE TRANSACTION <gid>``; and the
``task_zombie_prepare`` fault, a detached process that prepares a part after the epoch's commit.

The task is handed a :class:`_Task` (pickled into it) and yields one result row per partition,
of schema :data:`_RESULT`; :meth:`stoker.sinks.postgres.PostgresSink.prepare` collects them.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stoker.sinks._pg_modes import STAGE_COLUMNS, copy_staged
from stoker.sinks._pg_parts import Table, _markers_name, make_gid, table_parts, uid_hash
from stoker.testing import kill_task_worker, task_fault, task_note

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

    WriteFn = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]

# How long a zombie task's detached process waits for the epoch's commit before giving up.
_ZOMBIE_WAIT = 300.0


@dataclass(frozen=True)
class _Task:
    """What a writer task needs (pickled into the task)."""

    dsn: str
    table: Table  # the resolved (schema, table); a written name in hand-made tests
    columns: tuple[str, ...]
    job: str
    uid: str
    epoch: int
    attempt: int
    tag: str
    # The stage the rows go to (an upsert or a replace, see _pg_modes), or None: the table.
    stage: tuple[str, ...] | None = None

    def gid(self, part: int, task: int) -> str:
        return make_gid(self.job, self.epoch, self.attempt, part, task, self.tag, self.owner)

    @property
    def owner(self) -> str:
        return uid_hash(self.uid)


_RESULT = "part int, task long, task_attempt int, rows long, gid string"


def write_plan(df: DataFrame, writers: int, write: WriteFn | None) -> DataFrame:
    """An epoch's frame through its writer tasks (``write``; None: a plan only analysed,
    never run). The columns are renamed by position first: pyspark's ``mapInArrow`` refers
    to each column by its name, and a name Spark generates (``CAST(session.start AS
    BIGINT)``) reads as a path there (UNRESOLVED_COLUMN). The tasks write by position, into
    the columns their ``_Task`` names."""
    plain = df.toDF(*(f"_{i}" for i in range(len(df.columns))))
    return plain.coalesce(writers).mapInArrow(write or _never, _RESULT)


def _never(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    raise AssertionError("a plan only analysed ran")


def _copy_and_mark(conn: Any, t: _Task, gid: str, part: int, batches: Any) -> int:
    """COPY the rows and insert the part's marker, in the connection's open transaction."""
    from psycopg import sql

    rows = 0
    into = table_parts(t.table) if t.stage is None else t.stage
    columns = t.columns if t.stage is None else (*STAGE_COLUMNS, *t.columns)
    copy_sql = sql.SQL("COPY {} ({}) FROM STDIN").format(
        sql.Identifier(*into), sql.SQL(", ").join(map(sql.Identifier, columns))
    )
    with conn.cursor() as cur, cur.copy(copy_sql) as copy:
        if t.stage is not None:
            rows = copy_staged(copy, t.uid, t.epoch, part, _rows(batches), len(t.columns))
        else:
            for row in _rows(batches):
                copy.write_row(row)
                rows += 1
    # The marker commits with the part and only with it: once the gid is no longer prepared,
    # a visible marker says "committed", none says "rolled back or never prepared".
    conn.execute(
        sql.SQL(
            "INSERT INTO {} (uid, gid, job_id, epoch, attempt, part) "
            "VALUES (%s, %s, %s, %s, %s, %s)"
        ).format(sql.Identifier(*_markers_name(t.table))),
        (t.uid, gid, t.job, t.epoch, t.attempt, part),
    )
    return rows


def _rows(batches: Any) -> Iterator[tuple[Any, ...]]:
    for batch in batches:
        yield from zip(
            *(batch.column(i).to_pylist() for i in range(batch.num_columns)), strict=True
        )


def _write_partition(t: _Task, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Runs in a Spark task: one transaction for the partition, ended by PREPARE TRANSACTION."""
    import psycopg
    import pyarrow as pa
    from psycopg import sql
    from pyspark import TaskContext

    ctx = TaskContext.get()
    part = ctx.partitionId() if ctx is not None else 0
    task = ctx.taskAttemptId() if ctx is not None else 0
    number = ctx.attemptNumber() if ctx is not None else 0
    gid = t.gid(part, task)
    if task_fault("task_zombie_prepare", t.epoch, part, number) is not None:
        _zombie(t, gid, part, list(batches))  # raises: this task attempt fails
    conn = psycopg.connect(t.dsn, autocommit=False)
    try:
        rows = _copy_and_mark(conn, t, gid, part, batches)
        # The transaction survives this process from here on, until COMMIT/ROLLBACK PREPARED.
        conn.execute(sql.SQL("PREPARE TRANSACTION {}").format(sql.Literal(gid)))
        if task_fault("task_after_prepare", t.epoch, part, number) is not None:
            task_note(f"worker death after PREPARE of {gid}")
            kill_task_worker()
        slow = task_fault("task_slow", t.epoch, part, number)
        if slow is not None:
            task_note(f"slow task after PREPARE of {gid}: {slow[0] if slow else 60}s")
            time.sleep(float(slow[0]) if slow else 60.0)
    finally:
        conn.close()
    yield pa.RecordBatch.from_pylist(
        [{"part": part, "task": task, "task_attempt": number, "rows": rows, "gid": gid}],
        schema=pa.schema(
            [
                ("part", pa.int32()),
                ("task", pa.int64()),
                ("task_attempt", pa.int32()),
                ("rows", pa.int64()),
                ("gid", pa.string()),
            ]
        ),
    )


def _zombie(t: _Task, gid: str, part: int, batches: list[pa.RecordBatch]) -> None:
    """The ``task_zombie_prepare`` fault: hand the open transaction to a detached process that
    prepares it only after the epoch's commit, then fail this task attempt."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the forked process
        code = 1
        try:
            os.setsid()
            if os.fork() != 0:
                os._exit(0)
            os.close(r)
            code = _zombie_body(t, gid, part, batches, w)
        finally:
            os._exit(code)
    os.close(w)
    os.waitpid(pid, 0)
    with os.fdopen(r, "rb") as fh:
        holding = fh.read(1) == b"1"
    task_note(f"zombie task attempt: {gid} held by a detached process ({holding=})")
    raise RuntimeError(f"stoker.testing: task attempt of {gid} left as a zombie")


def _zombie_note(t: _Task, part: int, state: str, gid: str) -> None:
    folder = os.environ.get("STOKER_FAULT_DIR")
    if folder:
        path = Path(folder) / f"zombie-{t.epoch}-{part}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"pid": os.getpid(), "gid": gid, "state": state}))
        os.replace(tmp, path)


def _zombie_body(t: _Task, gid: str, part: int, batches: list[pa.RecordBatch], w: int) -> int:
    import psycopg
    from psycopg import sql

    # Keep stderr (the executor's log) and the pipe; let go of the worker's sockets. The
    # executor may die before this process does: a note to its stderr must not kill us.
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    os.closerange(3, w)
    os.closerange(w + 1, 1024)
    conn = psycopg.connect(t.dsn, autocommit=False)
    _copy_and_mark(conn, t, gid, part, batches)
    os.write(w, b"1")
    os.close(w)
    _zombie_note(t, part, "holding", gid)
    markers = sql.Identifier(*_markers_name(t.table))
    done = sql.SQL(
        "SELECT 1 FROM {} WHERE uid = %s AND gid LIKE %s AND "
        "((epoch = %s AND part = %s) OR epoch > %s) LIMIT 1"
    ).format(markers)
    deadline = time.monotonic() + _ZOMBIE_WAIT
    with psycopg.connect(t.dsn, autocommit=True) as watch:
        while time.monotonic() < deadline:
            args = (t.uid, f"%:{t.tag}:{t.owner}", t.epoch, part, t.epoch)
            if watch.execute(done, args).fetchone():
                conn.execute(sql.SQL("PREPARE TRANSACTION {}").format(sql.Literal(gid)))
                conn.close()
                _zombie_note(t, part, "prepared", gid)
                with contextlib.suppress(OSError):
                    task_note(f"zombie PREPARE of {gid} after the epoch's commit")
                return 0
            time.sleep(0.05)
    conn.close()
    _zombie_note(t, part, "gave_up", gid)
    return 0
