"""The API's contract and its docs page: the one error model, the answers each call can give,
the job id pattern, the control, application, cluster and scaling request bodies and answers,
the security schemes, and Swagger UI served from the package (``/docs`` works without
internet)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.staticfiles import StaticFiles

from stoker.manager.cluster_records import CLUSTER_NAME_PATTERN
from stoker.manager.rescales import MAX_EXECUTORS

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
# A JVM memory amount with its unit (the manager checks it against the host's memory).
MEMORY_PATTERN = r"^[1-9][0-9]{0,8}[kKmMgGtT][bB]?$"
CLUSTER_SPEC_HELP = (
    "Where the driver's Spark runs: `local` (local[*] inside the driver), "
    "`standalone:workers=2,cores=1,memory=1g` (a cluster stoker starts for this application "
    "and tears down when it ends), `spark://host:port` (a master you run; left alone), or "
    "the name of a RUNNING session cluster (POST /v1/clusters)."
)
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
        None, description="409 JobConflict: how the live job's spec differs from this one."
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
    409: "The id is live with another spec (`difference`), or it has ended (`state`; submit "
    'it with "restart": true to run it again), or it is taken by another kind of record or '
    "another application's job (JobOwnedElsewhere, `owner`); for control, the event cannot be "
    "taken in the job's control state, or its `request_id` was used for another event "
    "(`reason`); for a cluster, its name is in use or its state refuses the change "
    "(ClusterConflict).",
    422: "Bad input: `field` names the field, `error` says what is allowed. Nothing changed.",
    429: "Too many control events for this job: retry after `Retry-After` seconds.",
    500: "A cluster could not be started, changed or stopped (ClusterError; what was started "
    "is stopped again), or a bug (InternalError: see the job manager's log).",
    503: "The store is unavailable, or this manager lost the leader lease mid-call.",
}
_RETRY_AFTER = {
    "Retry-After": {
        "description": "Whole seconds (at least 1) until the job takes another control event.",
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


# Control ----------------------------------------------------------------------------------------
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


def scaling_field(description: str) -> Any:
    """A body's ``scaling``: checked by :func:`stoker.scalespec.parse_scaling` (a 422 naming
    ``scaling`` and the key at fault), described here as what it reads."""
    return Field(
        None,
        description=description,
        json_schema_extra={"anyOf": [*SCALING_VALUE["anyOf"], {"type": "null"}]},
    )


class ApplicationBody(BaseModel):
    """``POST /v1/applications``."""

    model_config = ConfigDict(extra="forbid")

    app_id: str | None = Field(
        None,
        min_length=1,
        max_length=JOB_ID_MAX,
        pattern=JOB_ID_PATTERN,
        description=f"Default: the entrypoint's file name without .py. {JOB_ID_HELP}. "
        "Applications and jobs share one id space.",
    )
    entrypoint: str = Field(
        ...,
        min_length=1,
        description="The program (.py) on the manager's host, under an --allow-dir: top-level "
        "code or a main() that runs jobs with stoker.run / stoker.submit.",
    )
    args: list[str] = Field(default_factory=list, description="The program's sys.argv[1:].")
    conf: dict[str, str] = Field(
        default_factory=dict, description="spark.* and stoker.* keys for the driver."
    )
    cluster: str = Field("local", min_length=1, description=CLUSTER_SPEC_HELP)
    restart_strategy: dict[str, Any] | None = Field(
        None, description='For the driver, e.g. {"strategy": "fixed-delay", "attempts": 3}'
    )
    driver_memory: str | None = Field(
        None, pattern=MEMORY_PATTERN, description="spark.driver.memory, e.g. 2g."
    )
    driver_cores: int | None = Field(None, ge=1, le=1024, description="spark.driver.cores.")
    restart: bool = Field(False, description="Run an ended application again.")
    scaling: Any = scaling_field(
        SCALING_HELP + " The application's jobs share its executors and scaling."
    )


class ClusterBody(BaseModel):
    """``POST /v1/clusters``: a session cluster (Spark standalone) that outlives applications."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(
        None,
        pattern=CLUSTER_NAME_PATTERN,
        description="Default: cluster-<6 hex>. Applications run on it with cluster=<name>.",
    )
    workers: int = Field(2, ge=1, le=64)
    cores: int = Field(1, ge=1, le=1024, description="Cores of each worker.")
    memory: str = Field("1g", pattern=MEMORY_PATTERN, description="Memory of each worker.")


class WorkerBody(BaseModel):
    """``POST /v1/clusters/{name}/workers``: one more worker (default: the cluster's sizes)."""

    model_config = ConfigDict(extra="forbid")

    cores: int | None = Field(None, ge=1, le=1024)
    memory: str | None = Field(None, pattern=MEMORY_PATTERN)


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
                        {"type": "string", "pattern": r"^\s*\d+(\.\d+)?\s*(ms|s|m|h)?\s*$"},
                        {"type": "number", "minimum": 0, "maximum": 86400},
                    ],
                    "description": "e.g. '2s', '500ms', '1m', or seconds; 0 = as fast as possible",
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
    "minProperties": 1,
    "description": "New executor bounds of the job's owner (the job, or its application); "
    "its mode stays. max_executors must be at least min_executors (422 otherwise).",
}
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
SAVEPOINT_BODY: dict[str, Any] = {
    "type": "object",
    "properties": {**_SAVEPOINT_FIELDS, "request_id": _REQUEST_ID},
    "additionalProperties": False,
}


# Scaling -----------------------------------------------------------------------------------------
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
    owner: str
    scaling: ScalingView
    executor_target: int | None = None
    resources: dict[str, Any] | None = None
    rescale: RescaleView


# The job managers --------------------------------------------------------------------------------
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


class ManagersView(BaseModel):
    """The leader and every manager whose heartbeat is fresh, oldest first."""

    leader: LeaderView | None = Field(
        ..., description="null while no manager holds a live lease (a takeover under way)."
    )
    managers: list[ManagerView]


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

    @app.get(DOCS_URL, include_in_schema=False)
    def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=OPENAPI_URL,
            title=f"{app.title} - API docs",
            swagger_js_url=f"{ui}/swagger-ui-bundle.js",
            swagger_css_url=f"{ui}/swagger-ui.css",
            swagger_favicon_url=f"{ui}/favicon-32x32.png",
            # No badge fetched from the public validator; keep a token typed into Authorize.
            swagger_ui_parameters={"validatorUrl": None, "persistAuthorization": True},
        )


def install_openapi(app: FastAPI, *, token: bool, open_paths: frozenset[str]) -> None:
    """``/openapi.json`` as the server behaves: with a token, every operation but
    ``open_paths`` declares the bearer token (or ``X-Stoker-Token``); FastAPI's own 422 model,
    which this server never sends, is gone."""

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
        for ops in schema.get("paths", {}).values():
            for op in ops.values():
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
