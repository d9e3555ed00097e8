"""``GET /metrics``: Prometheus text exposition of the app's registry."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse, Response

from stoker.server.deps import Ctx
from stoker.server.docs import errors
from stoker.server.metrics import exposition
from stoker.server.routes._common import GUARDED

router = APIRouter()


@router.get("/metrics", response_class=PlainTextResponse, responses=errors(*GUARDED, 503))
def metrics(ctx: Ctx) -> Response:
    """Prometheus metrics (text exposition format): jobs and applications by state, attempts,
    epochs committed, submit latency, rescales; per job (``job_id``): epoch duration by
    step, rows, input and processing rate, backlog, control apply latency, executors,
    attempts, restarts, state."""
    body, content_type = exposition(ctx.registry)
    return Response(body, media_type=content_type)
