"""What several routers share: the job id in a path, the answers each kind of call can give
besides its success, and a body read as a JSON object by the route itself."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from fastapi import Path, Query, Request, Response

from stoker.errors import InvalidInput
from stoker.manager.pages import CURSOR_MAX, CURSOR_PATTERN, PAGE_DEFAULT, PAGE_MAX
from stoker.server.docs import JOB_ID_HELP, JOB_ID_MAX, JOB_ID_PATTERN, errors

BIGINT = 2**63 - 1  # the store's attempt numbers

# The auth answers: every guarded call may get a 401, a call that changes state a 403 too.
# Declared on every route; the schema keeps them only for a server that can give them
# (stoker.server.docs.install_openapi: 401 with a token, 403 with a read-only token too).
GUARDED = (401,)
WRITES = (401, 403)
READS = errors(*GUARDED, 404, 422, 503)

job_path: Any = Path(
    ..., min_length=1, max_length=JOB_ID_MAX, pattern=JOB_ID_PATTERN, description=JOB_ID_HELP
)


async def json_object(request: Request, empty: dict[str, Any] | None = None) -> dict[str, Any]:
    """The request's body as a JSON object (``empty`` for no body at all, when given)."""
    raw = await request.body()
    if not raw.strip() and empty is not None:
        return dict(empty)
    try:
        body = json.loads(raw)
    except ValueError:  # UnicodeDecodeError is one
        raise InvalidInput("body", "malformed JSON") from None
    if not isinstance(body, dict):
        raise InvalidInput("body", f"expects a JSON object, got {type(body).__name__}")
    return body


# A paged list's parameters (GET /v1/jobs, GET /v1/applications).
page_limit: Any = Query(PAGE_DEFAULT, ge=1, le=PAGE_MAX, description="Records in this page.")
page_after: Any = Query(
    None,
    max_length=CURSOR_MAX,
    pattern=CURSOR_PATTERN,
    description="The X-Next-Cursor of the page before: a position `<created_at>~<id>`.",
)


def log_tail() -> Any:
    """The ``tail`` query parameter of a driver log (a job's or an application's): lines."""
    return Query(
        None,
        ge=1,
        le=1_000_000,
        description="Only the last N lines (at most 16 MiB; default: the last 1 MiB, from a "
        "line start).",
    )


def next_page(
    response: Response, path: str, cursor: str | None, limit: int, state: Any = None
) -> None:
    """Tell the client where the next page of a list starts: ``X-Next-Cursor`` and a relative
    ``Link`` ``rel="next"`` (nothing when this page was the last)."""
    if cursor is None:
        return
    query = {"limit": limit, "after": cursor, **({"state": str(state)} if state else {})}
    response.headers["X-Next-Cursor"] = cursor
    response.headers["Link"] = f'<{path}?{urlencode(query)}>; rel="next"'
