"""A PostgreSQL sink with real two-phase commit, exact under Spark task retries and speculation.

Each Spark task writes its partition in its own transaction: ``COPY`` of the rows, one marker
row in ``stoker_parts`` naming the part, then ``PREPARE TRANSACTION <gid>`` with

    gid = stoker:<job>:<epoch>:<attempt>:<partition>:<task attempt id>:<sink tag>

The Spark task attempt id makes every copy of a task (a retry, a speculative copy, a zombie
that prepares late) a part of its own: no task ever touches another's gid. The parts Spark
reports back from the task attempts whose results it kept (exactly one per partition) are
the epoch's recorded set: the runtime stores it with the PREPARED sink transaction before the
epoch is decided. Commit commits exactly that set; a gid of the set that is not prepared any
more was committed before if its marker row is visible (the marker commits with it), and is
lost otherwise: commit then raises :class:`SinkError` rather than commit a partial epoch.
Every other prepared gid of the job for this epoch or an earlier one is a stray (a retried or
speculative task's copy, a zombie's late part): commit rolls it back. Recovery rolls back
every prepared gid that is left once the decided epochs are committed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import signal
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stoker.errors import InvalidSink, SinkError
from stoker.sinks.base import (
    Decision,
    PartitionId,
    Prepared,
    PreparedPart,
    Recovered,
    SinkOwner,
    TaskAttemptId,
)
from stoker.testing import kill_task_worker, task_fault, task_note
from stoker.types import AttemptNo, Epoch, JobId

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame
    from pyspark.sql.types import DataType, StructType

log = logging.getLogger("stoker.sinks.postgres")

_TABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?$")
# The current gid, and the legacy one of earlier versions (no task attempt, no sink tag).
_GID = re.compile(
    r"^stoker:(?P<job>[^:]+):(?P<epoch>\d+):(?P<attempt>\d+):(?P<part>\d+)"
    r"(?::(?P<task>\d+):(?P<tag>[0-9a-f]{8}))?$"
)
# PostgreSQL's GIDSIZE is 200 bytes with the terminating NUL. The longest gid: 7 + 100 (job)
# + 1 + 19 (epoch) + 1 + 10 (attempt) + 1 + 10 (partition) + 1 + 19 (task) + 1 + 8 = 178.
GID_MAX = 199
MARKERS = "stoker_parts"
# How long a zombie task's detached process waits for the epoch's commit before giving up.
_ZOMBIE_WAIT = 300.0


def gid_prefix(job_id: str, epoch: int, attempt: int) -> str:
    """Every gid of (job, epoch, attempt) starts with this (then partition, task, sink tag)."""
    return f"stoker:{job_id}:{epoch}:{attempt}:"


def make_gid(job_id: str, epoch: int, attempt: int, part: int, task: int, tag: str) -> str:
    gid = f"{gid_prefix(job_id, epoch, attempt)}{part}:{task}:{tag}"
    if len(gid.encode()) > GID_MAX:
        raise InvalidSink("postgres", f"gid {gid!r} is longer than PostgreSQL's {GID_MAX} bytes")
    return gid


@dataclass(frozen=True)
class ParsedGid:
    gid: str
    job: str
    epoch: Epoch
    attempt: AttemptNo
    part: int
    tag: str | None  # None: a legacy gid, which names no sink


def parse_gid(gid: str) -> ParsedGid | None:
    m = _GID.match(gid)
    if not m:
        return None
    return ParsedGid(
        gid,
        m.group("job"),
        Epoch(int(m.group("epoch"))),
        AttemptNo(int(m.group("attempt"))),
        int(m.group("part")),
        m.group("tag"),
    )


def _pg_type(dt: DataType) -> str:
    from pyspark.sql import types as T

    simple: list[tuple[type, str]] = [
        (T.LongType, "BIGINT"),
        (T.IntegerType, "INTEGER"),
        (T.ShortType, "SMALLINT"),
        (T.ByteType, "SMALLINT"),
        (T.DoubleType, "DOUBLE PRECISION"),
        (T.FloatType, "REAL"),
        (T.StringType, "TEXT"),
        (T.BooleanType, "BOOLEAN"),
        (T.TimestampNTZType, "TIMESTAMP"),
        (T.TimestampType, "TIMESTAMPTZ"),
        (T.DateType, "DATE"),
        (T.BinaryType, "BYTEA"),
    ]
    for cls, name in simple:
        if isinstance(dt, cls):
            return name
    if isinstance(dt, T.DecimalType):
        return f"NUMERIC({dt.precision},{dt.scale})"
    raise InvalidSink(
        "postgres.schema", f"no PostgreSQL column type for Spark type {dt.simpleString()}"
    )


def _markers_name(table: str) -> tuple[str, ...]:
    """The marker table, in the schema of the sink's table."""
    schema, _, _ = table.rpartition(".")
    return (schema, MARKERS) if schema else (MARKERS,)


@dataclass(frozen=True)
class _Task:
    """What a writer task needs (pickled into the task)."""

    dsn: str
    table: str
    columns: tuple[str, ...]
    job: str
    uid: str
    epoch: int
    attempt: int
    tag: str

    def gid(self, part: int, task: int) -> str:
        return make_gid(self.job, self.epoch, self.attempt, part, task, self.tag)


_RESULT = "part int, task long, task_attempt int, rows long, gid string"


def _copy_and_mark(conn: Any, t: _Task, gid: str, part: int, batches: Any) -> int:
    """COPY the rows and insert the part's marker, in the connection's open transaction."""
    from psycopg import sql

    rows = 0
    copy_sql = sql.SQL("COPY {} ({}) FROM STDIN").format(
        sql.Identifier(*t.table.split(".")), sql.SQL(", ").join(map(sql.Identifier, t.columns))
    )
    with conn.cursor() as cur, cur.copy(copy_sql) as copy:
        for batch in batches:
            for row in zip(
                *(batch.column(i).to_pylist() for i in range(batch.num_columns)), strict=True
            ):
                copy.write_row(row)
            rows += batch.num_rows
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
            args = (t.uid, f"%:{t.tag}", t.epoch, part, t.epoch)
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


@dataclass
class PostgresSink:
    """Exactly-once rows in a PostgreSQL table through PREPARE TRANSACTION / COMMIT PREPARED.

    ``max_writers`` bounds the Spark tasks that write an epoch (each holds one prepared
    transaction until commit): the epoch's frame is coalesced to at most that many partitions.
    None: a quarter of the server's ``max_prepared_transactions``.
    """

    dsn: str
    table: str
    create_table: bool = True
    name: str = ""
    max_writers: int | None = None

    def __post_init__(self) -> None:
        if not self.name:
            self.name = f"postgres:{self.table}"
        self._job: JobId | None = None
        self._uid = ""
        self._tag = ""
        self._created = False
        self._writers: int | None = None

    def describe(self) -> str:
        extra = f", max_writers={self.max_writers}" if self.max_writers is not None else ""
        return f"postgres(table={self.table!r}{extra})"

    def descriptor(self) -> dict[str, Any]:
        # The tag is derived again by open() from the same database and table; it is recorded
        # to say which gids are this sink's.
        return {
            "kind": "postgres",
            "dsn": self.dsn,
            "table": self.table,
            "name": self.name,
            "create_table": self.create_table,
            "max_writers": self.max_writers,
            "tag": self._tag,
        }

    def _connect(self) -> Any:
        import psycopg

        try:
            return psycopg.connect(self.dsn, autocommit=True, connect_timeout=5)
        except psycopg.Error as e:
            raise SinkError("postgres.dsn", f"cannot connect to PostgreSQL: {e}".strip()) from e

    # bounds ------------------------------------------------------------------------------------
    @staticmethod
    def default_writers(max_prepared: int) -> int:
        """Writers when ``max_writers`` is not set: a quarter of the server's prepared
        transactions, leaving room for retried and speculative copies, strays awaiting the
        next commit's scan, and other jobs on the same server."""
        return max(1, max_prepared // 4)

    def _fit(self, max_prepared: int) -> int:
        """The writer count for a server with ``max_prepared``; InvalidSink if it cannot fit."""
        if max_prepared <= 0:
            raise InvalidSink(
                "postgres",
                "the server has max_prepared_transactions = 0, so it cannot hold prepared "
                "transactions; set max_prepared_transactions to at least the number of "
                "parallel tasks (e.g. 64) in postgresql.conf (or ALTER SYSTEM SET "
                "max_prepared_transactions = 64) and restart the server",
            )
        writers = self.max_writers or self.default_writers(max_prepared)
        # Every writer may hold a second prepared part at once (a retry or a speculative copy
        # of its task, until the commit rolls it back).
        if 2 * writers > max_prepared:
            what = (
                f"max_writers = {writers}"
                if self.max_writers
                else "the default of 1 writer (max_writers not set)"
            )
            raise InvalidSink(
                "postgres.max_writers",
                f"{what} needs max_prepared_transactions >= {2 * writers} (a retried or "
                f"speculative copy of each writer task may hold a second prepared transaction), "
                f"but the server has max_prepared_transactions = {max_prepared}: set max_writers "
                f"to at most {max(1, max_prepared // 2)}"
                + (" or raise" if max_prepared >= 2 else "; raise")
                + " max_prepared_transactions in postgresql.conf (and restart the server)",
            )
        return writers

    def validate(self, owner: SinkOwner) -> None:
        if not _TABLE.match(self.table):
            raise InvalidSink(
                "postgres.table",
                f"{self.table!r} is not a plain table name "
                "(letters, digits and '_', optionally schema.table)",
            )
        if self.max_writers is not None and (
            isinstance(self.max_writers, bool)
            or not isinstance(self.max_writers, int)
            or self.max_writers < 1
        ):
            raise InvalidSink(
                "postgres.max_writers",
                f"must be a whole number >= 1 (or None for the server's default), "
                f"got {self.max_writers!r}",
            )
        with self._connect() as conn:
            self._writers = self._fit(self._max_prepared(conn))

    @staticmethod
    def _max_prepared(conn: Any) -> int:
        row = conn.execute("SHOW max_prepared_transactions").fetchone()
        return int(row[0]) if row else 0

    def open(self, owner: SinkOwner, state_dir: Path) -> None:
        from psycopg import errors, sql

        self._job = owner.job_id
        self._uid = owner.uid
        with self._connect() as conn:
            (db,) = conn.execute("SELECT current_database()").fetchone()
            # Names the sink inside the gid: two PostgreSQL sinks of one job never take each
            # other's parts for strays.
            self._tag = hashlib.sha1(f"{db}/{self.table}".encode()).hexdigest()[:8]
            name = sql.Identifier(*_markers_name(self.table))
            qualified = ".".join(_markers_name(self.table))
            # Only when missing: CREATE INDEX IF NOT EXISTS would wait for the prepared parts
            # that hold the table (recovery comes after open), for ever.
            if conn.execute("SELECT to_regclass(%s)", (qualified,)).fetchone()[0] is not None:
                return
            # Two drivers creating it at once: one wins, the other sees it exist.
            with (
                contextlib.suppress(errors.UniqueViolation, errors.DuplicateTable),
                conn.transaction(),
            ):
                conn.execute(
                    sql.SQL(
                        "CREATE TABLE IF NOT EXISTS {} (uid TEXT NOT NULL, gid TEXT NOT NULL, "
                        "job_id TEXT NOT NULL, epoch BIGINT NOT NULL, attempt INTEGER NOT NULL, "
                        "part INTEGER NOT NULL, made_at TIMESTAMPTZ NOT NULL DEFAULT now(), "
                        "PRIMARY KEY (uid, gid))"
                    ).format(name)
                )
                conn.execute(
                    sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (uid, epoch)").format(
                        sql.Identifier(f"{MARKERS}_uid_epoch"), name
                    )
                )

    def _ensure_table(self, schema: StructType) -> None:
        if self._created or not self.create_table:
            return
        from psycopg import sql

        cols = sql.SQL(", ").join(
            sql.SQL("{} {}").format(sql.Identifier(f.name), sql.SQL(_pg_type(f.dataType)))
            for f in schema.fields
        )
        with self._connect() as conn:
            conn.execute(
                sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(
                    sql.Identifier(*self.table.split(".")), cols
                )
            )
        self._created = True

    def writers(self) -> int:
        """How many partitions (so prepared transactions) an epoch is written through."""
        if self._writers is None:
            with self._connect() as conn:
                self._writers = self._fit(self._max_prepared(conn))
        return self._writers

    # protocol ----------------------------------------------------------------------------------
    def prepare(self, df: DataFrame, epoch: Epoch, attempt: AttemptNo) -> Prepared:
        if self._job is None:
            raise SinkError("postgres", f"sink {self.name!r} prepared before open()")
        self._ensure_table(df.schema)
        t = _Task(
            self.dsn, self.table, tuple(df.columns), self._job, self._uid, epoch, attempt, self._tag
        )

        def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            return _write_partition(t, batches)

        out = df.coalesce(self.writers()).mapInArrow(write, _RESULT)
        n = out.rdd.getNumPartitions()
        results = out.collect()
        # The kept results: one per partition, from the task attempt whose result Spark kept.
        parts = sorted(
            (
                PreparedPart(
                    id=r["gid"],
                    partition=PartitionId(int(r["part"])),
                    task_attempt=TaskAttemptId(int(r["task"])),
                    task_attempt_number=int(r["task_attempt"]),
                    rows=int(r["rows"]),
                )
                for r in results
            ),
            key=lambda p: p.partition,
        )
        got = [p.partition for p in parts]
        if got != list(range(n)):
            raise SinkError(
                "postgres",
                f"epoch {epoch}: expected one prepared part per partition 0..{n - 1}, Spark "
                f"returned parts for partitions {got}",
            )
        return Prepared(
            rows=sum(p.rows for p in parts),
            detail={"gids": [p.id for p in parts], "parts": [p.to_json() for p in parts]},
            parts=tuple(parts),
        )

    def _prepared(self, conn: Any) -> list[ParsedGid]:
        """This sink's prepared gids of this job (and legacy gids of the job, which name no
        sink), in this database."""
        assert self._job is not None, "open() first"
        out = []
        for (gid,) in conn.execute(
            "SELECT gid FROM pg_prepared_xacts WHERE database = current_database() AND gid LIKE %s",
            (f"stoker:{self._job}:%",),
        ).fetchall():
            p = parse_gid(gid)
            if p and p.job == self._job and p.tag in (None, self._tag):
                out.append(p)
        return out

    def _visible(self, conn: Any, gid: str) -> bool:
        """Whether the part ``gid`` was committed (its marker row is visible)."""
        from psycopg import sql

        parsed = parse_gid(gid)
        if parsed is not None and parsed.tag is None:
            # A legacy gid (no marker was written with it): not prepared means finished; an
            # earlier version recorded it and can only have committed it.
            log.warning("postgres: legacy part %s not prepared: taken as committed", gid)
            return True
        row = conn.execute(
            sql.SQL("SELECT 1 FROM {} WHERE uid = %s AND gid = %s").format(
                sql.Identifier(*_markers_name(self.table))
            ),
            (self._uid, gid),
        ).fetchone()
        return row is not None

    def _finish(self, conn: Any, gid: str, commit: bool) -> bool:
        """COMMIT or ROLLBACK PREPARED; False if ``gid`` was not prepared (any more)."""
        import psycopg
        from psycopg import sql

        verb = "COMMIT PREPARED {}" if commit else "ROLLBACK PREPARED {}"
        try:
            conn.execute(sql.SQL(verb).format(sql.Literal(gid)))
        except psycopg.errors.UndefinedObject:
            return False
        return True

    def commit(self, epoch: Epoch, attempt: AttemptNo, detail: Mapping[str, Any]) -> None:
        """Commit exactly the recorded gids of (epoch, attempt); roll back the strays."""
        if self._job is None:
            raise SinkError("postgres", f"sink {self.name!r} committed before open()")
        gids = detail.get("gids")
        if not isinstance(gids, list) or not all(isinstance(g, str) for g in gids):
            raise SinkError(
                "postgres",
                f"epoch {epoch} of attempt {attempt}: the recorded sink transaction names no "
                f"prepared parts (detail {dict(detail)!r}); nothing can be committed exactly",
            )
        kept = set(gids)
        with self._connect() as conn:
            held = {p.gid for p in self._prepared(conn)}
            # 1. Every recorded part is prepared or was committed before (a commit or recovery
            #    that crashed midway). A part that is neither is lost: say so, commit nothing.
            lost = [g for g in gids if g not in held and not self._visible(conn, g)]
            if lost:
                raise SinkError(
                    "postgres",
                    f"epoch {epoch} was decided for attempt {attempt} with {len(gids)} parts, "
                    f"but {len(lost)} of them are neither prepared nor committed: {lost}. "
                    "Their rows are lost; nothing of the epoch was committed by this call",
                )
            # 2. Commit the recorded set. One that vanished meanwhile was committed by a
            #    concurrent recovery of the same decision, or it is lost.
            for g in gids:
                vanished = g in held and not self._finish(conn, g, commit=True)
                if vanished and not self._visible(conn, g):
                    raise SinkError(
                        "postgres", f"epoch {epoch}: part {g} vanished before its commit"
                    )
            # 3. Strays: every other part of this epoch, and every part left of earlier ones
            #    (all decided and committed by now), e.g. a zombie task that prepared late.
            for p in self._prepared(conn):
                if p.gid not in kept and p.epoch <= epoch:
                    self._finish(conn, p.gid, commit=False)
                    log.info("postgres: rolled back stray part %s", p.gid)
            # 4. Markers are needed only while an epoch may still be committed again: keep
            #    this epoch's and the one before (a fenced zombie's late commit finds them).
            from psycopg import sql

            conn.execute(
                sql.SQL("DELETE FROM {} WHERE uid = %s AND job_id = %s AND epoch < %s").format(
                    sql.Identifier(*_markers_name(self.table))
                ),
                (self._uid, self._job, epoch - 1),
            )

    def abort(self, epoch: Epoch, attempt: AttemptNo) -> None:
        with self._connect() as conn:
            for p in self._prepared(conn):
                if p.epoch == epoch and p.attempt == attempt:
                    self._finish(conn, p.gid, commit=False)

    def recover(self, decision: Decision) -> Recovered:
        """Roll back every prepared part left: the decided epochs' recorded parts were
        committed before this runs (see :meth:`TwoPhaseSink.recover`)."""
        done = Recovered()
        with self._connect() as conn:
            for p in self._prepared(conn):
                if not self._finish(conn, p.gid, commit=False):
                    continue
                if decision(p.epoch) == p.attempt:
                    done.strays.append(p.gid)
                elif (p.epoch, p.attempt) not in done.aborted:
                    done.aborted.append((p.epoch, p.attempt))
        return done
