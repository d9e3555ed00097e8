"""``GET /healthz``: liveness, open without a token."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from stoker.server.deps import Ctx
from stoker.server.docs import errors

router = APIRouter()


@router.get("/healthz", responses=errors(503))
def healthz(ctx: Ctx) -> dict[str, Any]:
    """Liveness, and whether this manager is the leader."""
    leader = ctx.manager.store.get_leader()
    supervisor = ctx.supervisor
    return {
        "ok": True,
        "leader": bool(supervisor and supervisor.is_leader),
        "leader_address": leader.address if leader else None,
    }
