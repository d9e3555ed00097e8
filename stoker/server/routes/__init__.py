"""The REST API, one router per resource; each router's request bodies and answers beside its
routes. The routers reach the manager facade through :mod:`stoker.server.deps`."""

from __future__ import annotations

from fastapi import APIRouter

from stoker.server.routes import (
    applications,
    clusters,
    control,
    events,
    health,
    jobs,
    managers,
    metrics,
    operations,
    scaling,
    state,
)

# In the order the app serves them (the schema lists them so).
ROUTERS: tuple[APIRouter, ...] = (
    health.router,
    events.router,
    metrics.router,
    jobs.router,
    scaling.router,
    state.router,
    applications.router,
    clusters.router,
    operations.router,
    control.router,
    managers.router,
)

__all__ = ["ROUTERS"]
