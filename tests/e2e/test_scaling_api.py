"""Scaling through the REST API and the CLI (issue 11, point 5), against a real ``stoker
server`` on a real SQLite store.

No Spark: the manager is ``--api-only`` (it never leads, so no driver starts). Jobs and
applications are submitted through the API (or made in the store as a driver records them);
what a driver and the scaler would write (resources, executor targets, epoch metrics,
decisions) is written through the store's own API, and what the API answers and stored is
read back through the API and the store. One server for the module, with a token and a
read-only token; the CLI runs as a user runs it (subprocesses).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from stoker.store import Store, open_store
from stoker.store.records import Owner
from stoker.types import AttemptNo, ControlVersion, Epoch, JobId, JobKind, JobState, job_id
from tests.support import REPO, stoker_cmd
from tests.support.manager import Manager, stop_all

pytestmark = pytest.mark.timeout(600)

TOKEN = "scale-t0ken"
READ_TOKEN = "scale-read-t0ken"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
READ = {"Authorization": f"Bearer {READ_TOKEN}"}
APP = """\
from stoker import Pipeline, sinks, sources

pipeline = Pipeline("demo").source(sources.generator(total=10)).sink(sinks.files("/tmp/none"))
"""
AUTO = {
    "mode": "auto",
    "min_executors": 1,
    "max_executors": 4,
    "target_utilization": 0.7,
    "catch_up": 300.0,
    "stabilization": 60.0,
    "cooldown": 120.0,
    "max_rescales_per_hour": 10,
}
FIXED = {**AUTO, "mode": "fixed", "max_executors": None}
# What a local run records as an application's job's spec (no driver runs here).
IN_APP_SPEC: dict[str, Any] = {
    "kind": "in_app",
    "name": "x",
    "sources": ["generator(rows_per_second=10)"],
    "sinks": ["files('/out')"],
    "config": {},
    "trigger_s": 2.0,
}


@dataclass
class Server:
    manager: Manager
    url: str  # the store's
    app: Path  # an application file under the allowed folder

    @property
    def http(self) -> httpx.Client:
        return self.manager.http

    def store(self) -> Store:
        return open_store(self.url)

    def submit(self, name: str, scaling: Any = None, **extra: Any) -> httpx.Response:
        body: dict[str, Any] = {"job_id": name, "entrypoint": str(self.app), **extra}
        if scaling is not None:
            body["scaling"] = scaling
        return self.http.post("/v1/jobs", json=body, headers=AUTH)

    def application(self, name: str, scaling: Any = None) -> httpx.Response:
        body: dict[str, Any] = {"app_id": name, "entrypoint": str(self.app)}
        if scaling is not None:
            body["scaling"] = scaling
        return self.http.post("/v1/applications", json=body, headers=AUTH)

    def in_app_job(self, name: str, app: str) -> str:
        st = self.store()
        try:
            st.create_job(job_id(name), name, dict(IN_APP_SPEC), {}, app_id=JobId(app))
        finally:
            st.close()
        return name

    def record(self, name: str) -> Any:
        st = self.store()
        try:
            return st.get_job(job_id(name))
        finally:
            st.close()

    def rescales(self, name: str) -> list[Any]:
        st = self.store()
        try:
            return st.list_rescales(job_id(name), limit=1000)
        finally:
            st.close()

    def cli(self, *args: str, server: bool = True) -> subprocess.CompletedProcess[str]:
        argv = stoker_cmd(*args)
        if server:
            argv += ["--server", self.manager.url, "--token", TOKEN]
        return subprocess.run(
            argv, capture_output=True, text=True, timeout=120, cwd=str(REPO), env=_env()
        )


def _env() -> dict[str, str]:
    import os

    scrub = ("STOKER_TOKEN", "STOKER_READ_TOKEN", "STOKER_SERVER", "STOKER_STORE")
    return {k: v for k, v in os.environ.items() if k not in scrub}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("scaleapi")
    allowed = root / "allowed"
    allowed.mkdir()
    (allowed / "demo.py").write_text(APP)
    url = f"sqlite:///{root / 'store.db'}"
    m = Manager(
        "scale",
        url,
        root / "state",
        [allowed],
        root / "scale.log",
        token=TOKEN,
        read_token=READ_TOKEN,
        extra_args=["--api-only"],
    )
    try:
        m.wait_up()
        yield Server(m, url, allowed / "demo.py")
    finally:
        stop_all([m])


# submission ---------------------------------------------------------------------------------------
def test_a_submission_sets_its_scaling_and_a_resubmission_keeps_it(server: Server) -> None:
    r = server.submit("sub-text", "auto:min=1,max=4")
    assert r.status_code == 201, r.text
    job = r.json()
    assert job["scaling"] == AUTO and job["spec"]["scaling"] == AUTO
    # The state partitions are fixed at submission: -D spark.sql.shuffle.partitions, else 8.
    assert (job["executor_target"], job["resources"], job["max_parallelism"]) == (None, None, 8)
    assert server.record("sub-text").scaling == AUTO
    # The same as an object (durations as text): the same spec.
    r = server.submit("sub-obj", {"mode": "auto", "max_executors": 4, "catch_up": "5m"})
    assert (r.status_code, r.json()["scaling"]) == (201, AUTO), r.text
    # Changed at runtime, then submitted again as before: the live job, its scaling as it is.
    r = server.http.post(
        "/v1/jobs/sub-text/control", json={"kind": "scaling", "scaling": "reactive"}, headers=AUTH
    )
    assert r.status_code == 202, r.text
    r = server.submit("sub-text", "auto:min=1,max=4")
    assert r.status_code == 200 and r.json()["duplicate"] is True, r.text
    assert r.json()["scaling"]["mode"] == "reactive"
    assert server.record("sub-text").scaling["mode"] == "reactive"
    # Another scaling for the live id is another spec: refused, nothing changed.
    r = server.submit("sub-text", "auto:min=2,max=4")
    assert r.status_code == 409 and r.json()["type"] == "JobConflict", r.text
    assert "scaling" in r.json()["difference"]
    assert server.record("sub-text").scaling["mode"] == "reactive"
    # No scaling, or "fixed": mode fixed, nothing kept in the spec (specs made before scaling
    # existed stay equal), and the two are the same job.
    r = server.submit("sub-none")
    assert (r.status_code, r.json()["scaling"]) == (201, FIXED), r.text
    assert "scaling" not in r.json()["spec"] and server.record("sub-none").scaling is None
    r = server.submit("sub-none", "fixed")
    assert r.status_code == 200 and r.json()["duplicate"] is True, r.text


@pytest.mark.parametrize(
    ("scaling", "words"),
    [
        ("elastic", "mode must be one of fixed, reactive, auto"),
        ("auto:min=2", "max_executors is required"),
        ("auto:min=3,max=2", "must be at least min_executors"),
        ("auto:min=0,max=2", "min_executors must be 1 or more"),
        ("auto:max=2,target_utilization=1.5", "target_utilization"),
        ("auto:max=2,cooldown=-1s", "cooldown"),
        ("auto:max=2,speed=3", "unknown key 'speed'"),
        ({"max_executors": 2}, "mode is required"),
        ({"mode": "auto", "max_executors": "many"}, "max_executors must be a whole number"),
        (7, "scaling"),
    ],
)
def test_a_bad_scaling_is_refused_naming_it_and_nothing_is_made(
    server: Server, scaling: Any, words: str
) -> None:
    r = server.submit("bad-scaling", scaling)
    assert (r.status_code, r.json()["field"]) == (422, "scaling"), r.text
    assert words in r.json()["error"], r.text
    assert server.http.get("/v1/jobs/bad-scaling", headers=AUTH).status_code == 404
    r = server.application("bad-scaling-app", scaling)
    assert (r.status_code, r.json()["field"]) == (422, "scaling"), r.text
    assert server.http.get("/v1/applications/bad-scaling-app", headers=AUTH).status_code == 404


def test_an_application_s_scaling_is_its_jobs(server: Server) -> None:
    r = server.application("shop", "auto:min=1,max=4")
    assert r.status_code == 201, r.text
    view = r.json()
    assert view["scaling"] == AUTO and view["spec"]["scaling"] == AUTO
    assert view["executor_target"] is None and view["resources"] is None
    server.in_app_job("shop-orders", "shop")
    st = server.store()
    try:
        st.set_executor_target(job_id("shop"), 3)
        st.report_resources(job_id("shop"), {"executors": 2, "cores": 4, "at": 1.0})
        st.set_job_spec(job_id("shop-orders"), {**IN_APP_SPEC, "max_parallelism": 16})
    finally:
        st.close()
    job = server.http.get("/v1/jobs/shop-orders", headers=AUTH).json()
    assert job["app_id"] == "shop"
    assert (job["scaling"], job["executor_target"], job["max_parallelism"]) == (AUTO, 3, 16)
    assert job["resources"]["executors"] == 2  # its application's, until it reports its own
    listed = {j["job_id"]: j for j in server.http.get("/v1/jobs", headers=AUTH).json()}
    assert listed["shop-orders"]["executor_target"] == 3
    app = server.http.get("/v1/applications/shop", headers=AUTH).json()
    assert (app["scaling"], app["executor_target"]) == (AUTO, 3)
    assert [j["job_id"] for j in app["jobs"]] == ["shop-orders"]
    assert server.application("shop", "auto:min=1,max=4").json()["duplicate"] is True
    r = server.application("shop", "reactive")
    assert r.status_code == 409 and "scaling" in r.json()["difference"], r.text


# rescale history ----------------------------------------------------------------------------------
def _history(server: Server, name: str) -> None:
    """A job in mode auto with two rescales, as the scaler records them: a decision in use
    12.5 s after it was made (two workers added), then an executor lost; target 3."""
    assert server.submit(name, "auto:min=1,max=4").status_code == 201
    st = server.store()
    try:
        first = st.add_rescale(
            job_id(name),
            kind="decision",
            policy="default",
            mode="auto",
            signals={"utilization": 1.4, "backlog": 5000},
            from_executors=1,
            to_executors=3,
            reason="behind: backlog 5000",
            status="decided",
            at=1000.0,
        )
        st.update_rescale(
            first.rescale_id, status="in_use", in_use_at=1012.5, workers={"added": ["w1", "w2"]}
        )
        st.add_rescale(
            job_id(name),
            kind="observed",
            policy="default",
            mode="auto",
            signals={},
            from_executors=3,
            to_executors=2,
            reason="executor 2 lost",
            status="observed",
            at=2000.0,
        )
        st.set_executor_target(job_id(name), 3)
    finally:
        st.close()


def test_rescales_lists_the_owner_s_history_newest_first(server: Server) -> None:
    _history(server, "hist")
    r = server.http.get("/v1/jobs/hist/rescales", headers=AUTH)
    assert r.status_code == 200, r.text
    view = r.json()
    assert (view["job_id"], view["owner"], view["scaling"]) == ("hist", "hist", AUTO)
    assert view["executor_target"] == 3
    kinds = [
        (x["kind"], x["status"], x["from_executors"], x["to_executors"]) for x in view["rescales"]
    ]
    assert kinds == [("observed", "observed", 3, 2), ("decision", "in_use", 1, 3)]
    decision = view["rescales"][1]
    assert decision["signals"] == {"utilization": 1.4, "backlog": 5000}
    assert decision["seconds_to_in_use"] == pytest.approx(12.5)
    assert decision["workers"] == {"added": ["w1", "w2"], "removed": []}
    # A page, and since.
    got = server.http.get("/v1/jobs/hist/rescales?limit=1", headers=AUTH).json()["rescales"]
    assert [x["kind"] for x in got] == ["observed"]
    got = server.http.get("/v1/jobs/hist/rescales?since=1500", headers=AUTH).json()["rescales"]
    assert [x["kind"] for x in got] == ["observed"]
    # The read-only token reads it.
    assert server.http.get("/v1/jobs/hist/rescales", headers=READ).status_code == 200


def test_an_application_s_job_answers_with_its_application_s_history(server: Server) -> None:
    assert server.application("fleet", "auto:min=1,max=2").status_code == 201
    server.in_app_job("fleet-a", "fleet")
    r = server.http.put("/v1/jobs/fleet-a/resources", json={"max_executors": 5}, headers=AUTH)
    assert r.status_code == 200, r.text
    assert (r.json()["owner"], r.json()["scaling"]["max_executors"]) == ("fleet", 5)
    for name in ("fleet-a", "fleet"):  # the job's id, or the application's
        view = server.http.get(f"/v1/jobs/{name}/rescales", headers=AUTH).json()
        assert (view["job_id"], view["owner"]) == (name, "fleet")
        assert [x["reason"] for x in view["rescales"]] == ["bounds min=1,max=2 -> min=1,max=5"]
        assert view["rescales"][0]["job_id"] == "fleet"
    assert server.rescales("fleet-a") == []  # recorded on the owner, not on the job


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("limit=0", "query.limit"),
        ("limit=1001", "query.limit"),
        ("limit=x", "query.limit"),
        ("since=-1", "query.since"),
    ],
)
def test_rescales_refuses_a_bad_query(server: Server, query: str, field: str) -> None:
    r = server.http.get(f"/v1/jobs/hist/rescales?{query}", headers=AUTH)
    assert (r.status_code, r.json()["field"]) == (422, field), r.text


def test_rescales_of_an_unknown_job_is_a_404(server: Server) -> None:
    r = server.http.get("/v1/jobs/nobody/rescales", headers=AUTH)
    assert (r.status_code, r.json()["type"]) == (404, "JobNotFound"), r.text
    r = server.http.get("/v1/jobs/a..b/rescales", headers=AUTH)
    assert (r.status_code, r.json()["field"]) == (422, "job_id"), r.text


# bounds -------------------------------------------------------------------------------------------
def test_new_bounds_keep_the_mode_and_are_recorded_with_their_sender(server: Server) -> None:
    assert server.submit("bounded", "auto:min=1,max=4").status_code == 201
    r = server.http.put(
        "/v1/jobs/bounded/resources", json={"min_executors": 2, "max_executors": 6}, headers=AUTH
    )
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["scaling"] == {**AUTO, "min_executors": 2, "max_executors": 6}
    assert (out["job_id"], out["owner"]) == ("bounded", "bounded")
    rescale = out["rescale"]
    assert (rescale["kind"], rescale["status"], rescale["policy"]) == ("bounds", "recorded", "user")
    assert (rescale["sender"], rescale["mode"]) == ("operator", "auto")
    assert rescale["reason"] == "bounds min=1,max=4 -> min=2,max=6"
    # One bound alone keeps the other.
    r = server.http.put("/v1/jobs/bounded/resources", json={"max_executors": 3}, headers=AUTH)
    assert r.json()["scaling"]["min_executors"] == 2 and r.json()["scaling"]["max_executors"] == 3
    assert server.record("bounded").scaling["max_executors"] == 3
    assert [x.kind for x in server.rescales("bounded")] == ["bounds", "bounds"]
    # Bounds of a job in mode fixed are kept for when it goes auto.
    assert server.submit("bounded-fixed").status_code == 201
    r = server.http.put("/v1/jobs/bounded-fixed/resources", json={"max_executors": 2}, headers=AUTH)
    assert r.status_code == 200 and r.json()["scaling"]["mode"] == "fixed", r.text


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({}, "min_executors", "give min_executors, max_executors or both"),
        ({"min_executors": None}, "min_executors", "give min_executors"),
        ({"max_executors": 0}, "max_executors", "from 1 to 10000"),
        ({"min_executors": "2"}, "min_executors", "whole number"),
        ({"min_executors": True}, "min_executors", "whole number"),
        ({"min_executors": 1.5}, "min_executors", "whole number"),
        ({"min_executors": 5.0}, "min_executors", "must be at most max_executors (4)"),
        ({"max_executors": 10001}, "max_executors", "from 1 to 10000"),
        ({"min_executors": 5}, "min_executors", "must be at most max_executors (4)"),
        ({"min_executors": 3, "max_executors": 2}, "max_executors", "at least min_executors"),
        ({"min": 2}, "min", "is not a field"),
        ([1, 2], "body", "expects a JSON object"),
    ],
)
def test_bad_bounds_are_refused_naming_the_field_and_nothing_changes(
    server: Server, body: Any, field: str, words: str
) -> None:
    name = "bounds-bad"
    if server.http.get(f"/v1/jobs/{name}", headers=AUTH).status_code == 404:
        assert server.submit(name, "auto:min=1,max=4").status_code == 201
    r = server.http.put(f"/v1/jobs/{name}/resources", json=body, headers=AUTH)
    assert (r.status_code, r.json()["field"]) == (422, field), r.text
    assert words in r.json()["error"], r.text
    assert server.record(name).scaling == AUTO and server.rescales(name) == []


def test_bounds_refuse_malformed_json_an_unknown_job_and_an_ended_owner(server: Server) -> None:
    r = server.http.put(
        "/v1/jobs/hist/resources",
        content=b"{",
        headers={**AUTH, "Content-Type": "application/json"},
    )
    assert (r.status_code, r.json()["field"]) == (422, "body"), r.text
    r = server.http.put("/v1/jobs/nobody/resources", json={"max_executors": 2}, headers=AUTH)
    assert (r.status_code, r.json()["type"]) == (404, "JobNotFound"), r.text
    assert server.submit("ended", "auto:min=1,max=4").status_code == 201
    assert server.http.post("/v1/jobs/ended/cancel", headers=AUTH).status_code == 202
    assert server.record("ended").state == JobState.CANCELED
    r = server.http.put("/v1/jobs/ended/resources", json={"max_executors": 2}, headers=AUTH)
    assert (r.status_code, r.json()["type"]) == (409, "JobTerminal"), r.text
    assert "its scaling can no longer change" in r.json()["error"]
    assert server.record("ended").scaling == AUTO and server.rescales("ended") == []
    # An application's job whose application has ended.
    assert server.application("gone", "auto:min=1,max=4").status_code == 201
    server.in_app_job("gone-a", "gone")
    assert server.http.post("/v1/applications/gone/cancel", headers=AUTH).status_code == 202
    r = server.http.put("/v1/jobs/gone-a/resources", json={"max_executors": 2}, headers=AUTH)
    assert (r.status_code, r.json()["job_id"]) == (409, "gone"), r.text


# control ------------------------------------------------------------------------------------------
def test_a_scaling_control_event_applies_at_once_and_is_kept(server: Server) -> None:
    assert server.submit("ctl", "auto:min=1,max=4").status_code == 201
    st = server.store()
    try:
        st.set_executor_target(job_id("ctl"), 3)
    finally:
        st.close()
    r = server.http.post(
        "/v1/jobs/ctl/control",
        json={"kind": "scaling", "scaling": "auto:min=2,max=8", "request_id": "r-1"},
        headers=AUTH,
    )
    assert r.status_code == 202, r.text
    ev = r.json()
    want = {**AUTO, "min_executors": 2, "max_executors": 8}
    assert (ev["status"], ev["applied_epoch"], ev["sender"]) == ("COMMITTED", None, "operator")
    assert ev["body"] == {"scaling": want}
    assert ev["result"]["scaling"] == want and ev["result"]["owner"] == "ctl"
    assert server.record("ctl").scaling == want
    assert server.record("ctl").executor_target == 3  # still auto: the scaler's to change
    # A retry answers the stored event; nothing happens twice.
    r = server.http.post(
        "/v1/jobs/ctl/control",
        json={"kind": "scaling", "scaling": "auto:min=2,max=8", "request_id": "r-1"},
        headers=AUTH,
    )
    assert (r.status_code, r.json()["control_id"]) == (200, ev["control_id"]), r.text
    # Leaving auto: the executor target goes with it.
    r = server.http.post(
        "/v1/jobs/ctl/control", json={"kind": "scaling", "scaling": {"mode": "fixed"}}, headers=AUTH
    )
    assert r.status_code == 202 and r.json()["status"] == "COMMITTED", r.text
    assert server.record("ctl").scaling == FIXED and server.record("ctl").executor_target is None
    history = server.http.get("/v1/jobs/ctl/control?kind=scaling", headers=AUTH).json()["events"]
    assert [e["status"] for e in history] == ["COMMITTED", "COMMITTED"]
    rescales = server.http.get("/v1/jobs/ctl/rescales", headers=AUTH).json()["rescales"]
    assert [(x["kind"], x["mode"], x["sender"]) for x in rescales] == [
        ("bounds", "fixed", "operator"),
        ("bounds", "auto", "operator"),
    ]
    assert rescales[1]["reason"].endswith(f"(control {ev['control_id']})")


def test_a_scaling_event_to_an_application_s_job_changes_the_application(server: Server) -> None:
    assert server.application("fleet2").status_code == 201
    server.in_app_job("fleet2-a", "fleet2")
    r = server.http.post(
        "/v1/jobs/fleet2-a/control", json={"kind": "scaling", "scaling": "reactive"}, headers=AUTH
    )
    assert r.status_code == 202 and r.json()["result"]["owner"] == "fleet2", r.text
    assert server.record("fleet2").scaling["mode"] == "reactive"
    assert server.record("fleet2-a").scaling is None
    app = server.http.get("/v1/applications/fleet2", headers=AUTH).json()
    assert app["scaling"]["mode"] == "reactive"
    # The application's own id takes a scaling event (and only that kind), kept in its history.
    r = server.http.post(
        "/v1/jobs/fleet2/control", json={"kind": "scaling", "scaling": "fixed"}, headers=AUTH
    )
    assert (r.status_code, r.json()["job_id"], r.json()["status"]) == (202, "fleet2", "COMMITTED")
    assert server.record("fleet2").scaling["mode"] == "fixed"
    history = server.http.get("/v1/jobs/fleet2/control", headers=AUTH).json()["events"]
    assert [(e["kind"], e["control_id"]) for e in history] == [("scaling", r.json()["control_id"])]
    got = server.http.get(f"/v1/jobs/fleet2/control/{r.json()['control_id']}", headers=AUTH)
    assert got.status_code == 200 and got.json()["status"] == "COMMITTED", got.text
    r = server.http.post("/v1/jobs/fleet2/control", json={"kind": "pause"}, headers=AUTH)
    assert r.status_code == 404 and "it is an application" in r.json()["error"], r.text
    assert server.http.get("/v1/jobs/fleet2/config", headers=AUTH).status_code == 404


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"kind": "scaling"}, "scaling"),
        ({"kind": "scaling", "scaling": "auto"}, "scaling"),
        ({"kind": "scaling", "scaling": None}, "scaling"),
        ({"kind": "scaling", "scaling": "reactive", "mode": "x"}, "mode"),
    ],
)
def test_a_bad_scaling_event_is_refused_and_nothing_is_stored(
    server: Server, body: dict[str, Any], field: str
) -> None:
    name = "ctl-bad"
    if server.http.get(f"/v1/jobs/{name}", headers=AUTH).status_code == 404:
        assert server.submit(name).status_code == 201
    r = server.http.post(f"/v1/jobs/{name}/control", json=body, headers=AUTH)
    assert (r.status_code, r.json()["field"]) == (422, field), r.text
    assert server.http.get(f"/v1/jobs/{name}/control", headers=AUTH).json()["events"] == []
    assert server.record(name).scaling is None


def test_a_scaling_event_to_an_ended_job_is_refused(server: Server) -> None:
    r = server.http.post(
        "/v1/jobs/ended/control", json={"kind": "scaling", "scaling": "fixed"}, headers=AUTH
    )
    assert (r.status_code, r.json()["type"]) == (409, "JobTerminal"), r.text


# auth ---------------------------------------------------------------------------------------------
def test_scaling_calls_need_their_tokens(server: Server) -> None:
    assert server.submit("auth-job", "auto:min=1,max=4").status_code == 201
    calls = [
        ("GET", "/v1/jobs/auth-job/rescales", None),
        ("PUT", "/v1/jobs/auth-job/resources", {"max_executors": 2}),
        ("POST", "/v1/jobs/auth-job/control", {"kind": "scaling", "scaling": "fixed"}),
        ("POST", "/v1/jobs", {"job_id": "auth-x", "entrypoint": "/x.py", "scaling": "fixed"}),
    ]
    before = server.rescales("auth-job")
    for method, path, body in calls:
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            r = server.http.request(method, path, json=body, headers=headers)
            assert (r.status_code, r.json()["type"]) == (401, "Unauthorized"), (path, r.text)
    for method, path, body in calls[1:]:
        r = server.http.request(method, path, json=body, headers=READ)
        assert (r.status_code, r.json()["type"]) == (403, "Forbidden"), (path, r.text)
    assert server.rescales("auth-job") == before
    assert server.record("auth-job").scaling == AUTO


# metrics ------------------------------------------------------------------------------------------
def _epoch(st: Store, job: str, n: int, **metrics: Any) -> None:
    jid = job_id(job)
    rec = st.get_job(jid)
    attempt = rec.current_attempt
    if attempt == 0:
        attempt = st.start_attempt(jid, Owner("h", 1, "x"), 600.0, AttemptNo(0)).attempt
    st.pin_epoch(jid, Epoch(n), attempt, ControlVersion(rec.control_version))
    st.decide_epoch(jid, Epoch(n), attempt, 10, False)
    st.mark_epoch_committed(jid, Epoch(n))
    st.set_epoch_metrics(jid, Epoch(n), **metrics)


def _samples(text: str, name: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line.startswith(name + "{"):
            labels, value = line.rsplit(" ", 1)
            out[labels[len(name) + 1 : -1]] = float(value)
    return out


def test_metrics_show_executors_target_backlog_utilization_and_rescales(server: Server) -> None:
    assert (
        server.submit("met", "auto:min=1,max=4", conf={"stoker.trigger": "2s"}).status_code == 201
    )
    assert server.application("met-app", "reactive").status_code == 201
    server.in_app_job("met-app-a", "met-app")  # its driver records trigger_s 2.0
    assert server.submit("met-zero", conf={"stoker.trigger": "0"}).status_code == 201
    st = server.store()
    try:
        st.report_resources(job_id("met"), {"executors": 3, "cores": 6, "at": 1.0})
        st.set_executor_target(job_id("met"), 4)
        _epoch(st, "met", 0, duration_ms=1000.0, backlog=700, executors=3, cores=6)
        _epoch(st, "met", 1, duration_ms=3000.0, backlog=250)
        st.report_resources(job_id("met-app"), {"executors": 2, "cores": 2, "at": 1.0})
        st.set_executor_target(job_id("met-app"), 5)
        _epoch(st, "met-app-a", 0, duration_ms=500.0)
        _epoch(st, "met-zero", 0, duration_ms=500.0, backlog=0)
    finally:
        st.close()
    text = server.http.get("/metrics", headers=READ).text
    executors = _samples(text, "stoker_job_executors")
    assert executors['job_id="met"'] == 3.0
    assert executors['job_id="met-app-a"'] == 2.0
    # An application's own series name it as one (issue 23 item 7: it was job_id="met-app").
    assert 'job_id="met-app"' not in executors
    assert _samples(text, "stoker_application_executors")['app_id="met-app"'] == 2.0
    assert _samples(text, "stoker_application_executor_target")['app_id="met-app"'] == 5.0
    target = _samples(text, "stoker_job_executor_target")
    assert target['job_id="met"'] == 4.0 and target['job_id="met-app-a"'] == 5.0
    assert 'job_id="met-app"' not in target
    backlog = _samples(text, "stoker_job_backlog")
    assert backlog['job_id="met"'] == 250.0 and backlog['job_id="met-zero"'] == 0.0
    assert 'job_id="met-app-a"' not in backlog  # none recorded
    utilization = _samples(text, "stoker_job_utilization")
    assert utilization['job_id="met"'] == pytest.approx(1.5)  # 3 s of a 2 s trigger
    assert utilization['job_id="met-app-a"'] == pytest.approx(0.25)
    assert 'job_id="met-zero"' not in utilization  # trigger 0: no interval to measure against
    # Control's trigger is the one in force.
    r = server.http.post(
        "/v1/jobs/met/control", json={"kind": "trigger", "interval": "6s"}, headers=AUTH
    )
    assert r.status_code == 202, r.text
    text = server.http.get("/metrics", headers=READ).text
    assert _samples(text, "stoker_job_utilization")['job_id="met"'] == pytest.approx(0.5)
    assert "# TYPE stoker_rescales_total counter" in text
    totals = _samples(text, "stoker_rescales_total")
    assert set(totals) == {'kind="bounds"', 'kind="decision"', 'kind="observed"'}
    # The history so far: each kind as many times as the store holds it (the counter
    # counts each once, however often it is scraped).
    st = server.store()
    try:
        owners = [j for j in st.list_jobs(kind=None) if j.app_id is None]
        held: dict[str, int] = {}
        for o in owners:
            for x in st.list_rescales(o.job_id, limit=1000):
                held[x.kind] = held.get(x.kind, 0) + 1
        st.add_rescale(
            job_id("met"),
            kind="decision",
            policy="default",
            mode="auto",
            signals={},
            from_executors=3,
            to_executors=4,
            reason="r",
            status="decided",
        )
    finally:
        st.close()
    assert totals['kind="decision"'] == held.get("decision", 0)
    assert totals['kind="bounds"'] == held.get("bounds", 0)
    again = _samples(server.http.get("/metrics", headers=READ).text, "stoker_rescales_total")
    assert again['kind="decision"'] == totals['kind="decision"'] + 1
    assert again['kind="bounds"'] == totals['kind="bounds"']
    # Ended jobs show no gauges.
    assert 'job_id="ended"' not in _samples(text, "stoker_job_executors")


# the command line ---------------------------------------------------------------------------------
def test_cli_rescales_resources_and_control_scaling_through_the_server(server: Server) -> None:
    _history(server, "cli-hist")
    p = server.cli("rescales", "cli-hist")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == "job        cli-hist"
    assert lines[1].startswith("scaling    auto:min=1,max=4,") and "target 3" in lines[1]
    assert "observed" in lines[2] and "3 -> 2" in lines[2] and "executor 2 lost" in lines[2]
    assert "decision" in lines[3] and "1 -> 3" in lines[3] and "in use after 12.5s" in lines[3]
    assert "workers +2/-0" in lines[3]
    p = server.cli("rescales", "cli-hist", "--json", "--limit", "1")
    assert p.returncode == 0, p.stderr
    view = json.loads(p.stdout)
    assert view["owner"] == "cli-hist" and len(view["rescales"]) == 1

    assert server.submit("cli-job", "auto:min=1,max=4").status_code == 201
    p = server.cli("resources", "cli-job", "--min", "2", "--max", "5")
    assert p.returncode == 0, p.stderr
    assert "bounds min=1,max=4 -> min=2,max=5" in p.stdout and "by operator" in p.stdout
    assert server.record("cli-job").scaling["max_executors"] == 5
    p = server.cli("resources", "cli-job", "--max", "3", "--json")
    assert json.loads(p.stdout)["scaling"]["max_executors"] == 3, p.stderr

    p = server.cli("control", "cli-job", "scaling", "reactive")
    assert p.returncode == 0, p.stderr
    assert "scaling" in p.stdout and "COMMITTED" in p.stdout and "scaling reactive" in p.stdout
    assert server.record("cli-job").scaling["mode"] == "reactive"

    p = server.cli("status", "cli-job")
    assert p.returncode == 0, p.stderr
    assert "scaling    reactive" in p.stdout


def test_cli_refuses_bad_input_with_its_exit_code(server: Server) -> None:
    """The refusals in process (click's runner, the same command against the same server):
    each message names the option or field, each exit code is its error's."""
    from click.testing import CliRunner

    from stoker.cli import main

    runner = CliRunner()
    assert server.submit("cli-refuse", "auto:min=1,max=4").status_code == 201
    assert server.submit("cli-ended").status_code == 201
    assert server.http.post("/v1/jobs/cli-ended/cancel", headers=AUTH).status_code == 202

    def run(*args: str, token: str = TOKEN) -> Any:
        argv = [*args, "--server", server.manager.url, "--token", token]
        return runner.invoke(main, argv, env={"STOKER_SERVER": None, "STOKER_TOKEN": None})

    cases = [
        (("resources", "cli-refuse"), 2, "--min: give --min, --max or both"),
        (("resources", "cli-refuse", "--min", "0"), 2, "--min: expects a whole number from 1"),
        (("resources", "cli-refuse", "--min", "9", "--max", "3"), 2, "max_executors: must be at"),
        (("resources", "nobody", "--max", "3"), 3, "'nobody' not found"),
        (("resources", "cli-ended", "--max", "3"), 5, "its scaling can no longer change"),
        (("rescales", "nobody"), 3, "'nobody' not found"),
        (("rescales", "cli-refuse", "--limit", "0"), 2, "--limit"),
        (("control", "cli-refuse", "scaling", "auto:min=2"), 2, "max_executors is required"),
        (("control", "cli-ended", "scaling", "fixed"), 5, "has ended in state CANCELED"),
    ]
    for args, code, words in cases:
        got = run(*args)
        assert (got.exit_code, words in got.stderr) == (code, True), (args, got.stderr)
    before = server.record("cli-refuse").scaling
    assert run("rescales", "cli-refuse", token=READ_TOKEN).exit_code == 0  # a read
    got = run("resources", "cli-refuse", "--max", "2", token=READ_TOKEN)
    assert got.exit_code == 11 and "read-only" in got.stderr, got.stderr  # a change
    assert server.record("cli-refuse").scaling == before


def test_cli_run_submits_with_scaling(server: Server) -> None:
    p = server.cli("run", str(server.app), "--job-id", "cli-run", "--scaling", "auto:max=3", "-d")
    assert p.returncode == 0, p.stderr
    assert server.record("cli-run").scaling == {**AUTO, "max_executors": 3}
    p = server.cli(
        "run", str(server.app), "--driver", "--app-id", "cli-app", "--scaling", "reactive", "-d"
    )
    assert p.returncode == 0, p.stderr
    assert server.record("cli-app").scaling["mode"] == "reactive"
    assert server.record("cli-app").kind == JobKind.APPLICATION
    p = server.cli("app", "status", "cli-app")
    assert p.returncode == 0 and "scaling     reactive" in p.stdout, p.stdout + p.stderr
    # An application is called one (issue 23 item 7: rescales and resources said "job").
    p = server.cli("rescales", "cli-app")
    assert p.returncode == 0 and p.stdout.splitlines()[0] == "application cli-app", p.stdout
    p = server.cli("rescales", "cli-app", "--json")
    assert json.loads(p.stdout)["kind"] == "application", p.stdout
    p = server.cli("run", str(server.app), "--job-id", "cli-bad", "--scaling", "auto", "-d")
    assert p.returncode == 2 and "--scaling: max_executors is required" in p.stderr, p.stderr
    assert server.http.get("/v1/jobs/cli-bad", headers=AUTH).status_code == 404
    p = server.cli("run", str(server.app), "--scaling", "reactive", server=False)
    assert p.returncode == 2 and "--scaling: is the job manager's" in p.stderr, p.stderr


def test_cli_without_a_server_reads_and_writes_the_store(server: Server) -> None:
    store = ["--store", server.url]
    assert server.submit("local-job", "auto:min=1,max=4").status_code == 201
    p = server.cli("resources", "local-job", "--max", "6", *store, server=False)
    assert p.returncode == 0, p.stderr
    rescale = server.rescales("local-job")[0]
    assert rescale.sender is not None and rescale.sender.startswith("local:")
    p = server.cli("control", "local-job", "scaling", "auto:min=2,max=6", *store, server=False)
    assert p.returncode == 0 and "COMMITTED" in p.stdout, p.stderr
    assert server.record("local-job").scaling == {**AUTO, "min_executors": 2, "max_executors": 6}
    p = server.cli("rescales", "local-job", "--json", *store, server=False)
    assert p.returncode == 0, p.stderr
    view = json.loads(p.stdout)
    assert [x["kind"] for x in view["rescales"]] == ["bounds", "bounds"]
    p = server.cli("status", "local-job", *store, server=False)
    assert p.returncode == 0 and "scaling    auto:min=2,max=6" in p.stdout, p.stdout + p.stderr
