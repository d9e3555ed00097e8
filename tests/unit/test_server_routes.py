"""The server's rooms reached one at a time: a router served alone over a stand-in manager
(through the dependency the routers share, no closure), the one map of errors to statuses,
and the 405 answer naming the methods of routers included in an app."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any, cast

from fastapi import FastAPI
from fastapi.testclient import TestClient

from stoker.errors import (
    ClusterConflict,
    ClusterError,
    InvalidInput,
    JobNotFound,
    StokerError,
    StoreError,
    TooManyRequests,
)
from stoker.manager import ControlRateLimiter, JobManager
from stoker.manager.rescales import RescaleTally
from stoker.server.deps import ServerState, install_state
from stoker.server.errors import install_error_handlers, status_of
from stoker.server.events import EventFeed
from stoker.server.metrics import Histogram
from stoker.server.routes import health, jobs, managers


class _Store:
    """A store whose leader read answers, fails, or hangs (``mode``)."""

    def __init__(self) -> None:
        self.mode = "answers"
        self.reads = 0
        self.release = threading.Event()

    def get_leader(self) -> Any:
        self.reads += 1
        if self.mode == "fails":
            raise StoreError("database is locked")
        if self.mode == "hangs":
            self.release.wait(30)
        return SimpleNamespace(address="http://10.0.0.1:8080")


class _Managers:
    """Only what the routes under test call."""

    store = _Store()

    def managers(self) -> dict[str, Any]:
        return {"leader": None, "managers": []}

    def view(self, job_id: str) -> dict[str, Any]:
        raise JobNotFound(job_id)


def _app(*routers: Any, manager: JobManager | None = None) -> FastAPI:
    """An app of ``routers`` over ``manager`` (a stand-in by default)."""
    manager = manager if manager is not None else cast(JobManager, _Managers())
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


def test_liveness_never_reads_the_store_and_readiness_does_within_a_limit() -> None:
    """Issue 21, item 9: /healthz waited behind the store (one API connection, a long list
    before it): a slow store made a live manager look dead. Liveness answers from memory;
    readiness asks the store, and answers 503 naming why when it fails or does not answer
    within its limit."""
    store = _Managers.store
    store.mode, store.reads = "hangs", 0
    try:
        with TestClient(_app(health.router)) as client:
            r = client.get("/healthz")
            assert (r.status_code, r.json()) == (200, {"ok": True, "leader": False})
            assert store.reads == 0
            r = client.get("/readyz")  # the store hangs: 503 after the limit, not a hang
            assert r.status_code == 503, r.text
            assert r.json()["error"] == (
                f"the store did not answer within {health.READY_TIMEOUT_S:g} s"
            )
            store.release.set()
            store.mode = "fails"
            r = client.get("/readyz")
            assert (r.status_code, r.json()["error"]) == (
                503,
                "the store cannot be read: StoreError",
            )
            store.mode = "answers"
            r = client.get("/readyz")
            assert (r.status_code, r.json()) == (
                200,
                {"ready": True, "leader": False, "leader_address": "http://10.0.0.1:8080"},
            )
    finally:
        store.release.set()
        store.mode = "answers"


def test_the_jobs_list_comes_in_pages_with_a_cursor(tmp_path: Any) -> None:
    """Issue 21 item 9: ``GET /v1/jobs?limit=N`` over a real manager and SQLite store; the
    ``X-Next-Cursor`` leads through every job once; a cursor that is not one is 422."""
    from stoker.store import open_store
    from stoker.types import job_id

    store = open_store(tmp_path / "store.db")
    names = [f"job-{n:02d}" for n in range(7)]
    for name in names:
        store.create_job(job_id(name), name, {"kind": "app"}, {})
    app = _app(jobs.router, manager=JobManager(store, tmp_path / "state", [tmp_path]))
    try:
        with TestClient(app) as client:
            seen: list[str] = []
            params: dict[str, Any] = {"limit": 3}
            pages = 0
            while True:
                r = client.get("/v1/jobs", params=params)
                assert r.status_code == 200, r.text
                pages += 1
                seen += [j["job_id"] for j in r.json()]
                cursor = r.headers.get("X-Next-Cursor")
                if cursor is None:
                    assert "Link" not in r.headers
                    break
                assert r.headers["Link"].endswith('; rel="next"'), r.headers["Link"]
                params = {"limit": 3, "after": cursor}
            assert (seen, pages) == (names, 3)
            assert [j["job_id"] for j in client.get("/v1/jobs").json()] == names  # one page
            for bad in ("nope", "W10", "x" * 401, "1.5~a..b", "1e9~a", "~a", "1.5~"):
                r = client.get("/v1/jobs", params={"after": bad})
                assert r.status_code == 422, (bad, r.text)
            # Issue 23 item 12: any position the schema's pattern admits is a cursor (none is
            # refused), before, between or after the jobs there are.
            for position, rest in (("0.0~a", names), ("0~zzz", names), ("9999999999~a", [])):
                r = client.get("/v1/jobs", params={"after": position})
                assert r.status_code == 200, (position, r.text)
                assert [j["job_id"] for j in r.json()] == rest, position
            assert client.get("/v1/jobs", params={"limit": 0}).status_code == 422
            assert client.get("/v1/jobs", params={"limit": 1001}).status_code == 422
    finally:
        store.close()


def test_the_epochs_list_comes_in_pages_with_a_cursor(tmp_path: Any) -> None:
    """Issue 21 item 9: ``GET /v1/jobs/{id}/epochs?limit=N`` pages newest first; a full page
    carries ``X-Next-Cursor`` (its oldest epoch) and the pages go through every epoch once,
    however many the job commits meanwhile (they come before every cursor)."""
    from stoker.store import Owner, open_store
    from stoker.types import AttemptNo, ControlVersion, Epoch, job_id

    store = open_store(tmp_path / "store.db")
    jid = job_id("paged")
    store.create_job(jid, "paged", {"kind": "app"}, {})
    att = store.start_attempt(jid, Owner("h", 1, "x"), 30.0, AttemptNo(0))

    def commit(n: int) -> None:
        store.pin_epoch(jid, Epoch(n), att.attempt, ControlVersion(0))
        store.decide_epoch(jid, Epoch(n), att.attempt, 1, False)

    for n in range(7):
        commit(n)
    app = _app(jobs.router, manager=JobManager(store, tmp_path / "state", [tmp_path]))
    try:
        with TestClient(app) as client:
            seen: list[int] = []
            params: dict[str, Any] = {"limit": 3}
            while True:
                r = client.get("/v1/jobs/paged/epochs", params=params)
                assert r.status_code == 200, r.text
                seen += [e["epoch"] for e in r.json()]
                if len(seen) == 3:
                    commit(7)  # a new epoch while the client pages: not in a later page
                cursor = r.headers.get("X-Next-Cursor")
                if cursor is None:
                    break
                assert r.headers["Link"] == (
                    f'</v1/jobs/paged/epochs?limit=3&before={cursor}>; rel="next"'
                )
                params = {"limit": 3, "before": int(cursor)}
            assert seen == [6, 5, 4, 3, 2, 1, 0]
            assert client.get("/v1/jobs/paged/epochs", params={"before": -1}).status_code == 422
    finally:
        store.close()
