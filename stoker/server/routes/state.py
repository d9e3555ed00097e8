"""A stopped job's state: its number of state partitions, changed offline."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from stoker.errors import InvalidInput
from stoker.server.deps import Manager
from stoker.server.docs import errors, json_body
from stoker.server.routes._common import WRITES, job_path, json_object
from stoker.server.routes.operations import ACCEPTED, accepted, idempotency_key

router = APIRouter()

REPARTITION_BODY: dict[str, Any] = {
    "type": "object",
    "properties": {
        "partitions": {
            "type": "integer",
            "minimum": 1,
            "maximum": 100_000,
            "description": "The job's new number of state partitions (its maximum parallelism).",
        },
    },
    "required": ["partitions"],
    "additionalProperties": False,
}


@router.post(
    "/v1/jobs/{job_id}/state/repartition",
    status_code=202,
    responses={**ACCEPTED, **errors(*WRITES, 404, 409, 422, 429, 503)},
    openapi_extra=json_body(REPARTITION_BODY),
)
async def repartition_state(
    request: Request,
    manager: Manager,
    job_id: str = job_path,
    key: str | None = idempotency_key(),
) -> JSONResponse:
    """Give a stopped job N state partitions (its maximum parallelism), offline, through
    Spark's checkpoint repartitioning on the manager's host: ``{"partitions": N}``, as an
    operation (202; it runs Spark, seconds to minutes). Refused at once, 422 naming the
    reason, when the job runs, never ran, or N is not a whole number >= 1; the operation ends
    FAILED (status 422) when its state store cannot be repartitioned or N is the job's number
    already; nothing changes then. Its ``result``: ``{"job_id", "from", "to", ...}``."""
    body = await json_object(request)
    unknown = sorted(set(body) - {"partitions"})
    if unknown:
        raise InvalidInput(unknown[0], 'unknown field (the body is {"partitions": N})')
    if "partitions" not in body:
        raise InvalidInput("partitions", "required: the number of state partitions")
    found = await run_in_threadpool(
        lambda: manager.repartition_operation(job_id, body["partitions"], idem_key=key)
    )
    return accepted(found)
