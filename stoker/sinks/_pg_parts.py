"""A PostgreSQL sink's parts: the gid that names each prepared transaction, the marker row
that commits with it, and the queries on the server's prepared transactions (which parts of a
job are prepared, whether one was committed, COMMIT or ROLLBACK PREPARED).

    gid = stoker:<job>:<epoch>:<attempt>:<partition>:<task attempt id>:<sink tag>:<uid hash>

The uid hash names the job's record in its store (:class:`~stoker.sinks.base.SinkOwner`): two
jobs of one id (two state folders, each with its own store) never take each other's parts.
Gids of earlier versions name no uid; see :func:`prepared_parts` for when they are a job's.
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass
from typing import Any

from stoker.errors import InvalidSink
from stoker.types import AttemptNo, Epoch

log = logging.getLogger("stoker.sinks.postgres")

# The current gid, and the legacy ones of earlier versions: without the uid hash, and before
# that without task attempt and sink tag.
_GID = re.compile(
    r"^stoker:(?P<job>[^:]+):(?P<epoch>\d+):(?P<attempt>\d+):(?P<part>\d+)"
    r"(?::(?P<task>\d+):(?P<tag>[0-9a-f]{8})(?::(?P<owner>[0-9a-f]{12}))?)?$"
)
# PostgreSQL's GIDSIZE is 200 bytes with the terminating NUL. The longest gid: 7 + 100 (job)
# + 1 + 19 (epoch) + 1 + 10 (attempt) + 1 + 10 (partition) + 1 + 19 (task) + 1 + 8 (tag)
# + 1 + 12 (uid hash) = 191.
GID_MAX = 199
MARKERS = "stoker_parts"
# A table written as `schema.table`, or resolved by the server to (schema, table).
Table = str | tuple[str, str]


def uid_hash(uid: str) -> str:
    """The short name of a job's uid in its gids (48 bits: two uids of one job id on one
    table colliding is not a practical concern)."""
    return hashlib.sha1(uid.encode()).hexdigest()[:12]


def table_parts(table: Table) -> tuple[str, ...]:
    """The identifier parts of ``table``: (schema, table) or (table,)."""
    return table if isinstance(table, tuple) else tuple(table.split("."))


def gid_prefix(job_id: str, epoch: int, attempt: int) -> str:
    """Every gid of (job, epoch, attempt) starts with this (then partition, task, sink tag)."""
    return f"stoker:{job_id}:{epoch}:{attempt}:"


def make_gid(
    job_id: str, epoch: int, attempt: int, part: int, task: int, tag: str, owner: str
) -> str:
    """The gid of a part; ``owner`` is the job uid's :func:`uid_hash`."""
    gid = f"{gid_prefix(job_id, epoch, attempt)}{part}:{task}:{tag}:{owner}"
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
    owner: str | None = None  # the uid hash; None: a legacy gid, which names no uid


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
        m.group("owner"),
    )


def _markers_name(table: Table) -> tuple[str, ...]:
    """The marker table, in the schema of the sink's table."""
    return (*table_parts(table)[:-1], MARKERS)


@dataclass(frozen=True)
class Scope:
    """Which prepared gids are one sink's of one job: ``job`` and ``tag`` (the resolved
    table), ``owner`` (the uid hash), and ``legacy_tag`` (the tag versions without a uid in
    the gid derived from the table as written)."""

    job: str
    tag: str
    owner: str
    legacy_tag: str

    def holds(self, p: ParsedGid) -> bool:
        """Whether ``p`` is this scope's part.

        A gid without a uid (an earlier version's, from before the owner rows) is taken as
        this job's, as those versions did, when it names this job and the sink's old tag or
        no sink: the sink only asks after ``open`` claimed the table for this uid, so no
        job of this version and another uid writes it; a job still running an earlier
        version beside it is not told apart (upgrade both)."""
        if p.job != self.job:
            return False
        if p.owner is not None:
            return p.owner == self.owner and p.tag == self.tag
        return p.tag in (None, self.legacy_tag)

    def foreign(self, p: ParsedGid) -> bool:
        """Whether ``p`` is this sink's part (job, table) of another uid."""
        return p.job == self.job and p.tag == self.tag and p.owner not in (None, self.owner)


def job_parts(conn: Any, job: str) -> list[ParsedGid]:
    """Every prepared gid of ``job`` in this database, of any sink and uid."""
    out = []
    for (gid,) in conn.execute(
        "SELECT gid FROM pg_prepared_xacts WHERE database = current_database() AND gid LIKE %s",
        (f"stoker:{job}:%",),
    ).fetchall():
        p = parse_gid(gid)
        if p and p.job == job:
            out.append(p)
    return out


def prepared_parts(conn: Any, scope: Scope) -> list[ParsedGid]:
    """The prepared gids of ``scope`` (see :meth:`Scope.holds`), in this database."""
    return [p for p in job_parts(conn, scope.job) if scope.holds(p)]


def part_visible(conn: Any, table: Table, uid: str, gid: str) -> bool:
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
            sql.Identifier(*_markers_name(table))
        ),
        (uid, gid),
    ).fetchone()
    return row is not None


def finish_part(conn: Any, gid: str, commit: bool) -> bool:
    """COMMIT or ROLLBACK PREPARED; False if ``gid`` was not prepared (any more)."""
    import psycopg
    from psycopg import sql

    verb = "COMMIT PREPARED {}" if commit else "ROLLBACK PREPARED {}"
    try:
        conn.execute(sql.SQL(verb).format(sql.Literal(gid)))
    except psycopg.errors.UndefinedObject:
        return False
    return True
