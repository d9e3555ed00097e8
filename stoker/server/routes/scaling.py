"""A job's (or its application's) scaling: the rescale history, and new executor bounds."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from stoker.manager.rescales import MAX_EXECUTORS, RESCALES_MAX
from stoker.redact import redact_answer
from stoker.server.deps import Ctx
from stoker.server.docs import JOB_ID_HELP, JOB_ID_MAX, JOB_ID_PATTERN, errors, json_body
from stoker.server.routes._common import READS, WRITES, json_object

router = APIRouter()

_BOUND = {
    "anyOf": [{"type": "integer", "minimum": 1, "maximum": MAX_EXECUTORS}, {"type": "null"}],
}
RESOURCES_BODY: dict[str, Any] = {
    "type": "object",
    "properties": {
        "min_executors": {**_BOUND, "description": "The fewest executors (null: kept)."},
        "max_executors": {**_BOUND, "description": "The most executors (null: kept)."},
    },
    "additionalProperties": False,
    # At least one bound given as a number (a null keeps that bound: not a change alone).
    "anyOf": [
        {"required": ["min_executors"], "properties": {"min_executors": {"type": "integer"}}},
        {"required": ["max_executors"], "properties": {"max_executors": {"type": "integer"}}},
    ],
    "description": "New executor bounds of the job's owner (the job, or its application); "
    "its mode stays. max_executors must be at least min_executors (422 otherwise).",
}


class ScalingView(BaseModel):
    """A scaling spec in force (durations in seconds)."""

    mode: str = Field(..., description="fixed, reactive or auto.")
    min_executors: int
    max_executors: int | None = None
    target_utilization: float
    catch_up: float = Field(..., description="Seconds to catch a backlog up in.")
    stabilization: float = Field(..., description="Seconds a change must hold before acting.")
    cooldown: float = Field(..., description="Seconds after a change before the next one.")


class RescaleView(BaseModel):
    """One scaling decision or observation of an owner of executors."""

    rescale_id: int
    job_id: str = Field(..., description="The owner (a lone job or an application).")
    at: float
    kind: str = Field(
        ...,
        description="`decision` (the autoscaler), `observed` (executors came or went by "
        "themselves) or `bounds` (a user changed the scaling or its bounds).",
    )
    policy: str = Field(..., description="The policy that decided, or `user`.")
    mode: str
    signals: dict[str, Any] = Field(..., description="What the decision was made from.")
    from_executors: int | None = None
    to_executors: int | None = None
    workers: dict[str, Any] = Field(..., description='{"added": [ids], "removed": [ids]}')
    reason: str
    status: str = Field(
        ...,
        description="decided -> in_use | failed | superseded; observed; recorded (bounds).",
    )
    in_use_at: float | None = None
    seconds_to_in_use: float | None = Field(
        None, description="From the decision until the new size was in use."
    )
    error: str | None = None
    sender: str | None = Field(None, description="Who changed the bounds (kind bounds).")


class RescalesView(BaseModel):
    """An owner's scaling now and its rescale history, newest first."""

    job_id: str = Field(..., description="The id asked for.")
    kind: str = Field("job", description="What that id is: job or application.")
    owner: str = Field(..., description="Whose executors: the job itself, or its application.")
    scaling: ScalingView
    executor_target: int | None = Field(None, description="What the scaler wants now.")
    resources: dict[str, Any] | None = Field(
        None, description="What the owner's driver reports: executors, cores, hosts, at."
    )
    rescales: list[RescaleView]


class ResourcesView(BaseModel):
    """The owner's scaling after new bounds, and the rescale that records them."""

    job_id: str
    kind: str = "job"
    owner: str
    scaling: ScalingView
    executor_target: int | None = None
    resources: dict[str, Any] | None = None
    rescale: RescaleView


scalable_path: Any = Path(
    ...,
    min_length=1,
    max_length=JOB_ID_MAX,
    pattern=JOB_ID_PATTERN,
    description=f"A job's id, or an application's (scaling is its owner's). {JOB_ID_HELP}.",
)


@router.get("/v1/jobs/{job_id}/rescales", response_model=RescalesView, responses=READS)
def get_rescales(
    ctx: Ctx,
    job_id: str = scalable_path,
    limit: int = Query(100, ge=1, le=RESCALES_MAX),
    since: float | None = Query(
        None, ge=0, le=1e12, description="Only those at or after this time (epoch seconds)."
    ),
) -> JSONResponse:
    """The scaling history of the job's owner (the job, or its application: ``owner``
    says which), newest first: every autoscaler decision with the signals it saw, every
    change of executors observed, every change of scaling or bounds by a user; with the
    owner's scaling, executor target and reported resources now."""
    return JSONResponse(redact_answer(ctx.manager.rescales(job_id, limit, since)))


@router.put(
    "/v1/jobs/{job_id}/resources",
    response_model=ResourcesView,
    responses=errors(*WRITES, 404, 409, 422, 503),
    openapi_extra=json_body(RESOURCES_BODY),
)
async def put_resources(request: Request, ctx: Ctx, job_id: str = scalable_path) -> JSONResponse:
    """Change the executor bounds of a running job's owner (the job, or its
    application): ``{"min_executors": n, "max_executors": m}`` (either alone keeps the
    other), mode kept; recorded in its rescale history with who sent it. 409 when the
    owner has ended."""
    body = await json_object(request)
    sender = "operator" if ctx.token is not None else "api"
    out = await run_in_threadpool(lambda: ctx.manager.set_resources(job_id, body, sender=sender))
    return JSONResponse(redact_answer(out))
