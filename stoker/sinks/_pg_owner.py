"""Who writes a PostgreSQL table for a job id: one owner row per (table, job id) in
``stoker_owners``, beside ``stoker_parts`` in the table's schema, naming the uid of the job's
record in its store.

Two jobs of one id (two state folders, each with its own store; a local ``stoker run``
beside a managed job) number their epochs alike; their parts are told apart by the uid in
the gid, but their rows would both land in the table. So the first uid to open the table for
a job id claims it (an ``INSERT`` that only one of two racing jobs wins), and every other
uid of that id is refused at ``validate`` and ``open``, naming the owner.

The sink cannot see another job's store, so it cannot tell an owner that is gone (its store
deleted) from one that is stopped, failed or between attempts with a decided epoch waiting
for its recovery. An owner row therefore holds until the user releases it: the refusal says
how (one ``DELETE``). The next uid to claim the released table rolls back what the old uid
left prepared there (see :meth:`stoker.sinks.postgres.PostgresSink.open`).

A restore from a savepoint hands the table over, as a files sink's marker is: the savepoint's
job id's row is marked ``handed_to`` the restored job (:func:`hand_over`), which goes on with
the same uid under its own id. The old job id is refused from then on (``validate``, ``open``,
and a commit of a zombie), naming the job that took over: run again, it would write the
epochs after the savepoint a second time. The column is added to an owner table that
predates it when the first handover needs it; rows are read without naming it.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from stoker.errors import OwnedElsewhere, SinkError
from stoker.sinks._pg_server import create_missing_table
from stoker.sinks.base import SinkOwner

OWNERS = "stoker_owners"
FIELD = "postgres.table"


@dataclass(frozen=True)
class TableOwner:
    """An owner row: the job id and uid that write ``table`` (schema, name)."""

    table: tuple[str, str]
    job_id: str
    uid: str
    claimed_at: datetime | None = None
    host: str = ""
    pid: int = 0
    handed_to: str | None = None  # the job a restore handed this job id's rows over to

    def owned_by(self, owner: SinkOwner) -> bool:
        return (self.job_id, self.uid) == (owner.job_id, owner.uid) and self.handed_to is None

    def describe(self) -> str:
        when = f" at {self.claimed_at:%Y-%m-%d %H:%M:%S %Z}" if self.claimed_at else ""
        where = f" on {self.host} (pid {self.pid})" if self.host else ""
        return f"job {self.job_id!r} (uid {self.uid}), which claimed it{when}{where}"

    def release_sql(self) -> str:
        """The statement that releases the table from this owner."""
        schema, name = self.table
        return (
            f"DELETE FROM {_quoted(schema)}.{OWNERS} WHERE table_name = {_literal(name)} "
            f"AND job_id = {_literal(self.job_id)} AND uid = {_literal(self.uid)}"
        )


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def qualified(table: tuple[str, str]) -> str:
    return ".".join(_quoted(p) for p in table)


def _name(table: tuple[str, str]) -> Any:
    from psycopg import sql

    return sql.Identifier(table[0], OWNERS)


def ensure_owners(conn: Any, table: tuple[str, str]) -> None:
    """Create the owner table beside ``table`` if it is missing."""
    from psycopg import sql

    create_missing_table(
        conn,
        qualified((table[0], OWNERS)),
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (table_name TEXT NOT NULL, job_id TEXT NOT NULL, "
            "uid TEXT NOT NULL, claimed_at TIMESTAMPTZ NOT NULL DEFAULT now(), "
            "host TEXT NOT NULL DEFAULT '', pid INTEGER NOT NULL DEFAULT 0, handed_to TEXT, "
            "PRIMARY KEY (table_name, job_id))"
        ).format(_name(table)),
    )


def read_owner(
    conn: Any, table: tuple[str, str], job_id: str, exists: bool = False
) -> TableOwner | None:
    """The owner row of (``table``, ``job_id``); None when there is none (or no owner table
    yet: reading creates nothing, so ``validate`` can ask; ``exists``: it is known to be
    there, one query fewer)."""
    from psycopg import errors, sql

    if (
        not exists
        and not conn.execute("SELECT to_regclass(%s)", (qualified((table[0], OWNERS)),)).fetchone()[
            0
        ]
    ):
        return None
    # ``handed_to`` through the row's JSON: an owner table made before the column reads too.
    query = sql.SQL(
        "SELECT uid, claimed_at, host, pid, to_jsonb(o) ->> 'handed_to' FROM {} o "
        "WHERE table_name = %s AND job_id = %s"
    ).format(_name(table))
    try:
        row = conn.execute(query, (table[1], job_id)).fetchone()
    except errors.UndefinedTable:  # dropped since: no owner
        return None
    if row is None:
        return None
    return TableOwner(table, job_id, str(row[0]), row[1], str(row[2]), int(row[3]), row[4])


def claim(conn: Any, table: tuple[str, str], owner: SinkOwner) -> tuple[TableOwner, bool]:
    """Make ``owner`` the owner of (``table``, its job id) unless some uid is already; return
    the owner row and whether this call claimed it (False: it was there before)."""
    from psycopg import sql

    ensure_owners(conn, table)
    won = conn.execute(
        sql.SQL(
            "INSERT INTO {} (table_name, job_id, uid, host, pid) VALUES (%s, %s, %s, %s, %s) "
            "ON CONFLICT DO NOTHING RETURNING uid"
        ).format(_name(table)),
        (table[1], owner.job_id, owner.uid, socket.gethostname(), os.getpid()),
    ).fetchone()
    row = read_owner(conn, table, owner.job_id, exists=True)
    if row is None:  # released again between the two statements: nobody holds it now
        raise SinkError(FIELD, f"table {qualified(table)}: its owner row vanished while claimed")
    return row, won is not None


def hand_over(conn: Any, table: tuple[str, str], previous: SinkOwner, to: SinkOwner) -> bool:
    """Mark ``previous``'s owner row of ``table`` handed over to ``to``'s job (a restore from
    ``previous``'s savepoint); whether a row was marked now (False: none of ``previous``'s,
    or handed over already). Idempotent."""
    from psycopg import sql

    row = read_owner(conn, table, previous.job_id)
    if row is None or row.uid != previous.uid or row.handed_to == to.job_id:
        return False
    # A short lock: the column is added only to an owner table made before it existed, and
    # nothing holds that table in a prepared transaction (parts never touch it).
    conn.execute("SET lock_timeout = '10s'")  # autocommit: for this connection
    conn.execute(
        sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS handed_to TEXT").format(_name(table))
    )
    n = conn.execute(
        sql.SQL(
            "UPDATE {} SET handed_to = %s WHERE table_name = %s AND job_id = %s AND uid = %s"
        ).format(_name(table)),
        (to.job_id, table[1], previous.job_id, previous.uid),
    ).rowcount
    return bool(n)


def refusal(row: TableOwner, owner: SinkOwner) -> OwnedElsewhere:
    """The error for ``owner`` finding its table written for its job id by another uid (or
    handed over to another job by a restore): who, since when, and the ways out."""
    if row.handed_to is not None and row.uid == owner.uid:
        return OwnedElsewhere(
            FIELD,
            f"table {qualified(row.table)} was handed over from job {owner.job_id!r} to job "
            f"{row.handed_to!r} by a restore from a savepoint of {owner.job_id!r}: job "
            f"{row.handed_to!r} goes on writing it (the same uid, {owner.uid}), and this job "
            "would write the epochs after the savepoint again. Run job "
            f"{row.handed_to!r} instead; if it is gone for good and this job is to write the "
            f"table again, release the row with: {row.release_sql()}",
        )
    return OwnedElsewhere(
        FIELD,
        f"table {qualified(row.table)} is written for job {owner.job_id!r} by {row.describe()}; "
        f"this job (uid {owner.uid}) is not that job's record (its store or state folder is "
        "another), and two jobs of one id on one table would both write it. Run the job "
        "from the state folder and store it was started with, or give this one another job "
        f"id or table. If that job is gone for good (its store and state folder deleted), "
        f"release the table with: {row.release_sql()}; what it left prepared in the table "
        "is then rolled back when this job opens it",
    )


def check_still_owner(conn: Any, table: tuple[str, str], owner: SinkOwner) -> None:
    """Raise :class:`SinkError` when the table was released (or claimed by another uid) since
    this job opened it: what this job prepared may have been rolled back by the new owner."""
    row = read_owner(conn, table, owner.job_id, exists=True)
    if row is None or not row.owned_by(owner):
        if row is None:
            why = "was deleted (released)"
        elif row.handed_to is not None:
            why = f"was handed over to job {row.handed_to!r} by a restore from a savepoint"
        else:
            why = f"names {row.describe()}"
        raise SinkError(
            FIELD,
            f"table {qualified(table)} is no longer written for job {owner.job_id!r} by uid "
            f"{owner.uid}: its owner row {why}; nothing more is committed to it",
        )
