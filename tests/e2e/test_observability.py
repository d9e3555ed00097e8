"""Observability of a job manager, end to end (issue 12, part 2): ``/metrics`` on
``prometheus_client``, the sample Grafana dashboard, ``GET /v1/events`` (server-sent events)
and ``--log-format json``.

One real ``stoker server`` (a token and a read-only token, JSON logs) and one real Spark job
under it: an endless generator at a fixed rate, with one config event sent while it runs.
An event stream is open from before the job is submitted, so it sees the job appear, start
and commit epochs. Everything is read as a user reads it: over HTTP, with prometheus_client's
parser, and from the driver's log through the API.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support import JVM_OPTS, REPO, wait_for
from tests.support.manager import Manager

pytestmark = [pytest.mark.timeout(900), pytest.mark.scenario]

TOKEN = "obs-t0ken"
READ_TOKEN = "obs-read-t0ken"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
READ = {"Authorization": f"Bearer {READ_TOKEN}"}
JOB = "obs"
JOB_TIMEOUT = 420.0  # a cold Spark driver on 2 cores that other suites share
STEP_TIMEOUT = 240.0
CONF = {
    "stoker.master": "local[1]",
    "stoker.trigger": "500ms",
    "spark.driver.extraJavaOptions": JVM_OPTS,
}
APP = """\
from stoker import Pipeline, sinks, sources

p = Pipeline("obs", config={"tag": "a"})
p.source(sources.generator(rows_per_second=40))
p.transform(lambda df, ctx: df)
p.sink(sinks.files("out", format="json"))
"""
# The series the brief names; each must be in /metrics with the job's label.
JOB_SERIES = (
    "stoker_job_epoch_duration_seconds",
    "stoker_job_rows",
    "stoker_job_input_rows_per_second",
    "stoker_job_processing_rows_per_second",
    "stoker_job_backlog",
    "stoker_job_control_apply_latency_seconds",
    "stoker_job_executors",
    "stoker_job_attempts",
    "stoker_job_restarts",
    "stoker_job_last_epoch",
    "stoker_job_state",
)
TEXT_LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} stoker")


@dataclass
class Stream:
    """A client of ``GET /v1/events`` reading in a thread of its own."""

    url: str
    headers: dict[str, str]
    params: dict[str, str] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    status: int | None = None
    ready: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._client = httpx.Client(base_url=self.url, timeout=httpx.Timeout(30.0, read=None))
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            with self._client.stream(
                "GET", "/v1/events", params=self.params, headers=self.headers
            ) as r:
                self.status = r.status_code
                if r.status_code != 200:
                    r.read()
                    return
                cur: dict[str, Any] = {}
                for line in r.iter_lines():
                    if line.startswith("retry:"):
                        self.ready.set()
                    elif not line:
                        if "data" in cur:
                            cur["data"] = json.loads(cur["data"])
                            self.events.append(cur)
                        cur = {}
                    elif not line.startswith(":"):
                        key, _, value = line.partition(": ")
                        cur[key] = value
        except (httpx.HTTPError, RuntimeError):
            pass  # closed by the test
        finally:
            self.ready.set()

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e["data"] for e in list(self.events) if e.get("event") == kind]

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._client.close()


@dataclass
class World:
    manager: Manager
    stream: Stream
    control_id: str


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("obs")
    apps = root / "apps"
    apps.mkdir()
    (apps / "obs_app.py").write_text(APP)
    m = Manager(
        "obs",
        f"sqlite:///{root / 'store.db'}",
        root / "state",
        [apps],
        root / "manager.log",
        token=TOKEN,
        read_token=READ_TOKEN,
        extra_args=["--log-format", "json"],
    )
    stream: Stream | None = None
    try:
        m.wait_up()
        stream = Stream(m.url, READ, {"job_id": JOB})
        assert stream.ready.wait(60), "the event stream did not open"
        assert stream.status == 200
        body = {"job_id": JOB, "entrypoint": str(apps / "obs_app.py"), "conf": CONF}
        r = m.http.post("/v1/jobs", json=body, headers=AUTH)
        assert r.status_code == 201, r.text
        wait_for(
            lambda: f"3 epochs committed; manager log:\n{m.log_tail()}",
            lambda: len(stream.of("epoch")) >= 3,  # type: ignore[union-attr]
            JOB_TIMEOUT,
        )
        r = m.http.post(
            f"/v1/jobs/{JOB}/control", json={"kind": "config", "set": {"tag": "b"}}, headers=AUTH
        )
        assert r.status_code == 202, r.text
        cid = r.json()["control_id"]

        def committed() -> bool:
            got = m.http.get(f"/v1/jobs/{JOB}/control/{cid}", headers=READ).json()
            assert got["status"] != "REJECTED", got
            return bool(got["status"] == "COMMITTED")

        wait_for("the config event to commit", committed, STEP_TIMEOUT)
        yield World(m, stream, cid)
    finally:
        if stream is not None:
            stream.close()
        with contextlib.suppress(httpx.HTTPError):
            m.http.post(f"/v1/jobs/{JOB}/cancel", headers=AUTH)
        m.stop()  # kills the driver and its JVM too


def _scrape(m: Manager) -> tuple[str, dict[str, Any]]:
    r = m.http.get("/metrics", headers=READ)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    return r.text, {f.name: f for f in text_string_to_metric_families(r.text)}


def _job_samples(family: Any) -> list[Any]:
    return [s for s in family.samples if s.labels.get("job_id") == JOB]


# metrics -----------------------------------------------------------------------------------
def test_metrics_parse_and_carry_every_named_series(world: World) -> None:
    _text, fams = _scrape(world.manager)
    # What existed before prometheus_client, by the same names.
    for name in (
        "stoker_jobs",
        "stoker_applications",
        "stoker_attempts_started",
        "stoker_epochs_committed",
        "stoker_leader",
        "stoker_submit_latency_seconds",
        "stoker_rescales",
        "stoker_job_executor_target",
        "stoker_job_utilization",
    ):
        assert name in fams, name
    for name in JOB_SERIES:
        assert name in fams and _job_samples(fams[name]), name

    counts = {
        s.labels["step"]: s.value
        for s in _job_samples(fams["stoker_job_epoch_duration_seconds"])
        if s.name.endswith("_count")
    }
    assert set(counts) == {"total", "write", "commit", "spark"}
    assert counts["total"] >= 3 and counts["write"] >= 3 and counts["commit"] >= 3
    rows = _job_samples(fams["stoker_job_rows"])[0]
    assert rows.name == "stoker_job_rows_total" and rows.value > 0
    latency = {
        s.name: s.value for s in _job_samples(fams["stoker_job_control_apply_latency_seconds"])
    }
    assert latency["stoker_job_control_apply_latency_seconds_count"] >= 1
    attempts = _job_samples(fams["stoker_job_attempts"])[0]
    assert attempts.name == "stoker_job_attempts_total" and attempts.value == 1
    assert _job_samples(fams["stoker_job_restarts"])[0].value == 0
    state = _job_samples(fams["stoker_job_state"])
    assert [(s.labels["state"], s.value) for s in state] == [("RUNNING", 1.0)]
    assert _job_samples(fams["stoker_job_processing_rows_per_second"])[0].value > 0


def test_per_job_counters_only_grow_between_scrapes(world: World) -> None:
    def counts(fams: dict[str, Any]) -> tuple[float, float]:
        total = next(
            s.value
            for s in _job_samples(fams["stoker_job_epoch_duration_seconds"])
            if s.name.endswith("_count") and s.labels["step"] == "total"
        )
        return total, _job_samples(fams["stoker_job_rows"])[0].value

    first = counts(_scrape(world.manager)[1])
    wait_for(
        "another epoch to be counted",
        lambda: counts(_scrape(world.manager)[1])[0] > first[0],
        STEP_TIMEOUT,
    )
    later = counts(_scrape(world.manager)[1])
    assert later[0] > first[0] and later[1] >= first[1]


def test_metrics_refuse_a_missing_token(world: World) -> None:
    assert world.manager.http.get("/metrics").status_code == 401


def test_grafana_dashboard_uses_only_series_the_endpoint_exposes(world: World) -> None:
    _text, fams = _scrape(world.manager)
    # A family is declared (HELP, TYPE) also while no job has a value for it (an executor
    # target under fixed scaling): its series names count as exposed.
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}
    exposed = {f.name for f in fams.values()}
    for f in fams.values():
        exposed |= {f.name + sfx for sfx in suffixes.get(f.type, ())}
        exposed |= {s.name for s in f.samples}
    dash = json.loads((REPO / "docs" / "grafana-dashboard.json").read_text())
    exprs = [
        t["expr"] for p in dash["panels"] if p.get("type") != "row" for t in p.get("targets", [])
    ]
    assert exprs and all(p.get("targets") for p in dash["panels"] if p.get("type") != "row")
    for expr in exprs:
        names = set(re.findall(r"\bstoker_[a-z_]+", expr))
        assert names, expr
        assert names <= exposed, (expr, names - exposed)
    variable = dash["templating"]["list"][1]["definition"]
    assert set(re.findall(r"\bstoker_[a-z_]+", variable)) <= exposed


# events ------------------------------------------------------------------------------------
def test_events_show_the_job_starting_committing_and_its_control(world: World) -> None:
    s = world.stream

    def control() -> list[str]:
        return [e["status"] for e in s.of("control") if e["control_id"] == world.control_id]

    # The REST API said COMMITTED first (the fixture): the stream shows it when it next polls.
    wait_for(
        lambda: f"the stream to show the config event COMMITTED (it showed {control()})",
        lambda: "COMMITTED" in control(),
        STEP_TIMEOUT,
    )
    wait_for(
        "the stream to show the job RUNNING",
        lambda: "RUNNING" in [e["state"] for e in s.of("job")],
        STEP_TIMEOUT,
    )
    jobs = s.of("job")
    assert jobs[0]["previous"] is None  # a new job (CREATED, or RUNNING already if quick)
    assert "RUNNING" in [e["state"] for e in jobs]
    for before, after in itertools.pairwise(jobs):
        assert after["previous"] == before["state"]
    epochs = [e["epoch"] for e in s.of("epoch")]
    assert epochs == sorted(set(epochs))  # each once, in order
    assert all(e["job_id"] == JOB and e["rows"] is not None for e in s.of("epoch"))
    statuses = control()
    assert statuses[-1] == "COMMITTED" and statuses == sorted(
        set(statuses), key=["PENDING", "APPLIED", "COMMITTED"].index
    )
    ids = [e["id"] for e in s.events]
    assert len(ids) == len(set(ids))


def test_events_resume_after_last_event_id(world: World) -> None:
    seen = list(world.stream.events)
    assert len(seen) >= 3
    resumed = Stream(world.manager.url, {**READ, "Last-Event-ID": seen[0]["id"]}, {"job_id": JOB})
    try:
        wait_for("the resumed stream to catch up", lambda: len(resumed.events) >= 2, 60)
        # Everything after the given id, from the ring, in the same order with the same ids.
        assert [e["id"] for e in resumed.events[:2]] == [seen[1]["id"], seen[2]["id"]]
        assert resumed.events[0]["data"] == seen[1]["data"]
    finally:
        resumed.close()


def test_events_from_another_run_start_with_a_resync(world: World) -> None:
    other = Stream(world.manager.url, {**READ, "Last-Event-ID": "0000dead-7"}, {"job_id": JOB})
    try:
        wait_for("a first event", lambda: other.events, 60)
        assert other.events[0]["event"] == "resync"
    finally:
        other.close()


@pytest.mark.parametrize(
    "headers", [{}, {"Authorization": "Bearer wrong"}], ids=["missing", "wrong"]
)
def test_events_refuse_a_bad_token(world: World, headers: dict[str, str]) -> None:
    r = world.manager.http.get("/v1/events", headers=headers)
    assert r.status_code == 401
    assert r.json()["type"] == "Unauthorized"


# logs --------------------------------------------------------------------------------------
def test_driver_logs_json_lines_with_job_attempt_and_epoch(world: World) -> None:
    r = world.manager.http.get(f"/v1/jobs/{JOB}/attempts/1/log", headers=READ)
    assert r.status_code == 200
    lines = r.text.splitlines()
    assert not [ln for ln in lines if TEXT_LOG_LINE.match(ln)]  # no stoker line as text
    records = [json.loads(ln) for ln in lines if ln.startswith("{")]
    assert records
    for rec in records:
        assert {"ts", "level", "logger", "message"} <= set(rec)
    ours = [rec for rec in records if rec["logger"].startswith("stoker")]
    assert ours and all(rec.get("job") == JOB and rec.get("attempt") == 1 for rec in ours)
    committed = [rec for rec in ours if rec["logger"] == "stoker.epoch"]
    assert committed and all(isinstance(rec.get("epoch"), int) for rec in committed)
    assert {rec["epoch"] for rec in committed} >= {0, 1, 2}


def test_manager_logs_json_lines(world: World) -> None:
    text = world.manager.log.read_text(errors="replace")
    records = [json.loads(ln) for ln in text.splitlines() if ln.startswith("{")]
    assert any(rec["logger"].startswith("stoker") for rec in records), text[-2000:]
    assert not [ln for ln in text.splitlines() if TEXT_LOG_LINE.match(ln)]


def test_events_show_a_cancel_as_state_changes(world: World) -> None:
    """Last in the module: the job ends here."""
    r = world.manager.http.post(f"/v1/jobs/{JOB}/cancel", headers=AUTH)
    assert r.status_code == 202, r.text
    wait_for(
        "CANCELED in the event stream",
        lambda: "CANCELED" in [e["state"] for e in world.stream.of("job")],
        STEP_TIMEOUT,
    )
    changes = [(e["previous"], e["state"]) for e in world.stream.of("job")]
    assert ("RUNNING", "CANCELING") in changes or ("RUNNING", "CANCELED") in changes
