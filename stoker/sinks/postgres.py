"""A PostgreSQL sink with real two-phase commit.

Each Spark task writes its partition in its own transaction and ends it with
``PREPARE TRANSACTION 'stoker:<job>:<epoch>:<attempt>:<partition>'``. The driver, once the
store has decided the epoch, runs ``COMMIT PREPARED`` for each; recovery lists
``pg_prepared_xacts`` and commits or rolls back by the store's decision.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stoker.errors import SinkError
from stoker.sinks.base import Decision, Prepared, Recovered
from stoker.types import AttemptNo, Epoch, JobId

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame
    from pyspark.sql.types import DataType, StructType

_TABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?$")
_GID = re.compile(r"^stoker:(?P<job>[^:]+):(?P<epoch>\d+):(?P<attempt>\d+):(?P<part>\d+)$")


def gid_prefix(job_id: str, epoch: int, attempt: int) -> str:
    """The prepared-transaction id of a task is this prefix followed by its partition id."""
    return f"stoker:{job_id}:{epoch}:{attempt}:"


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
    raise SinkError(
        "postgres.schema", f"no PostgreSQL column type for Spark type {dt.simpleString()}"
    )


def _write_partition(
    dsn: str, table: str, columns: list[str], prefix: str, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """Runs in a Spark task: one transaction for the partition, ended by PREPARE TRANSACTION."""
    import psycopg
    import pyarrow as pa
    from psycopg import sql
    from pyspark import TaskContext

    ctx = TaskContext.get()
    part = ctx.partitionId() if ctx is not None else 0
    gid = f"{prefix}{part}"
    rows = 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        # A retried task finds the part its earlier try prepared: replace it.
        if conn.execute("SELECT 1 FROM pg_prepared_xacts WHERE gid = %s", (gid,)).fetchone():
            conn.execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(gid)))
        conn.autocommit = False
        copy_sql = sql.SQL("COPY {} ({}) FROM STDIN").format(
            sql.Identifier(*table.split(".")), sql.SQL(", ").join(map(sql.Identifier, columns))
        )
        with conn.cursor() as cur, cur.copy(copy_sql) as copy:
            for batch in batches:
                for row in zip(
                    *(batch.column(i).to_pylist() for i in range(batch.num_columns)), strict=True
                ):
                    copy.write_row(row)
                rows += batch.num_rows
        # The transaction survives this process from here on, until COMMIT/ROLLBACK PREPARED.
        conn.execute(sql.SQL("PREPARE TRANSACTION {}").format(sql.Literal(gid)))
        conn.autocommit = True
    yield pa.RecordBatch.from_pylist(
        [{"part": part, "rows": rows, "gid": gid}],
        schema=pa.schema([("part", pa.int32()), ("rows", pa.int64()), ("gid", pa.string())]),
    )


@dataclass
class PostgresSink:
    """Exactly-once rows in a PostgreSQL table through PREPARE TRANSACTION / COMMIT PREPARED."""

    dsn: str
    table: str
    create_table: bool = True
    name: str = ""

    def __post_init__(self) -> None:
        if not self.name:
            self.name = f"postgres:{self.table}"
        self._job: JobId | None = None
        self._created = False

    def describe(self) -> str:
        return f"postgres(table={self.table!r})"

    def _connect(self) -> Any:
        import psycopg

        try:
            return psycopg.connect(self.dsn, autocommit=True, connect_timeout=5)
        except psycopg.Error as e:
            raise SinkError("postgres.dsn", f"cannot connect to PostgreSQL: {e}".strip()) from e

    def validate(self) -> None:
        if not _TABLE.match(self.table):
            raise SinkError(
                "postgres.table",
                f"{self.table!r} is not a plain table name "
                "(letters, digits and '_', optionally schema.table)",
            )
        with self._connect() as conn:
            row = conn.execute("SHOW max_prepared_transactions").fetchone()
            n = int(row[0]) if row else 0
            if n <= 0:
                raise SinkError(
                    "postgres",
                    "the server has max_prepared_transactions = 0, so it cannot hold prepared "
                    "transactions; set max_prepared_transactions to at least the number of "
                    "parallel tasks (e.g. 64) in postgresql.conf (or ALTER SYSTEM SET "
                    "max_prepared_transactions = 64) and restart the server",
                )

    def open(self, job_id: JobId, state_dir: Path) -> None:
        self._job = job_id

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

    def prepare(self, df: DataFrame, epoch: Epoch, attempt: AttemptNo) -> Prepared:
        assert self._job is not None, "open() first"
        self._ensure_table(df.schema)
        dsn, table, columns = self.dsn, self.table, list(df.columns)
        prefix = gid_prefix(self._job, epoch, attempt)

        def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            return _write_partition(dsn, table, columns, prefix, batches)

        results = df.mapInArrow(write, "part int, rows long, gid string").collect()
        rows = sum(int(r["rows"]) for r in results)
        return Prepared(rows=rows, detail={"gids": sorted(r["gid"] for r in results)})

    def _prepared(self, conn: Any) -> list[tuple[str, Epoch, AttemptNo]]:
        out = []
        for (gid,) in conn.execute(
            "SELECT gid FROM pg_prepared_xacts WHERE database = current_database() AND gid LIKE %s",
            (f"stoker:{self._job}:%",),
        ).fetchall():
            m = _GID.match(gid)
            if m and m.group("job") == self._job:
                out.append((gid, Epoch(int(m.group("epoch"))), AttemptNo(int(m.group("attempt")))))
        return out

    def _finish(self, conn: Any, gid: str, commit: bool) -> None:
        import psycopg
        from psycopg import sql

        verb = "COMMIT PREPARED {}" if commit else "ROLLBACK PREPARED {}"
        # Finished meanwhile by another recovery: commit and abort are idempotent.
        with contextlib.suppress(psycopg.errors.UndefinedObject):
            conn.execute(sql.SQL(verb).format(sql.Literal(gid)))

    def commit(self, epoch: Epoch, attempt: AttemptNo) -> None:
        with self._connect() as conn:
            for gid, e, a in self._prepared(conn):
                if e == epoch:
                    # Parts of this epoch by other (fenced or dead) attempts are never committed.
                    self._finish(conn, gid, commit=a == attempt)

    def abort(self, epoch: Epoch, attempt: AttemptNo) -> None:
        with self._connect() as conn:
            for gid, e, a in self._prepared(conn):
                if e == epoch and a == attempt:
                    self._finish(conn, gid, commit=False)

    def recover(self, decision: Decision) -> Recovered:
        done = Recovered()
        with self._connect() as conn:
            for gid, e, a in self._prepared(conn):
                ok = decision(e) == a
                self._finish(conn, gid, commit=ok)
                (done.committed if ok else done.aborted).append((e, a))
        return done
