"""``/v1/applications``: programs whose driver the leader starts and supervises."""

from __future__ import annotations

import functools
from typing import Any

from fastapi import APIRouter, Path, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field

from stoker.redact import redact_answer, redact_text
from stoker.server.auth import sender
from stoker.server.deps import Ctx, Manager
from stoker.server.docs import (
    ENTRYPOINT_MAX,
    ENTRYPOINT_PATTERN,
    JOB_ID_HELP,
    JOB_ID_MAX,
    JOB_ID_PATTERN,
    MEMORY_PATTERN,
    SCALING_HELP,
    errors,
    scaling_field,
)
from stoker.server.routes._common import (
    BIGINT,
    GUARDED,
    READS,
    WRITES,
    log_tail,
    next_page,
    page_after,
    page_limit,
)
from stoker.server.routes.operations import ACCEPTED, accepted, idempotency_key
from stoker.types import JobState

router = APIRouter()

CLUSTER_SPEC_HELP = (
    "Where the driver's Spark runs: `local` (local[*] inside the driver), "
    "`standalone:workers=2,cores=1,memory=1g` (a cluster stoker starts for this application "
    "and tears down when it ends), `spark://host:port` (a master you run; left alone), or "
    "the name of a RUNNING session cluster (POST /v1/clusters)."
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
        max_length=ENTRYPOINT_MAX,
        pattern=ENTRYPOINT_PATTERN,
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
    standby: bool = Field(
        False,
        description="Keep a warm standby driver (the program run up to its first job, Spark "
        "up and warmed, holding nothing) that takes the application's next attempt when the "
        "running driver dies and runs main on under the same job ids; cluster `local` only. "
        "Shown as `standby` in the application's status.",
    )
    scaling: Any = scaling_field(
        SCALING_HELP + " The application's jobs share its executors and scaling."
    )


app_path: Any = Path(
    ..., min_length=1, max_length=JOB_ID_MAX, pattern=JOB_ID_PATTERN, description=JOB_ID_HELP
)


@router.post(
    "/v1/applications",
    status_code=201,
    responses={
        200: {
            "description": "The same spec, live or ended (`duplicate`: nothing starts), or "
            "`restarted`."
        },
        **errors(*WRITES, 409, 422, 503),
    },
)
async def submit_application(body: ApplicationBody, manager: Manager) -> JSONResponse:
    """Submit a program (an application): the leader starts its driver on its cluster and
    supervises it (restart strategy, HA). 201 created; 200 when the id exists with the same
    spec, live or ended (``duplicate``: retry-safe, nothing starts), or ``restarted``; 409
    for another spec (an ended one without ``restart`` too), or an id taken by a job."""
    res = await run_in_threadpool(
        functools.partial(
            manager.submit_application,
            body.app_id,
            body.entrypoint,
            args=body.args,
            conf=body.conf,
            cluster=body.cluster,
            restart_strategy=body.restart_strategy,
            driver_memory=body.driver_memory,
            driver_cores=body.driver_cores,
            restart=body.restart,
            scaling=body.scaling,
            standby=body.standby,
        )
    )
    out = await run_in_threadpool(manager.application, res.job.job_id)
    out["duplicate"] = res.outcome == "duplicate"
    out["restarted"] = res.outcome == "restarted"
    return JSONResponse(redact_answer(out), status_code=201 if res.outcome == "created" else 200)


@router.get("/v1/applications", responses=errors(*GUARDED, 422, 503))
def list_applications(
    manager: Manager,
    response: Response,
    state: JobState | None = Query(None),
    limit: int = page_limit,
    after: str | None = page_after,
) -> list[dict[str, Any]]:
    """Applications in brief (state, attempt, cluster, number of jobs), oldest first, a page
    at a time: ``X-Next-Cursor`` (and a ``Link`` ``rel="next"``) when more follow."""
    page, nxt = manager.applications_page(state, limit, after)
    next_page(response, "/v1/applications", nxt, limit, state)
    return [redact_answer(a) for a in page]


@router.get("/v1/applications/{app_id}", responses=READS)
def get_application(manager: Manager, app_id: str = app_path) -> dict[str, Any]:
    """State, every driver attempt, the live driver (pid, host), the cluster, each job with
    its state and last epoch, the last error."""
    return dict(redact_answer(manager.application(app_id)))


@router.post(
    "/v1/applications/{app_id}/cancel",
    status_code=202,
    responses=errors(*WRITES, 404, 409, 422, 503),
)
def cancel_application(manager: Manager, app_id: str = app_path) -> dict[str, Any]:
    """Graceful: every job of the application stops after its epoch in flight commits,
    then the driver ends; the application's own cluster is torn down."""
    return dict(redact_answer(manager.cancel_application(app_id)))


class StopBody(BaseModel):
    """``POST /v1/applications/{id}/stop``: stop it to resume it later."""

    model_config = ConfigDict(extra="forbid")

    savepoint: bool = Field(
        False, description="Write a savepoint of each live job first (then the cancel)."
    )
    dir: str | None = Field(
        None,
        min_length=1,
        max_length=ENTRYPOINT_MAX,
        description="Where the savepoints go (absolute, under an --allow-dir); default: in "
        "each job's state folder.",
    )


@router.post(
    "/v1/applications/{app_id}/stop",
    status_code=202,
    responses={**ACCEPTED, **errors(*WRITES, 404, 409, 422, 429, 503)},
)
def stop_application(
    request: Request,
    ctx: Ctx,
    app_id: str = app_path,
    body: StopBody | None = None,
    key: str | None = idempotency_key(),
) -> JSONResponse:
    """Stop the application to resume it later (``POST .../resume``), as an operation: with
    ``savepoint``, each live job writes a savepoint at its next epoch boundary first (a
    savepoint refused or not written leaves the application running, the operation FAILED
    naming the job); then every job stops after its epoch in flight commits, and the
    application ends CANCELED. Its ``result``: ``{"app_id", "state", "savepoints"}`` (job ->
    folder). 409: it has ended."""
    b = body or StopBody.model_validate({})
    who = sender(request, ctx.token)
    return accepted(
        ctx.manager.stop_application_operation(app_id, b.savepoint, b.dir, sender=who, idem_key=key)
    )


@router.post(
    "/v1/applications/{app_id}/resume",
    responses={
        200: {"description": "The application, running again (`restarted`)."},
        **errors(*WRITES, 404, 409, 422, 503),
    },
)
async def resume_application(manager: Manager, app_id: str = app_path) -> JSONResponse:
    """Run an ended application again with its recorded spec: a new driver attempt whose
    ``main`` takes its CANCELED and FAILED jobs back from their checkpoints (FINISHED ones
    stay finished). 422 while it runs."""
    res = await run_in_threadpool(manager.resume_application, app_id)
    out = await run_in_threadpool(manager.application, res.job.job_id)
    out["restarted"] = res.outcome == "restarted"
    return JSONResponse(redact_answer(out))


@router.get("/v1/applications/{app_id}/log", response_class=PlainTextResponse, responses=READS)
def application_log(
    manager: Manager,
    app_id: str = app_path,
    attempt: int | None = Query(None, ge=1, le=BIGINT, description="Default: the current attempt."),
    tail: int | None = log_tail(),
) -> str:
    """The driver's log of one attempt of the application."""
    return redact_text(manager.application_log(app_id, attempt, tail))
