"""The job manager's REST API and CLI, driven as a user would.

Real ``stoker server`` processes (a pair on one SQLite file, a pair on one PostgreSQL database,
one with a token), real drivers on Spark, HTTP with httpx, the CLI in subprocesses.

A Spark driver takes minutes to start on a loaded 2-core machine, so the module runs few of
them and side by side: first the two 64-client races (one job per pair), then an endless job
to cancel and a bounded job to kill -9. Every other test reads what those jobs did or uses
drivers that fail before Spark starts. The tests depend on the file's order.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from stoker.procs import host_id
from tests.pg import ThrowawayPostgres
from tests.support import JVM_OPTS, REPO, exactly_once, file_sink_ids, stoker_cmd, wait_for
from tests.support.manager import Manager, stop_all
from tests.support.procs import Proc, describe, process_tree, still_alive

pytestmark = pytest.mark.timeout(1200)

JOB_TIMEOUT = 420.0  # a cold Spark driver, another beside it, on 2 cores other suites share
QUICK = 90.0  # a CLI call; a job that fails before Spark starts, submitted minutes ago
RESUME = 180.0  # a driver that resumes an ended job from its checkpoint (no Spark)
CONF = {
    "stoker.master": "local[1]",
    "stoker.trigger": "200ms",
    # A short-lived JVM: C1 only and one GC thread cost less CPU on a loaded machine.
    "spark.driver.extraJavaOptions": JVM_OPTS,
}
TOKEN = "t0ken-for-tests"
WRONG_TOKEN = (
    "wrong token: send 'Authorization: Bearer <token>' with the token the manager was started with"
)
CLIENTS = 64
# Spark gives a Python worker a fixed 10 s to connect back to the JVM; on an overloaded machine
# that fails now and then and the supervisor restarts the attempt (its restart strategy). Such
# attempts are told apart by their error and never overlap the next one: see `settled`.
SPARK_STARTUP_FLAKES = ("Python worker failed to connect back",)

# Only defines the pipeline: the driver finds it and runs it under the manager's attempt.
APP = """\
from stoker.procs import host_id
from stoker import Pipeline, sinks, sources

pipeline = (
    Pipeline({name!r})
    .source(sources.generator({source}, partitions=1))
    .sink(sinks.files({out!r}))
)
"""

# Fails after the driver claimed its attempt, before Spark starts: the runtime ends the attempt
# FAILED with the error, the manager's restart strategy decides what comes next.
BROKEN_SINK_APP = """\
from stoker import Pipeline, sources
from stoker.sinks.files import FilesSink


class BrokenSink(FilesSink):
    def open(self, job_id, state_dir):
        raise RuntimeError("boom: the sink cannot open")


pipeline = Pipeline({name!r}).source(sources.generator(total=10)).sink(BrokenSink({out!r}))
"""

# Dies before stoker runs anything: the driver exits 1 with a traceback, its attempt unclaimed.
MAIN_RAISES_APP = """\
from stoker import Pipeline, sinks, sources

pipeline = Pipeline({name!r}).source(sources.generator(total=10)).sink(sinks.files({out!r}))

if __name__ == "__main__":
    raise RuntimeError("boom: main gave up")
"""


# the world -------------------------------------------------------------------------------------
@dataclass
class World:
    root: Path
    apps: Path  # the managers' allowed folder
    outside: Path  # a folder they do not allow

    def app(self, name: str, source: str, template: str = APP) -> tuple[Path, Path]:
        """Write an application file; return (entrypoint, its files sink folder)."""
        out = self.root / "out" / name
        path = self.apps / f"{name}.py"
        path.write_text(template.format(name=name, source=source, out=str(out)))
        return path, out


def body(job: str | None, entrypoint: Path, **extra: Any) -> dict[str, Any]:
    b: dict[str, Any] = {"entrypoint": str(entrypoint), "conf": dict(CONF), **extra}
    if job is not None:
        b["job_id"] = job
    return b


def get(m: Manager, path: str, **params: Any) -> Any:
    r = m.http.get(path, params=params)
    assert r.status_code == 200, (path, r.status_code, r.text)
    return r.json()


def view(m: Manager, job: str) -> dict[str, Any]:
    return dict(get(m, f"/v1/jobs/{job}"))


def attempts(m: Manager, job: str) -> list[tuple[int, str]]:
    return [(a["attempt"], a["state"]) for a in get(m, f"/v1/jobs/{job}/attempts")]


def settled(m: Manager, job: str) -> list[tuple[int, str]]:
    """The job's attempts, less those Spark failed while starting (SPARK_STARTUP_FLAKES).

    Whatever their errors, attempts never overlap: each starts after the one before it ended.
    """
    atts = get(m, f"/v1/jobs/{job}/attempts")
    for prev, nxt in itertools.pairwise(atts):
        assert prev["ended_at"] is not None and nxt["started_at"] >= prev["ended_at"], atts
    return [
        (a["attempt"], a["state"])
        for a in atts
        if not (
            a["state"] == "FAILED" and any(f in (a["error"] or "") for f in SPARK_STARTUP_FLAKES)
        )
    ]


def epochs(m: Manager, job: str) -> list[dict[str, Any]]:
    return list(get(m, f"/v1/jobs/{job}/epochs", limit=100_000))


def attempt_log(m: Manager, job: str, attempt: int) -> str:
    r = m.http.get(f"/v1/jobs/{job}/attempts/{attempt}/log")
    assert r.status_code == 200, r.text
    return r.text


def _story(m: Manager, job: str) -> str:
    """What a timeout message shows: the job, its attempts, the tail of each attempt's log."""
    try:
        v = view(m, job)
        parts = [json.dumps(v)[:1500]]
        for n in range(1, int(v["current_attempt"]) + 1):
            parts.append(f"--- attempt {n} log:\n{attempt_log(m, job, n)[-2500:]}")
    except (AssertionError, httpx.HTTPError) as e:
        parts = [f"(cannot read job {job}: {e})"]
    return "\n".join([*parts, f"--- {m.name} log:\n{m.log_tail(1500)}"])


def wait_state(m: Manager, job: str, state: str, timeout: float = JOB_TIMEOUT) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        v = view(m, job)
        if v["state"] == state:
            return v
        if v["state"] in ("FINISHED", "CANCELED", "FAILED"):
            raise AssertionError(f"job {job} ended {v['state']}, not {state}:\n{_story(m, job)}")
        return None

    return dict(wait_for(lambda: f"job {job} to be {state}:\n{_story(m, job)}", reached, timeout))


def wait_committed(m: Manager, job: str, n: int = 1, timeout: float = JOB_TIMEOUT) -> None:
    wait_for(
        lambda: f"{n} committed epochs of {job}:\n{_story(m, job)}",
        lambda: sum(e["state"] == "COMMITTED" for e in epochs(m, job)) >= n,
        timeout,
    )


def _cli_env(env: dict[str, str] | None) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if k not in ("STOKER_SERVER", "STOKER_TOKEN")}
    return {**base, **(env or {})}


def stoker(
    *args: str, env: dict[str, str] | None = None, timeout: float = QUICK
) -> subprocess.CompletedProcess[str]:
    """The CLI in a subprocess; STOKER_SERVER / STOKER_TOKEN only when given in ``env``."""
    return subprocess.run(
        stoker_cmd(*args),
        cwd=str(REPO),
        env=_cli_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def defines() -> list[str]:
    return [a for k, v in CONF.items() for a in ("-D", f"{k}={v}")]


def metrics(m: Manager) -> dict[str, float]:
    """``name{labels}`` -> value, from the Prometheus text of ``GET /metrics``."""
    r = m.http.get("/metrics")
    assert r.status_code == 200, r.text
    out = {}
    for line in r.text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


# fixtures --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    root = tmp_path_factory.mktemp("server")
    (root / "apps").mkdir()
    (root / "outside").mkdir()
    return World(root, root / "apps", root / "outside")


def _pair(world: World, name: str, store: str) -> list[Manager]:
    # One state folder for both: it holds the checkpoints, which every leader must see.
    state = world.root / f"{name}-state"
    ms = [
        Manager(f"{name}{i}", store, state, [world.apps], world.root / f"{name}{i}.log")
        for i in range(2)
    ]
    for m in ms:
        m.wait_up()
    return ms


@pytest.fixture(scope="module")
def sqlite_pair(world: World) -> Iterator[list[Manager]]:
    """Two managers on one SQLite file."""
    ms: list[Manager] = []
    try:
        ms = _pair(world, "lite", f"sqlite:///{world.root / 'store.db'}")
        yield ms
    finally:
        stop_all(ms)


@pytest.fixture(scope="module")
def pg_pair(world: World, pg_server: ThrowawayPostgres) -> Iterator[list[Manager]]:
    """Two managers on one PostgreSQL database."""
    name = f"server_{os.getpid()}"
    ms: list[Manager] = []
    try:
        ms = _pair(world, "pg", pg_server.create_database(name))
        yield ms
    finally:
        stop_all(ms)
        pg_server.drop_database(name)


@pytest.fixture(scope="module")
def token_manager(world: World) -> Iterator[Manager]:
    """One manager with a token, on a store of its own; used for input it must refuse."""
    m = Manager(
        "tok",
        f"sqlite:///{world.root / 'tok.db'}",
        world.root / "tok-state",
        [world.apps],
        world.root / "tok.log",
        token=TOKEN,
    )
    try:
        m.wait_up()
        yield m
    finally:
        stop_all([m])


@dataclass
class Race:
    managers: list[Manager]
    job: str
    app: Path
    out: Path
    answers: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    follower: subprocess.Popen[str] | None = None


def _race(managers: list[Manager], payload: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    """CLIENTS threads, each with its own client, half to each manager, all at once."""
    barrier = threading.Barrier(CLIENTS)
    answers: list[tuple[int, dict[str, Any]] | None] = [None] * CLIENTS
    errors: list[BaseException] = []

    def client(i: int) -> None:
        try:
            with httpx.Client(base_url=managers[i % 2].url, timeout=120.0) as c:
                barrier.wait(timeout=120)
                r = c.post("/v1/jobs", json=payload)
                answers[i] = (r.status_code, r.json())
        except BaseException as e:  # reported below, in the test's thread
            errors.append(e)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=180)
    assert not errors, errors
    assert all(a is not None for a in answers)
    return [a for a in answers if a is not None]


@pytest.fixture(scope="module")
def races(
    world: World, sqlite_pair: list[Manager], pg_pair: list[Manager]
) -> Iterator[dict[str, Race]]:
    """The same id submitted by 64 clients to each pair; both jobs then run side by side.

    Right after, ``stoker run`` (attached, no --job-id) submits the SQLite race's file again:
    it names the live job after the file's pipeline and follows it until it ends.
    """
    out = {}
    for backend, pair in (("sqlite", sqlite_pair), ("postgres", pg_pair)):
        job = f"race-{backend}"
        app, sink = world.app(job, "total=300, max_rows_per_epoch=100")
        race = Race(pair, job, app, sink)
        race.answers = _race(pair, body(job, app))
        out[backend] = race
    race = out["sqlite"]
    race.follower = subprocess.Popen(
        stoker_cmd("run", str(race.app), "--server", race.managers[0].url, *defines()),
        cwd=str(REPO),
        env=_cli_env(None),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        yield out
    finally:
        if race.follower.poll() is None:
            os.killpg(race.follower.pid, signal.SIGKILL)
            race.follower.communicate()


@dataclass
class LongJobs:
    detached: subprocess.CompletedProcess[str]
    detached_seconds: float
    kill_total: int


@pytest.fixture(scope="module")
def long_jobs(world: World, sqlite_pair: list[Manager]) -> LongJobs:
    """Submitted together: an endless job to cancel, a bounded one to kill -9, and three that
    fail before Spark starts (their restart strategies differ)."""
    a, b = sqlite_pair
    endless, _ = world.app("endless", "total=None, rows_per_second=20, max_rows_per_epoch=50")
    # ~100 s of input at its pace: still running when its test comes, whatever ran before.
    kill_total = 3000
    kill_app, _ = world.app(
        "kill9", f"total={kill_total}, rows_per_second=30, max_rows_per_epoch=100"
    )
    broken, _ = world.app("broken-sink", "", BROKEN_SINK_APP)
    parked, _ = world.app("parked", "", BROKEN_SINK_APP)
    raises, _ = world.app("main-raises", "", MAIN_RAISES_APP)

    t0 = time.monotonic()
    detached = stoker(
        "run", str(endless), "--job-id", "endless", "--detached", "--server", b.url, *defines()
    )
    took = time.monotonic() - t0
    restart3 = {"strategy": "fixed-delay", "attempts": 3, "delay": 0.5}
    r = a.http.post("/v1/jobs", json=body("kill9", kill_app, restart_strategy=restart3))
    assert r.status_code == 201, r.text
    fixed = {"strategy": "fixed-delay", "attempts": 2, "delay": 0.5}
    r = b.http.post("/v1/jobs", json=body("broken-sink", broken, restart_strategy=fixed))
    assert r.status_code == 201, r.text
    # Fails, then waits 10 minutes before its next attempt: a job to cancel while RESTARTING.
    later = {"strategy": "fixed-delay", "attempts": 5, "delay": 600}
    r = a.http.post("/v1/jobs", json=body("parked", parked, restart_strategy=later))
    assert r.status_code == 201, r.text
    # No job_id: the id is the name of the pipeline the file defines.
    r = b.http.post("/v1/jobs", json=body(None, raises, restart_strategy={"strategy": "none"}))
    assert (r.status_code, r.json()["job_id"], r.json()["state"]) == (
        201,
        "main-raises",
        "CREATED",
    ), r.text
    return LongJobs(detached, took, kill_total)


# 7. bad input ----------------------------------------------------------------------------------
def _refused(m: Manager, payload: Any, status: int, fld: str) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    if isinstance(payload, bytes):
        r = m.http.post(
            "/v1/jobs", content=payload, headers={**headers, "Content-Type": "application/json"}
        )
    else:
        r = m.http.post("/v1/jobs", json=payload, headers=headers)
    assert (r.status_code, r.json().get("field")) == (status, fld), r.text
    assert m.http.get("/v1/jobs", headers=headers).json() == []
    return dict(r.json())


def test_bad_submissions_are_422_naming_the_field_and_create_nothing(
    world: World, token_manager: Manager
) -> None:
    m = token_manager
    app, _ = world.app("never", "total=10")
    (world.apps / "notes.txt").write_text("print('not an app')\n")
    (world.outside / "elsewhere.py").write_text(APP.format(name="x", source="total=1", out="/x"))

    err = _refused(m, b'{"entrypoint": ', 422, "body")
    assert err["error"] == "body: malformed JSON"
    err = _refused(m, {"entrypoint": str(app), "nope": 1}, 422, "nope")
    assert err["error"] == "nope: Extra inputs are not permitted"
    _refused(m, {"job_id": "x"}, 422, "entrypoint")
    err = _refused(m, body("x", world.apps / "missing.py"), 422, "entrypoint")
    assert err["error"] == f"entrypoint: '{world.apps / 'missing.py'}' does not exist"
    err = _refused(m, body("x", world.apps / "notes.txt"), 422, "entrypoint")
    assert err["error"] == f"entrypoint: '{world.apps / 'notes.txt'}' is not a Python file (.py)"
    err = _refused(m, body("x", world.outside / "elsewhere.py"), 422, "entrypoint")
    assert "lies outside the allowed folders" in err["error"]
    # A path that climbs out of the allowed folder is outside too.
    _refused(m, body("x", world.apps / ".." / "outside" / "elsewhere.py"), 422, "entrypoint")
    err = _refused(m, body("no/slash", app), 422, "job_id")
    assert err["error"].startswith("job_id: 'no/slash' is not a valid job id")
    err = _refused(m, {**body("x", app), "conf": {"nope.x": "1"}}, 422, "conf.nope.x")
    assert "use spark.<conf> or stoker.<key>" in err["error"]
    _refused(m, {**body("x", app), "conf": {"stoker.nope": "1"}}, 422, "conf.stoker.nope")
    _refused(m, {**body("x", app), "conf": {"stoker.trigger": "soon"}}, 422, "conf.stoker.trigger")
    _refused(
        m, {**body("x", app), "conf": {"stoker.store": "sqlite:///x"}}, 422, "conf.stoker.store"
    )
    _refused(m, {**body("x", app), "conf": {"spark.x": 1}}, 422, "conf.spark.x")
    _refused(m, {**body("x", app), "args": "--not-a-list"}, 422, "args")
    err = _refused(
        m,
        body("x", app, restart_strategy={"strategy": "sometimes"}),
        422,
        "restart_strategy.strategy",
    )
    assert err["error"] == (
        "restart_strategy.strategy: 'sometimes' is not one of none, fixed-delay, "
        "exponential-delay, failure-rate"
    )
    _refused(
        m,
        body("x", app, restart_strategy={"strategy": "fixed-delay", "attempts": -1}),
        422,
        "restart_strategy.attempts",
    )
    _refused(
        m,
        body("x", app, restart_strategy={"strategy": "none", "delay": 1}),
        422,
        "restart_strategy",
    )
    assert not (world.root / "out" / "never").exists()


def test_the_token_guards_every_call_but_healthz(world: World, token_manager: Manager) -> None:
    m = token_manager
    app, _ = world.app("never", "total=10")
    calls = [("POST", "/v1/jobs"), ("POST", "/v1/jobs/never/cancel")]
    calls += [("GET", "/v1/jobs"), ("GET", "/v1/jobs/never"), ("GET", "/metrics")]
    for method, path in calls:
        payload = body("never", app) if path == "/v1/jobs" and method == "POST" else None
        r = m.http.request(method, path, json=payload)
        assert (r.status_code, r.json()) == (
            401,
            {
                "error": "missing token: send 'Authorization: Bearer <token>'",
                "type": "Unauthorized",
            },
        )
        r = m.http.request(method, path, json=payload, headers={"Authorization": "Bearer wrong"})
        assert (r.status_code, r.json()) == (401, {"error": WRONG_TOKEN, "type": "Unauthorized"})
        r = m.http.request(method, path, json=payload, headers={"X-Stoker-Token": "wrong"})
        assert r.status_code == 401
    # The right token gets through to the job lookup, for writes and reads.
    auth = {"Authorization": f"Bearer {TOKEN}"}
    r = m.http.post("/v1/jobs/never/cancel", headers=auth)
    assert (r.status_code, r.json()["type"]) == (404, "JobNotFound")
    assert m.http.get("/v1/jobs", headers=auth).json() == []
    assert m.http.get("/v1/jobs/never", headers=auth).status_code == 404
    assert m.http.get("/metrics", headers={"X-Stoker-Token": TOKEN}).status_code == 200
    # Liveness stays open.
    assert m.http.get("/healthz").status_code == 200


# 2. one id, 64 clients, two managers -----------------------------------------------------------
@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_64_concurrent_submissions_make_one_job(races: dict[str, Race], backend: str) -> None:
    race = races[backend]
    statuses = Counter(status for status, _ in race.answers)
    assert statuses == Counter({201: 1, 200: CLIENTS - 1}), race.answers[:3]
    created = next(a for s, a in race.answers if s == 201)
    assert (created["job_id"], created["duplicate"], created["restarted"]) == (
        race.job,
        False,
        False,
    )
    assert all(a["duplicate"] is True for s, a in race.answers if s == 200)
    # Every answer names the one job: same id, same creation.
    assert {(a["job_id"], a["created_at"]) for _, a in race.answers} == {
        (race.job, created["created_at"])
    }
    for m in race.managers:
        assert [j["job_id"] for j in get(m, "/v1/jobs")] == [race.job]


def test_a_live_job_submitted_with_another_spec_is_409_naming_the_difference(
    races: dict[str, Race],
) -> None:
    race = races["sqlite"]
    a, b = race.managers
    r = b.http.post("/v1/jobs", json=body(race.job, race.app, args=["--other"]))
    assert r.status_code == 409, r.text
    assert (r.json()["type"], r.json()["job_id"]) == ("JobConflict", race.job)
    assert r.json()["difference"] == "args: [] (live) vs ['--other'] (submitted)"
    # A conf the allow-list takes (a master it refuses is a 422 before any job is looked up).
    other = {"stoker.master": "local[2]"}
    r = a.http.post("/v1/jobs", json={**body(race.job, race.app), "conf": other})
    assert r.status_code == 409, r.text
    live = " ".join(f"{k}={v}" for k, v in sorted(CONF.items()))
    assert r.json()["difference"] == f"conf: {live} (live) vs stoker.master=local[2] (submitted)"
    # The CLI says so with exit code 9.
    p = stoker("run", str(race.app), "--job-id", race.job, "--server", b.url, "--arg", "x")
    assert p.returncode == 9, p.stderr
    assert p.stderr.startswith(f"stoker: error: job '{race.job}' is live with a different spec: ")
    # restart=true on a live job is not a second instance: the live job, as a duplicate.
    r = a.http.post("/v1/jobs", json=body(race.job, race.app, restart=True))
    assert (r.status_code, r.json()["duplicate"]) == (200, True), r.text
    assert view(a, race.job)["spec"]["args"] == []


def test_a_running_job_shows_its_attempt_driver_and_lease(races: dict[str, Race]) -> None:
    race = races["sqlite"]
    m = race.managers[0]

    def running() -> dict[str, Any] | None:
        v = view(m, race.job)
        att = v["attempt"]
        return v if att and att["state"] == "RUNNING" and att["pid"] > 0 else None

    v = wait_for(lambda: _story(m, race.job), running, JOB_TIMEOUT)
    now = time.time()
    assert (v["job_id"], v["state"]) == (race.job, "RUNNING")
    att = v["attempt"]
    assert (att["attempt"], att["host"], att["ended_at"]) == (
        v["current_attempt"],
        host_id(),
        None,
    )
    assert now - 10 < att["lease_expires_at"] <= now + 5 + 2  # the driver renews a 5 s lease
    argv = Path(f"/proc/{att['pid']}/cmdline").read_bytes().split(b"\0")
    assert b"stoker.runtime.driver" in argv
    assert argv[argv.index(b"--attempt") + 1] == str(att["attempt"]).encode()
    assert argv[argv.index(b"--job") + 1] == race.job.encode()
    assert os.getpgid(att["pid"]) == att["pid"]  # it leads its own process group
    assert [j["job_id"] for j in get(m, "/v1/jobs", state="RUNNING")] == [race.job]
    assert get(m, "/v1/jobs", state="FINISHED") == []


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_the_raced_job_runs_one_attempt_and_writes_once(
    races: dict[str, Race], backend: str
) -> None:
    race = races[backend]
    m = race.managers[1]
    v = wait_state(m, race.job, "FINISHED")
    assert settled(m, race.job) == [(v["current_attempt"], "FINISHED")]
    assert file_sink_ids(race.out) == Counter(range(300))


# 9. the CLI, attached ------------------------------------------------------------------------
def test_an_attached_run_follows_the_job_until_it_finishes(races: dict[str, Race]) -> None:
    race = races["sqlite"]
    assert race.follower is not None
    stdout, stderr = race.follower.communicate(timeout=QUICK)
    assert race.follower.returncode == 0, stderr[-3000:]
    # No --job-id: the manager named the job after the file's pipeline, the live race job.
    assert stdout == f"{race.job}\n"
    lines = stderr.splitlines()
    assert re.fullmatch(
        rf"job {race.job}: already live \((CREATED|RUNNING|RESTARTING)\)", lines[0]
    ), lines
    epoch_lines = [line for line in lines if line.startswith("  epoch ")]
    assert epoch_lines == [
        "  epoch 0 committed: 100 rows",
        "  epoch 1 committed: 100 rows",
        "  epoch 2 committed: 100 rows (final)",
    ]
    att = view(race.managers[0], race.job)["attempt"]
    assert lines[-1] == f"job {race.job}: FINISHED attempt {att['attempt']} pid {att['pid']}"


def test_an_ended_job_is_returned_to_its_resubmission_until_restarted_from_its_checkpoint(
    races: dict[str, Race],
) -> None:
    race = races["sqlite"]
    a, b = race.managers
    before = view(a, race.job)["current_attempt"]
    # The same submission again (a client's retry): the ended job, nothing started.
    r = a.http.post("/v1/jobs", json=body(race.job, race.app))
    assert r.status_code == 200, r.text
    got = r.json()
    assert (got["state"], got["duplicate"], got["restarted"]) == ("FINISHED", True, False)
    assert got["current_attempt"] == before
    # Another spec, no restart: 409 naming the state and the difference.
    r = a.http.post("/v1/jobs", json=body(race.job, race.app, args=["x"]))
    assert r.status_code == 409, r.text
    assert (r.json()["type"], r.json()["state"]) == ("JobTerminal", "FINISHED")
    assert r.json()["difference"] == "args: [] (ended) vs ['x'] (submitted)"
    files = sorted(p.name for p in race.out.iterdir())
    assert view(a, race.job)["current_attempt"] == before

    r = b.http.post("/v1/jobs", json=body(race.job, race.app, restart=True))
    assert r.status_code == 200, r.text
    got = r.json()
    assert (got["state"], got["restarted"], got["duplicate"]) == ("RESTARTING", True, False)
    v = wait_state(a, race.job, "FINISHED", RESUME)
    assert v["current_attempt"] == before + 1
    assert attempts(a, race.job)[-2:] == [(before, "FINISHED"), (before + 1, "FINISHED")]
    # Resumed from its checkpoint: nothing read or written again.
    assert sorted(p.name for p in race.out.iterdir()) == files
    assert file_sink_ids(race.out) == Counter(range(300))
    log = attempt_log(a, race.job, before + 1)
    assert f"job {race.job}: attempt {before + 1} started" in log
    assert "stoker.epoch:" not in log  # its final epoch was committed: Spark never started


# 3. reads --------------------------------------------------------------------------------------
def test_reads_of_a_job_its_attempts_epochs_and_logs(races: dict[str, Race]) -> None:
    race = races["sqlite"]
    m = race.managers[1]
    job = race.job
    assert [j["job_id"] for j in get(m, "/v1/jobs")] == [job]
    assert [j["job_id"] for j in get(m, "/v1/jobs", state="FINISHED")] == [job]
    assert get(m, "/v1/jobs", state="CANCELED") == []

    v = view(m, job)
    last = v["current_attempt"]
    assert (v["state"], v["last_error"], v["failures"]) == ("FINISHED", None, 0)
    assert (v["attempt"]["attempt"], v["attempt"]["state"]) == (last, "FINISHED")
    assert v["attempt"]["pid"] > 0 and v["attempt"]["host"] == host_id()
    assert v["attempt"]["started_at"] <= v["attempt"]["ended_at"]
    e = v["last_epoch"]
    assert (e["epoch"], e["state"], e["rows"], e["final"], e["decided_by"]) == (
        2,
        "COMMITTED",
        100,
        True,
        last - 1,
    )

    assert [(e["epoch"], e["state"], e["rows"], e["final"]) for e in epochs(m, job)] == [
        (2, "COMMITTED", 100, True),
        (1, "COMMITTED", 100, False),
        (0, "COMMITTED", 100, False),
    ]
    assert [e["epoch"] for e in get(m, f"/v1/jobs/{job}/epochs", limit=1)] == [2]

    log = attempt_log(m, job, last - 1)  # the attempt that ran the epochs
    for n in range(2):
        assert f"stoker.epoch: epoch {n} committed: 100 rows, " in log, log[-3000:]
    assert re.search(r"stoker.epoch: epoch 2 committed: 100 rows, \d+ ms \(final\)", log)
    assert f"stoker driver: job {job} ended FINISHED" in log
    tail = m.http.get(f"/v1/jobs/{job}/attempts/{last - 1}/log", params={"tail": 2}).text
    assert tail == "".join(log.splitlines(keepends=True)[-2:])  # the last two lines

    # Unknown ids: 404, whatever is asked about them.
    for path in (
        "/v1/jobs/nosuch",
        "/v1/jobs/nosuch/attempts",
        "/v1/jobs/nosuch/epochs",
        "/v1/jobs/nosuch/attempts/1/log",
        f"/v1/jobs/{job}/attempts/99/log",
    ):
        r = m.http.get(path)
        assert (r.status_code, r.json()["type"]) == (404, "JobNotFound"), (path, r.text)
    r = m.http.post("/v1/jobs/nosuch/cancel")
    assert (r.status_code, r.json()["job_id"]) == (404, "nosuch")
    # Bad parameters: 422 naming them.
    for path, params, fld in (
        ("/v1/jobs", {"state": "NOPE"}, "query.state"),
        (f"/v1/jobs/{job}/epochs", {"limit": 0}, "query.limit"),
        (f"/v1/jobs/{job}/epochs", {"limit": "many"}, "query.limit"),
        (f"/v1/jobs/{job}/attempts/x/log", {}, "path.attempt"),
        (f"/v1/jobs/{job}/attempts/1/log", {"tail": 0}, "query.tail"),
        ("/v1/jobs/bad$id", {}, "job_id"),
    ):
        r = m.http.get(path, params=params)
        assert (r.status_code, r.json()["field"]) == (422, fld), (path, r.text)
    # Canceling an ended job: 409 with its state.
    r = m.http.post(f"/v1/jobs/{job}/cancel")
    assert (r.status_code, r.json()["state"]) == (409, "FINISHED")


# 4. cancel -------------------------------------------------------------------------------------
def test_a_detached_run_returns_at_once_with_the_job_id(long_jobs: LongJobs) -> None:
    p = long_jobs.detached
    assert p.returncode == 0, p.stderr
    assert p.stdout == "endless\n"
    assert p.stderr == "job endless: submitted (CREATED)\n"
    assert long_jobs.detached_seconds < 60  # it waits for no driver: a CLI start, one call


def _job_processes(m: Manager, job: str) -> tuple[int, set[Proc]]:
    """The current driver's pid and every process of its job: its group and descendants."""
    att = view(m, job)["attempt"]
    assert att["state"] == "RUNNING" and att["pid"] > 0, att
    pgid = int(att["pid"])
    procs = process_tree(pgid=pgid, root=pgid)
    assert pgid in {p.pid for p in procs}
    # Spark's JVM and its Python workers are in it.
    assert any(p.argv and p.argv[0].endswith("java") for p in procs), describe(procs)
    assert any(a.startswith("pyspark.") for p in procs for a in p.argv), describe(procs)
    return pgid, procs


def test_cancel_commits_the_epoch_in_flight_and_leaves_no_process(
    long_jobs: LongJobs, sqlite_pair: list[Manager], world: World
) -> None:
    m = sqlite_pair[1]
    wait_committed(m, "endless", 2)
    pgid, procs = _job_processes(m, "endless")
    current = view(m, "endless")["current_attempt"]
    p = stoker("cancel", "endless", "--server", m.url)
    assert (p.returncode, p.stdout, p.stderr) == (0, "endless: CANCELING\n", "")

    v = wait_state(m, "endless", "CANCELED", 180)
    assert (v["current_attempt"], v["last_error"]) == (current, None)
    assert v["cancel_requested_at"] is not None
    assert settled(m, "endless") == [(current, "CANCELED")]
    es = epochs(m, "endless")
    # The epoch in flight completed: every epoch is committed, none is left pinned or decided.
    assert [e["state"] for e in es] == ["COMMITTED"] * len(es)
    assert [e["epoch"] for e in es] == list(range(len(es) - 1, -1, -1))
    rows = sum(e["rows"] for e in es)
    assert rows > 0
    exactly_once(file_sink_ids(world.root / "out" / "endless"), rows)
    # No process of the job is left: not the driver, not the JVM, not a Python worker.
    wait_for(
        lambda: f"the processes of the job to end: {describe(still_alive(procs))}",
        lambda: not still_alive(procs) and not process_tree(pgid=pgid, root=pgid),
        60,
    )
    r = m.http.post("/v1/jobs/endless/cancel")
    assert (r.status_code, r.json()["state"]) == (409, "CANCELED")


def test_cancel_over_http_of_a_job_waiting_to_restart_ends_it_at_once(
    long_jobs: LongJobs, sqlite_pair: list[Manager]
) -> None:
    m = sqlite_pair[0]
    wait_state(m, "parked", "RESTARTING", QUICK)
    r = m.http.post("/v1/jobs/parked/cancel")
    assert r.status_code == 202, r.text
    got = r.json()
    assert (got["job_id"], got["state"]) == ("parked", "CANCELED")
    assert got["cancel_requested_at"] is not None
    assert view(m, "parked")["state"] == "CANCELED"
    assert attempts(m, "parked") == [(1, "FAILED")]


# 6. driver kill -9 -----------------------------------------------------------------------------
def test_a_killed_driver_is_restarted_and_the_job_finishes_exactly_once(
    long_jobs: LongJobs, sqlite_pair: list[Manager], world: World
) -> None:
    m = sqlite_pair[0]
    wait_committed(m, "kill9", 1)
    killed = view(m, "kill9")["current_attempt"]
    pgid, procs = _job_processes(m, "kill9")
    assert not any(e["final"] for e in epochs(m, "kill9")), "the job ended before the kill"
    os.killpg(pgid, signal.SIGKILL)
    # The input was paced to outlast the tests before this one; the next attempt need not
    # crawl through the rest of it (the event applies from its first epoch).
    fast = {"kind": "rate_limit", "rows_per_second": 3000, "max_rows_per_epoch": 1000}
    r = m.http.post("/v1/jobs/kill9/control", json=fast)
    assert r.status_code == 202, r.text

    v = wait_state(m, "kill9", "FINISHED")
    assert v["last_error"] is None
    atts = {a["attempt"]: a for a in get(m, "/v1/jobs/kill9/attempts")}
    assert atts[killed]["state"] == "FAILED"
    assert re.fullmatch(
        rf"the driver exited with code -9 without ending its attempt(: .*)?|"
        rf"the driver \(pid {pgid}\) is gone",
        atts[killed]["error"],
    ), atts[killed]["error"]
    # The next attempt (after any Spark start-up failure) finished the job.
    after = [(n, s) for n, s in settled(m, "kill9") if n > killed]
    assert after == [(v["current_attempt"], "FINISHED")]
    es = epochs(m, "kill9")
    assert [e["state"] for e in es] == ["COMMITTED"] * len(es)
    assert {e["decided_by"] for e in es} == {killed, v["current_attempt"]}
    exactly_once(file_sink_ids(world.root / "out" / "kill9"), long_jobs.kill_total)
    assert not still_alive(procs), describe(still_alive(procs))


# 5. restart strategies -------------------------------------------------------------------------
def test_fixed_delay_gives_up_after_its_attempts_with_the_last_error_readable(
    long_jobs: LongJobs, sqlite_pair: list[Manager]
) -> None:
    m = sqlite_pair[1]
    v = wait_state(m, "broken-sink", "FAILED", QUICK)
    assert (v["current_attempt"], v["failures"]) == (3, 3)
    # The user's exception first, with its type, then where it was raised (issue 41 item 5).
    first = "RuntimeError: boom: the sink cannot open"
    assert v["last_error"].splitlines()[0] == first, v["last_error"]
    assert 'broken-sink.py", line 7, in open' in v["last_error"], v["last_error"]
    atts = get(m, "/v1/jobs/broken-sink/attempts")
    assert [(a["attempt"], a["state"], a["error"].splitlines()[0]) for a in atts] == [
        (n, "FAILED", first) for n in (1, 2, 3)
    ]
    # The strategy's delay between an attempt's end and the next one's start.
    for prev, nxt in itertools.pairwise(atts):
        assert nxt["started_at"] - prev["ended_at"] >= 0.5 - 0.05
    log = attempt_log(m, "broken-sink", 3)
    assert "stoker driver: JobFailed: job 'broken-sink' failed: boom: the sink cannot open" in log
    assert epochs(m, "broken-sink") == []


def test_strategy_none_fails_after_one_attempt(
    long_jobs: LongJobs, sqlite_pair: list[Manager]
) -> None:
    m = sqlite_pair[0]
    v = wait_state(m, "main-raises", "FAILED", QUICK)
    assert (v["current_attempt"], v["failures"]) == (1, 1)
    # The driver's last error line from its log is part of the error.
    err = (
        "the driver exited with code 1 without ending its attempt: RuntimeError: boom: main gave up"
    )
    assert v["last_error"] == err
    atts = get(m, "/v1/jobs/main-raises/attempts")
    assert [(a["attempt"], a["state"], a["error"]) for a in atts] == [(1, "FAILED", err)]
    log = attempt_log(m, "main-raises", 1)
    assert "Traceback (most recent call last):" in log
    assert "RuntimeError: boom: main gave up" in log


# 9. the CLI over REST --------------------------------------------------------------------------
def test_cli_list_status_logs_with_flags_and_environment(
    sqlite_pair: list[Manager], token_manager: Manager, races: dict[str, Race]
) -> None:
    m = sqlite_pair[0]
    job = races["sqlite"].job
    jobs = {j["job_id"]: j["state"] for j in get(m, "/v1/jobs")}
    assert (jobs[job], jobs["endless"], jobs["main-raises"]) == ("FINISHED", "CANCELED", "FAILED")

    p = stoker("list", "--server", m.url, "--json")
    assert p.returncode == 0, p.stderr
    listed = [json.loads(line) for line in p.stdout.splitlines()]
    assert {(d["job_id"], d["state"]) for d in listed} == set(jobs.items())
    p = stoker("list", "--state", "CANCELED", env={"STOKER_SERVER": m.url})
    assert p.returncode == 0, p.stderr
    canceled = {j["job_id"]: j["current_attempt"] for j in get(m, "/v1/jobs", state="CANCELED")}
    assert sorted(line.split() for line in p.stdout.splitlines()) == sorted(
        [j, "CANCELED", "attempt", str(n)] for j, n in canceled.items()
    )
    assert set(canceled) == {"endless", "parked"}

    v = view(m, job)
    p = stoker("status", job, "--server", m.url)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[:2] == [f"job        {job}", "state      FINISHED"]
    assert lines[2].startswith(f"attempt    {v['current_attempt']} FINISHED pid ")
    assert lines[3].startswith("last epoch 2 COMMITTED rows 100 at ")
    p = stoker("status", job, "--json", env={"STOKER_SERVER": m.url})
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == view(m, job)

    p = stoker("logs", job, "--attempt", str(v["current_attempt"] - 1), "--server", m.url)
    assert p.returncode == 0, p.stderr
    assert "stoker.epoch: epoch 0 committed: 100 rows" in p.stdout
    assert p.stdout == attempt_log(m, job, v["current_attempt"] - 1)
    p = stoker("logs", "broken-sink", env={"STOKER_SERVER": m.url})  # the current attempt: 3
    assert p.returncode == 0, p.stderr
    assert p.stdout == attempt_log(m, "broken-sink", 3)

    p = stoker("epochs", job, "--server", m.url, "--json")
    assert p.returncode == 0, p.stderr
    assert [json.loads(line)["epoch"] for line in p.stdout.splitlines()] == [2, 1, 0]

    # The token comes from --token or STOKER_TOKEN; calls without it are refused (exit 11).
    env = {"STOKER_SERVER": token_manager.url}
    p = stoker("cancel", "nosuch", env=env)
    assert (p.returncode, p.stderr) == (
        11,
        "stoker: error: missing token: send 'Authorization: Bearer <token>'"
        " (the CLI sends the token given with --token or STOKER_TOKEN, else the one in the file "
        "STOKER_TOKEN_FILE names, else ./.stoker-server/token for a loopback URL)\n",
    )
    p = stoker("cancel", "nosuch", env={**env, "STOKER_TOKEN": "wrong"})
    assert (p.returncode, p.stderr) == (
        11,
        f"stoker: error: {WRONG_TOKEN} (the CLI sends the token given with --token or "
        "STOKER_TOKEN, else the one in the file STOKER_TOKEN_FILE names, else "
        "./.stoker-server/token for a loopback URL)\n",
    )
    p = stoker("cancel", "nosuch", env={**env, "STOKER_TOKEN": TOKEN})
    assert (p.returncode, p.stderr) == (3, "stoker: error: job 'nosuch' not found\n")
    p = stoker("cancel", "nosuch", "--token", TOKEN, env=env)
    assert (p.returncode, p.stderr) == (3, "stoker: error: job 'nosuch' not found\n")


def test_cli_exit_codes_for_unknown_ended_and_bad_jobs(
    world: World, sqlite_pair: list[Manager], races: dict[str, Race]
) -> None:
    m = sqlite_pair[1]
    for args in (("status",), ("logs",), ("cancel",), ("epochs",)):
        p = stoker(*args, "nosuch", "--server", m.url)
        assert (p.returncode, p.stderr) == (3, "stoker: error: job 'nosuch' not found\n"), args
    race = races["sqlite"]
    # The same command again: the ended job is followed to its end at once (its exit code).
    p = stoker("run", str(race.app), "--job-id", race.job, "--server", m.url, *defines())
    assert (p.returncode, p.stdout) == (0, f"{race.job}\n"), p.stderr
    assert p.stderr.startswith(
        f"job {race.job}: already ended (FINISHED): nothing started; --restart runs it again "
        "from its checkpoint\n"
    ), p.stderr
    # Another spec: refused, exit code 5.
    p = stoker(
        "run", str(race.app), "--job-id", race.job, "--server", m.url, *defines(), "--arg", "x"
    )
    assert (p.returncode, p.stdout) == (5, "")
    assert p.stderr == (
        f"stoker: error: job '{race.job}' has ended in state FINISHED and was submitted with "
        "another spec (args: [] (ended) vs ['x'] (submitted)); to run it again from its "
        'checkpoint ask for a restart: --restart (stoker run), "restart": true (REST), '
        "restart=True (stoker.run)\n"
    )
    p = stoker("run", str(race.app), "--server", m.url, "-D", "nope.x=1")
    assert (p.returncode, p.stderr) == (
        2,
        "stoker: error: conf.nope.x: unknown setting: use spark.<conf> or stoker.<key> with key "
        "one of trigger, state_dir, store, master, lease_ttl, retention.epochs, retention.time, "
        "retention.interval, paced_trigger, progress_timeout, cancel_timeout, startup_timeout\n",
    )
    p = stoker("status", "x", "--server", "http://127.0.0.1:1")
    assert p.returncode == 12
    assert p.stderr.startswith("stoker: error: cannot reach the job manager at http://127.0.0.1:1")


# 8. metrics and docs ---------------------------------------------------------------------------
def test_metrics_are_prometheus_text(races: dict[str, Race]) -> None:
    race = races["postgres"]
    m0 = race.managers[0]
    n_attempts = len(attempts(m0, race.job))
    n_epochs = sum(e["state"] == "COMMITTED" for e in epochs(m0, race.job))
    assert n_epochs == 3
    states = ("CANCELED", "CANCELING", "CREATED", "FAILED", "FINISHED", "RESTARTING", "RUNNING")
    for m in race.managers:
        r = m.http.get("/metrics")
        assert r.headers["content-type"].startswith("text/plain")
        assert "# TYPE stoker_jobs gauge" in r.text
        assert "# TYPE stoker_attempts_started_total counter" in r.text
        assert "# TYPE stoker_submit_latency_seconds histogram" in r.text
        got = metrics(m)
        assert {s: got[f'stoker_jobs{{state="{s}"}}'] for s in states} == {
            s: 1.0 if s == "FINISHED" else 0.0 for s in states
        }
        assert got["stoker_attempts_started_total"] == n_attempts
        assert got["stoker_epochs_committed_total"] == n_epochs
        # Each manager answered half of the 64 submissions, and nothing else was submitted.
        assert got['stoker_submit_latency_seconds_bucket{le="+Inf"}'] == CLIENTS / 2
        assert got["stoker_submit_latency_seconds_count"] == CLIENTS / 2
        buckets = [
            v for k, v in got.items() if k.startswith("stoker_submit_latency_seconds_bucket")
        ]
        assert buckets == sorted(buckets) and len(buckets) == 11
        assert got["stoker_submit_latency_seconds_sum"] > 0
    # One of the two leads (a lease hand-over may be under way: then ask again).
    wait_for(
        "exactly one manager to report stoker_leader 1",
        lambda: (
            sorted(metrics(m)['stoker_leader{manager="self"}'] for m in race.managers) == [0.0, 1.0]
        ),
        10,
    )


def test_docs_and_openapi_are_served(sqlite_pair: list[Manager]) -> None:
    m = sqlite_pair[0]
    r = m.http.get("/docs")
    assert r.status_code == 200 and "swagger" in r.text.lower()
    r = m.http.get("/openapi.json")
    assert r.status_code == 200
    paths = r.json()["paths"]
    for p in (
        "/v1/jobs",
        "/v1/jobs/{job_id}",
        "/v1/jobs/{job_id}/attempts",
        "/v1/jobs/{job_id}/epochs",
        "/v1/jobs/{job_id}/cancel",
        "/v1/jobs/{job_id}/attempts/{attempt}/log",
        "/metrics",
        "/healthz",
        "/readyz",
    ):
        assert p in paths, sorted(paths)
