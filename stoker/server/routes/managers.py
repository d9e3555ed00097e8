"""``GET /v1/managers``: the job managers sharing this store, the leader and the standbys."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from stoker.redact import redact_answer
from stoker.server.deps import Manager
from stoker.server.docs import errors
from stoker.server.routes._common import GUARDED

router = APIRouter()


class LeaderView(BaseModel):
    """The leader lease while it is live."""

    holder: str = Field(..., description="The leading manager's id.")
    address: str = Field(..., description="Where the leader serves.")
    token: int = Field(..., description="The fencing token: grows with every new leader.")
    expires_at: float = Field(..., description="Unless renewed (epoch seconds).")


class ManagerView(BaseModel):
    """A job manager that takes part in the election (an --api-only one does not)."""

    holder: str = Field(..., description="The id it takes the leader lease under.")
    address: str = Field(..., description="Where it serves.")
    role: str = Field(..., description="`leader` (it holds the live lease) or `standby`.")
    started_at: float = Field(..., description="Its first heartbeat (epoch seconds).")
    seen_at: float = Field(..., description="Its last heartbeat (epoch seconds).")
    stoker_version: str | None = Field(
        None, description="The stoker it runs; null for a stoker that records none (before 0020)."
    )
    schema_version: int | None = Field(
        None, description="The newest store migration its stoker knows; null as above."
    )


class ManagersView(BaseModel):
    """The leader and every manager whose heartbeat is fresh, oldest first."""

    leader: LeaderView | None = Field(
        ..., description="null while no manager holds a live lease (a takeover under way)."
    )
    managers: list[ManagerView]


@router.get("/v1/managers", response_model=ManagersView, responses=errors(*GUARDED, 503))
def list_managers(manager: Manager) -> JSONResponse:
    """The job managers sharing this store: the leader (the live lease's holder) and the
    standbys, each seen within 3 leader TTLs, oldest first. A heartbeat each, shown
    only; the lease alone decides who leads. An --api-only manager is not listed."""
    return JSONResponse(redact_answer(manager.managers()))
