"""stoker.client.Client against a real ``stoker server``: every REST call, every refusal.

The application's main raises before Spark starts, so an attempt (with a driver log) exists
within seconds and the job ends FAILED (restart strategy ``none``); run as an application,
the same file's driver fails the same way.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from stoker.client import Client, Submitted, SubmittedApplication
from stoker.errors import (
    ApplicationNotFound,
    ClusterNotFound,
    InvalidInput,
    JobNotFound,
    JobOwnedElsewhere,
    JobTerminal,
    Unauthorized,
)
from tests.support import wait_for
from tests.support.manager import Manager, stop_all

pytestmark = pytest.mark.timeout(600)

TOKEN = "client-t0ken"
READ_TOKEN = "client-read-t0ken"
ENDS = 180.0  # a driver that imports stoker and fails, on a loaded machine

APP = """\
from stoker import Pipeline, sinks, sources

pipeline = Pipeline("raiser").source(sources.generator(total=10)).sink(sinks.files({out!r}))

if __name__ == "__main__":
    raise RuntimeError("boom: main gave up")
"""


@pytest.fixture(scope="module")
def manager(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Manager, Path]]:
    root = tmp_path_factory.mktemp("client")
    apps = root / "apps"
    apps.mkdir()
    app = apps / "raiser.py"
    app.write_text(APP.format(out=str(root / "out")))
    m = Manager(
        "client",
        f"sqlite:///{root / 'store.db'}",
        root / "state",
        [apps],
        root / "manager.log",
        token=TOKEN,
        read_token=READ_TOKEN,
    )
    try:
        m.wait_up()
        yield m, app
    finally:
        stop_all([m])


def test_every_call(manager: tuple[Manager, Path]) -> None:
    m, app = manager
    with Client(m.url, TOKEN) as c:
        assert c.health()["ok"] is True
        sub = c.submit(str(app), restart_strategy={"strategy": "none"})
        assert isinstance(sub, Submitted)
        assert (sub.outcome, sub.job_id, sub.job["state"]) == ("created", "raiser", "CREATED")
        again = c.submit(str(app), job_id="raiser", restart_strategy={"strategy": "none"})
        assert (again.outcome, again.job_id) == ("duplicate", "raiser")

        wait_for("the job to fail", lambda: c.job("raiser")["state"] == "FAILED", ENDS)
        view = c.job("raiser")
        assert view["attempt"]["attempt"] == view["current_attempt"] == 1
        assert [j["job_id"] for j in c.jobs()] == ["raiser"]
        assert c.jobs("FAILED") == c.jobs()
        assert c.jobs("RUNNING") == []
        assert [a["attempt"] for a in c.attempts("raiser")] == [1]
        assert "RuntimeError: boom: main gave up" in c.log("raiser", 1)
        whole = c.log("raiser", 1)
        assert c.log("raiser", 1, tail=2) == "".join(whole.splitlines(keepends=True)[-2:])
        assert c.epochs("raiser") == []
        assert "stoker_jobs" in c.metrics()

        none = {"strategy": "none"}
        again = c.submit(str(app), job_id="raiser", restart_strategy=none)  # safe to retry
        assert (again.outcome, again.job["state"]) == ("duplicate", "FAILED")
        with pytest.raises(JobTerminal) as ended:
            c.submit(str(app), job_id="raiser", args=["other"], restart_strategy=none)
        assert (ended.value.state, ended.value.difference) == (
            "FAILED",
            "args: [] (ended) vs ['other'] (submitted)",
        )
        assert c.submit(str(app), job_id="raiser", restart=True).outcome == "restarted"
        assert c.cancel("raiser")["job_id"] == "raiser"


def test_refusals_become_stoker_errors(manager: tuple[Manager, Path]) -> None:
    m, app = manager
    with Client(m.url, TOKEN) as c:
        with pytest.raises(JobNotFound):
            c.job("nosuch")
        with pytest.raises(InvalidInput) as bad:
            c.submit(str(app.parent / "missing.py"), job_id="x")
        assert bad.value.field == "entrypoint"
    with Client(m.url, READ_TOKEN) as c:
        assert c.jobs() is not None
        with pytest.raises(Unauthorized, match="read-only"):
            c.cancel("raiser")
    with Client(m.url) as c:
        assert c.health()["ok"] is True
        with pytest.raises(Unauthorized, match="missing token"):
            c.jobs()


def test_applications_and_clusters(manager: tuple[Manager, Path]) -> None:
    """The application and cluster calls, on a program whose main raises (no Spark starts)."""
    m, app = manager
    with Client(m.url, TOKEN) as c:
        assert c.clusters() == []
        sub = c.submit_application(
            str(app), app_id="raiser-app", restart_strategy={"strategy": "none"}
        )
        assert isinstance(sub, SubmittedApplication)
        assert (sub.outcome, sub.app_id, sub.app["state"]) == ("created", "raiser-app", "CREATED")
        again = c.submit_application(
            str(app), app_id="raiser-app", restart_strategy={"strategy": "none"}
        )
        assert again.outcome == "duplicate"
        wait_for(
            "the application to fail",
            lambda: c.application("raiser-app")["state"] == "FAILED",
            ENDS,
        )
        view = c.application("raiser-app")
        assert [(a["attempt"], a["state"]) for a in view["attempts"]] == [(1, "FAILED")]
        assert "boom: main gave up" in (view["error"] or ""), view
        assert [a["app_id"] for a in c.applications()] == ["raiser-app"]
        assert c.applications("RUNNING") == []
        log = c.application_log("raiser-app")
        assert "RuntimeError: boom: main gave up" in log
        assert c.application_log("raiser-app", attempt=1, tail=2) == "".join(
            log.splitlines(keepends=True)[-2:]
        )
        with pytest.raises(JobTerminal):
            c.cancel_application("raiser-app")
        # Refusals, each its own error.
        with pytest.raises(ApplicationNotFound, match="'nosuch' not found"):
            c.application("nosuch")
        with pytest.raises(ApplicationNotFound, match="it is a job"):
            c.application("raiser")
        with pytest.raises(JobNotFound, match="it is an application"):
            c.job("raiser-app")
        with pytest.raises(JobOwnedElsewhere, match="job submitted alone"):
            c.submit_application(str(app), app_id="raiser")
        with pytest.raises(InvalidInput) as bad:
            c.submit_application(str(app), app_id="x", cluster="standalone:workers=0")
        assert bad.value.field == "cluster"
        with pytest.raises(ClusterNotFound):
            c.cluster("nosuch")
        with pytest.raises(ClusterNotFound):
            c.stop_cluster("nosuch")
        with pytest.raises(ClusterNotFound):
            c.add_worker("nosuch")
        with pytest.raises(InvalidInput) as bad:
            c.start_cluster("x", workers=1, memory="1")
        assert bad.value.field == "memory"
        assert c.clusters(include_stopped=True) == []
        assert [j["job_id"] for j in c.jobs()] == ["raiser"]  # never an application
