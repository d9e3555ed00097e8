"""The host's cluster budget, and session clusters left starting (issue 21, item 8).

A fuzzer against the API started 11 session clusters (42 JVMs, about 10 GB) in 9 minutes.
Every start, of a session cluster, of a worker, of an application's own cluster, is checked
against what the store says runs, and refused before any process starts, naming the budget
and the option that sets it. A real SQLite store; the budget's records name no process, so
nothing starts or is killed there."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from stoker.clock import ManualClock
from stoker.errors import ClusterConflict
from stoker.manager.cluster_keeper import STALE_START, CannotRun, ClusterKeeper
from stoker.manager.clusters.budget import HostBudget, usage
from stoker.manager.sessions import SessionClusters
from stoker.procs import host_id, process_start_marker
from stoker.store import Store, open_store
from stoker.store.fleet_records import ClusterProcess
from stoker.types import ClusterState, JobKind, job_id


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    st = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    yield st
    st.close()


def _worker(n: int, cores: int = 1, memory: str = "1g") -> ClusterProcess:
    return ClusterProcess.from_json(
        {"role": "worker", "id": f"worker-{n}", "cores": cores, "memory": memory}
    )


def _running(store: Store, name: str, workers: int, state: ClusterState) -> None:
    spec = {"kind": "standalone", "workers": workers, "cores": 1, "memory": "1g"}
    store.create_cluster(name, "session", spec)
    started = [_worker(i + 1) for i in range(workers if state == ClusterState.RUNNING else 1)]
    store.update_cluster(
        name,
        state=state,
        master_url="spark://127.0.0.1:1" if state == ClusterState.RUNNING else None,
        web_url="http://127.0.0.1:2" if state == ClusterState.RUNNING else None,
        processes=started,
    )


def test_usage_counts_live_clusters_and_the_workers_a_starting_one_will_add(
    store: Store,
) -> None:
    _running(store, "a", 2, ClusterState.RUNNING)
    _running(store, "b", 3, ClusterState.STARTING)  # one worker recorded, two to come
    _running(store, "gone", 2, ClusterState.RUNNING)
    store.update_cluster("gone", state=ClusterState.STOPPING)
    store.update_cluster("gone", state=ClusterState.STOPPED)
    u = usage(store.list_clusters(include_stopped=True))
    assert (u.clusters, u.workers, u.cores, u.memory_mb) == (2, 5, 5, 5 * 1024)


def test_session_clusters_and_workers_over_the_budget_are_refused(
    store: Store, tmp_path: Path
) -> None:
    _running(store, "a", 2, ClusterState.RUNNING)
    budget = HostBudget(clusters=2, workers=3, memory_mb=8 * 1024, cores=16)
    sessions = SessionClusters(store, tmp_path / "clusters", budget)

    with pytest.raises(ClusterConflict) as err:
        sessions.start("b", workers=2)
    assert str(err.value) == (
        "cluster 'b' would go over this host's cluster budget: workers: 2 in use + 2 asked > 3 "
        "allowed (--max-workers). Stop a cluster (stoker cluster stop NAME), or raise the "
        "budget with stoker server's option"
    )
    with pytest.raises(ClusterConflict, match=r"worker memory \(MiB\): 2048 in use \+ 8192"):
        sessions.start("b", workers=1, memory="8g")
    assert sessions.find("b") is None  # nothing recorded, nothing started
    with pytest.raises(ClusterConflict, match="a worker for cluster 'a' would go over"):
        sessions.add_worker("a", memory="7g")
    assert len(store.get_cluster("a").processes) == 2

    tight = SessionClusters(store, tmp_path / "clusters", HostBudget(clusters=1))
    with pytest.raises(ClusterConflict, match=r"clusters: 1 in use \+ 1 asked > 1 allowed"):
        tight.start("b", workers=1)


def test_an_applications_own_cluster_over_the_budget_cannot_run(
    store: Store, tmp_path: Path
) -> None:
    _running(store, "a", 2, ClusterState.RUNNING)
    spec = {"kind": "application", "cluster": "standalone:workers=2,cores=1,memory=1g"}
    app, _ = store.create_job(job_id("etl"), "etl", spec, {}, kind=JobKind.APPLICATION)
    keeper = ClusterKeeper(store, tmp_path, HostBudget(clusters=1))
    with pytest.raises(CannotRun, match="application etl's own cluster would go over"):
        keeper.master_for(app)
    assert [c.name for c in store.list_clusters()] == ["a"]  # not even recorded


def test_a_session_cluster_left_starting_by_a_dead_manager_is_stopped(tmp_path: Path) -> None:
    """Its JVMs may run (recorded as each started) and it holds budget: the leader gives the
    start up once it is stale and stops what it recorded. A real process stands for its
    master (its own process group, as a JVM stoker starts)."""
    clock = ManualClock()
    store = open_store(f"sqlite:///{tmp_path / 'store.db'}", clock)
    jvm = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        store.create_cluster("left", "session", {"kind": "standalone", "workers": 1})
        master = ClusterProcess.from_json(
            {
                "role": "master",
                "id": "master",
                "host": host_id(),
                "address": "127.0.0.1",
                "pid": jvm.pid,
                "pid_started": process_start_marker(jvm.pid),
            }
        )
        store.update_cluster("left", processes=[master])
        keeper = ClusterKeeper(store, tmp_path)
        keeper.tend({})
        assert store.get_cluster("left").state == ClusterState.STARTING  # not stale yet
        clock.advance(STALE_START + 1)
        keeper._looked = float("-inf")  # the next look is due now
        keeper.tend({})
        assert keeper.wait(60)
        rec = store.get_cluster("left")
        assert rec.state == ClusterState.STOPPED, rec
        assert jvm.wait(10) is not None  # its process stopped
    finally:
        if jvm.poll() is None:
            jvm.kill()
        jvm.wait()
        store.close()
