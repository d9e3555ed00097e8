"""A job's control: events sent to it (applied at an epoch boundary), their history, the
config they made, and savepoints (a control event of their own kind)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from stoker import durations
from stoker.errors import InvalidInput
from stoker.manager.control import HISTORY_MAX, control_view
from stoker.redact import redact_answer
from stoker.server.auth import sender
from stoker.server.deps import Ctx, Manager
from stoker.server.docs import SCALING_VALUE, errors, json_body
from stoker.server.routes._common import BIGINT, READS, WRITES, job_path, json_object
from stoker.store import ControlEvent
from stoker.types import ControlKind, ControlStatus

router = APIRouter()


class ControlEventView(BaseModel):
    """One control event: what was asked, by whom, and how far it got."""

    control_id: str = Field(..., description="The event's id.")
    job_id: str
    version: int = Field(..., description="The control version the event made.")
    kind: str = Field(
        ...,
        description="config, rate_limit, log_level, trigger, pause, resume, "
        "checkpoint, event, savepoint or scaling.",
    )
    status: str = Field(
        ...,
        description="PENDING -> APPLIED (at `applied_epoch`) -> COMMITTED (that epoch "
        "committed), or REJECTED (`reason`). A scaling event is COMMITTED at once, without "
        "an epoch.",
    )
    applied_epoch: int | None = Field(None, description="The epoch the event applied at.")
    reason: str | None = Field(None, description="Why it was rejected.")
    result: dict[str, Any] | None = Field(
        None,
        description="What it produced (a savepoint's `path` and `epoch`; a scaling event's "
        "`owner`, new `scaling` and `rescale_id`).",
    )
    request_id: str | None = Field(None, description="The caller's retry key, if one was sent.")
    sender: str = Field(..., description="`operator` (the token), `anonymous` or `local:<user>`.")
    origin: str | None = Field(None, description="Where the request came from (client address).")
    created_at: float
    applied_at: float | None = None
    ended_at: float | None = None
    body: dict[str, Any] = Field(..., description="The event's own fields, as checked.")


class ControlHistory(BaseModel):
    """A page of a job's control events, newest first."""

    events: list[ControlEventView]
    next: int | None = Field(
        None, description="Pass as `before` for the next (older) page; null on the last page."
    )


class ConfigView(BaseModel):
    """A job's effective config and control state now."""

    job_id: str
    version: int = Field(..., description="The latest control version.")
    config: dict[str, Any] = Field(..., description="What the transform sees as ctx.config.")
    paused: bool
    trigger_s: float | None = Field(None, description="Set by control; null: the job's own.")
    rate_limit: dict[str, Any] = Field(..., description="Limits set by control.")
    log_level: dict[str, Any] = Field(..., description='{"root": ..., "loggers": {...}}')
    pending: int = Field(..., description="Events stored and not yet applied.")


_REQUEST_ID = {
    "type": "string",
    "minLength": 1,
    "maxLength": 200,
    "pattern": r"\S",
    "description": "Retry key: the same request_id with the same event answers the stored "
    "event (200); with another event, 409.",
}
_NUMBER_OR_NULL = {"anyOf": [{"type": "number", "exclusiveMinimum": 0}, {"type": "null"}]}
_COUNT_OR_NULL = {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "null"}]}


def _kind(name: str, fields: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "type": "object",
        "title": name,
        "properties": {"kind": {"const": name}, **fields, "request_id": _REQUEST_ID},
        "required": ["kind", *required],
        "additionalProperties": False,
    }


_SAVEPOINT_FIELDS = {
    "stop": {"type": "boolean", "description": "Stop the job after the savepoint."},
    "dir": {
        "anyOf": [{"type": "string", "minLength": 1, "pattern": r"^/"}, {"type": "null"}],
        "description": "An absolute folder under one of the manager's --allow-dir folders "
        "(default: a folder in the job's state folder).",
    },
}
CONTROL_BODY: dict[str, Any] = {
    "oneOf": [
        _kind(
            "config",
            {
                "set": {"type": "object", "description": "Declared config keys and values."},
                "unset": {"type": "array", "items": {"type": "string"}},
            },
        ),
        _kind(
            "rate_limit",
            {
                "rows_per_second": _NUMBER_OR_NULL,
                "max_rows_per_epoch": _COUNT_OR_NULL,
                "max_files_per_epoch": _COUNT_OR_NULL,
            },
        ),
        _kind(
            "log_level",
            {
                "level": {
                    "type": "string",
                    "enum": ["ALL", "TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF"],
                },
                "logger": {"type": "string", "pattern": r"^[A-Za-z_][A-Za-z0-9_.$-]{0,199}$"},
            },
            ("level",),
        ),
        _kind(
            "trigger",
            {
                "interval": {
                    "anyOf": [
                        {"type": "string", "pattern": durations.PATTERN},
                        {"type": "number", "minimum": 0, "maximum": 86400},
                    ],
                    "description": (
                        f"e.g. {durations.EXAMPLES} or seconds, up to 1 day; "
                        "0 = as fast as possible"
                    ),
                }
            },
            ("interval",),
        ),
        _kind("pause", {}),
        _kind("resume", {}),
        _kind("checkpoint", {}),
        _kind(
            "event",
            {
                "name": {"type": "string", "pattern": r"^[A-Za-z_][A-Za-z0-9_.-]{0,99}$"},
                "payload": {"description": "Any JSON (at most 64 KiB)."},
            },
            ("name",),
        ),
        _kind("savepoint", _SAVEPOINT_FIELDS),
        _kind("scaling", {"scaling": SCALING_VALUE}, ("scaling",)),
    ],
    "description": "One control event. Config keys and value types, event names and the rate "
    "limits a job's sources obey are checked against the job's pipeline (422 naming the field).",
}
SAVEPOINT_BODY: dict[str, Any] = {
    "type": "object",
    "properties": {**_SAVEPOINT_FIELDS, "request_id": _REQUEST_ID},
    "additionalProperties": False,
}

control_path: Any = Path(
    ..., pattern=r"^[A-Za-z0-9_-]{1,64}$", description="A control event's id (`control_id`)."
)
CONTROL_WRITES = {
    202: {"model": ControlEventView, "description": "Stored, PENDING: the event is durable."},
    200: {
        "model": ControlEventView,
        "description": "A retry: this request_id and event were stored before.",
    },
    **errors(*WRITES, 404, 409, 422, 429, 503),
}


def _event_answer(ev: ControlEvent, created: bool = False) -> JSONResponse:
    return JSONResponse(redact_answer(control_view(ev)), status_code=202 if created else 200)


async def _submit(ctx: Ctx, request: Request, job_id: str, body: dict[str, Any]) -> JSONResponse:
    ev, created = await run_in_threadpool(
        lambda: ctx.manager.submit_control(
            job_id,
            body,
            sender=sender(request, ctx.token),
            origin=request.client.host if request.client else None,
        )
    )
    return _event_answer(ev, created)


@router.post(
    "/v1/jobs/{job_id}/control",
    status_code=202,
    response_model=None,
    responses=CONTROL_WRITES,
    openapi_extra=json_body(CONTROL_BODY),
)
async def post_control(request: Request, ctx: Ctx, job_id: str = job_path) -> JSONResponse:
    """Send a control event to a job: 202 once it is stored (PENDING); it applies at the
    job's next epoch boundary. A ``scaling`` event applies at once (COMMITTED, no epoch)
    to the job's owner, and may name an application too. A retry with the same
    ``request_id`` and event answers the stored event (200); with another event, 409.
    Rate limited per job (429)."""
    ctx.limiter.take(job_id)
    return await _submit(ctx, request, job_id, await json_object(request))


@router.get(
    "/v1/jobs/{job_id}/control/{control_id}",
    response_model=ControlEventView,
    responses=READS,
)
def get_control(
    manager: Manager, job_id: str = job_path, control_id: str = control_path
) -> JSONResponse:
    """One control event and how far it got."""
    return _event_answer(manager.control_event(job_id, control_id))


@router.get("/v1/jobs/{job_id}/control", response_model=ControlHistory, responses=READS)
def control_history(
    manager: Manager,
    job_id: str = job_path,
    limit: int = Query(50, ge=1, le=HISTORY_MAX),
    before: int | None = Query(
        None, ge=1, le=BIGINT, description="Only versions below this (the `next` value)."
    ),
    kind: ControlKind | None = Query(None),
    status: ControlStatus | None = Query(None),
) -> JSONResponse:
    """The job's control events, newest first, a page at a time."""
    page = manager.control_history(job_id, limit, before, kind, status)
    return JSONResponse(redact_answer(page))


@router.get("/v1/jobs/{job_id}/config", response_model=ConfigView, responses=READS)
def config(manager: Manager, job_id: str = job_path) -> JSONResponse:
    """The job's effective config and control state now, with their version."""
    return JSONResponse(redact_answer(manager.config_view(job_id)))


@router.post(
    "/v1/jobs/{job_id}/savepoints",
    status_code=202,
    response_model=None,
    responses=CONTROL_WRITES,
    openapi_extra=json_body(SAVEPOINT_BODY, required=False),
)
async def post_savepoint(request: Request, ctx: Ctx, job_id: str = job_path) -> JSONResponse:
    """Take a savepoint at the next epoch boundary (``"stop": true``: then stop the job).
    Answers like a control event; its ``result`` gets the folder once written."""
    ctx.limiter.take(job_id)
    body = await json_object(request, empty={})
    if body.get("kind", "savepoint") != "savepoint":
        raise InvalidInput("kind", "a savepoint request takes stop, dir and request_id only")
    return await _submit(ctx, request, job_id, {**body, "kind": str(ControlKind.SAVEPOINT)})


@router.get("/v1/jobs/{job_id}/savepoints", response_model=ControlHistory, responses=READS)
def savepoints(
    manager: Manager,
    job_id: str = job_path,
    limit: int = Query(50, ge=1, le=HISTORY_MAX),
    before: int | None = Query(None, ge=1, le=BIGINT),
) -> JSONResponse:
    """The job's savepoints, newest first."""
    page = manager.control_history(job_id, limit, before, ControlKind.SAVEPOINT)
    return JSONResponse(redact_answer(page))


@router.get(
    "/v1/jobs/{job_id}/savepoints/{control_id}",
    response_model=ControlEventView,
    responses=READS,
)
def savepoint(
    manager: Manager, job_id: str = job_path, control_id: str = control_path
) -> JSONResponse:
    """One savepoint and how far it got (its folder in ``result.path`` once written)."""
    return _event_answer(manager.control_event(job_id, control_id, ControlKind.SAVEPOINT))
