"""The job manager's refusals, turned back into the errors the server raised: one place
that reads an answer's status, ``type`` and fields (the REST client's other half)."""

from __future__ import annotations

from typing import Any, NoReturn

import httpx

from stoker.errors import (
    ApplicationNotFound,
    ClusterError,
    ClusterNotFound,
    ControlConflict,
    ControlNotFound,
    InvalidInput,
    JobConflict,
    JobNotFound,
    JobOwnedElsewhere,
    JobTerminal,
    StokerError,
    TooManyRequests,
    Unauthorized,
)


def raise_operation_error(op: dict[str, Any], path: str) -> NoReturn:
    """Raise the error a FAILED operation ended with, as the call at ``path`` would have
    raised it had it answered synchronously (its ``status`` and the error's class)."""
    error = str(op.get("error") or "the operation failed")
    body: dict[str, Any] = {"error": error, "type": op.get("error_type")}
    if op.get("error_type") in ("InvalidInput", "InvalidPipeline") and ": " in error:
        body["field"] = error.split(": ", 1)[0]
    refusal = httpx.Response(int(op.get("status") or 500), json=body)
    raise_refusal(refusal, path)


def raise_refusal(resp: httpx.Response, path: str) -> NoReturn:
    """Raise the :class:`~stoker.errors.StokerError` that a 4xx/5xx answer to ``path`` stands
    for, with the server's own words (they may say where to look instead)."""
    try:
        body = resp.json()
    except ValueError:
        body = {"error": resp.text}
    msg = str(body.get("error", resp.text))
    kind = body.get("type")
    job = str(body.get("job_id", path))
    if resp.status_code in (401, 403):
        raise Unauthorized(msg)
    if kind == "ControlNotFound":
        raise ControlNotFound(job, str(body.get("control_id")))
    if kind == "ClusterNotFound":
        raise ClusterNotFound(str(body.get("cluster", path)))
    if kind in ("ApplicationNotFound", "JobNotFound"):
        err: StokerError = (
            ApplicationNotFound(job) if kind == "ApplicationNotFound" else JobNotFound(job)
        )
        raise err.with_message(msg)  # the server's words: they may say where to look instead
    if kind == "JobOwnedElsewhere":
        raise JobOwnedElsewhere(job, str(body.get("owner", ""))).with_message(msg)
    if kind in ("ClusterError", "ClusterConflict"):
        raise ClusterError(msg)
    if resp.status_code == 404:
        raise JobNotFound(job)
    if resp.status_code == 429:
        wait = resp.headers.get("retry-after") or body.get("retry_after") or 1
        err = TooManyRequests(job, float(body.get("retry_after") or wait), "")
        raise err.with_message(msg)  # the server's words, with its limit
    if kind == "ControlConflict":
        raise ControlConflict(job, str(body.get("reason", msg)))
    if resp.status_code == 422:
        field = str(body.get("field", "request"))
        raise InvalidInput(field, msg.removeprefix(f"{field}: "))  # the message names it
    if kind == "JobTerminal":
        diff = body.get("difference")
        err = JobTerminal(job, str(body.get("state")), None if diff is None else str(diff))
        raise err.with_message(msg)  # the server's words: what can no longer be done
    if kind == "JobConflict":
        raise JobConflict(job, str(body.get("difference")))
    raise StokerError(f"job manager answered {resp.status_code}: {msg}")
