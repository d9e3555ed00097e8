"""Pages of a list (``GET /v1/jobs``, ``GET /v1/applications``): at most ``limit`` records in
(created_at, id) order, and an opaque cursor that names the last one, for the next page.

A cursor is the base64url of ``[created_at, id]``: a record made while a client pages never
shifts a page it has read (new records come after every cursor handed out), and a record
deleted meanwhile is simply not there. A cursor that is not one of ours is bad input (422),
checked before any read.
"""

from __future__ import annotations

import base64
import binascii
import json
import math

from stoker.errors import InvalidInput
from stoker.store import JobRecord, Store
from stoker.types import JobKind, JobState

PAGE_DEFAULT = 1000
PAGE_MAX = 1000
CURSOR_MAX = 400  # characters: an id is at most 128, a time a few dozen


def cursor_of(created_at: float, record_id: str) -> str:
    raw = json.dumps([created_at, record_id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def parse_cursor(text: str | None) -> tuple[float, str] | None:
    """The (created_at, id) a cursor names; None for none. :class:`InvalidInput` on ``after``
    for anything that is not a cursor this server made."""
    if text is None or text == "":
        return None
    bad = InvalidInput("after", "is not a cursor from this list (use the X-Next-Cursor given)")
    if len(text) > CURSOR_MAX:
        raise bad
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        value = json.loads(raw)
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise bad from None
    if (
        not isinstance(value, list)
        or len(value) != 2
        or isinstance(value[0], bool)
        or not isinstance(value[0], int | float)
        or not math.isfinite(value[0])
        or not isinstance(value[1], str)
        or not value[1]
    ):
        raise bad
    return float(value[0]), value[1]


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
