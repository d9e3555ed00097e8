"""What the routers reach through FastAPI dependencies: the app's :class:`ServerState` (the
manager facade and the app's own counters), kept on ``app.state`` by :func:`install_state`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, FastAPI, Request

from stoker.manager import ControlRateLimiter, JobManager, Supervisor
from stoker.manager.rescales import RescaleTally
from stoker.server.events import EventFeed
from stoker.server.metrics import Histogram

if TYPE_CHECKING:
    from prometheus_client.registry import CollectorRegistry


@dataclass
class ServerState:
    """One app's: the manager it serves, the tokens, and what its routes count or share."""

    manager: JobManager
    supervisor: Supervisor | None
    token: str | None
    read_token: str | None
    limiter: ControlRateLimiter  # control events per job
    submit_latency: Histogram  # POST /v1/jobs, for /metrics
    rescale_tally: RescaleTally
    registry: CollectorRegistry  # /metrics
    feed: EventFeed  # /v1/events


def install_state(app: FastAPI, state: ServerState) -> None:
    """Keep ``state`` on ``app`` for the routers' dependencies."""
    app.state.stoker = state


# async: resolved on the event loop, not in a worker thread of its own.
async def _state(request: Request) -> ServerState:
    state: ServerState = request.app.state.stoker
    return state


async def _manager(request: Request) -> JobManager:
    state: ServerState = request.app.state.stoker
    return state.manager


Ctx = Annotated[ServerState, Depends(_state)]
Manager = Annotated[JobManager, Depends(_manager)]

__all__ = ["Ctx", "Manager", "ServerState", "install_state"]
