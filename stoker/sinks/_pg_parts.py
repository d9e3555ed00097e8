"""A PostgreSQL sink's parts: the gid that names each prepared transaction, the marker row
that commits with it, and the queries on the server's prepared transactions (which parts of a
job are prepared, whether one was committed, COMMIT or ROLLBACK PREPARED).

    gid = stoker:<job>:<epoch>:<attempt>:<partition>:<task attempt id>:<sink tag>
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

from stoker.errors import InvalidSink
from stoker.types import AttemptNo, Epoch

log = logging.getLogger("stoker.sinks.postgres")

# The current gid, and the legacy one of earlier versions (no task attempt, no sink tag).
_GID = re.compile(
    r"^stoker:(?P<job>[^:]+):(?P<epoch>\d+):(?P<attempt>\d+):(?P<part>\d+)"
    r"(?::(?P<task>\d+):(?P<tag>[0-9a-f]{8}))?$"
)
# PostgreSQL's GIDSIZE is 200 bytes with the terminating NUL. The longest gid: 7 + 100 (job)
# + 1 + 19 (epoch) + 1 + 10 (attempt) + 1 + 10 (partition) + 1 + 19 (task) + 1 + 8 = 178.
GID_MAX = 199
MARKERS = "stoker_parts"


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


def _markers_name(table: str) -> tuple[str, ...]:
    """The marker table, in the schema of the sink's table."""
    schema, _, _ = table.rpartition(".")
    return (schema, MARKERS) if schema else (MARKERS,)


def prepared_parts(conn: Any, job: str, tag: str) -> list[ParsedGid]:
    """The sink's (``tag``) prepared gids of ``job`` (and legacy gids of the job, which name
    no sink), in this database."""
    out = []
    for (gid,) in conn.execute(
        "SELECT gid FROM pg_prepared_xacts WHERE database = current_database() AND gid LIKE %s",
        (f"stoker:{job}:%",),
    ).fetchall():
        p = parse_gid(gid)
        if p and p.job == job and p.tag in (None, tag):
            out.append(p)
    return out


def part_visible(conn: Any, table: str, uid: str, gid: str) -> bool:
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
