"""The control REST API against real ``stoker server`` processes (issue 9).

No Spark: every manager is ``--api-only`` (it never leads, so no driver starts) and the jobs
are made directly in its SQLite store (``store.create_job`` with a pipeline's spec, as a local
run records it), or submitted (the manager then reads the app file's pipeline in a child
process). What a request stored is checked by opening the store after it.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from stoker.store import Store, open_store
from stoker.types import ControlStatus, JobState, job_id
from tests.support.manager import Manager, stop_all

pytestmark = pytest.mark.timeout(600)

TOKEN = "ctl-t0ken"
READ_TOKEN = "ctl-read-t0ken"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
# What a local run records as the job's spec (Pipeline.spec()).
SPEC: dict[str, Any] = {
    "name": "x",
    "sources": ["generator(rows_per_second=10)", "files(path='/in')"],
    "sinks": ["files('/out')"],
    "config": {"min_amount": 10.0, "tag": "a"},
    "events": ["reload_rules"],
}
APP = """\
from stoker import Pipeline, sinks, sources

pipeline = Pipeline("fromfile", {{"threshold": 5, "mode": "fast"}})
pipeline.source(sources.generator(total=10)).sink(sinks.files({out!r}))


@pipeline.on_control("reload")
def _reload(event, ctx):
    pass
"""


@dataclass
class Server:
    manager: Manager
    url: str  # the store's
    root: Path
    allowed: Path

    @property
    def http(self) -> httpx.Client:
        return self.manager.http

    def store(self) -> Store:
        return open_store(self.url)

    def job(self, name: str, state: JobState | None = None) -> str:
        st = self.store()
        try:
            jid = job_id(name)
            st.create_job(jid, name, {**SPEC, "name": name}, dict(SPEC["config"]))
            if state is not None:
                st.set_job_state(jid, state)
        finally:
            st.close()
        return name

    def stored(self, name: str) -> list[Any]:
        st = self.store()
        try:
            return st.list_controls(job_id(name), limit=1000)
        finally:
            st.close()

    def version(self, name: str) -> int:
        st = self.store()
        try:
            return int(st.control_snapshot(job_id(name)).version)
        finally:
            st.close()


def _start(root: Path, name: str, **kw: Any) -> Server:
    root.mkdir(parents=True, exist_ok=True)
    allowed = root / "allowed"
    allowed.mkdir(exist_ok=True)
    url = f"sqlite:///{root / 'store.db'}"
    extra = ["--api-only", *kw.pop("extra_args", [])]
    m = Manager(name, url, root / "state", [allowed], root / f"{name}.log", extra_args=extra, **kw)
    m.wait_up()
    return Server(m, url, root, allowed)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = _start(tmp_path_factory.mktemp("ctlapi"), "ctl", token=TOKEN, read_token=READ_TOKEN)
    try:
        yield s
    finally:
        stop_all([s.manager])


@pytest.fixture(scope="module")
def open_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """No token; at most one control event per job per 100 s (a burst of one)."""
    root = tmp_path_factory.mktemp("ctlopen")
    s = _start(root, "ctl-open", extra_args=["--control-rate", "0.01"])
    try:
        yield s
    finally:
        stop_all([s.manager])


def _post(s: Server, job: str, body: Any, path: str = "control", **kw: Any) -> httpx.Response:
    headers = kw.pop("headers", AUTH)
    if isinstance(body, bytes):
        headers = {**headers, "Content-Type": "application/json"}
        return s.http.post(f"/v1/jobs/{job}/{path}", content=body, headers=headers)
    return s.http.post(f"/v1/jobs/{job}/{path}", json=body, headers=headers)


# every kind ------------------------------------------------------------------------------------
def test_every_kind_is_stored_pending_and_each_makes_a_version(server: Server) -> None:
    job = server.job("kinds")
    sp = str(server.allowed / "sp-1")
    bodies: list[dict[str, Any]] = [
        {"kind": "config", "set": {"min_amount": 20}, "unset": ["tag"]},
        {"kind": "rate_limit", "rows_per_second": 500},
        {"kind": "rate_limit", "max_files_per_epoch": 2, "max_rows_per_epoch": None},
        {"kind": "log_level", "level": "DEBUG", "logger": "my.module"},
        {"kind": "trigger", "interval": "2s"},
        {"kind": "pause"},
        {"kind": "resume"},
        {"kind": "checkpoint"},
        {"kind": "event", "name": "reload_rules", "payload": {"rules": [1, 2]}},
        {"kind": "savepoint", "stop": False, "dir": sp},
    ]
    answers = []
    for body in bodies:
        r = _post(server, job, body)
        assert r.status_code == 202, r.text
        v = r.json()
        assert (v["kind"], v["status"], v["job_id"]) == (body["kind"], "PENDING", job)
        assert (v["sender"], v["origin"]) == ("operator", "127.0.0.1")
        assert v["applied_epoch"] is None and v["request_id"] is None
        answers.append(v)
    assert [v["version"] for v in answers] == list(range(1, len(bodies) + 1))
    assert answers[0]["body"] == {"set": {"min_amount": 20.0}, "unset": ["tag"]}
    assert answers[4]["body"] == {"interval": "2s", "seconds": 2.0}
    assert answers[-1]["body"] == {"stop": False, "dir": sp}
    # Each is readable, and is what the store holds.
    for v in answers:
        r = server.http.get(f"/v1/jobs/{job}/control/{v['control_id']}", headers=AUTH)
        assert (r.status_code, r.json()) == (200, v)
    stored = {e.control_id: e for e in server.stored(job)}
    assert set(stored) == {v["control_id"] for v in answers}
    assert all(e.status == ControlStatus.PENDING for e in stored.values())
    assert server.version(job) == len(bodies)
    # The savepoint, as a savepoint too; a config event is not one.
    r = server.http.get(f"/v1/jobs/{job}/savepoints/{answers[-1]['control_id']}", headers=AUTH)
    assert (r.status_code, r.json()) == (200, answers[-1])
    r = server.http.get(f"/v1/jobs/{job}/savepoints/{answers[0]['control_id']}", headers=AUTH)
    assert (r.status_code, r.json()["type"]) == (404, "ControlNotFound"), r.text


def test_savepoints_route_takes_stop_and_an_allowed_dir(server: Server) -> None:
    job = server.job("sps")
    r = _post(server, job, b"", path="savepoints")  # no body: the defaults
    assert r.status_code == 202, r.text
    assert (r.json()["kind"], r.json()["body"]) == ("savepoint", {"stop": False, "dir": None})
    folder = server.allowed / "sub" / ".." / "sp-2"
    r = _post(server, job, {"stop": True, "dir": str(folder)}, path="savepoints")
    assert r.status_code == 202, r.text
    assert r.json()["body"] == {"stop": True, "dir": str(server.allowed / "sp-2")}
    r = server.http.get(f"/v1/jobs/{job}/savepoints", headers=AUTH)
    assert r.status_code == 200
    assert [e["body"]["stop"] for e in r.json()["events"]] == [True, False]
    assert r.json()["next"] is None


# bad input ---------------------------------------------------------------------------------------
BAD: list[tuple[str, Any, str, int, str | None, str]] = [
    # (case, body, path, status, field, words in the error)
    ("unknown kind", {"kind": "explode"}, "control", 422, "kind", "unknown control kind"),
    ("no kind", {"set": {}}, "control", 422, "kind", "unknown control kind None"),
    (
        "unknown config key",
        {"kind": "config", "set": {"max_amount": 1}},
        "control",
        422,
        "config.max_amount",
        "declared: min_amount, tag",
    ),
    (
        "wrong type",
        {"kind": "config", "set": {"min_amount": "lots"}},
        "control",
        422,
        "config.min_amount",
        "expects number",
    ),
    (
        "negative rate",
        {"kind": "rate_limit", "rows_per_second": -5},
        "control",
        422,
        "rows_per_second",
        "must be > 0",
    ),
    (
        "unknown event",
        {"kind": "event", "name": "nope"},
        "control",
        422,
        "name",
        "registered: reload_rules",
    ),
    ("bad level", {"kind": "log_level", "level": "LOUD"}, "control", 422, "level", "DEBUG"),
    ("malformed JSON", b'{"kind": "pause"', "control", 422, "body", "malformed JSON"),
    ("not text", b"\xff\xfe", "control", 422, "body", "malformed JSON"),
    ("not an object", [{"kind": "pause"}], "control", 422, "body", "expects a JSON object"),
    ("empty body", b"", "control", 422, "body", "malformed JSON"),
    (
        "dir outside the allowed folders",
        {"dir": "/etc/stoker-sp"},
        "savepoints",
        422,
        "dir",
        "lies outside the allowed folders",
    ),
    ("relative dir", {"dir": "sp"}, "savepoints", 422, "dir", "is not an absolute path"),
    ("savepoint stop", {"stop": "yes"}, "savepoints", 422, "stop", "expects true or false"),
    (
        "another kind on savepoints",
        {"kind": "pause"},
        "savepoints",
        422,
        "kind",
        "a savepoint request takes",
    ),
]


@pytest.mark.parametrize(("case", "body", "path", "status", "field", "words"), BAD)
def test_bad_input_is_refused_naming_the_problem_and_nothing_is_stored(
    server: Server, case: str, body: Any, path: str, status: int, field: str | None, words: str
) -> None:
    job = server.job("bad-" + case.replace(" ", "-"))
    r = _post(server, job, body, path=path)
    assert r.status_code == status, r.text
    answer = r.json()
    assert answer["type"] == "InvalidInput" and answer["field"] == field, answer
    assert words in answer["error"], answer
    assert server.stored(job) == [] and server.version(job) == 0


def test_unknown_and_ended_jobs_and_tokens_are_refused(server: Server) -> None:
    r = _post(server, "no-such-job", {"kind": "pause"})
    assert (r.status_code, r.json()["type"]) == (404, "JobNotFound"), r.text
    assert "no-such-job" in r.json()["error"]
    r = server.http.get("/v1/jobs/no-such-job/control", headers=AUTH)
    assert r.status_code == 404
    ended = server.job("ended", JobState.CANCELED)
    r = _post(server, ended, {"kind": "pause"})
    assert (r.status_code, r.json()["type"], r.json()["state"]) == (409, "JobTerminal", "CANCELED")
    assert server.stored(ended) == []
    job = server.job("guarded")
    r = _post(server, job, {"kind": "pause"}, headers={})
    assert (r.status_code, r.json()["type"]) == (401, "Unauthorized")
    assert r.headers["www-authenticate"] == "Bearer"
    r = _post(server, job, {"kind": "pause"}, headers={"Authorization": "Bearer nope"})
    assert (r.status_code, r.json()["type"]) == (401, "Unauthorized")
    r = _post(server, job, {"kind": "pause"}, headers={"Authorization": f"Bearer {READ_TOKEN}"})
    assert (r.status_code, r.json()["type"]) == (403, "Forbidden")
    r = _post(server, job, {}, path="savepoints", headers={"X-Stoker-Token": READ_TOKEN})
    assert r.status_code == 403
    assert server.stored(job) == []
    # Reads take the read-only token.
    r = server.http.get(f"/v1/jobs/{job}/config", headers={"X-Stoker-Token": READ_TOKEN})
    assert r.status_code == 200 and r.json()["pending"] == 0
    # A state that refuses the event: a conflict, nothing stored.
    assert _post(server, job, {"kind": "resume"}).status_code == 409
    r = _post(server, job, {"kind": "checkpoint"})
    assert r.status_code == 202
    assert _post(server, job, {"kind": "pause"}).status_code == 202
    r = _post(server, job, {"kind": "checkpoint"})
    assert (r.status_code, r.json()["type"]) == (409, "ControlConflict"), r.text
    assert "paused" in r.json()["reason"]
    assert [e.kind for e in server.stored(job)] == ["pause", "checkpoint"]


# retries, history, config, display -------------------------------------------------------------
def test_a_request_id_retry_answers_the_stored_event_and_another_body_conflicts(
    server: Server,
) -> None:
    job = server.job("retry")
    body = {"kind": "config", "set": {"tag": "b"}, "request_id": "deploy-42"}
    first = _post(server, job, body)
    assert first.status_code == 202 and first.json()["request_id"] == "deploy-42"
    again = _post(server, job, body)
    assert (again.status_code, again.json()) == (200, first.json())
    other = _post(server, job, {**body, "set": {"tag": "c"}})
    assert (other.status_code, other.json()["type"]) == (409, "ControlConflict"), other.text
    assert "deploy-42" in other.json()["error"]
    sp = {"stop": False, "request_id": "sp-1"}
    made = _post(server, job, sp, path="savepoints")
    assert made.status_code == 202
    assert _post(server, job, sp, path="savepoints").json() == made.json()
    assert [e.request_id for e in server.stored(job)] == ["sp-1", "deploy-42"]


def test_history_pages_newest_first_and_filters(server: Server) -> None:
    job = server.job("history")
    for i in range(7):
        assert _post(server, job, {"kind": "config", "set": {"tag": f"t{i}"}}).status_code == 202
    assert _post(server, job, {"kind": "checkpoint"}).status_code == 202
    seen: list[int] = []
    params: dict[str, Any] = {"limit": 3}
    pages = 0
    while True:
        r = server.http.get(f"/v1/jobs/{job}/control", params=params, headers=AUTH)
        assert r.status_code == 200, r.text
        seen += [e["version"] for e in r.json()["events"]]
        pages += 1
        if r.json()["next"] is None:
            break
        params["before"] = r.json()["next"]
    assert (seen, pages) == ([8, 7, 6, 5, 4, 3, 2, 1], 3)
    r = server.http.get(
        f"/v1/jobs/{job}/control", params={"kind": "checkpoint"}, headers=AUTH
    ).json()
    assert [e["kind"] for e in r["events"]] == ["checkpoint"]
    r = server.http.get(f"/v1/jobs/{job}/control", params={"status": "APPLIED"}, headers=AUTH)
    assert r.json() == {"events": [], "next": None}
    r = server.http.get(f"/v1/jobs/{job}/control", params={"status": "DONE"}, headers=AUTH)
    assert (r.status_code, r.json()["field"]) == (422, "query.status")
    r = server.http.get(f"/v1/jobs/{job}/control", params={"limit": 0}, headers=AUTH)
    assert r.status_code == 422


def test_the_config_view_and_a_paused_job(server: Server) -> None:
    job = server.job("view", JobState.RUNNING)
    for body in (
        {"kind": "config", "set": {"min_amount": 25}},
        {"kind": "rate_limit", "rows_per_second": 100},
        {"kind": "log_level", "level": "warning"},
        {"kind": "trigger", "interval": "500ms"},
        {"kind": "pause"},
    ):
        assert _post(server, job, body).status_code == 202
    r = server.http.get(f"/v1/jobs/{job}/config", headers=AUTH)
    assert (r.status_code, r.json()) == (
        200,
        {
            "job_id": job,
            "version": 5,
            "config": {"min_amount": 25.0, "tag": "a"},
            "paused": True,
            "trigger_s": 0.5,
            "rate_limit": {"rows_per_second": 100.0},
            "log_level": {"root": "WARN"},
            "pending": 5,
        },
    )
    view = server.http.get(f"/v1/jobs/{job}", headers=AUTH).json()
    assert (view["state"], view["paused"]) == ("PAUSED", True)
    listed = {j["job_id"]: j for j in server.http.get("/v1/jobs", headers=AUTH).json()}
    assert (listed[job]["state"], listed[job]["paused"]) == ("PAUSED", True)
    st = server.store()
    try:
        assert st.get_job(job_id(job)).state == JobState.RUNNING  # a display state only
    finally:
        st.close()
    assert _post(server, job, {"kind": "resume"}).status_code == 202
    view = server.http.get(f"/v1/jobs/{job}", headers=AUTH).json()
    assert (view["state"], view["paused"]) == ("RUNNING", False)


def test_a_job_no_driver_declared_is_checked_against_its_app_file(server: Server) -> None:
    app = server.allowed / "fromfile.py"
    app.write_text(APP.format(out=str(server.root / "out")))
    r = server.http.post("/v1/jobs", json={"entrypoint": str(app)}, headers=AUTH)
    assert (r.status_code, r.json()["job_id"]) == (201, "fromfile"), r.text
    r = _post(server, "fromfile", {"kind": "config", "set": {"threshold": 7}})
    assert r.status_code == 202, r.text
    r = _post(server, "fromfile", {"kind": "config", "set": {"min_amount": 7}})
    assert (r.status_code, r.json()["field"]) == (422, "config.min_amount"), r.text
    assert "declared: mode, threshold" in r.json()["error"]
    assert _post(server, "fromfile", {"kind": "event", "name": "reload"}).status_code == 202
    r = _post(server, "fromfile", {"kind": "rate_limit", "max_files_per_epoch": 3})
    assert (r.status_code, r.json()["field"]) == (422, "max_files_per_epoch")
    assert [e.kind for e in server.stored("fromfile")] == ["event", "config"]


# anonymous senders, the rate limit ---------------------------------------------------------------
def test_without_auth_the_sender_is_anonymous_and_the_rate_limit_answers_429(
    open_server: Server,
) -> None:
    job = open_server.job("limited")
    # The origin is the connection's, whatever a client says it forwards (issue 22, item 8).
    r = _post(open_server, job, {"kind": "checkpoint"}, headers={"X-Forwarded-For": "10.9.8.7"})
    assert r.status_code == 202, r.text
    assert (r.json()["sender"], r.json()["origin"]) == ("anonymous", "127.0.0.1")
    for path, body in (("control", {"kind": "checkpoint"}), ("savepoints", {})):
        r = _post(open_server, job, body, path=path, headers={})
        assert r.status_code == 429, r.text
        assert r.json()["type"] == "TooManyRequests" and r.json()["job_id"] == job
        assert "0.01 per second" in r.json()["error"]
        retry = r.headers["retry-after"]
        assert retry.isdigit() and int(retry) >= 1, retry
    assert len(open_server.stored(job)) == 1
    # Per job: another job is not held back.
    other = open_server.job("limited-other")
    assert _post(open_server, other, {"kind": "pause"}, headers={}).status_code == 202


# durability --------------------------------------------------------------------------------------
def test_an_acknowledged_event_survives_a_sigkill_of_the_manager(tmp_path: Path) -> None:
    first = _start(tmp_path, "doomed")
    second: Server | None = None
    try:
        job = first.job("durable", JobState.RUNNING)
        r = _post(first, job, {"kind": "config", "set": {"tag": "kept"}}, headers={})
        assert r.status_code == 202, r.text
        os.killpg(first.manager.proc.pid, signal.SIGKILL)  # at once, no clean-up of any kind
        first.manager.proc.wait(timeout=30)
        stored = first.stored(job)
        assert [(e.control_id, e.status, e.body) for e in stored] == [
            (r.json()["control_id"], ControlStatus.PENDING, {"set": {"tag": "kept"}, "unset": []})
        ]
        second = _start(tmp_path, "after")
        got = second.http.get(f"/v1/jobs/{job}/control/{r.json()['control_id']}")
        assert (got.status_code, got.json()) == (200, r.json())
        cfg = second.http.get(f"/v1/jobs/{job}/config").json()
        assert (cfg["config"]["tag"], cfg["pending"]) == ("kept", 1)
    finally:
        stop_all([m.manager for m in (first, second) if m is not None])


def test_the_openapi_schema_documents_the_control_routes(server: Server) -> None:
    schema = server.http.get("/openapi.json").json()
    post = schema["paths"]["/v1/jobs/{job_id}/control"]["post"]
    kinds = [o["properties"]["kind"]["const"] for o in _body_schema(post)["oneOf"]]
    assert kinds == [
        "config",
        "rate_limit",
        "log_level",
        "trigger",
        "pause",
        "resume",
        "checkpoint",
        "event",
        "savepoint",
        "scaling",
    ]
    assert {"200", "202", "401", "403", "404", "409", "422", "429"} <= set(post["responses"])
    assert "Retry-After" in post["responses"]["429"]["headers"]
    assert {"ControlEventView", "ControlHistory", "ConfigView"} <= set(
        schema["components"]["schemas"]
    )


def _body_schema(op: dict[str, Any]) -> dict[str, Any]:
    return dict(op["requestBody"]["content"]["application/json"]["schema"])
