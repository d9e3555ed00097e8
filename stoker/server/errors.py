"""The one place where errors become HTTP answers: the status of each :class:`StokerError`
and the exception handlers that give every refusal the one error shape (``ErrorAnswer`` in
:mod:`stoker.server.docs`), registered on an app by :func:`install_error_handlers`."""

from __future__ import annotations

import math
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match, Mount

from stoker.errors import (
    ClusterConflict,
    ClusterError,
    ClusterNotFound,
    ControlConflict,
    ControlNotFound,
    DuplicateJob,
    InvalidInput,
    JobConflict,
    JobNotFound,
    JobOwnedElsewhere,
    JobTerminal,
    MigrationRefused,
    NotLeader,
    OperationNotFound,
    SinkError,
    SourceError,
    StokerError,
    StoreError,
    StoreTooNew,
    TooManyRequests,
    UpgradeConflict,
    UpgradeNotFound,
)
from stoker.paths import not_a_python_file
from stoker.redact import redact_answer
from stoker.server.docs import DOCS_URL, ENTRYPOINT_MAX
from stoker.types import job_id as check_job_id

HTTP_STATUS: dict[type[StokerError], int] = {
    InvalidInput: 422,
    JobNotFound: 404,
    JobConflict: 409,
    JobTerminal: 409,
    DuplicateJob: 409,
    ControlNotFound: 404,
    ControlConflict: 409,
    TooManyRequests: 429,
    NotLeader: 503,
    StoreError: 503,
    JobOwnedElsewhere: 409,
    ClusterNotFound: 404,
    OperationNotFound: 404,
    UpgradeNotFound: 404,
    UpgradeConflict: 409,
    ClusterConflict: 409,  # before ClusterError in every class's MRO: the state refuses it
    ClusterError: 500,  # a cluster could not be started, changed or stopped
    SinkError: 503,  # an external system failed (InvalidSink is InvalidInput first: 422)
    SourceError: 503,
    StoreTooNew: 409,  # not an outage: this stoker is older than the store it was given
    MigrationRefused: 409,
}


def status_of(err: StokerError) -> int:
    """The HTTP status of ``err``: its nearest class in :data:`HTTP_STATUS`, else 500."""
    for cls in type(err).__mro__:
        if cls in HTTP_STATUS:
            return HTTP_STATUS[cls]
    return 500


def status_of_name(error_type: str | None) -> int:
    """The HTTP status of a stoker error known by its class name (an operation's recorded
    error): as :func:`status_of` would give it; 500 for an unexpected error."""
    import stoker.errors

    cls = getattr(stoker.errors, error_type or "", None)
    if isinstance(cls, type) and issubclass(cls, StokerError):
        for c in cls.__mro__:
            if c in HTTP_STATUS:
                return HTTP_STATUS[c]
    return 500


# The methods any route serves (OPTIONS is in none: it is not served).
_METHODS = ("DELETE", "GET", "HEAD", "PATCH", "POST", "PUT")


def _allowed(request: Request) -> set[str]:
    """Every method of every route of the request's path (Starlette names only the first
    route's). Asked of each route, as the router asks it: an included router answers for
    its own routes. A mount serves no method of its own."""
    allowed: set[str] = set()
    for route in request.app.router.routes:
        if isinstance(route, Mount):
            continue
        for method in _METHODS:
            match, _ = route.matches({**request.scope, "method": method})
            if match is Match.FULL:
                allowed.add(method)
    return allowed


def _retry_after(err: TooManyRequests) -> str:
    """``Retry-After``: whole seconds, at least 1."""
    return str(max(1, math.ceil(err.retry_after)))


async def stoker_error(request: Request, err: StokerError) -> JSONResponse:
    body: dict[str, Any] = {"error": str(err), "type": type(err).__name__}
    job = getattr(err, "job_id", None)
    if job is not None:
        body["job_id"] = job  # lets a client rebuild the error without parsing the message
    if isinstance(err, InvalidInput):
        body["field"] = err.field
    if isinstance(err, JobTerminal):
        body["state"] = err.state
    if isinstance(err, (JobConflict, JobTerminal)) and err.difference is not None:
        body["difference"] = err.difference
    if isinstance(err, ControlNotFound):
        body["control_id"] = err.control_id
    if isinstance(err, ControlConflict):
        body["reason"] = err.reason
    if isinstance(err, JobOwnedElsewhere):
        body["owner"] = err.owner
    if isinstance(err, ClusterNotFound):
        body["cluster"] = err.name
    headers = None
    if isinstance(err, TooManyRequests):
        body["retry_after"] = round(err.retry_after, 3)
        headers = {"Retry-After": _retry_after(err)}
    return JSONResponse(redact_answer(body), status_code=status_of(err), headers=headers)


def _entrypoint_refusal(value: str) -> str | None:
    """What the schema's entrypoint rule refuses, in the manager's own words
    (:func:`stoker.paths.not_a_python_file`, as ``check_app_path`` says it): the schema only
    says what it can (a path ending in .py, at most ENTRYPOINT_MAX characters); the manager
    checks the rest."""
    if len(value) > ENTRYPOINT_MAX:
        return f"{value[:200]!r}... is longer than {ENTRYPOINT_MAX} characters"
    if not value.endswith(".py") or "\x00" in value:
        return not_a_python_file(value[:200])
    return None


async def invalid_request(request: Request, err: RequestValidationError) -> JSONResponse:
    first = err.errors()[0] if err.errors() else {}
    loc = [str(p) for p in first.get("loc", []) if p != "body"]
    field = ".".join(loc) or "body"
    msg = first.get("msg", "invalid request")
    if first.get("type") == "json_invalid":
        field, msg = "body", "malformed JSON"
    elif field in ("job_id", "app_id") or field.endswith((".job_id", ".app_id")):
        # The same words as the store's own check of a job id (an application's id obeys
        # the same rule: they share one id space).
        name = "app_id" if field.endswith("app_id") else "job_id"
        try:
            check_job_id(first.get("input"))  # type: ignore[arg-type]
        except InvalidInput as e:
            field = name
            msg = e.message if name == "job_id" else e.message.replace("job id", "application id")
    elif field == "entrypoint" and isinstance(first.get("input"), str):
        msg = _entrypoint_refusal(first["input"]) or msg
    return JSONResponse(
        {"error": f"{field}: {msg}", "field": field, "type": "InvalidInput"}, status_code=422
    )


async def unexpected(request: Request, err: Exception) -> JSONResponse:
    # A bug: the one error shape still, the details in the manager's log (uvicorn logs it).
    return JSONResponse(
        {
            "error": f"internal error ({type(err).__name__}): see the job manager's log",
            "type": "InternalError",
        },
        status_code=500,
    )


async def http_error(request: Request, err: StarletteHTTPException) -> JSONResponse:
    # The framework's own refusals, in the one error shape.
    if err.status_code == 400:  # a body that is not even text (FastAPI's "error parsing")
        return JSONResponse(
            {"error": "body: malformed JSON", "field": "body", "type": "InvalidInput"},
            status_code=422,
        )
    if err.status_code == 405:
        allow = ", ".join(sorted(_allowed(request)))
        return JSONResponse(
            {
                "error": f"{request.method} is not allowed on {request.url.path}: use {allow}",
                "type": "MethodNotAllowed",
            },
            status_code=405,
            headers={"Allow": allow},
        )
    if err.status_code == 404:
        return JSONResponse(
            {"error": f"no such path: {request.url.path} (see {DOCS_URL})", "type": "NotFound"},
            status_code=404,
        )
    return JSONResponse(
        {"error": str(err.detail), "type": "HTTPError"},
        status_code=err.status_code,
        headers=getattr(err, "headers", None),
    )


def install_error_handlers(app: FastAPI) -> None:
    """Answer every error raised on ``app`` in the one error shape."""
    app.add_exception_handler(StokerError, stoker_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, invalid_request)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, unexpected)
    app.add_exception_handler(StarletteHTTPException, http_error)  # type: ignore[arg-type]


__all__ = ["HTTP_STATUS", "install_error_handlers", "status_of", "status_of_name"]
