"""The server's rooms reached one at a time: a router served alone over a stand-in manager
(through the dependency the routers share, no closure), the one map of errors to statuses,
and the 405 answer naming the methods of routers included in an app."""

from __future__ import annotations

from typing import Any, cast

from fastapi import FastAPI
from fastapi.testclient import TestClient

from stoker.errors import (
    ClusterConflict,
    ClusterError,
    InvalidInput,
    JobNotFound,
    StokerError,
    TooManyRequests,
)
from stoker.manager import ControlRateLimiter, JobManager
from stoker.manager.rescales import RescaleTally
from stoker.server.deps import ServerState, install_state
from stoker.server.errors import install_error_handlers, status_of
from stoker.server.events import EventFeed
from stoker.server.metrics import Histogram
from stoker.server.routes import jobs, managers


class _Managers:
    """Only what the routes under test call."""

    def managers(self) -> dict[str, Any]:
        return {"leader": None, "managers": []}

    def view(self, job_id: str) -> dict[str, Any]:
        raise JobNotFound(job_id)


def _app(*routers: Any) -> FastAPI:
    manager = cast(JobManager, _Managers())
    app = FastAPI()
    install_state(
        app,
        ServerState(
            manager=manager,
            supervisor=None,
            token=None,
            read_token=None,
            limiter=ControlRateLimiter(0),
            submit_latency=Histogram(),
            rescale_tally=RescaleTally(),
            registry=cast(Any, None),
            feed=EventFeed(manager),
        ),
    )
    install_error_handlers(app)
    for router in routers:
        app.include_router(router)
    return app


def test_a_router_alone_over_a_stand_in_manager() -> None:
    with TestClient(_app(managers.router)) as client:
        r = client.get("/v1/managers")
        assert (r.status_code, r.json()) == (200, {"leader": None, "managers": []})
        assert client.get("/v1/jobs").status_code == 404  # not this router's


def test_errors_answer_in_the_one_shape_with_their_status() -> None:
    with TestClient(_app(jobs.router)) as client:
        r = client.get("/v1/jobs/nope")
        assert (r.status_code, r.json()) == (
            404,
            {"error": "job 'nope' not found", "job_id": "nope", "type": "JobNotFound"},
        )
        r = client.delete("/v1/jobs/nope")
        assert (r.status_code, r.headers["allow"]) == (405, "GET")
        r = client.put("/v1/jobs")
        assert (r.status_code, r.headers["allow"]) == (405, "GET, POST")
        assert r.json()["error"] == "PUT is not allowed on /v1/jobs: use GET, POST"


def test_the_status_of_each_error_is_its_nearest_class() -> None:
    assert status_of(InvalidInput("f", "bad")) == 422
    assert status_of(JobNotFound("j")) == 404
    assert status_of(TooManyRequests("j", 1.0, "20/s")) == 429
    assert status_of(ClusterConflict("cluster c is busy")) == 409  # a ClusterError too
    assert status_of(ClusterError("cluster c failed")) == 500
    assert status_of(StokerError("other")) == 500
