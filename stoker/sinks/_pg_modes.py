"""How a PostgreSQL sink writes Spark's ``update`` and ``complete`` output modes exactly once.

An ``append`` part COPYs its rows into the table itself. An upsert (``key`` given) or a
replace (``complete``) cannot be done inside the part's prepared transaction: two parts
holding one key (a retried or speculative task's copy, a zombie's late part, two coalesced
partitions) would each lock that row until COMMIT PREPARED, and the second would wait for ever
on a prepared transaction that only the epoch's commit ends; and PostgreSQL refuses to PREPARE
a transaction that touched a temporary table. So a part COPYs its rows into the sink's
*stage* table ``stoker_stage_<tag>`` (beside the table, insert only: no part ever waits on
another), with its (uid, epoch, part) and a running number per row, plus one *head* row
(number -1) that says the part exists even when it holds no rows.

Once the epoch's recorded parts are committed (their stage rows visible), the sink's commit
*applies* the stage to the table in one transaction that also deletes the applied stage rows:

- upsert: for every key the newest staged row (latest epoch, then part, then row number)
  goes in with ``INSERT ... ON CONFLICT (key) DO UPDATE``: rows of one key in two parts of one
  epoch, or in two epochs whose application a crash delayed, give one row, the last written;
- replace: ``DELETE FROM`` the table and insert the rows of the newest epoch that has a head.

Readers see the table change at once, per epoch. A crash between COMMIT PREPARED and the
application leaves the epoch's sink transaction unfinished in the store, so recovery calls
commit again, which applies what is staged; an application that happened already left nothing
staged (a replace then does nothing: no head is left), so applying is idempotent.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from stoker.errors import InvalidSink
from stoker.sinks._pg_parts import Table, table_parts

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

# The stage's own columns, before the table's; a head row has number HEAD.
STAGE_COLUMNS = ("stoker_uid", "stoker_epoch", "stoker_part", "stoker_ord")
HEAD = -1
MODES = ("append", "update", "complete")


def stage_name(table: Table, tag: str) -> tuple[str, ...]:
    """The stage of the sink whose resolved table has tag ``tag``, in that table's schema
    (named by the tag: any table name fits in PostgreSQL's 63 bytes)."""
    return (*table_parts(table)[:-1], f"stoker_stage_{tag}")


def staged(mode: str, key: Sequence[str] | None) -> bool:
    """Whether parts go through the stage: an upsert (a key) or a replace (complete)."""
    return mode == "complete" or bool(key)


def check_key(key: Sequence[str] | None) -> tuple[str, ...] | None:
    """The ``key`` option as a tuple of column names; InvalidSink naming what is wrong."""
    if key is None:
        return None
    names = (key,) if isinstance(key, str) else key
    if (
        isinstance(names, bool | bytes)
        or not isinstance(names, Sequence)
        or not names
        or not all(isinstance(k, str) and k for k in names)
    ):
        raise InvalidSink(
            "postgres.key", f"must be a column name or a non-empty list of them, got {key!r}"
        )
    if len(set(names)) != len(names):
        raise InvalidSink("postgres.key", f"names a column twice: {list(names)}")
    return tuple(names)


def check_mode(mode: str, key: tuple[str, ...] | None, table: str) -> None:
    """Refuse an output mode the sink cannot write as the mode means (never silently append)."""
    if mode not in MODES:
        raise InvalidSink("postgres.output_mode", f"must be one of {', '.join(MODES)}: {mode!r}")
    if mode == "update" and not key:
        raise InvalidSink(
            "postgres.key",
            f"output_mode='update' gives each epoch's changed rows; appended to {table!r} they "
            "would pile up as a changelog. Declare the columns that identify a row, e.g. "
            f"sinks.postgres(dsn, {table!r}, key=['k']): each epoch is then upserted on them "
            "(INSERT ... ON CONFLICT); or use output_mode='complete' to replace the table",
        )


def ensure_stage(conn: Any, stage: tuple[str, ...], schema: StructType) -> list[str]:
    """Create the stage if it is missing: its own columns, then the epoch's, all nullable
    (a head row holds no values). A stage that exists takes the epoch's columns it lacks,
    nullable, as the table does (new code adding an output column): a part COPYs
    every output column into it. The columns added to an existing stage."""
    from psycopg import errors, sql

    from stoker.sinks._pg_server import _pg_type

    name = sql.Identifier(*stage)
    if conn.execute("SELECT to_regclass(%s)", (name.as_string(conn),)).fetchone()[0] is not None:
        have = set(_columns(conn, stage))
        missing = [f for f in schema.fields if f.name not in have]
        if missing:
            # Only when one is missing: the ALTER waits for any transaction holding the stage.
            with conn.transaction():
                for f in missing:
                    conn.execute(
                        sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS {} {}").format(
                            name, sql.Identifier(f.name), sql.SQL(_pg_type(f.dataType))
                        )
                    )
        return [f.name for f in missing]
    cols = sql.SQL(", ").join(
        sql.SQL("{} {}").format(sql.Identifier(f.name), sql.SQL(_pg_type(f.dataType)))
        for f in schema.fields
    )
    # Two drivers creating it at once: one wins, the other sees it exist.
    with (
        contextlib.suppress(errors.UniqueViolation, errors.DuplicateTable),
        conn.transaction(),
    ):
        conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (stoker_uid TEXT NOT NULL, stoker_epoch BIGINT "
                "NOT NULL, stoker_part INTEGER NOT NULL, stoker_ord BIGINT NOT NULL, {})"
            ).format(name, cols)
        )
        conn.execute(
            sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (stoker_uid, stoker_epoch)").format(
                sql.Identifier(f"{stage[-1]}_uid_epoch"), name
            )
        )
    return []


def copy_staged(copy: Any, uid: str, epoch: int, part: int, rows: Any, width: int) -> int:
    """Write a part's head row and its rows into the stage's COPY; the rows written."""
    copy.write_row((uid, epoch, part, HEAD, *([None] * width)))
    n = 0
    for row in rows:
        copy.write_row((uid, epoch, part, n, *row))
        n += 1
    return n


def has_unique_key(conn: Any, table: tuple[str, str], key: Sequence[str]) -> bool:
    """Whether ``table`` has a primary key or a plain unique index on exactly ``key`` (what
    ``ON CONFLICT (key)`` needs; the columns' order does not matter)."""
    row = conn.execute(
        "SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relname = %s AND i.indisunique AND i.indpred IS NULL "
        "AND i.indexprs IS NULL AND (SELECT array_agg(a.attname::text ORDER BY a.attname) "
        "FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum = ANY(i.indkey)) = %s "
        "LIMIT 1",
        (table[0], table[1], sorted(key)),
    ).fetchone()
    return row is not None


def table_exists(conn: Any, table: tuple[str, str]) -> bool:
    from psycopg import sql

    name = sql.Identifier(*table).as_string(conn)
    return conn.execute("SELECT to_regclass(%s)", (name,)).fetchone()[0] is not None


def _shown(name: str) -> str:
    """An identifier as SQL to run takes it: bare when plain, else in double quotes (a name
    Spark generates, ``CAST(session.start AS BIGINT)``)."""
    if re.fullmatch(r"[a-z_][a-z0-9_]*", name):
        return name
    return '"' + name.replace('"', '""') + '"'


def check_unique_key(conn: Any, table: tuple[str, str], key: Sequence[str]) -> None:
    """An existing table to upsert into has a unique constraint on the key: refuse it
    otherwise, saying how to add one (nothing is changed)."""
    if not table_exists(conn, table) or has_unique_key(conn, table, key):
        return
    cols = ", ".join(map(_shown, key))
    name = ".".join(map(_shown, table))
    raise InvalidSink(
        "postgres.key",
        f"table {name} has no primary key or unique index on ({cols}), which the upsert "
        f"(INSERT ... ON CONFLICT ({cols})) needs: add one, e.g. ALTER TABLE {name} ADD "
        f"PRIMARY KEY ({cols}), or write into a new table (create_table=True creates it "
        "with that key)",
    )


def _columns(conn: Any, stage: tuple[str, ...]) -> list[str]:
    """The table's columns the stage holds (its own columns left out), in order."""
    from psycopg import sql

    rows = conn.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attnum > 0 "
        "AND NOT attisdropped ORDER BY attnum",
        (sql.Identifier(*stage).as_string(conn),),
    ).fetchall()
    return [str(r[0]) for r in rows if str(r[0]) not in STAGE_COLUMNS]


def apply_stage(
    conn: Any,
    table: tuple[str, str],
    stage: tuple[str, ...],
    uid: str,
    epoch: int,
    key: Sequence[str] | None,
    replace: bool,
) -> int:
    """Apply what ``uid`` staged for epochs up to ``epoch`` to the table, in one transaction
    that deletes it from the stage; the rows applied (0 when nothing was staged)."""
    from psycopg import sql

    name = sql.Identifier(*stage)
    if conn.execute("SELECT to_regclass(%s)", (name.as_string(conn),)).fetchone()[0] is None:
        return 0
    target = sql.Identifier(*table)
    with conn.transaction():
        # One application at a time (a commit and a concurrent recovery of the same epoch).
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (".".join(stage),))
        cols = _columns(conn, stage)
        col_list = sql.SQL(", ").join(map(sql.Identifier, cols))
        if replace:
            applied = _replace(conn, target, name, col_list, uid, epoch)
        else:
            applied = _upsert(conn, target, name, cols, tuple(key or ()), uid, epoch)
        conn.execute(
            sql.SQL("DELETE FROM {} WHERE stoker_uid = %s AND stoker_epoch <= %s").format(name),
            (uid, epoch),
        )
    return applied


def _replace(conn: Any, target: Any, stage: Any, cols: Any, uid: str, epoch: int) -> int:
    from psycopg import sql

    (newest,) = conn.execute(
        sql.SQL(
            "SELECT max(stoker_epoch) FROM {} WHERE stoker_uid = %s AND stoker_epoch <= %s "
            "AND stoker_ord = %s"
        ).format(stage),
        (uid, epoch, HEAD),
    ).fetchone()
    if newest is None:
        return 0  # applied before: replacing again with nothing would empty the table
    conn.execute(sql.SQL("DELETE FROM {}").format(target))
    cur = conn.execute(
        sql.SQL(
            "INSERT INTO {} ({}) SELECT {} FROM {} WHERE stoker_uid = %s AND stoker_epoch = %s "
            "AND stoker_ord <> %s"
        ).format(target, cols, cols, stage),
        (uid, newest, HEAD),
    )
    return int(cur.rowcount)


def _upsert(
    conn: Any,
    target: Any,
    stage: Any,
    cols: list[str],
    key: tuple[str, ...],
    uid: str,
    epoch: int,
) -> int:
    from psycopg import sql

    keys = sql.SQL(", ").join(map(sql.Identifier, key))
    rest = [c for c in cols if c not in key]
    action = (
        sql.SQL("DO UPDATE SET ")
        + sql.SQL(", ").join(
            sql.SQL("{} = EXCLUDED.{}").format(sql.Identifier(c), sql.Identifier(c)) for c in rest
        )
        if rest
        else sql.SQL("DO NOTHING")
    )
    col_list = sql.SQL(", ").join(map(sql.Identifier, cols))
    # One row per key (ON CONFLICT cannot touch a row twice in one statement): the last
    # written, by epoch, then part, then row number.
    cur = conn.execute(
        sql.SQL(
            "INSERT INTO {} ({}) SELECT DISTINCT ON ({}) {} FROM {} WHERE stoker_uid = %s AND "
            "stoker_epoch <= %s AND stoker_ord <> %s ORDER BY {}, stoker_epoch DESC, "
            "stoker_part DESC, stoker_ord DESC ON CONFLICT ({}) "
        ).format(target, col_list, keys, col_list, stage, keys, keys)
        + action,
        (uid, epoch, HEAD),
    )
    return int(cur.rowcount)
