"""The Clusters page's fragment over a real SQLite store: the jobs of stoker's applications on
a cluster with the executors their drivers report, a master that does not answer (a real
refused connection) said so without failing the page, and actions for the full token only.
The real master's ``/json/`` is read in tests/e2e/test_clusters_api.py."""

from __future__ import annotations

import socket
from dataclasses import replace
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from stoker.manager import JobManager
from stoker.server.app import create_app
from stoker.server.ui import views
from stoker.store import ClusterProcess, Owner, Store
from stoker.types import AttemptNo, ClusterState, JobState, job_id

TOKEN = "full-t0ken"
READ_TOKEN = "read-t0ken"
WORKER = ClusterProcess(
    role="worker",
    id="worker-1",
    host="box-1",
    address="127.0.0.2",
    pid=1,
    pid_started="1",
    port=40001,
    web_port=40002,
    log="/state/worker-1.log",
    cores=1,
    memory="512m",
)
MASTER = replace(WORKER, role="master", id="master", address="127.0.0.1", cores=0, memory="")


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def manager(store: Store, tmp_path: Path) -> JobManager:
    app = tmp_path / "etl.py"
    app.write_text("print('never run here')\n")
    store.create_cluster("shared", "session", {"cluster": "standalone:workers=1"})
    store.update_cluster(
        "shared",
        state=ClusterState.RUNNING,
        master_url="spark://127.0.0.1:7077",
        web_url=f"http://127.0.0.1:{_closed_port()}",
        processes=[MASTER, WORKER],
    )
    store.create_cluster("old", "session", {"cluster": "standalone:workers=1"})
    for state in (ClusterState.RUNNING, ClusterState.STOPPING, ClusterState.STOPPED):
        store.update_cluster("old", state=state)
    m = JobManager(store, tmp_path / "state", [tmp_path])
    m.submit_application("etl", str(app), cluster="shared")
    store.start_attempt(job_id("etl"), Owner("h", 4242, "x"), 30.0, AttemptNo(0))
    for name, resources in (
        ("etl.orders", {"executors": 3, "cores": 2, "warming": 1}),
        ("etl.idle", None),
    ):
        store.create_job(job_id(name), name, {"kind": "in_app"}, {}, app_id=job_id("etl"))
        store.set_job_state(job_id(name), JobState.RUNNING)
        if resources:
            store.report_resources(job_id(name), resources)
    # A job submitted alone runs on no stoker cluster: never listed under one.
    m.submit("lone", str(app))
    store.set_job_state(job_id("lone"), JobState.RUNNING)
    store.report_resources(job_id("lone"), {"executors": 9, "cores": 9, "warming": 0})
    return m


def test_jobs_with_their_executors_and_an_unreachable_master(manager: JobManager) -> None:
    by_name = {c["name"]: c for c in views.clusters(manager)}
    shared = by_name["shared"]
    assert shared["master"] is None
    assert shared["master_error"] == "master not reachable"
    assert [w["id"] for w in shared["worker_procs"]] == ["worker-1"]
    assert shared["jobs"] == [
        {
            "job_id": "etl.idle",
            "app_id": "etl",
            "state": "RUNNING",
            "executors": None,
            "cores": None,
            "warming": None,
        },
        {
            "job_id": "etl.orders",
            "app_id": "etl",
            "state": "RUNNING",
            "executors": 3,
            "cores": 2,
            "warming": 1,
        },
    ]
    old = by_name["old"]
    assert (old["master"], old["master_error"], old["jobs"]) == (None, None, [])


def test_the_fragment_shows_them_and_actions_only_for_the_full_token(
    manager: JobManager,
) -> None:
    app = create_app(manager, token=TOKEN, read_token=READ_TOKEN)
    with TestClient(app) as client:
        full = client.get("/ui/f/clusters", headers={"Authorization": f"Bearer {TOKEN}"})
        read = client.get("/ui/f/clusters", headers={"Authorization": f"Bearer {READ_TOKEN}"})
        refused = client.get("/ui/f/clusters")
    assert (full.status_code, read.status_code, refused.status_code) == (200, 200, 401)
    for r in (full, read):
        html = r.text
        assert "master not reachable" in html
        assert 'data-worker="worker-1"' in html
        assert 'data-job="etl.orders"' in html and 'data-job="lone"' not in html
        assert '<td class="n executors">3</td>' in html
        assert "Applications and executors on shared" in html
        assert "Applications and executors on old" not in html  # stopped: nothing runs
    assert "Add a worker to shared" in full.text and "Remove worker-1" in full.text
    assert "Add a worker to" not in read.text and "Remove " not in read.text


def test_a_worker_is_matched_to_its_own_entry_of_the_master() -> None:
    # A worker removed before on the same address stays listed (DEAD) beside the new one.
    dead = {"host": "127.0.0.2", "port": 40000, "state": "DEAD", "coresused": 0}
    alive = {"host": "127.0.0.2", "port": 40001, "state": "ALIVE", "coresused": 1}
    other = {"host": "127.0.0.3", "port": 40001, "state": "ALIVE", "coresused": 1}
    listed = [dead, alive, other]
    shown = WORKER.to_json()  # as the API shows it
    assert views._listed_worker(listed, shown) is alive
    assert views._listed_worker(listed, {**shown, "port": 40000}) is dead
    assert views._listed_worker(listed, {**shown, "port": 0}) is alive  # port not known yet
    assert views._listed_worker(listed, {**shown, "address": "127.0.0.4"}) is None
