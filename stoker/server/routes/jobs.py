"""``/v1/jobs``: submit, list, read a job, its attempts, their logs and its epochs; cancel;
upgrade to new code."""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Path, Query, Response
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field

from stoker.manager.upgrades import (
    WATCH_EPOCHS,
    WATCH_EPOCHS_MAX,
    WATCH_SECONDS,
    WATCH_SECONDS_MAX,
)
from stoker.redact import redact_answer, redact_text
from stoker.server.deps import Ctx, Manager
from stoker.server.docs import (
    ENTRYPOINT_MAX,
    ENTRYPOINT_PATTERN,
    JOB_ID_HELP,
    JOB_ID_MAX,
    JOB_ID_PATTERN,
    SCALING_HELP,
    errors,
    scaling_field,
)
from stoker.server.routes._common import (
    BIGINT,
    GUARDED,
    READS,
    WRITES,
    job_path,
    log_tail,
    next_page,
    page_after,
    page_limit,
)
from stoker.types import JobState

router = APIRouter()


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
        max_length=ENTRYPOINT_MAX,
        pattern=ENTRYPOINT_PATTERN,
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
    rewrite_output_after_savepoint: bool = Field(
        False,
        description="With from_savepoint: when the savepoint's job went on after it and a sink "
        "holds that later output, start anyway and write the rows of those epochs again "
        "(without it the driver refuses the start, naming the sink and the epochs).",
    )
    fork: bool = Field(
        False,
        description="With from_savepoint: start a fork, under a uid of its own, to outputs of "
        "its own (a sink writing the savepoint's job's or an earlier restore's is refused). A "
        "savepoint goes on under its uid once: restored before, it is refused without this, "
        "and with it until the earlier restores have ended with their outputs resolved.",
    )
    ignore_unreachable_stores: bool = Field(
        False,
        description="A store the lineage check of a start from a savepoint (and of a restored "
        "job's later starts) must read and cannot open (the savepoint's job's, an earlier "
        "restore's) is skipped with a warning instead of refusing the start (422 naming it). "
        "Only when that job is known to be over.",
    )
    scaling: Any = scaling_field(SCALING_HELP)
    standby: bool = Field(
        False,
        description="Keep a warm standby driver (the app imported, Spark up, the plan "
        "analyzed, holding nothing) that takes the job's next attempt when the running driver "
        "dies; shown as `standby` in the job's status. On a standalone master (`spark://`) the "
        "job must set `spark.cores.max`: the standby keeps executors of its own up to it.",
    )


@router.post(
    "/v1/jobs",
    status_code=201,
    responses={
        200: {
            "description": "The same spec, live or ended (`duplicate`: nothing starts), or "
            "`restarted`."
        },
        **errors(*WRITES, 409, 422, 503),
    },
)
async def submit(body: SubmitBody, ctx: Ctx) -> JSONResponse:
    """Submit a job. 201 created; 200 with ``duplicate`` when the id exists with the same spec,
    live or ended (retry-safe: nothing starts), or ``restarted`` for an ended job submitted
    with ``restart``; 409 for another spec."""
    manager = ctx.manager
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
            rewrite_output_after_savepoint=body.rewrite_output_after_savepoint,
            standby=body.standby,
            fork=body.fork,
            ignore_unreachable_stores=body.ignore_unreachable_stores,
        )
    finally:
        ctx.submit_latency.observe(time.perf_counter() - t0)
    out = manager.submitted_view(res.job)
    out["duplicate"] = res.outcome == "duplicate"
    out["restarted"] = res.outcome == "restarted"
    return JSONResponse(redact_answer(out), status_code=201 if res.outcome == "created" else 200)


@router.get("/v1/jobs", responses=errors(*GUARDED, 422, 503))
def list_jobs(
    manager: Manager,
    response: Response,
    state: JobState | None = Query(None),
    limit: int = page_limit,
    after: str | None = page_after,
) -> list[dict[str, Any]]:
    """Jobs, oldest first, a page at a time (from the store: complete even while a new
    leader recovers). When more follow, the answer carries ``X-Next-Cursor`` (and a ``Link``
    ``rel="next"``): pass it as ``after`` for the next page. A RUNNING job that control paused
    shows ``"state": "PAUSED"``."""
    page, nxt = manager.list_page(state, limit, after)
    next_page(response, "/v1/jobs", nxt, limit, state)
    return [redact_answer(j) for j in page]


@router.get("/v1/jobs/{job_id}", responses=READS)
def get_job(manager: Manager, job_id: str = job_path) -> dict[str, Any]:
    """State, current attempt (pid, host, lease expiry), last epoch, timings. A RUNNING job
    that control paused shows ``"state": "PAUSED"`` and ``"paused": true``."""
    return dict(redact_answer(manager.view(job_id)))


@router.get("/v1/jobs/{job_id}/attempts", responses=READS)
def attempts(manager: Manager, job_id: str = job_path) -> list[dict[str, Any]]:
    """Every attempt of the job, oldest first."""
    return [redact_answer(a.to_dict()) for a in manager.attempts(job_id)]


@router.get(
    "/v1/jobs/{job_id}/attempts/{attempt}/log",
    response_class=PlainTextResponse,
    responses=READS,
)
def attempt_log(
    manager: Manager,
    job_id: str = job_path,
    attempt: int = Path(..., ge=1, le=BIGINT, description="The attempt's number (from 1)."),
    tail: int | None = log_tail(),
) -> str:
    """The driver's log of one attempt (422 for an attempt no job manager started)."""
    return redact_text(manager.attempt_log(job_id, attempt, tail))


@router.get("/v1/jobs/{job_id}/epochs", responses=READS)
def epochs(
    response: Response,
    manager: Manager,
    job_id: str = job_path,
    limit: int = Query(100, ge=1, le=100_000),
    before: int | None = Query(
        None,
        ge=0,
        le=2**62,
        description="Only epochs below this one: the X-Next-Cursor of the page before.",
    ),
) -> list[dict[str, Any]]:
    """The job's epochs, newest first (those retention kept), a page of at most ``limit``;
    a full page carries ``X-Next-Cursor`` (its oldest epoch) and a ``Link`` to the next one.
    Pages are stable while the job commits new epochs (they come before every cursor)."""
    rows = manager.epochs(job_id, limit, before)
    if len(rows) == limit and rows:
        oldest = int(rows[-1].epoch)
        response.headers["X-Next-Cursor"] = str(oldest)
        query = urlencode({"limit": limit, "before": oldest})
        response.headers["Link"] = f'</v1/jobs/{job_id}/epochs?{query}>; rel="next"'
    return [redact_answer(e.to_dict()) for e in rows]


@router.post(
    "/v1/jobs/{job_id}/cancel", status_code=202, responses=errors(*WRITES, 404, 409, 422, 503)
)
def cancel(manager: Manager, job_id: str = job_path) -> dict[str, Any]:
    """Graceful: the current epoch completes and commits, then the driver stops."""
    return dict(redact_answer(manager.cancel(job_id).to_dict()))


class UpgradeBody(BaseModel):
    """``POST /v1/jobs/{job_id}/upgrade``."""

    model_config = ConfigDict(extra="forbid")

    entrypoint: str = Field(
        ...,
        min_length=1,
        max_length=ENTRYPOINT_MAX,
        pattern=ENTRYPOINT_PATTERN,
        description="The new code: an application file (.py) on the manager's host, under an "
        "--allow-dir, other than the file the job runs now (that one is what a rollback runs).",
    )
    config: dict[str, Any] = Field(
        default_factory=dict,
        description="Pipeline config values for the new code, on top of the job's.",
    )
    watch_epochs: int = Field(
        WATCH_EPOCHS,
        ge=1,
        le=WATCH_EPOCHS_MAX,
        description="The upgrade is CONFIRMED once the new code has committed this many epochs.",
    )
    watch_seconds: float = Field(
        WATCH_SECONDS,
        ge=0,
        le=WATCH_SECONDS_MAX,
        description="... or once it has run this long after the swap without a failure (a "
        "job given no data). A failure before: ROLLED_BACK to the old code.",
    )


@router.post(
    "/v1/jobs/{job_id}/upgrade",
    status_code=202,
    responses=errors(*WRITES, 404, 409, 422, 429, 503),
)
def upgrade(body: UpgradeBody, manager: Manager, job_id: str = job_path) -> dict[str, Any]:
    """Move a running job to new code at an epoch boundary, without a cold start: 202 with
    the upgrade, PENDING. Checked at once: the file, its config, its sources against the
    running job's (422 naming the difference; nothing changes). The leader then warms the new
    code as a standby, checks its state schema against the checkpoint (REFUSED with the
    difference), stops the running driver at an epoch boundary and hands the next attempt to
    the new code (SWAPPED), then watches it: CONFIRMED, or ROLLED_BACK to the old code (kept
    warm until then) if it fails. 409 while another upgrade of the job is live."""
    return dict(redact_answer(manager.upgrade(job_id, body.model_dump())))


@router.get("/v1/jobs/{job_id}/upgrades", responses=READS)
def list_upgrades(
    manager: Manager,
    job_id: str = job_path,
    limit: int = Query(100, ge=1, le=1000),
) -> list[dict[str, Any]]:
    """The job's upgrades, newest first."""
    return [redact_answer(u) for u in manager.upgrades_of(job_id, limit)]


@router.get("/v1/jobs/{job_id}/upgrades/{upgrade_id}", responses=READS)
def get_upgrade(
    manager: Manager,
    job_id: str = job_path,
    upgrade_id: str = Path(..., min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$"),
) -> dict[str, Any]:
    """One upgrade: its state (PENDING, SWAPPED, CONFIRMED, ROLLED_BACK, REFUSED), the code
    before and after, what was checked, and why it was refused or rolled back."""
    return dict(redact_answer(manager.upgrade_of(job_id, upgrade_id)))
