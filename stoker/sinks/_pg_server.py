"""What a PostgreSQL sink asks of its server before it writes: a connection (the DSN checked),
room for its prepared transactions (``max_prepared_transactions`` against the writers), a
plain table name and the schema it resolves to, output column names it can take as they are
(at most 63 bytes), a column type for each Spark type, and the
marker table its parts commit their rows in (:data:`~stoker.sinks._pg_parts.MARKERS`)."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from stoker.errors import InvalidSink, SinkError
from stoker.sinks._pg_parts import MARKERS, Table, _markers_name

if TYPE_CHECKING:
    from pyspark.sql.types import DataType

_TABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?$")


def connect(dsn: str) -> Any:
    import psycopg

    try:
        return psycopg.connect(dsn, autocommit=True, connect_timeout=5)
    except psycopg.Error as e:
        raise SinkError("postgres.dsn", f"cannot connect to PostgreSQL: {e}".strip()) from e


# bounds ----------------------------------------------------------------------------------------
def default_writers(max_prepared: int) -> int:
    """Writers when ``max_writers`` is not set: a quarter of the server's prepared
    transactions, leaving room for retried and speculative copies, strays awaiting the
    next commit's scan, and other jobs on the same server."""
    return max(1, max_prepared // 4)


def fit_writers(max_prepared: int, max_writers: int | None) -> int:
    """The writer count for a server with ``max_prepared``; InvalidSink if it cannot fit."""
    if max_prepared <= 0:
        raise InvalidSink(
            "postgres",
            "the server has max_prepared_transactions = 0, so it cannot hold prepared "
            "transactions; set max_prepared_transactions to at least the number of "
            "parallel tasks (e.g. 64) in postgresql.conf (or ALTER SYSTEM SET "
            "max_prepared_transactions = 64) and restart the server",
        )
    writers = max_writers or default_writers(max_prepared)
    # Every writer may hold a second prepared part at once (a retry or a speculative copy
    # of its task, until the commit rolls it back).
    if 2 * writers > max_prepared:
        what = (
            f"max_writers = {writers}"
            if max_writers
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


def check_options(table: str, max_writers: int | None) -> None:
    """The sink's own options, before the server is asked anything."""
    if not _TABLE.match(table):
        raise InvalidSink(
            "postgres.table",
            f"{table!r} is not a plain table name "
            "(letters, digits and '_', optionally schema.table)",
        )
    if max_writers is not None and (
        isinstance(max_writers, bool) or not isinstance(max_writers, int) or max_writers < 1
    ):
        raise InvalidSink(
            "postgres.max_writers",
            f"must be a whole number >= 1 (or None for the server's default), got {max_writers!r}",
        )


def max_prepared(conn: Any) -> int:
    row = conn.execute("SHOW max_prepared_transactions").fetchone()
    return int(row[0]) if row else 0


# tables ----------------------------------------------------------------------------------------
def resolve_table(conn: Any, table: str) -> tuple[str, str]:
    """The (schema, table) the server writes for ``table`` as the user wrote it.

    A table that exists: where the server's search path finds it (``to_regclass``). One that
    does not (yet; ``create_table`` creates it at the first prepare): the written schema, or
    else the schema ``CREATE TABLE`` would put it in (``current_schema()``). The sink then
    names the resolved table everywhere, so a table created later in another schema of the
    search path does not move it."""
    from psycopg import sql

    parts = table.split(".")
    quoted = sql.Identifier(*parts).as_string(conn)
    row = conn.execute(
        "SELECT n.nspname, c.relname FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass(%s)",
        (quoted,),
    ).fetchone()
    if row is not None:
        return str(row[0]), str(row[1])
    if len(parts) == 2:
        return parts[0], parts[1]
    (schema,) = conn.execute("SELECT current_schema()").fetchone()
    if schema is None:
        (path,) = conn.execute("SHOW search_path").fetchone()
        raise InvalidSink(
            "postgres.table",
            f"table {table!r} does not exist and no schema of the search_path ({path}) "
            "exists to create it in: write the table as schema.table, or create the schema",
        )
    return str(schema), parts[0]


def _table_columns(conn: Any, table: tuple[str, str]) -> set[str]:
    """The table's columns (none: no such table)."""
    from psycopg import sql

    rows = conn.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attnum > 0 "
        "AND NOT attisdropped",
        (sql.Identifier(*table).as_string(conn),),
    ).fetchall()
    return {str(r[0]) for r in rows}


def add_missing_columns(conn: Any, table: tuple[str, str], fields: dict[str, str]) -> list[str]:
    """Add to the table, nullable, each of ``fields`` (name -> PostgreSQL type) it lacks, in
    one transaction; the names added."""
    from psycopg import sql

    have = _table_columns(conn, table)
    if not have:
        return []  # no table: check_columns says so
    missing = [c for c in fields if c not in have]
    if missing:
        with conn.transaction():
            for c in missing:
                conn.execute(
                    sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS {} {}").format(
                        sql.Identifier(*table), sql.Identifier(c), sql.SQL(fields[c])
                    )
                )
    return missing


def check_columns(conn: Any, table: tuple[str, str], fields: dict[str, str], sink: str) -> None:
    """The table exists and has a column for every field an epoch writes (``fields``: name ->
    the PostgreSQL type stoker would give it); else InvalidSink saying what to run. A missing
    table or column fails every retry the same way (bad input: exit 2, never retried); a
    column the table has and the output lacks gets its default."""
    from psycopg import sql

    name = sql.Identifier(*table).as_string(conn)
    have = _table_columns(conn, table)
    if not have:
        raise InvalidSink(
            "postgres.table",
            f"table {name} of sink {sink!r} does not exist: create it, or pass "
            "create_table=True to have the sink create it",
        )
    missing = [c for c in fields if c not in have]
    if missing:
        adds = ", ".join(
            f"ADD COLUMN {sql.Identifier(c).as_string(conn)} {fields[c]}" for c in missing
        )
        raise InvalidSink(
            "postgres.table",
            f"table {name} of sink {sink!r} has no column {', '.join(missing)} that the "
            f"pipeline writes: add it (ALTER TABLE {name} {adds}) or leave it out of the "
            "output",
        )


# PostgreSQL's NAMEDATALEN - 1: a longer identifier is cut to this many bytes, silently.
NAME_MAX = 63


def _cut(name: str) -> str:
    """``name`` as PostgreSQL keeps it: its first 63 bytes, on a character boundary."""
    return name.encode()[:NAME_MAX].decode(errors="ignore")


def check_output_columns(
    columns: Sequence[str], key: Sequence[str] | None, reserved: Sequence[str], sink: str
) -> None:
    """Refuse an output whose columns the sink cannot write as they are named, before
    anything is written: a name PostgreSQL would cut to 63 bytes (it would write another
    column, or two names into one), the same name twice, an empty one, one the sink's stage
    uses itself (``reserved``), a ``key`` column the output lacks. Any other name (Spark's
    ``CAST(session.start AS BIGINT)`` among them) is written as it is, always quoted."""
    fix = (
        "alias it in the pipeline, e.g. F.col('session.start').cast('long').alias('start'), "
        "or df.withColumnRenamed(name, 'start')"
    )
    long = [c for c in columns if len(c.encode()) > NAME_MAX]
    if long:
        by_cut: dict[str, list[str]] = {}
        for c in columns:
            by_cut.setdefault(_cut(c), []).append(c)
        clashes = "".join(
            f"; {' and '.join(map(repr, v))} would all be the column {k!r}"
            for k, v in by_cut.items()
            if len(v) > 1
        )
        raise InvalidSink(
            "postgres.columns",
            f"output column(s) {', '.join(map(repr, long))} of sink {sink!r} are longer than "
            f"the 63 bytes PostgreSQL keeps of a name (it would cut them){clashes}: {fix} "
            "to a name of at most 63 bytes",
        )
    seen: set[str] = set()
    for c in columns:
        why = (
            "is there twice"
            if c in seen
            else "is a column of the sink's stage table"
            if c in reserved
            else "is not a name PostgreSQL takes"
            if not c or "\x00" in c
            else None
        )
        if why is not None:
            raise InvalidSink(
                "postgres.columns", f"output column {c!r} of sink {sink!r} {why}: {fix}"
            )
        seen.add(c)
    missing = [k for k in key or () if k not in seen]
    if missing:
        raise InvalidSink(
            "postgres.key",
            f"key column(s) {missing} of sink {sink!r} are not in the output's columns "
            f"{list(columns)}",
        )


def server_key(conn: Any) -> str:
    """Which server and database a connection reaches, as far as the server tells: its
    address and port (a Unix socket: the socket folder the client used) and the database."""
    row = conn.execute(
        "SELECT host(inet_server_addr()), inet_server_port(), current_database()"
    ).fetchone()
    addr = row[0] if row[0] is not None else f"socket {conn.info.host}"
    port = row[1] if row[1] is not None else conn.info.port
    return f"{addr}:{port}/{row[2]}"


def create_missing_table(conn: Any, qualified: str, *statements: Any) -> None:
    """Run ``statements`` (a CREATE TABLE and its indexes) unless ``qualified`` exists already.
    Only when missing: CREATE INDEX IF NOT EXISTS would wait for the prepared parts that hold
    the table (recovery comes after open), for ever. Two drivers creating it at once: one wins,
    the other sees it exist."""
    from psycopg import errors

    if conn.execute("SELECT to_regclass(%s)", (qualified,)).fetchone()[0] is not None:
        return
    with (
        contextlib.suppress(errors.UniqueViolation, errors.DuplicateTable),
        conn.transaction(),
    ):
        for statement in statements:
            conn.execute(statement)


def ensure_markers(conn: Any, table: Table) -> None:
    """Create the marker table beside ``table`` if it is missing."""
    from psycopg import sql

    name = sql.Identifier(*_markers_name(table))
    create_missing_table(
        conn,
        name.as_string(conn),
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (uid TEXT NOT NULL, gid TEXT NOT NULL, "
            "job_id TEXT NOT NULL, epoch BIGINT NOT NULL, attempt INTEGER NOT NULL, "
            "part INTEGER NOT NULL, made_at TIMESTAMPTZ NOT NULL DEFAULT now(), "
            "PRIMARY KEY (uid, gid))"
        ).format(name),
        sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (uid, epoch)").format(
            sql.Identifier(f"{MARKERS}_uid_epoch"), name
        ),
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
