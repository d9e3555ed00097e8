"""``/v1/operations``: long calls (a session cluster's start, a worker added or removed, a
state repartition) answer 202 with an operation, polled here until it ends."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Header, Path
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from stoker.manager.operations import KEY_MAX, KEY_PATTERN
from stoker.redact import redact_answer
from stoker.server.deps import Manager
from stoker.server.docs import errors
from stoker.server.errors import status_of_name
from stoker.server.routes._common import GUARDED
from stoker.store.fleet_records import OperationRecord
from stoker.types import OperationState

router = APIRouter()

OP_ID_PATTERN = r"^op-[0-9a-f]{16}$"


class OperationView(BaseModel):
    """A long call run in the background: RUNNING, then SUCCEEDED or FAILED."""

    operation_id: str
    kind: str  # start-cluster, add-worker, remove-worker, repartition
    target: str  # the cluster or job ("" for a cluster started without a name)
    request: dict[str, Any]
    state: OperationState
    result: dict[str, Any] | None  # SUCCEEDED: what the call answers
    error: str | None  # FAILED: why
    error_type: str | None  # FAILED: the stoker error's class (InvalidInput, ClusterError, ...)
    status: int | None  # FAILED: the HTTP status the call would have answered
    created_at: float
    ended_at: float | None
    url: str  # where to poll it


# Where a call answers with an operation: a new one (202) or a retry's (200).
ACCEPTED: dict[int | str, dict[str, Any]] = {
    202: {"model": OperationView, "description": "Started: the operation (poll its `url`)."},
    200: {
        "model": OperationView,
        "description": "A retry: the operation this request (or key) started, as it is now.",
    },
}
IDEMPOTENCY_HELP = (
    "Any 1-200 printable ASCII characters: the same key again gets the operation it started "
    "(for a day after it ends) instead of starting another; with another request, 422. "
    "Without a key, the same request while its operation runs gets that operation."
)


def idempotency_key() -> Any:
    return Header(
        None,
        alias="Idempotency-Key",
        min_length=1,
        max_length=KEY_MAX,
        pattern=KEY_PATTERN,
        description=IDEMPOTENCY_HELP,
    )


def operation_view(op: OperationRecord) -> dict[str, Any]:
    """An operation as the API shows it: its record, ``url`` to poll, and once FAILED the
    ``status`` the call would have answered (404, 409, 422, 429, 500, 503)."""
    out = op.to_dict()
    out["url"] = f"/v1/operations/{op.op_id}"
    out["status"] = status_of_name(op.error_type) if op.state == "FAILED" else None
    return dict(redact_answer(out))


def accepted(found: tuple[OperationRecord, bool]) -> JSONResponse:
    """The answer of a call run as an operation: 202 for a new one, 200 for a retry's."""
    op, created = found
    view = operation_view(op)
    return JSONResponse(
        view, status_code=202 if created else 200, headers={"Location": view["url"]}
    )


@router.get(
    "/v1/operations/{op_id}",
    response_model=OperationView,
    responses=errors(*GUARDED, 404, 422, 503),
)
def get_operation(
    manager: Manager,
    op_id: str = Path(..., pattern=OP_ID_PATTERN, description="op-<16 hex>"),
) -> dict[str, Any]:
    """One operation: RUNNING, then SUCCEEDED with ``result`` (what the call answers) or
    FAILED with ``error`` and ``status``. One whose manager died before it ended is FAILED
    saying so; what it changed is the resource's to show (a cluster, a job)."""
    return operation_view(manager.operation(op_id))
