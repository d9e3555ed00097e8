"""``GET /healthz`` (liveness) and ``GET /readyz`` (readiness), both open without a token.

Liveness answers from this process's memory alone: a store that is slow, locked or down must
not make an orchestrator restart a manager that is fine (it would lose nothing, but gain
nothing either, and a restart loop of every manager on a store outage is worse). Readiness
asks the store, within a time limit: a manager whose store does not answer is up but cannot
serve, and says so with 503.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from stoker.errors import StokerError
from stoker.server.deps import Ctx
from stoker.server.docs import errors

router = APIRouter()

# How long readiness waits for the store before it answers 503.
READY_TIMEOUT_S = 2.0


@router.get("/healthz")
def healthz(ctx: Ctx) -> dict[str, Any]:
    """Liveness: the process answers. ``leader``: whether this manager holds the leader lease,
    as it knows it (no store read)."""
    supervisor = ctx.supervisor
    return {"ok": True, "leader": bool(supervisor and supervisor.is_leader)}


@router.get("/readyz", responses=errors(503))
async def readyz(ctx: Ctx) -> JSONResponse:
    """Readiness: the store answers within ``READY_TIMEOUT_S`` (503 otherwise, naming why),
    with who leads (``leader_address``: null while nobody holds the lease)."""
    supervisor = ctx.supervisor
    leads = bool(supervisor and supervisor.is_leader)
    try:
        leader = await asyncio.wait_for(
            asyncio.to_thread(ctx.manager.store.get_leader), READY_TIMEOUT_S
        )
    except TimeoutError:
        why = f"the store did not answer within {READY_TIMEOUT_S:g} s"
        return JSONResponse({"ready": False, "leader": leads, "error": why}, status_code=503)
    except StokerError as e:
        why = f"the store cannot be read: {type(e).__name__}"
        return JSONResponse({"ready": False, "leader": leads, "error": why}, status_code=503)
    return JSONResponse(
        {
            "ready": True,
            "leader": leads,
            "leader_address": leader.address if leader else None,
        }
    )
