"""Pages of a list (``GET /v1/jobs``, ``GET /v1/applications``): at most ``limit`` records in
(created_at, id) order, and a cursor that names the last one, for the next page.

A cursor is a position in that order, ``<created_at>~<id>`` (``1764316953.25~orders``): a
record made while a client pages never shifts a page it has read (new records come after
every cursor handed out), and a record deleted meanwhile is simply not there. Any position is
a cursor, so the API's schema states the whole grammar (:data:`CURSOR_PATTERN`) and a string
it admits is never refused (the base64 cursor before could not be described,
and schema-valid strings were 422). Anything else is bad input (422), checked before any read.
"""

from __future__ import annotations

import math
import re

from stoker.errors import InvalidInput
from stoker.store import JobRecord, Store
from stoker.types import JobKind, JobState

PAGE_DEFAULT = 1000
PAGE_MAX = 1000
CURSOR_MAX = 400  # characters: an id is at most 128, a time a few dozen
# A time as Python writes a float of a Unix time (no exponent below 1e16), then an id as the
# job id rule has it (docs.JOB_ID_PATTERN without its anchors).
_TIME = r"[0-9]{1,16}(?:\.[0-9]{1,20})?"
_ID = r"[A-Za-z0-9](?:[A-Za-z0-9_-]|\.[A-Za-z0-9_-])*\.?"
CURSOR_PATTERN = f"^{_TIME}~{_ID}$"
_CURSOR = re.compile(CURSOR_PATTERN)


def cursor_of(created_at: float, record_id: str) -> str:
    return f"{float(created_at)!r}~{record_id}"


def parse_cursor(text: str | None) -> tuple[float, str] | None:
    """The (created_at, id) a cursor names; None for none. :class:`InvalidInput` on ``after``
    for anything that is not a cursor."""
    if text is None or text == "":
        return None
    if len(text) > CURSOR_MAX or not _CURSOR.match(text):
        raise InvalidInput("after", "is not a cursor from this list (use the X-Next-Cursor given)")
    at, record_id = text.split("~", 1)
    value = float(at)
    if not math.isfinite(value):  # 16 digits cannot overflow; kept as the rule
        raise InvalidInput("after", "is not a cursor from this list (use the X-Next-Cursor given)")
    return value, record_id


def check_limit(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= PAGE_MAX:
        raise InvalidInput("limit", f"must be a whole number from 1 to {PAGE_MAX}, got {limit!r}")
    return limit


def read_page(
    store: Store, kind: JobKind, state: JobState | None, limit: int, after: str | None
) -> tuple[list[JobRecord], str | None]:
    """One page of ``kind``'s records (only those in ``state``) after the cursor ``after``,
    and the cursor of the next page (None at the end). Bad ``limit`` or ``after``: 422."""
    check_limit(limit)
    start = parse_cursor(after)
    rows = store.list_jobs_page(kind, limit + 1, start, state)
    if len(rows) <= limit:
        return rows, None
    rows = rows[:limit]
    return rows, cursor_of(rows[-1].created_at, rows[-1].job_id)
