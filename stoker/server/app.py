"""The REST API of a job manager (FastAPI). OpenAPI docs at ``/docs``."""

from __future__ import annotations

import hmac
import json
import math
import time
from typing import Any

from fastapi import FastAPI, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

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
    NotLeader,
    SinkError,
    SourceError,
    StokerError,
    StoreError,
    TooManyRequests,
)
from stoker.manager import ControlRateLimiter, JobManager, Supervisor
from stoker.manager.applications import CLUSTER_PATH_PATTERN
from stoker.manager.control import HISTORY_MAX, control_view
from stoker.manager.rescales import RESCALES_MAX, RescaleTally
from stoker.redact import redact_answer, redact_text
from stoker.server import events, ui
from stoker.server.docs import (
    CONTROL_BODY,
    DOCS_URL,
    JOB_ID_HELP,
    JOB_ID_MAX,
    JOB_ID_PATTERN,
    OPENAPI_URL,
    REPARTITION_BODY,
    RESOURCES_BODY,
    SAVEPOINT_BODY,
    SCALING_HELP,
    STATIC_URL,
    ApplicationBody,
    ClusterBody,
    ConfigView,
    ControlEventView,
    ControlHistory,
    ManagersView,
    RescalesView,
    ResourcesView,
    WorkerBody,
    errors,
    install_docs,
    install_openapi,
    json_body,
    scaling_field,
)
from stoker.server.metrics import Histogram, exposition, registry_for
from stoker.store import ControlEvent
from stoker.types import ControlKind, ControlStatus, JobState
from stoker.types import job_id as check_job_id

# The one place where errors become HTTP statuses.
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
    ClusterConflict: 409,  # before ClusterError in every class's MRO: the state refuses it
    ClusterError: 500,  # a cluster could not be started, changed or stopped
    SinkError: 503,  # an external system failed (InvalidSink is InvalidInput first: 422)
    SourceError: 503,
}


def _status(err: StokerError) -> int:
    for cls in type(err).__mro__:
        if cls in HTTP_STATUS:
            return HTTP_STATUS[cls]
    return 500


class SubmitBody(BaseModel):
    """``POST /v1/jobs``."""

    model_config = ConfigDict(extra="forbid")

    job_id: str | None = Field(
        None,
        min_length=1,
        max_length=JOB_ID_MAX,
        pattern=JOB_ID_PATTERN,
        description=f"Default: the name of the app's Pipeline. {JOB_ID_HELP}.",
    )
    entrypoint: str = Field(
        ...,
        min_length=1,
        description="The application file (.py) on the manager's host, under an --allow-dir.",
    )
    args: list[str] = Field(default_factory=list)
    conf: dict[str, str] = Field(default_factory=dict, description="spark.* and stoker.* keys.")
    restart: bool = Field(False, description="Run an ended job again from its checkpoint.")
    config: dict[str, Any] = Field(
        default_factory=dict,
        description="Pipeline config: declared keys only, each of its default's type.",
    )
    restart_strategy: dict[str, Any] | None = Field(
        None, description='e.g. {"strategy": "fixed-delay", "attempts": 3, "delay": 1}'
    )
    from_savepoint: str | None = Field(
        None,
        min_length=1,
        description="A savepoint folder (absolute, under an --allow-dir) the job starts from: "
        "its checkpoint, source logs, outputs and control state; exactly once across the switch.",
    )
    scaling: Any = scaling_field(SCALING_HELP)


# Open without a token: liveness (load balancers and orchestrators probe it) and the API's
# description (a browser cannot send a bearer token with the page it opens): the docs page,
# its assets and the schema, which hold no job, log or setting. The calls the page makes go
# with the token typed into its "Authorize" dialog.
# The web UI's pages and assets are open for the same reason (they hold no data; what they
# show comes in guarded fragments, see stoker.server.ui).
OPEN_PATHS = frozenset({"/healthz", DOCS_URL, OPENAPI_URL, *ui.OPEN_PATHS})
_OPEN_PREFIX = (STATIC_URL + "/", *ui.OPEN_PREFIXES)
# A refusal names the REST fix (the header); the CLI adds its own (--token, STOKER_TOKEN).
_READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_CHALLENGE = {"WWW-Authenticate": "Bearer"}
_BIGINT = 2**63 - 1  # the store's attempt numbers
_CONTROL_ID = r"^[A-Za-z0-9_-]{1,64}$"


def _given_token(request: Request) -> str | None:
    auth = request.headers.get("authorization")
    if auth and auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return request.headers.get("x-stoker-token")


def _same(given: str, expected: str | None) -> bool:
    # Constant time: the answer's timing does not tell how much of a token matched.
    return expected is not None and hmac.compare_digest(given.encode(), expected.encode())


def _retry_after(err: TooManyRequests) -> str:
    """``Retry-After``: whole seconds, at least 1."""
    return str(max(1, math.ceil(err.retry_after)))


async def _json_object(request: Request, empty: dict[str, Any] | None = None) -> dict[str, Any]:
    """The request's body as a JSON object (``empty`` for no body at all, when given)."""
    raw = await request.body()
    if not raw.strip() and empty is not None:
        return dict(empty)
    try:
        body = json.loads(raw)
    except ValueError:  # UnicodeDecodeError is one
        raise InvalidInput("body", "malformed JSON") from None
    if not isinstance(body, dict):
        raise InvalidInput("body", f"expects a JSON object, got {type(body).__name__}")
    return body


def create_app(
    manager: JobManager,
    supervisor: Supervisor | None = None,
    token: str | None = None,
    read_token: str | None = None,
    control_rate: float = 20.0,
) -> FastAPI:
    """The API over ``manager``.

    With ``token`` every call but ``/healthz`` needs a token: ``token`` for anything,
    ``read_token`` (optional) for reads only. Answers show secrets redacted
    (:mod:`stoker.redact`). ``control_rate``: control events per second per job (bursts of
    twice that); 0 turns the limit off.
    """
    if read_token is not None and token is None:
        raise InvalidInput("--read-token", "needs a token for mutating calls too (--token)")
    if token is not None and token == read_token:
        raise InvalidInput("--read-token", "must differ from --token")
    app = FastAPI(
        title="stoker job manager",
        version="1",
        docs_url=None,  # served by install_docs, from the package
        redoc_url=None,
        openapi_url=OPENAPI_URL,
    )
    install_docs(app)
    install_openapi(app, token=token is not None, open_paths=OPEN_PATHS)
    submit_latency = Histogram()
    rescale_tally = RescaleTally()
    limiter = ControlRateLimiter(control_rate)
    # The answers each kind of call can give besides its success (one error model for all).
    guarded_ = (401,) if token is not None else ()
    writes = (*guarded_, 403) if read_token is not None else guarded_
    job_path = Path(
        ..., min_length=1, max_length=JOB_ID_MAX, pattern=JOB_ID_PATTERN, description=JOB_ID_HELP
    )

    @app.middleware("http")
    async def authorized(request: Request, call_next: Any) -> Any:
        # Before routing and body parsing: an unauthenticated call learns nothing else, not
        # even whether its body was well-formed.
        path = request.url.path
        if token is not None and path not in OPEN_PATHS and not path.startswith(_OPEN_PREFIX):
            given = _given_token(request)
            if not given:
                return JSONResponse(
                    {
                        "error": "missing token: send 'Authorization: Bearer <token>'",
                        "type": "Unauthorized",
                    },
                    status_code=401,
                    headers=_CHALLENGE,
                )
            full, read_only = _same(given, token), _same(given, read_token)
            if not (full or read_only):
                return JSONResponse(
                    {
                        "error": "wrong token: send 'Authorization: Bearer <token>' with the "
                        "token the manager was started with",
                        "type": "Unauthorized",
                    },
                    status_code=401,
                    headers=_CHALLENGE,
                )
            if not full and request.method not in _READ_METHODS:
                return JSONResponse(
                    {
                        "error": "the token is read-only: this call changes state and needs the "
                        "token the manager was given with --token, as 'Authorization: Bearer "
                        "<token>'",
                        "type": "Forbidden",
                    },
                    status_code=403,
                )
        return await call_next(request)

    @app.exception_handler(StokerError)
    async def _stoker_error(request: Request, err: StokerError) -> JSONResponse:
        body: dict[str, Any] = {"error": str(err), "type": type(err).__name__}
        job = getattr(err, "job_id", None)
        if job is not None:
            body["job_id"] = job  # lets a client rebuild the error without parsing the message
        if isinstance(err, InvalidInput):
            body["field"] = err.field
        if isinstance(err, JobTerminal):
            body["state"] = err.state
        if isinstance(err, JobConflict):
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
        return JSONResponse(redact_answer(body), status_code=_status(err), headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, err: RequestValidationError) -> JSONResponse:
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
                msg = (
                    e.message if name == "job_id" else e.message.replace("job id", "application id")
                )
        return JSONResponse(
            {"error": f"{field}: {msg}", "field": field, "type": "InvalidInput"}, status_code=422
        )

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, err: Exception) -> JSONResponse:
        # A bug: the one error shape still, the details in the manager's log (uvicorn logs it).
        return JSONResponse(
            {
                "error": f"internal error ({type(err).__name__}): see the job manager's log",
                "type": "InternalError",
            },
            status_code=500,
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, err: StarletteHTTPException) -> JSONResponse:
        # The framework's own refusals, in the one error shape.
        if err.status_code == 400:  # a body that is not even text (FastAPI's "error parsing")
            return JSONResponse(
                {"error": "body: malformed JSON", "field": "body", "type": "InvalidInput"},
                status_code=422,
            )
        if err.status_code == 405:
            # Allow lists every method of every route of this path (Starlette names only the
            # first route's), OPTIONS included in none: it is not served.
            allowed: set[str] = set()
            for route in app.router.routes:
                match, _ = route.matches(request.scope)
                if match is not Match.NONE:
                    allowed |= set(getattr(route, "methods", None) or ())
            allow = ", ".join(sorted(allowed))
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

    @app.get("/healthz", responses=errors(503))
    def healthz() -> dict[str, Any]:
        """Liveness, and whether this manager is the leader."""
        leader = manager.store.get_leader()
        return {
            "ok": True,
            "leader": bool(supervisor and supervisor.is_leader),
            "leader_address": leader.address if leader else None,
        }

    registry = registry_for(manager, supervisor, submit_latency, rescale_tally)
    events.mount(app, manager, errors(*guarded_, 422, 503))

    @app.get(
        "/metrics",
        response_class=PlainTextResponse,
        responses=errors(*guarded_, 503),
    )
    def metrics() -> Response:
        """Prometheus metrics (text exposition format): jobs and applications by state, attempts,
        epochs committed, submit latency, rescales; per job (``job_id``): epoch duration by
        step, rows, input and processing rate, backlog, control apply latency, executors,
        attempts, restarts, state."""
        body, content_type = exposition(registry)
        return Response(body, media_type=content_type)

    @app.post(
        "/v1/jobs",
        status_code=201,
        responses={
            200: {"description": "Live with the same spec (`duplicate`), or `restarted`."},
            **errors(*writes, 409, 422, 503),
        },
    )
    async def submit(body: SubmitBody) -> JSONResponse:
        """Submit a job. 201 created; 200 with ``duplicate`` when live with the same spec,
        or ``restarted`` for an ended job submitted with ``restart``; 409 otherwise."""
        t0 = time.perf_counter()
        try:
            res = await manager.submit_async(
                body.job_id,
                body.entrypoint,
                body.args,
                body.conf,
                body.restart,
                body.restart_strategy,
                config=body.config,
                from_savepoint=body.from_savepoint,
                scaling=body.scaling,
            )
        finally:
            submit_latency.observe(time.perf_counter() - t0)
        out = manager.submitted_view(res.job)
        out["duplicate"] = res.outcome == "duplicate"
        out["restarted"] = res.outcome == "restarted"
        return JSONResponse(
            redact_answer(out), status_code=201 if res.outcome == "created" else 200
        )

    @app.get("/v1/jobs", responses=errors(*guarded_, 422, 503))
    def list_jobs(state: JobState | None = Query(None)) -> list[dict[str, Any]]:
        """All jobs (from the store: complete even while a new leader recovers). A RUNNING job
        that control paused shows ``"state": "PAUSED"``."""
        return [redact_answer(j) for j in manager.list_views(state)]

    reads = errors(*guarded_, 404, 422, 503)

    @app.get("/v1/jobs/{job_id}", responses=reads)
    def get_job(job_id: str = job_path) -> dict[str, Any]:
        """State, current attempt (pid, host, lease expiry), last epoch, timings. A RUNNING job
        that control paused shows ``"state": "PAUSED"`` and ``"paused": true``."""
        return dict(redact_answer(manager.view(job_id)))

    @app.get("/v1/jobs/{job_id}/attempts", responses=reads)
    def attempts(job_id: str = job_path) -> list[dict[str, Any]]:
        """Every attempt of the job, oldest first."""
        return [redact_answer(a.to_dict()) for a in manager.attempts(job_id)]

    @app.get(
        "/v1/jobs/{job_id}/attempts/{attempt}/log",
        response_class=PlainTextResponse,
        responses=reads,
    )
    def attempt_log(
        job_id: str = job_path,
        attempt: int = Path(..., ge=1, le=_BIGINT, description="The attempt's number (from 1)."),
        tail: int | None = Query(None, ge=1, description="Only the last this many bytes."),
    ) -> str:
        """The driver's log of one attempt (422 for an attempt no job manager started)."""
        return redact_text(manager.attempt_log(job_id, attempt, tail))

    @app.get("/v1/jobs/{job_id}/epochs", responses=reads)
    def epochs(
        job_id: str = job_path, limit: int = Query(100, ge=1, le=100_000)
    ) -> list[dict[str, Any]]:
        """The job's epochs, newest first (those retention kept)."""
        return [redact_answer(e.to_dict()) for e in manager.epochs(job_id, limit)]

    @app.post(
        "/v1/jobs/{job_id}/cancel", status_code=202, responses=errors(*writes, 404, 409, 422, 503)
    )
    def cancel(job_id: str = job_path) -> dict[str, Any]:
        """Graceful: the current epoch completes and commits, then the driver stops."""
        return dict(redact_answer(manager.cancel(job_id).to_dict()))

    # scaling -------------------------------------------------------------------------------
    scalable_path = Path(
        ...,
        min_length=1,
        max_length=JOB_ID_MAX,
        pattern=JOB_ID_PATTERN,
        description=f"A job's id, or an application's (scaling is its owner's). {JOB_ID_HELP}.",
    )

    @app.get("/v1/jobs/{job_id}/rescales", response_model=RescalesView, responses=reads)
    def get_rescales(
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
        return JSONResponse(redact_answer(manager.rescales(job_id, limit, since)))

    @app.put(
        "/v1/jobs/{job_id}/resources",
        response_model=ResourcesView,
        responses=errors(*writes, 404, 409, 422, 503),
        openapi_extra=json_body(RESOURCES_BODY),
    )
    async def put_resources(request: Request, job_id: str = scalable_path) -> JSONResponse:
        """Change the executor bounds of a running job's owner (the job, or its
        application): ``{"min_executors": n, "max_executors": m}`` (either alone keeps the
        other), mode kept; recorded in its rescale history with who sent it. 409 when the
        owner has ended."""
        body = await _json_object(request)
        sender = "operator" if token is not None else "api"
        out = await run_in_threadpool(lambda: manager.set_resources(job_id, body, sender=sender))
        return JSONResponse(redact_answer(out))

    @app.post(
        "/v1/jobs/{job_id}/state/repartition",
        responses=errors(*writes, 404, 409, 422, 500, 503),
        openapi_extra=json_body(REPARTITION_BODY),
    )
    async def repartition_state(request: Request, job_id: str = job_path) -> JSONResponse:
        """Give a stopped job N state partitions (its maximum parallelism), offline, through
        Spark's checkpoint repartitioning on the manager's host: ``{"partitions": N}``. 422
        naming the reason when the job runs, its state store cannot be repartitioned, or N is
        not a whole number >= 1 or is the job's number already; nothing changes then."""
        body = await _json_object(request)
        unknown = sorted(set(body) - {"partitions"})
        if unknown:
            raise InvalidInput(unknown[0], 'unknown field (the body is {"partitions": N})')
        if "partitions" not in body:
            raise InvalidInput("partitions", "required: the number of state partitions")
        out = await run_in_threadpool(lambda: manager.repartition_state(job_id, body["partitions"]))
        return JSONResponse(redact_answer(out))

    # applications --------------------------------------------------------------------------
    app_path = Path(
        ..., min_length=1, max_length=JOB_ID_MAX, pattern=JOB_ID_PATTERN, description=JOB_ID_HELP
    )

    @app.post(
        "/v1/applications",
        status_code=201,
        responses={
            200: {"description": "Live with the same spec (`duplicate`), or `restarted`."},
            **errors(*writes, 409, 422, 503),
        },
    )
    async def submit_application(body: ApplicationBody) -> JSONResponse:
        """Submit a program (an application): the leader starts its driver on its cluster and
        supervises it (restart strategy, HA). 201 created; 200 when live with the same spec
        (``duplicate``) or ``restarted``; 409 for another spec while live, an ended one
        without ``restart``, or an id taken by a job."""
        res = await run_in_threadpool(
            manager.submit_application,
            body.app_id,
            body.entrypoint,
            body.args,
            body.conf,
            body.cluster,
            body.restart_strategy,
            body.driver_memory,
            body.driver_cores,
            body.restart,
            body.scaling,
        )
        out = await run_in_threadpool(manager.application, res.job.job_id)
        out["duplicate"] = res.outcome == "duplicate"
        out["restarted"] = res.outcome == "restarted"
        return JSONResponse(
            redact_answer(out), status_code=201 if res.outcome == "created" else 200
        )

    @app.get("/v1/applications", responses=errors(*guarded_, 422, 503))
    def list_applications(state: JobState | None = Query(None)) -> list[dict[str, Any]]:
        """Every application, in brief (state, attempt, cluster, number of jobs)."""
        return [redact_answer(a) for a in manager.applications(state)]

    @app.get("/v1/applications/{app_id}", responses=reads)
    def get_application(app_id: str = app_path) -> dict[str, Any]:
        """State, every driver attempt, the live driver (pid, host), the cluster, each job with
        its state and last epoch, the last error."""
        return dict(redact_answer(manager.application(app_id)))

    @app.post(
        "/v1/applications/{app_id}/cancel",
        status_code=202,
        responses=errors(*writes, 404, 409, 422, 503),
    )
    def cancel_application(app_id: str = app_path) -> dict[str, Any]:
        """Graceful: every job of the application stops after its epoch in flight commits,
        then the driver ends; the application's own cluster is torn down."""
        return dict(redact_answer(manager.cancel_application(app_id)))

    @app.get("/v1/applications/{app_id}/log", response_class=PlainTextResponse, responses=reads)
    def application_log(
        app_id: str = app_path,
        attempt: int | None = Query(
            None, ge=1, le=_BIGINT, description="Default: the current attempt."
        ),
        tail: int | None = Query(None, ge=1, le=1_000_000, description="Only the last N lines."),
    ) -> str:
        """The driver's log of one attempt of the application."""
        return redact_text(manager.application_log(app_id, attempt, tail))

    # clusters ------------------------------------------------------------------------------
    cluster_path = Path(
        ...,
        pattern=CLUSTER_PATH_PATTERN,
        description="A cluster's name (app-<id>: an application's own).",
    )
    cluster_writes = errors(*writes, 404, 409, 422, 500, 503)

    @app.post("/v1/clusters", status_code=201, responses=errors(*writes, 409, 422, 500, 503))
    def start_cluster(body: ClusterBody | None = None) -> dict[str, Any]:
        """Start a session cluster (a Spark standalone master and its workers on this host);
        answers once every worker is ALIVE (tens of seconds). 409: the name is in use;
        500: it could not start (what was started is stopped again)."""
        b = body or ClusterBody.model_validate({})
        return dict(
            redact_answer(manager.start_session_cluster(b.name, b.workers, b.cores, b.memory))
        )

    @app.get("/v1/clusters", responses=errors(*guarded_, 422, 503))
    def list_clusters(
        include_stopped: bool = Query(False, description="Also the STOPPED ones."),
    ) -> list[dict[str, Any]]:
        """Every cluster stoker started: session clusters and applications' own."""
        return [redact_answer(c) for c in manager.clusters(include_stopped)]

    @app.get("/v1/clusters/{name}", responses=reads)
    def get_cluster(name: str = cluster_path) -> dict[str, Any]:
        """One cluster: its record, what its master says now (``status``) and the live
        applications on it (``used_by``)."""
        return dict(redact_answer(manager.cluster(name)))

    @app.post("/v1/clusters/{name}/workers", status_code=201, responses=cluster_writes)
    def add_worker(name: str = cluster_path, body: WorkerBody | None = None) -> dict[str, Any]:
        """Start one more worker (default: the cluster's cores and memory per worker)."""
        b = body or WorkerBody.model_validate({})
        return dict(redact_answer(manager.add_worker(name, b.cores, b.memory)))

    @app.delete("/v1/clusters/{name}/workers/{worker}", responses=cluster_writes)
    def remove_worker(
        name: str = cluster_path,
        worker: str = Path(
            ..., pattern=r"^[A-Za-z0-9._:-]{1,128}$", description="A worker's id or address."
        ),
        graceful: bool = Query(
            False, description="Decommission it first: running work moves, no task fails."
        ),
    ) -> dict[str, Any]:
        """Stop one worker of a RUNNING cluster."""
        return dict(redact_answer(manager.remove_worker(name, worker, graceful)))

    @app.post("/v1/clusters/{name}/stop", responses=cluster_writes)
    def stop_cluster(name: str = cluster_path) -> dict[str, Any]:
        """Stop a session cluster and every process of it. Applications still on it are named
        in ``used_by`` (not stopped). An application's own cluster: 409 (it goes when the
        application ends)."""
        return dict(redact_answer(manager.stop_cluster(name)))

    # control -------------------------------------------------------------------------------
    control_path = Path(
        ..., pattern=_CONTROL_ID, description="A control event's id (`control_id`)."
    )
    control_writes = {
        202: {"model": ControlEventView, "description": "Stored, PENDING: the event is durable."},
        200: {
            "model": ControlEventView,
            "description": "A retry: this request_id and event were stored before.",
        },
        **errors(*writes, 404, 409, 422, 429, 503),
    }

    def _sender(request: Request) -> str:
        given = _given_token(request)
        return "operator" if token is not None and given and _same(given, token) else "anonymous"

    def _event_answer(ev: ControlEvent, created: bool = False) -> JSONResponse:
        return JSONResponse(redact_answer(control_view(ev)), status_code=202 if created else 200)

    async def _submit(request: Request, job_id: str, body: dict[str, Any]) -> JSONResponse:
        ev, created = await run_in_threadpool(
            lambda: manager.submit_control(
                job_id,
                body,
                sender=_sender(request),
                origin=request.client.host if request.client else None,
            )
        )
        return _event_answer(ev, created)

    @app.post(
        "/v1/jobs/{job_id}/control",
        status_code=202,
        response_model=None,
        responses=control_writes,
        openapi_extra=json_body(CONTROL_BODY),
    )
    async def post_control(request: Request, job_id: str = job_path) -> JSONResponse:
        """Send a control event to a job: 202 once it is stored (PENDING); it applies at the
        job's next epoch boundary. A ``scaling`` event applies at once (COMMITTED, no epoch)
        to the job's owner, and may name an application too. A retry with the same
        ``request_id`` and event answers the stored event (200); with another event, 409.
        Rate limited per job (429)."""
        limiter.take(job_id)
        return await _submit(request, job_id, await _json_object(request))

    @app.get(
        "/v1/jobs/{job_id}/control/{control_id}",
        response_model=ControlEventView,
        responses=reads,
    )
    def get_control(job_id: str = job_path, control_id: str = control_path) -> JSONResponse:
        """One control event and how far it got."""
        return _event_answer(manager.control_event(job_id, control_id))

    @app.get("/v1/jobs/{job_id}/control", response_model=ControlHistory, responses=reads)
    def control_history(
        job_id: str = job_path,
        limit: int = Query(50, ge=1, le=HISTORY_MAX),
        before: int | None = Query(
            None, ge=1, le=_BIGINT, description="Only versions below this (the `next` value)."
        ),
        kind: ControlKind | None = Query(None),
        status: ControlStatus | None = Query(None),
    ) -> JSONResponse:
        """The job's control events, newest first, a page at a time."""
        page = manager.control_history(job_id, limit, before, kind, status)
        return JSONResponse(redact_answer(page))

    @app.get("/v1/jobs/{job_id}/config", response_model=ConfigView, responses=reads)
    def config(job_id: str = job_path) -> JSONResponse:
        """The job's effective config and control state now, with their version."""
        return JSONResponse(redact_answer(manager.config_view(job_id)))

    @app.post(
        "/v1/jobs/{job_id}/savepoints",
        status_code=202,
        response_model=None,
        responses=control_writes,
        openapi_extra=json_body(SAVEPOINT_BODY, required=False),
    )
    async def post_savepoint(request: Request, job_id: str = job_path) -> JSONResponse:
        """Take a savepoint at the next epoch boundary (``"stop": true``: then stop the job).
        Answers like a control event; its ``result`` gets the folder once written."""
        limiter.take(job_id)
        body = await _json_object(request, empty={})
        if body.get("kind", "savepoint") != "savepoint":
            raise InvalidInput("kind", "a savepoint request takes stop, dir and request_id only")
        return await _submit(request, job_id, {**body, "kind": str(ControlKind.SAVEPOINT)})

    @app.get("/v1/jobs/{job_id}/savepoints", response_model=ControlHistory, responses=reads)
    def savepoints(
        job_id: str = job_path,
        limit: int = Query(50, ge=1, le=HISTORY_MAX),
        before: int | None = Query(None, ge=1, le=_BIGINT),
    ) -> JSONResponse:
        """The job's savepoints, newest first."""
        page = manager.control_history(job_id, limit, before, ControlKind.SAVEPOINT)
        return JSONResponse(redact_answer(page))

    @app.get(
        "/v1/jobs/{job_id}/savepoints/{control_id}",
        response_model=ControlEventView,
        responses=reads,
    )
    def savepoint(job_id: str = job_path, control_id: str = control_path) -> JSONResponse:
        """One savepoint and how far it got (its folder in ``result.path`` once written)."""
        return _event_answer(manager.control_event(job_id, control_id, ControlKind.SAVEPOINT))

    # the job managers ----------------------------------------------------------------------
    @app.get("/v1/managers", response_model=ManagersView, responses=errors(*guarded_, 503))
    def list_managers() -> JSONResponse:
        """The job managers sharing this store: the leader (the live lease's holder) and the
        standbys, each seen within 3 leader TTLs, oldest first. A heartbeat each, shown
        only; the lease alone decides who leads. An --api-only manager is not listed."""
        return JSONResponse(redact_answer(manager.managers()))

    ui.mount(app, manager, supervisor, token, read_token)
    return app
