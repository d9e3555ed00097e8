"""The REST API of a job manager (FastAPI). OpenAPI docs at ``/docs``."""

from __future__ import annotations

import hmac
import time
from typing import Any

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field

from stoker.errors import (
    DuplicateJob,
    InvalidInput,
    JobConflict,
    JobNotFound,
    JobTerminal,
    NotLeader,
    StokerError,
    StoreError,
)
from stoker.manager import JobManager, Supervisor
from stoker.server.metrics import Histogram, counter, gauge
from stoker.types import JobState

# The one place where errors become HTTP statuses.
HTTP_STATUS: dict[type[StokerError], int] = {
    InvalidInput: 422,
    JobNotFound: 404,
    JobConflict: 409,
    JobTerminal: 409,
    DuplicateJob: 409,
    NotLeader: 503,
    StoreError: 503,
}


def _status(err: StokerError) -> int:
    for cls in type(err).__mro__:
        if cls in HTTP_STATUS:
            return HTTP_STATUS[cls]
    return 500


class SubmitBody(BaseModel):
    """``POST /v1/jobs``."""

    model_config = ConfigDict(extra="forbid")

    job_id: str | None = Field(None, description="Default: the name of the app's Pipeline.")
    entrypoint: str = Field(..., description="The application file (.py) on the manager's host.")
    args: list[str] = Field(default_factory=list)
    conf: dict[str, str] = Field(default_factory=dict, description="spark.* and stoker.* keys.")
    restart: bool = Field(False, description="Run an ended job again from its checkpoint.")
    restart_strategy: dict[str, Any] | None = Field(
        None, description='e.g. {"strategy": "fixed-delay", "attempts": 3, "delay": 1}'
    )


def create_app(
    manager: JobManager, supervisor: Supervisor | None = None, token: str | None = None
) -> FastAPI:
    """The API over ``manager``; mutating calls need ``token`` when one is given."""
    app = FastAPI(title="stoker job manager", version="1")
    submit_latency = Histogram()

    @app.middleware("http")
    async def authorized(request: Request, call_next: Any) -> Any:
        # Before routing and body parsing: an unauthenticated call learns nothing else, not
        # even whether its body was well-formed.
        if token is not None and request.method not in ("GET", "HEAD", "OPTIONS"):
            given = request.headers.get("x-stoker-token")
            auth = request.headers.get("authorization")
            if auth and auth.lower().startswith("bearer "):
                given = auth[7:].strip()
            if not given:
                return JSONResponse(
                    {"error": "missing token: send 'Authorization: Bearer <token>'"},
                    status_code=401,
                )
            if not hmac.compare_digest(given.encode(), token.encode()):
                return JSONResponse({"error": "wrong token"}, status_code=403)
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
        return JSONResponse(body, status_code=_status(err))

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, err: RequestValidationError) -> JSONResponse:
        first = err.errors()[0] if err.errors() else {}
        loc = [str(p) for p in first.get("loc", []) if p != "body"]
        field = ".".join(loc) or "body"
        msg = first.get("msg", "invalid request")
        if first.get("type") == "json_invalid":
            field, msg = "body", "malformed JSON"
        return JSONResponse(
            {"error": f"{field}: {msg}", "field": field, "type": "InvalidInput"}, status_code=422
        )

    @app.get("/healthz")
    def healthz() -> dict[str, Any]:
        """Liveness, and whether this manager is the leader."""
        leader = manager.store.get_leader()
        return {
            "ok": True,
            "leader": bool(supervisor and supervisor.is_leader),
            "leader_address": leader.address if leader else None,
        }

    @app.get("/metrics", response_class=PlainTextResponse)
    def metrics() -> str:
        """Prometheus metrics: jobs by state, attempts, epochs committed, submit latency."""
        by_state = {str(s): 0.0 for s in JobState}
        for j in manager.list_jobs():
            by_state[str(j.state)] += 1
        counts = manager.store.counts()
        lines = gauge("stoker_jobs", "Jobs by state.", by_state, "state")
        lines += counter(
            "stoker_attempts_started_total", "Attempts started (all jobs).", counts["attempts"]
        )
        lines += counter(
            "stoker_epochs_committed_total",
            "Epochs committed (all jobs).",
            counts["epochs_committed"],
        )
        lines += gauge(
            "stoker_leader",
            "1 if this manager holds the leader lease.",
            {"self": 1.0 if supervisor and supervisor.is_leader else 0.0},
            "manager",
        )
        lines += submit_latency.render(
            "stoker_submit_latency_seconds", "Time to answer POST /v1/jobs."
        )
        return "\n".join(lines) + "\n"

    @app.post("/v1/jobs")
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
            )
        finally:
            submit_latency.observe(time.perf_counter() - t0)
        out = res.job.to_dict()
        out["duplicate"] = res.outcome == "duplicate"
        out["restarted"] = res.outcome == "restarted"
        return JSONResponse(out, status_code=201 if res.outcome == "created" else 200)

    @app.get("/v1/jobs")
    def list_jobs(state: JobState | None = Query(None)) -> list[dict[str, Any]]:
        """All jobs (from the store: complete even while a new leader recovers)."""
        return [j.to_dict() for j in manager.list_jobs(state)]

    @app.get("/v1/jobs/{job_id}")
    def get_job(job_id: str) -> dict[str, Any]:
        """State, current attempt (pid, host, lease expiry), last epoch, timings."""
        return manager.view(job_id)

    @app.get("/v1/jobs/{job_id}/attempts")
    def attempts(job_id: str) -> list[dict[str, Any]]:
        return [a.to_dict() for a in manager.attempts(job_id)]

    @app.get("/v1/jobs/{job_id}/attempts/{attempt}/log", response_class=PlainTextResponse)
    def attempt_log(job_id: str, attempt: int, tail: int | None = Query(None, ge=1)) -> str:
        """The driver's log of one attempt."""
        return manager.attempt_log(job_id, attempt, tail)

    @app.get("/v1/jobs/{job_id}/epochs")
    def epochs(job_id: str, limit: int = Query(100, ge=1, le=100_000)) -> list[dict[str, Any]]:
        return [e.to_dict() for e in manager.epochs(job_id, limit)]

    @app.post("/v1/jobs/{job_id}/cancel", status_code=202)
    def cancel(job_id: str) -> dict[str, Any]:
        """Graceful: the current epoch completes and commits, then the driver stops."""
        return manager.cancel(job_id).to_dict()

    return app
