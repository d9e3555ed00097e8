"""Applications through a real ``stoker server``: REST and the CLI, real application drivers
(``stoker.runtime.appdriver``) on Spark ``local[1]``, real process checks.

Two programs run side by side to keep the module short: ``endless`` (a bounded backfill with
``stoker.run``, then an unbounded stream with ``stoker.submit``) submitted detached, and
``bounded`` (one bounded job) followed by an attached ``stoker run --driver`` until it ends.
The tests depend on the file's order: the endless one is canceled last.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support import JVM_OPTS, REPO, file_sink_ids, stoker_cmd, wait_for
from tests.support.manager import Manager, stop_all
from tests.support.procs import process_tree

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(1200)]

TOKEN = "apps-t0ken"
READ_TOKEN = "apps-read-t0ken"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
READ = {"Authorization": f"Bearer {READ_TOKEN}"}
SPARK = 420.0  # a cold Spark driver, another beside it, on 2 cores other suites share
QUICK = 90.0
TUNING = [
    "-D", "stoker.trigger=200ms",
    # A short-lived JVM: C1 only and one GC thread cost less CPU on a loaded machine.
    "-D", f"spark.driver.extraJavaOptions={JVM_OPTS}",
]  # fmt: skip
DEFINES = ["-D", "spark.master=local[1]", *TUNING]

BOUNDED = """\
import stoker
from stoker import Pipeline, sinks, sources


def main():
    numbers = Pipeline("numbers").source(
        sources.generator(total=30, max_rows_per_epoch=10, partitions=1)
    )
    stoker.run(numbers.sink(sinks.files({out!r})))
"""

ENDLESS = """\
import stoker
from stoker import Pipeline, sinks, sources


def main():
    backfill = Pipeline("backfill").source(sources.generator(total=10, partitions=1))
    stoker.run(backfill.sink(sinks.files({out!r} + "/backfill")))
    stream = Pipeline("stream").source(sources.generator(rows_per_second=5, partitions=1))
    stoker.submit(stream.sink(sinks.files({out!r} + "/stream"))).wait()
"""


@dataclass
class World:
    manager: Manager
    apps: Path
    out: Path
    seen: dict[str, Any] = field(default_factory=dict)  # what one test leaves the next

    @property
    def url(self) -> str:
        return self.manager.url


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("applications")
    apps, out = root / "apps", root / "out"
    apps.mkdir()
    (apps / "bounded.py").write_text(BOUNDED.format(out=str(out / "bounded")))
    (apps / "endless.py").write_text(ENDLESS.format(out=str(out / "endless")))
    m = Manager(
        "apps",
        f"sqlite:///{root / 'store.db'}",
        root / "state",
        [apps],
        root / "manager.log",
        token=TOKEN,
        read_token=READ_TOKEN,
    )
    try:
        m.wait_up()
        yield World(m, apps, out)
    finally:
        stop_all([m])


def stoker(
    *args: str, timeout: float = QUICK, token: str | None = TOKEN
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("STOKER_SERVER", "STOKER_TOKEN")}
    if token is not None:
        env["STOKER_TOKEN"] = token
    return subprocess.run(
        stoker_cmd(*args), cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )


def app_view(w: World, app: str) -> dict[str, Any]:
    r = w.manager.http.get(f"/v1/applications/{app}", headers=READ)
    assert r.status_code == 200, r.text
    return dict(r.json())


def jobs_of(view: dict[str, Any]) -> dict[str, str]:
    return {j["job_id"]: j["state"] for j in view["jobs"]}


# 1. no Spark: refusals -----------------------------------------------------------------------
def test_bad_submissions_are_refused_and_create_nothing(world: World) -> None:
    http, entry = world.manager.http, str(world.apps / "bounded.py")
    outside = world.apps.parent / "outside.py"
    outside.write_text("")
    for body, status, fld in (
        ({"entrypoint": entry, "cluster": "mesos:x"}, 422, "cluster"),
        ({"entrypoint": entry, "cluster": "standalone:workers=0"}, 422, "cluster"),
        ({"entrypoint": entry, "cluster": "standalone:workers=1,memory=100000g"}, 422, "cluster"),
        ({"entrypoint": entry, "cluster": "nosuch"}, 422, "cluster"),
        ({"entrypoint": str(outside)}, 422, "entrypoint"),
        ({"entrypoint": entry, "driver_memory": "100000g"}, 422, "driver_memory"),
        ({"entrypoint": entry, "app_id": "a..b"}, 422, "app_id"),
        ({"entrypoint": entry, "nope": 1}, 422, "nope"),
    ):
        r = http.post("/v1/applications", json=body, headers=AUTH)
        assert (r.status_code, r.json().get("field")) == (status, fld), (body, r.text)
    r = http.post("/v1/applications", json={"entrypoint": entry}, headers=READ)
    assert r.status_code == 403
    r = http.get("/v1/applications")
    assert r.status_code == 401
    assert http.get("/v1/applications", headers=READ).json() == []
    assert http.get("/v1/clusters", headers=READ).json() == []
    p = stoker("run", "--driver", entry, "--cluster", "standalone:workers=0", "--server", world.url)
    assert p.returncode == 2, p.stderr
    assert p.stderr.startswith("stoker: error: cluster: workers=0: a cluster needs at least 1 ")
    p = stoker("run", "--driver", entry)
    assert (p.returncode, p.stderr.count("\n")) == (2, 1), p.stderr
    assert "give --server" in p.stderr
    p = stoker("run", "--driver", entry, "--job-id", "x", "--server", world.url)
    assert p.returncode == 2 and "--job-id" in p.stderr, p.stderr
    p = stoker("app", "status", "nosuch", "--server", world.url)
    assert (p.returncode, p.stderr) == (3, "stoker: error: application 'nosuch' not found\n")


# 2. a detached program and an attached one, side by side ------------------------------------------
def test_a_detached_run_prints_the_application_id_at_once(world: World) -> None:
    p = stoker(
        "run", "--driver", str(world.apps / "endless.py"), "-d", "--server", world.url, *DEFINES
    )
    assert (p.returncode, p.stdout) == (0, "endless\n"), p.stderr
    assert p.stderr == "application endless: submitted (CREATED, cluster local)\n"
    # The same again: the live application, not a second one.
    p = stoker(
        "run", "--driver", str(world.apps / "endless.py"), "-d", "--server", world.url, *DEFINES
    )
    assert (p.returncode, p.stdout) == (0, "endless\n"), p.stderr
    assert "already live" in p.stderr


def test_an_attached_run_follows_the_application_until_it_finishes(world: World) -> None:
    p = stoker(
        "run", "--driver", str(world.apps / "bounded.py"), "--server", world.url, *DEFINES,
        timeout=SPARK,
    )  # fmt: skip
    assert (p.returncode, p.stdout) == (0, "bounded\n"), p.stderr + world.manager.log_tail()
    lines = p.stderr.splitlines()
    assert lines[0] == "application bounded: submitted (CREATED, cluster local)"
    assert any(ln.startswith("application bounded: RUNNING attempt 1 pid ") for ln in lines)
    assert lines[-2:] == ["  job bounded.numbers: FINISHED", "application bounded: FINISHED"]
    assert file_sink_ids(world.out / "bounded") == Counter(range(30))
    view = app_view(world, "bounded")
    assert (view["state"], view["driver"], jobs_of(view)) == (
        "FINISHED",
        None,
        {"bounded.numbers": "FINISHED"},
    )
    assert [(a["attempt"], a["state"]) for a in view["attempts"]] == [(1, "FINISHED")]


def test_the_view_shows_the_driver_cluster_and_each_job(world: World) -> None:
    def streaming() -> dict[str, Any] | None:
        v = app_view(world, "endless")
        assert v["state"] not in ("FAILED", "CANCELED", "FINISHED"), v
        jobs = {j["job_id"]: j for j in v["jobs"]}
        stream = jobs.get("endless.stream")
        if stream is None or stream["last_epoch"] is None or stream["last_epoch"] < 1:
            return None
        return v

    view = wait_for(
        lambda: (
            f"endless.stream to commit epochs: {app_view(world, 'endless')}\n"
            + world.manager.log_tail()
        ),
        streaming,
        SPARK,
        every=1.0,
    )
    assert set(view) >= {
        "app_id", "state", "attempt", "attempts", "driver", "cluster", "jobs", "error",
        "created_at",
    }  # fmt: skip
    assert (view["app_id"], view["state"], view["attempt"], view["error"]) == (
        "endless",
        "RUNNING",
        1,
        None,
    )
    drv = view["driver"]
    assert drv is not None and drv["pid"] > 0
    assert [(a["attempt"], a["state"], a["pid"]) for a in view["attempts"]] == [
        (1, "RUNNING", drv["pid"])
    ]
    assert view["cluster"] == {
        "spec": "local",
        "name": None,
        "state": None,
        "master_url": None,
        "workers": None,
    }
    assert jobs_of(view) == {"endless.backfill": "FINISHED", "endless.stream": "RUNNING"}
    stream = next(j for j in view["jobs"] if j["job_id"] == "endless.stream")
    assert stream["attempt"] == 1
    world.seen["driver"] = drv["pid"]
    # The jobs are jobs (with their application named); the applications are not.
    http = world.manager.http
    listed = {j["job_id"]: j["app_id"] for j in http.get("/v1/jobs", headers=READ).json()}
    assert listed == {
        "bounded.numbers": "bounded",
        "endless.backfill": "endless",
        "endless.stream": "endless",
    }
    r = http.get("/v1/jobs/endless", headers=READ)
    assert r.status_code == 404 and "it is an application" in r.json()["error"], r.text
    # One id space: a job's id cannot become an application.
    r = http.post(
        "/v1/applications",
        json={"entrypoint": str(world.apps / "bounded.py"), "app_id": "endless.stream"},
        headers=AUTH,
    )
    assert (r.status_code, r.json()["type"]) == (409, "JobOwnedElsewhere"), r.text
    assert r.json()["owner"] == "application 'endless' owns it"


def test_the_cli_lists_and_shows_applications(world: World) -> None:
    p = stoker("apps", "--server", world.url, token=READ_TOKEN)
    assert p.returncode == 0, p.stderr
    rows = sorted(line.split() for line in p.stdout.splitlines())
    assert [r[:2] for r in rows] == [["bounded", "FINISHED"], ["endless", "RUNNING"]]
    p = stoker("app", "status", "endless", "--server", world.url)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[:2] == ["application endless", "state       RUNNING"]
    assert lines[2].startswith(f"attempt     1 RUNNING pid {world.seen['driver']} on ")
    assert lines[3:5] == ["cluster     local", "jobs        2"]
    assert lines[5].split()[:2] == ["endless.backfill", "FINISHED"]
    assert lines[6].split()[:2] == ["endless.stream", "RUNNING"]
    p = stoker("app", "status", "bounded", "--json", "--server", world.url)
    assert p.returncode == 0 and json.loads(p.stdout) == app_view(world, "bounded"), p.stderr
    p = stoker("app", "logs", "endless", "--tail", "3", "--server", world.url)
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("\n") == 3
    # The stream goes on logging: the whole log read a moment later holds those three lines.
    r = world.manager.http.get("/v1/applications/endless/log", headers=READ)
    assert r.status_code == 200 and p.stdout in r.text


def test_each_job_of_an_application_has_a_log_view_of_its_own(world: World) -> None:
    """Issue 23 item 6: a job of an application has no driver of its own; its log is its lines
    of the application driver's log. The application's log names the job on each of stoker's
    lines; the job's view (REST, CLI, the UI's log button) holds its lines and no other job's.
    It used to answer 422 ("attempt 1 was not started by a job manager")."""
    http = world.manager.http
    jobs = ("endless.backfill", "endless.stream")

    def tagged() -> str | None:
        text = http.get("/v1/applications/endless/log", headers=READ).text
        return text if all(f" [{j}] " in text for j in jobs) else None

    app_log = wait_for("both jobs' lines in the application's log", tagged, QUICK)
    # Spark's WARN for each job's FAIR pool, made on first use as stoker means it (noise).
    assert "which has not been configured" not in app_log, app_log[-2000:]
    for jid, other in (jobs, jobs[::-1]):
        n = http.get(f"/v1/jobs/{jid}", headers=READ).json()["current_attempt"]
        r = http.get(f"/v1/jobs/{jid}/attempts/{n}/log", headers=READ)
        assert r.status_code == 200, r.text
        lines = r.text.splitlines()
        assert any(f" [{jid}] " in ln for ln in lines), r.text[-2000:]
        assert not any(f"[{other}]" in ln for ln in lines), r.text[-2000:]
        ui = http.get(f"/ui/f/jobs/{jid}/attempts/{n}/log", headers=READ)
        assert ui.status_code == 200 and f" [{jid}] " in ui.text, ui.text[-2000:]
    p = stoker("logs", "endless.stream", "--tail", "2", "--server", world.url, token=READ_TOKEN)
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("\n") == 2 and p.stdout.count(" [endless.stream] ") >= 1, p.stdout


def test_ctrl_c_detaches_an_attached_run_and_the_application_goes_on(world: World) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("STOKER_SERVER", "STOKER_TOKEN")}
    argv = stoker_cmd(
        "run", "--driver", str(world.apps / "endless.py"), "--server", world.url, *DEFINES
    )
    proc = subprocess.Popen(
        argv,
        cwd=REPO,
        env={**env, "STOKER_TOKEN": TOKEN},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()  # the submission's answer: the live application
        assert first == "application endless: already live (RUNNING, cluster local)\n", first
        following = proc.stderr.readline()  # the first state it follows
        assert following.strip(), following
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=QUICK)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert (proc.returncode, out) == (0, ""), err
    assert err.splitlines()[-1] == (
        f"detached; application endless keeps running: follow it with "
        f"stoker app status endless --server {world.url}"
    )
    assert app_view(world, "endless")["state"] == "RUNNING"


def test_cancel_ends_the_application_and_its_jobs(world: World) -> None:
    pid = world.seen["driver"]
    p = stoker("app", "cancel", "endless", "--server", world.url, token=READ_TOKEN)
    assert p.returncode == 11 and "read-only" in p.stderr
    p = stoker("app", "cancel", "endless", "--wait", "--server", world.url, timeout=SPARK)
    assert p.returncode == 0, p.stderr + world.manager.log_tail()
    assert p.stdout == "endless: CANCELING\nendless: CANCELED\n"
    view = app_view(world, "endless")
    assert (view["state"], view["driver"]) == ("CANCELED", None)
    assert jobs_of(view) == {"endless.backfill": "FINISHED", "endless.stream": "CANCELED"}
    assert [(a["attempt"], a["state"]) for a in view["attempts"]] == [(1, "CANCELED")]
    # The stream committed what it read, once.
    ids = file_sink_ids(world.out / "endless" / "stream")
    assert ids and set(ids.values()) == {1} and set(ids) == set(range(len(ids)))
    assert file_sink_ids(world.out / "endless" / "backfill") == Counter(range(10))
    # No driver, JVM or Python worker of it is left.
    wait_for(
        lambda: f"driver {pid}'s processes to go: {process_tree(pgid=pid, root=pid)}",
        lambda: not process_tree(pgid=pid, root=pid),
        60,
    )
    r = world.manager.http.post("/v1/applications/endless/cancel", headers=AUTH)
    assert (r.status_code, r.json()["type"]) == (409, "JobTerminal"), r.text


def test_resume_then_stop_with_savepoints(world: World) -> None:
    """Issue 21 item 3: the cancelled application resumes (its stream from its checkpoint,
    its finished backfill not again), then stops with a savepoint of each live job, to be
    resumed later; every id once across both runs."""
    before = file_sink_ids(world.out / "endless" / "stream")
    r = world.manager.http.post("/v1/applications/endless/resume", headers=READ)
    assert r.status_code == 403, r.text
    p = stoker("app", "resume", "endless", "--server", world.url)
    assert (p.returncode, p.stdout) == (0, "endless: RESTARTING\n"), p.stderr
    wait_for(
        lambda: f"the resumed stream to write past {len(before)} ids: {app_view(world, 'endless')}",
        lambda: len(file_sink_ids(world.out / "endless" / "stream")) > len(before) + 5,
        SPARK,
    )
    view = app_view(world, "endless")
    assert view["state"] == "RUNNING"
    assert jobs_of(view) == {"endless.backfill": "FINISHED", "endless.stream": "RUNNING"}
    r = world.manager.http.post("/v1/applications/endless/resume", headers=AUTH)
    assert (r.status_code, r.json()["field"]) == (422, "app_id"), r.text  # it runs

    p = stoker("app", "stop", "endless", "--savepoint", "--json", "--server", world.url,
               timeout=SPARK)  # fmt: skip
    assert p.returncode == 0, p.stderr + world.manager.log_tail()
    out = json.loads(p.stdout)
    assert out["app_id"] == "endless" and out["state"] in ("CANCELING", "CANCELED"), out
    [(job, folder)] = out["savepoints"].items()
    assert job == "endless.stream" and (Path(folder) / "_savepoint.json").exists(), out
    wait_for(
        lambda: f"the application to end: {app_view(world, 'endless')}",
        lambda: app_view(world, "endless")["state"] == "CANCELED",
        SPARK,
    )
    view = app_view(world, "endless")
    assert jobs_of(view) == {"endless.backfill": "FINISHED", "endless.stream": "CANCELED"}
    ids = file_sink_ids(world.out / "endless" / "stream")
    assert set(ids.values()) == {1} and set(ids) == set(range(len(ids))), "an id twice or lost"
    assert file_sink_ids(world.out / "endless" / "backfill") == Counter(range(10))
    p = stoker("app", "stop", "endless", "--server", world.url)
    assert p.returncode == 5 and "has ended" in p.stderr, p.stderr


# 3. an application's own cluster ----------------------------------------------------------------
def test_an_application_on_its_own_cluster_tears_it_down_at_the_end(world: World) -> None:
    entry = world.apps / "onstandalone.py"
    entry.write_text(BOUNDED.format(out=str(world.out / "onstandalone")))
    spec = "standalone:workers=1,cores=1,memory=512m"
    p = stoker(
        "run", "--driver", str(entry), "--cluster", spec, "--server", world.url, *TUNING,
        timeout=SPARK,
    )  # fmt: skip
    assert (p.returncode, p.stdout) == (0, "onstandalone\n"), p.stderr + world.manager.log_tail()
    assert p.stderr.splitlines()[0] == (
        f"application onstandalone: submitted (CREATED, cluster {spec})"
    )
    assert file_sink_ids(world.out / "onstandalone") == Counter(range(30))
    view = app_view(world, "onstandalone")
    assert view["cluster"]["spec"] == spec and view["cluster"]["name"] == "app-onstandalone"
    # Its driver's Spark ran on the cluster the leader started for it.
    log = world.manager.http.get("/v1/applications/onstandalone/log", headers=READ).text
    assert "onstandalone.numbers: starting Spark (spark://127.0.0.1:" in log, log[-3000:]

    def stopped() -> dict[str, Any] | None:
        r = world.manager.http.get("/v1/clusters/app-onstandalone", headers=READ)
        c = r.json()
        return c if c["state"] == "STOPPED" else None

    cluster = wait_for("the application's cluster to be torn down", stopped, 120)
    assert cluster["kind"] == "app" and cluster["owner_app"] == "onstandalone"
    for proc in cluster["processes"]:
        assert not process_tree(root=proc["pid"]), proc
    assert world.manager.http.get("/v1/clusters", headers=READ).json() == []
    daemons = ("deploy.master.Master", "deploy.worker.Worker", "CoarseGrainedExecutorBackend")
    left = [p for p in world.manager.driver_procs() if any(d in " ".join(p.argv) for d in daemons)]
    assert left == [], left
