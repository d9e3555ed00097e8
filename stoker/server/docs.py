"""The API's contract and its docs page: the one error model, the answers each call can give,
the job id pattern and the other shapes several routers share, the security schemes, and
Swagger UI served from the package (``/docs`` works without internet). Each resource's own
request bodies and answers are beside its routes (:mod:`stoker.server.routes`)."""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse
from pydantic import BaseModel, Field
from starlette.staticfiles import StaticFiles

SWAGGER_UI_VERSION = "5.35.0"  # npm swagger-ui-dist, copied into static/swagger-ui
STATIC_DIR = Path(__file__).parent / "static"
STATIC_URL = "/static"
DOCS_URL = "/docs"
OPENAPI_URL = "/openapi.json"

# What stoker.types.job_id accepts, said without a look-ahead (JSON Schema patterns are
# ECMA-262 and pydantic's are Rust's): 1-100 characters of letters, digits, '.', '_' or '-',
# starting with a letter or digit, no '..' anywhere. Lengths are minLength/maxLength.
JOB_ID_PATTERN = r"^[A-Za-z0-9](?:[A-Za-z0-9_-]|\.[A-Za-z0-9_-])*\.?$"
JOB_ID_MAX = 100
JOB_ID_HELP = (
    "1-100 letters, digits, '.', '_' or '-', starting with a letter or digit, no '..' (the "
    "pattern and lengths below)"
)
# An application file: a path (no NUL) ending in .py, at most PATH_MAX bytes. Whether it exists,
# is readable and lies under an --allow-dir no schema can say: those are 422s naming the field.
ENTRYPOINT_PATTERN = r"^[^\x00]*\.py$"
ENTRYPOINT_MAX = 4096
# A JVM memory amount with its unit (the manager checks it against the host's memory).
MEMORY_PATTERN = r"^[1-9][0-9]{0,8}[kKmMgGtT][bB]?$"
SCALING_HELP = (
    "How the job (or application: all of its jobs) scales: `fixed` (default: the executors "
    "it starts with), `reactive` (every executor the cluster offers), or `auto` (the scaler "
    "decides between min and max), as text (`auto:min=1,max=4,target_utilization=0.7,"
    'catch_up=5m,stabilization=1m,cooldown=2m`) or an object (`{"mode": "auto", '
    '"min_executors": 1, "max_executors": 4, "catch_up": "5m"}`; durations as seconds or '
    "text like 90s, 5m, 1h). Checked: 422 naming the key at fault."
)
# What parse_scaling reads, said as loosely as it reads it: the values' own checks (whole
# numbers also as text, durations as numbers or text) are the server's, answered with a 422.
_ANY = {"description": "See the description of `scaling`."}
SCALING_VALUE: dict[str, Any] = {
    "anyOf": [
        {"type": "string", "description": "fixed, reactive or auto:key=value,..."},
        {
            "type": "object",
            "properties": {
                "mode": {"type": "string", "description": "fixed, reactive or auto."},
                **{
                    key: _ANY
                    for key in (
                        "min_executors",
                        "min",
                        "max_executors",
                        "max",
                        "target_utilization",
                        "utilization",
                        "catch_up",
                        "stabilization",
                        "cooldown",
                    )
                },
            },
            "required": ["mode"],
            "additionalProperties": False,
        },
    ],
    "description": SCALING_HELP,
}


class ErrorAnswer(BaseModel):
    """The body of every refusal (4xx, 5xx): ``error`` says what is wrong and what to do."""

    error: str = Field(..., description="What is wrong, and what is allowed or what to do.")
    type: str | None = Field(
        None,
        description="The error's kind: InvalidInput, JobNotFound, ApplicationNotFound, "
        "JobConflict, JobTerminal, JobOwnedElsewhere, DuplicateJob, ControlNotFound, "
        "ControlConflict, ClusterNotFound, ClusterConflict, ClusterError, TooManyRequests, "
        "Unauthorized, Forbidden, MethodNotAllowed, NotFound, NotLeader, StoreError, "
        "InternalError.",
    )
    field: str | None = Field(None, description="422: the field at fault (dotted path).")
    job_id: str | None = Field(None, description="The job the error is about.")
    state: str | None = Field(None, description="409 JobTerminal: the state the job ended in.")
    difference: str | None = Field(
        None,
        description="409 JobConflict, JobTerminal: how the job's spec (live, or ended) "
        "differs from this one.",
    )
    control_id: str | None = Field(None, description="404 ControlNotFound: the event asked for.")
    reason: str | None = Field(
        None, description="409 ControlConflict: why the event cannot be taken now."
    )
    retry_after: float | None = Field(
        None, description="429 TooManyRequests: seconds until the job takes another event."
    )
    owner: str | None = Field(
        None, description="409 JobOwnedElsewhere: what holds the id (an application, a job)."
    )
    cluster: str | None = Field(None, description="404 ClusterNotFound: the cluster asked for.")


_ERROR_REF = {"$ref": "#/components/schemas/ErrorAnswer"}
_WHY = {
    401: "Token missing or wrong: send 'Authorization: Bearer <token>' (stoker CLI: --token "
    "or STOKER_TOKEN).",
    403: "The token is read-only and this call changes state.",
    404: "No such job, application or cluster (or attempt, or control event).",
    409: "The id is live with another spec (`difference`), or it has ended and was submitted "
    'with another spec (`state`, `difference`; submit it with "restart": true to run it '
    "again), or it is taken by another kind of record or "
    "another application's job (JobOwnedElsewhere, `owner`); for control, the event cannot be "
    "taken in the job's control state, or its `request_id` was used for another event "
    "(`reason`); for a cluster, its name is in use or its state refuses the change "
    "(ClusterConflict).",
    422: "Bad input: `field` names the field, `error` says what is allowed. Nothing changed.",
    429: "Too many control events for this job, (GET /v1/events) too many event streams "
    "open, or (a long call) too many operations running on this manager: retry after "
    "`Retry-After` seconds.",
    500: "A cluster could not be started, changed or stopped (ClusterError; what was started "
    "is stopped again), or a bug (InternalError: see the job manager's log).",
    503: "The store is unavailable, or this manager lost the leader lease mid-call.",
}
_RETRY_AFTER = {
    "Retry-After": {
        "description": "Whole seconds (at least 1) until the call may be taken.",
        "schema": {"type": "integer", "minimum": 1},
    }
}


def errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The ``responses=`` of a route: each code with the one error model."""
    out: dict[int | str, dict[str, Any]] = {}
    for code in codes:
        out[code] = {"model": ErrorAnswer, "description": _WHY[code]}
        if code == 429:
            out[code]["headers"] = _RETRY_AFTER
    return out


def scaling_field(description: str) -> Any:
    """A body's ``scaling``: checked by :func:`stoker.scalespec.parse_scaling` (a 422 naming
    ``scaling`` and the key at fault), described here as what it reads."""
    return Field(
        None,
        description=description,
        json_schema_extra={"anyOf": [*SCALING_VALUE["anyOf"], {"type": "null"}]},
    )


def json_body(schema: dict[str, Any], required: bool = True) -> dict[str, Any]:
    """``openapi_extra`` of a route that parses its JSON body itself."""
    return {
        "requestBody": {
            "required": required,
            "content": {"application/json": {"schema": schema}},
        }
    }


def install_docs(app: FastAPI) -> None:
    """``/docs`` (Swagger UI) from files served by this process: no CDN, no other host."""
    app.mount(STATIC_URL, StaticFiles(directory=STATIC_DIR), name="static")
    ui = f"{STATIC_URL}/swagger-ui"

    page = get_swagger_ui_html(
        openapi_url=OPENAPI_URL,
        title=f"{app.title} - API docs",
        swagger_js_url=f"{ui}/swagger-ui-bundle.js",
        swagger_css_url=f"{ui}/swagger-ui.css",
        swagger_favicon_url=f"{ui}/favicon-32x32.png",
        # No badge fetched from the public validator; a token typed into Authorize lives as
        # long as the page (not kept in the browser's localStorage for any script to read).
        swagger_ui_parameters={"validatorUrl": None, "persistAuthorization": False},
    )
    body = bytes(page.body)
    # The page's one inline script (Swagger UI's settings) by its hash: no other inline
    # script runs, nothing loads from another host, and no other site may frame it.
    hashes = " ".join(
        "'sha256-" + base64.b64encode(hashlib.sha256(m.group(1)).digest()).decode() + "'"
        for m in re.finditer(rb"<script>(.*?)</script>", body, re.S)
    )
    headers = {
        "Content-Security-Policy": f"default-src 'self'; script-src 'self' {hashes}; "
        "style-src 'self' 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'",
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
    }

    @app.get(DOCS_URL, include_in_schema=False)
    def docs() -> HTMLResponse:
        return HTMLResponse(body, headers=headers)


_GUARD_WHY = {
    "400": "BadHost: the request's Host is not a name this manager answers to "
    "(`stoker server --allow-host`).",
    "403": "CrossOrigin: a call that changes state from a page of another origin; or the "
    "token is read-only and this call changes state.",
    "415": "UnsupportedMediaType: a call that changes state sent a body that is not "
    "`Content-Type: application/json`.",
}


def install_openapi(
    app: FastAPI,
    *,
    token: bool,
    read_token: bool,
    open_paths: frozenset[str],
    host_check: bool = False,
) -> None:
    """``/openapi.json`` as the server behaves: with a token, every operation but
    ``open_paths`` declares the bearer token (or ``X-Stoker-Token``); the auth answers the
    routes declare are kept only where this server can give them (401: with a token; 403:
    with a read-only token too); FastAPI's own 422 model, which this server never sends, is
    gone."""
    never = {"401"} if not token else set()
    if not read_token:
        never.add("403")

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = get_openapi(
            title=app.title,
            version=app.version,
            description=app.description,
            routes=app.routes,
        )
        comps = schema.setdefault("components", {})
        for path, ops in schema.get("paths", {}).items():
            for method, op in ops.items():
                for code in never & set(op.get("responses", {})):
                    del op["responses"][code]
                # The request guard's refusals (stoker.server.guard), before any route runs.
                answers = op.setdefault("responses", {})
                guard = []
                if host_check and path not in ("/healthz", "/readyz"):
                    guard.append("400")
                if method.upper() not in ("GET", "HEAD", "OPTIONS"):
                    guard += ["403", "415"]
                for code in guard:
                    answers.setdefault(code, {"description": _GUARD_WHY[code]})
                for code, answer in op.get("responses", {}).items():
                    content = answer.get("content", {})
                    # A refusal is JSON even where the success is text (logs, metrics).
                    if code[0] in "45" and "application/json" not in content:
                        answer["content"] = {
                            "application/json": {"schema": _ERROR_REF},
                        }
        for name in ("HTTPValidationError", "ValidationError"):
            comps.get("schemas", {}).pop(name, None)
        if token:
            comps["securitySchemes"] = {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "The token given to `stoker server --token` (or the "
                    "read-only `--read-token`, for GET calls).",
                },
                "tokenHeader": {"type": "apiKey", "in": "header", "name": "X-Stoker-Token"},
            }
            for path, ops in schema.get("paths", {}).items():
                if path in open_paths:
                    continue
                for op in ops.values():
                    op["security"] = [{"bearer": []}, {"tokenHeader": []}]
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
