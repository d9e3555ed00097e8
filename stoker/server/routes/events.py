"""``GET /v1/events``: the app's :class:`~stoker.server.events.EventFeed` as server-sent
events (behind the token middleware, as every read)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse

from stoker.server.deps import Ctx
from stoker.server.docs import errors
from stoker.server.events import EventFeed, stream
from stoker.server.routes._common import GUARDED

router = APIRouter()

# One server-sent event: `id: <run>-<n>`, `event: <kind>`, `data: <one JSON object>`.
SSE_EVENT = {
    "type": "object",
    "required": ["data"],
    "properties": {
        "id": {"type": "string", "pattern": "^[0-9a-f]+-[0-9]+$"},
        "event": {"enum": ["job", "epoch", "control", "rescale", "resync"]},
        "data": {
            "type": "string",
            "contentMediaType": "application/json",
            "description": "One JSON object with `job_id` and what the kind says.",
        },
        "retry": {"type": "integer", "minimum": 0},
    },
}


@router.get(
    "/v1/events",
    response_class=StreamingResponse,
    responses={
        200: {
            "description": "A stream of server-sent events (never ends by itself).",
            # OpenAPI 3.1 has an event stream's `schema` describe each event (3.2 would say
            # `itemSchema`): its fields as the SSE format names them.
            "content": {"text/event-stream": {"schema": SSE_EVENT}},
        },
        **errors(*GUARDED, 422, 429, 503),
    },
)
async def events(
    request: Request,
    ctx: Ctx,
    job_id: str | None = Query(
        None,
        min_length=1,
        max_length=200,
        description="Only this job's (or application's) events.",
    ),
    last_event_id: str | None = Header(
        None,
        alias="Last-Event-ID",
        max_length=100,
        description="Resume after this event (its `id:`); sent by EventSource itself.",
    ),
) -> StreamingResponse:
    """Server-sent events of every job: ``job`` (state changes, new jobs), ``epoch``
    (committed), ``control`` (status changes of control events), ``rescale`` (recorded
    or changed), each with an ``id:``; a reconnect with ``Last-Event-ID`` resumes after
    it (``resync`` first when events were missed). ``?job_id=`` keeps one job's. The
    store is polled twice a second by one poller shared by every client. At most
    ``MAX_STREAMS`` (64) streams are open at once, ``MAX_READ_STREAMS`` (32) of them with
    the read-only token: 429 beyond."""
    read_only = bool(getattr(request.state, "read_only", False))
    ctx.feed.take_stream(read_only)
    return _Stream(
        ctx.feed,
        read_only,
        stream(ctx.feed, request, job_id, last_event_id),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


class _Stream(StreamingResponse):
    """A stream that gives its place back when it ends, however it ends (also when it never
    sent a byte: the client was gone first)."""

    def __init__(self, feed: EventFeed, read_only: bool, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._feed, self._read_only = feed, read_only

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._feed.give_back_stream(self._read_only)
