"""The host's cluster budget checked and reserved in the store (issue 39 item 7).

The budget was checked on a list of the store's clusters read in one transaction, and the
cluster (or worker) recorded in another: two managers, or the REST API and the leader, both
passed the check and both started, over the budget. Here every thread is a manager of its
own (a store, a connection, of its own) and all of them read the clusters before any of them
records one (a barrier after each one's first read), which is the interleaving that broke the
budget: exactly as many as it allows are created, the rest refused with its text. And the
budget is the host's: clusters another host recorded on a shared store do not count, those
of code before the host was recorded (no host) do.

Run against SQLite and PostgreSQL alike (fixtures in conftest.py). No process is started:
what would start JVMs is stood in for.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest

from stoker.errors import ClusterConflict, ClusterError
from stoker.manager import clusters
from stoker.manager.cluster_keeper import CannotRun, ClusterKeeper
from stoker.manager.clusters.budget import HostBudget
from stoker.manager.clusters.reserve import WorkerReservation, is_reserved
from stoker.manager.sessions import SessionClusters
from stoker.scaling.provider import StandaloneProvider
from stoker.store import ClusterProcess, Store
from stoker.types import ClusterState, JobKind, job_id
from tests.integration.store.support import OpenStore, race

N = 6
SPEC = {"kind": "standalone", "workers": 1, "cores": 1, "memory": "1g"}


class _ReadsTogether:
    """A store whose callers, each on a thread of its own, all read the clusters before any
    goes on: the first read of each thread waits for the others' at a barrier."""

    def __init__(self, store: Store, barrier: threading.Barrier, reads: tuple[str, ...]) -> None:
        self._store = store
        self._barrier = barrier
        self._reads = reads
        self._waited = False

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._store, name)
        if name not in self._reads:
            return value

        def read(*args: Any, **kwargs: Any) -> Any:
            out = value(*args, **kwargs)
            if not self._waited:
                self._waited = True
                self._barrier.wait()
            return out

        return read


def _managers(
    open_new: OpenStore, n: int, reads: tuple[str, ...] = ("list_clusters", "host_clusters")
) -> list[Store]:
    barrier = threading.Barrier(n, timeout=30)
    return [cast(Store, _ReadsTogether(open_new(), barrier, reads)) for _ in range(n)]


def _refusals(results: list[Any]) -> list[str]:
    assert all(isinstance(r, ClusterConflict | CannotRun) for r in results), results
    return [str(r) for r in results]


def test_managers_starting_session_clusters_at_once_stay_within_the_budget(
    store: Store, open_new: OpenStore, tmp_path: Path
) -> None:
    budget = HostBudget(clusters=2)
    managers = [
        SessionClusters(st, tmp_path / "clusters", budget, host="host-a")
        for st in _managers(open_new, N)
    ]

    results = race(N, lambda i: managers[i].begin_start(f"c{i}", workers=1)[0])

    started = [r for r in results if isinstance(r, str)]
    assert len(started) == 2, results
    refused = _refusals([r for r in results if not isinstance(r, str)])
    assert refused == [
        f"cluster 'c{i}' would go over this host's cluster budget: clusters: 2 in use + 1 "
        "asked > 2 allowed (--max-clusters). Stop a cluster (stoker cluster stop NAME), or "
        "raise the budget with stoker server's option"
        for i in range(N)
        if f"c{i}" not in started
    ]
    assert sorted(c.name for c in store.list_clusters()) == sorted(started)


def test_the_leader_and_the_api_starting_clusters_at_once_stay_within_the_budget(
    store: Store, open_new: OpenStore, tmp_path: Path
) -> None:
    """Applications' own clusters (the leader's keeper) and session clusters (the REST API)
    race for one budget of three clusters, all of them past their look for the name first."""
    apps = []
    for i in range(N // 2):
        spec = {"kind": "application", "cluster": "standalone:workers=1,cores=1,memory=1g"}
        app, _ = store.create_job(job_id(f"etl{i}"), f"etl{i}", spec, {}, kind=JobKind.APPLICATION)
        apps.append(app)
    budget = HostBudget(clusters=3)
    stores = _managers(open_new, N, reads=("get_cluster",))
    keepers = [ClusterKeeper(st, tmp_path, budget, host="host-a") for st in stores[: N // 2]]
    for k in keepers:
        k._in_background = lambda *_: None  # type: ignore[method-assign]  # no JVM starts
    sessions = [SessionClusters(st, tmp_path, budget, host="host-a") for st in stores[N // 2 :]]

    def start(i: int) -> str:
        if i < N // 2:
            assert keepers[i].master_for(apps[i]) == (
                False,
                None,
                clusters.app_conf(clusters.parse_cluster("standalone:workers=1,cores=1,memory=1g")),
            )
            return f"app-etl{i}"
        return sessions[i - N // 2].begin_start(f"s{i}", workers=1)[0]

    results = race(N, start)

    started = [r for r in results if isinstance(r, str)]
    assert len(started) == 3, results
    for r in _refusals([r for r in results if not isinstance(r, str)]):
        assert "would go over this host's cluster budget: clusters: 3 in use + 1 asked" in r
    assert sorted(c.name for c in store.list_clusters()) == sorted(started)


def _running(store: Store, name: str, host: str | None, workers: int = 1) -> None:
    store.create_cluster(name, "session", {**SPEC, "workers": workers}, host=host)
    procs = [
        ClusterProcess.from_json(
            {
                "role": "worker",
                "id": f"worker-{n}",
                "address": f"127.0.0.{n + 1}",
                "cores": 1,
                "memory": "1g",
            }
        )
        for n in range(1, workers + 1)
    ]
    store.update_cluster(
        name,
        state=ClusterState.RUNNING,
        master_url="spark://127.0.0.1:7077",
        web_url="http://127.0.0.1:8080",
        processes=procs,
    )


def test_clusters_of_another_host_do_not_count_and_those_of_no_host_do(
    store: Store, tmp_path: Path
) -> None:
    """Managers on two hosts share one store: each host's budget counts its own clusters,
    and (conservatively) those recorded by code that did not record a host."""
    budget = HostBudget(clusters=2)
    on_a = SessionClusters(store, tmp_path / "a", budget, host="host-a")
    on_b = SessionClusters(store, tmp_path / "b", budget, host="host-b")
    on_a.begin_start("a1", workers=1)
    on_a.begin_start("a2", workers=1)
    with pytest.raises(ClusterConflict, match=r"clusters: 2 in use \+ 1 asked > 2 allowed"):
        on_a.begin_start("a3", workers=1)

    on_b.begin_start("b1", workers=1)  # host A's two are not host B's
    assert store.get_cluster("b1").host == "host-b"
    assert store.get_cluster("a1").host == "host-a"

    _running(store, "old", None)  # a row of code before migration 24: no host
    with pytest.raises(ClusterConflict, match=r"clusters: 2 in use \+ 1 asked > 2 allowed"):
        on_b.begin_start("b2", workers=1)
    assert sorted(c.name for c in store.host_clusters("host-b")) == ["b1", "old"]
    assert sorted(c.name for c in store.host_clusters("host-a")) == ["a1", "a2", "old"]


def _fake_add_worker(
    master_url: str,
    web_url: str,
    processes: list[ClusterProcess],
    folder: Path,
    cores: int,
    memory: str,
    *,
    on_process: Callable[[ClusterProcess], None] | None = None,
    **_: Any,
) -> ClusterProcess:
    """Stands for a worker JVM: recorded as the real one is, started by no one."""
    n = len([p for p in processes if p.role == "worker" and p.address]) + 1
    info = ClusterProcess.from_json(
        {
            "role": "worker",
            "id": f"worker-{n}",
            "host": "host-a",
            "address": f"127.0.0.{n + 1}",
            "cores": cores,
            "memory": memory,
        }
    )
    if on_process is not None:
        on_process(info)
    return info


def test_managers_adding_workers_at_once_stay_within_the_budget(
    store: Store, open_new: OpenStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each adds a worker to a cluster of its own (one cluster's changes are serialized in a
    process by its lock; these are not): a budget of N + 2 workers takes two more."""
    monkeypatch.setattr(clusters, "add_worker", _fake_add_worker)
    for i in range(N):
        _running(store, f"c{i}", "host-a")
    _running(store, "elsewhere", "host-b", workers=3)  # another host's: not counted
    budget = HostBudget(clusters=N, workers=N + 2)
    managers = [
        SessionClusters(st, tmp_path / "clusters", budget, host="host-a")
        for st in _managers(open_new, N)
    ]

    results = race(N, lambda i: managers[i].add_worker(f"c{i}"))

    added = [r for r in results if isinstance(r, dict)]
    assert len(added) == 2, results
    for r in _refusals([r for r in results if not isinstance(r, dict)]):
        assert r.startswith("a worker for cluster 'c")
        assert f"workers: {N + 2} in use + 1 asked > {N + 2} allowed (--max-workers)" in r
    workers = [
        p.id for c in store.host_clusters("host-a") for p in c.processes if p.role == "worker"
    ]
    assert len(workers) == N + 2  # no reservation left behind
    assert all(w.startswith("worker-") for w in workers)


def test_a_worker_that_fails_to_start_gives_its_room_back(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its JVM recorded (then stopped by the start, as a real failed start does), the start
    fails: neither its record nor its reservation is left, and the room is free again."""
    seen: list[list[str]] = []

    def fails(*args: Any, on_process: Callable[[ClusterProcess], None], **kw: Any) -> Any:
        seen.append([p.id for p in store.get_cluster("c").processes])  # reserved, no JVM yet
        _fake_add_worker(*args, on_process=on_process, **kw)
        seen.append([p.id for p in store.get_cluster("c").processes])  # the JVM took its place
        raise ClusterError("the new worker did not register")

    monkeypatch.setattr(clusters, "add_worker", fails)
    _running(store, "c", "host-a")
    sessions = SessionClusters(store, tmp_path, HostBudget(workers=2), host="host-a")

    with pytest.raises(ClusterError, match="did not register"):
        sessions.add_worker("c")

    assert seen[0][0] == "worker-1" and seen[0][1].startswith("reserved-"), seen
    assert seen[1] == ["worker-1", "worker-2"]
    assert [p.id for p in store.get_cluster("c").processes] == ["worker-1"]
    monkeypatch.setattr(clusters, "add_worker", _fake_add_worker)
    assert sessions.add_worker("c")["cluster"]["workers"] == 2  # the room is free again


def test_the_scalers_of_two_managers_stay_within_the_budget(
    store: Store, open_new: OpenStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scaler started workers with no budget at all. Each of N leaders' scalers (one
    cluster each; one cluster's changes are serialized in a process by its lock) wants two
    more workers: a budget of N + 2 workers takes one of them whole, the rest are refused."""

    def fake_add_workers(
        master: str, web: str, procs: list[ClusterProcess], *args: Any, **kw: Any
    ) -> list[ClusterProcess]:
        folder, cores, memory, count = args
        out: list[ClusterProcess] = []
        for _ in range(count):
            out.append(_fake_add_worker(master, web, [*procs, *out], folder, cores, memory, **kw))
        return out

    def status(web_url: str) -> dict[str, Any]:  # the one worker runs another's executors
        return {"workers": [{"host": "127.0.0.2", "state": "ALIVE", "coresused": 1}]}

    monkeypatch.setattr(clusters, "add_workers", fake_add_workers)
    monkeypatch.setattr(clusters, "master_status", status)
    for i in range(N):
        _running(store, f"c{i}", "host-a")
    spec = {"kind": "application", "cluster": "c0"}
    owner, _ = store.create_job(job_id("etl"), "etl", spec, {}, kind=JobKind.APPLICATION)
    budget = HostBudget(clusters=N, workers=N + 2)
    providers = [
        StandaloneProvider(st, f"c{i}", tmp_path / f"c{i}", budget=budget, host="host-a")
        for i, st in enumerate(_managers(open_new, N, reads=("get_cluster",)))
    ]

    results = race(N, lambda i: providers[i].ensure(owner, 2))

    done = [r for r in results if isinstance(r, dict)]
    assert [len(r["added"]) for r in done] == [2], results
    for r in _refusals([r for r in results if not isinstance(r, dict)]):
        assert "the scaler's 2 more worker(s) for cluster 'c" in r
        assert f"workers: {N + 2} in use + 2 asked > {N + 2} allowed" in r
    workers = [p for c in store.host_clusters("host-a") for p in c.processes]
    assert len(workers) == N + 2 and not any(is_reserved(p) for p in workers)


def test_a_reservation_a_dead_manager_left_holds_its_room_until_removed(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A manager that died between its reservation and its JVM: the placeholder names no
    process (a stop has nothing to kill for it) and holds its room; an operator takes it out
    as any worker (``stoker cluster remove-worker NAME reserved-...``), and the room is free."""
    _running(store, "c", "host-a")
    budget = HostBudget(workers=2)
    left = WorkerReservation(
        store, "c", host="host-a", budget=budget, count=1, cores=1, memory="1g", what="w"
    )
    reserved = [p.id for p in left.reserve().processes if is_reserved(p)]
    assert len(reserved) == 1  # ... and the manager is gone
    sessions = SessionClusters(store, tmp_path, budget, host="host-a")
    monkeypatch.setattr(clusters, "add_worker", _fake_add_worker)
    with pytest.raises(ClusterConflict, match=r"workers: 2 in use \+ 1 asked > 2 allowed"):
        sessions.add_worker("c")

    sessions.remove_worker("c", reserved[0])

    assert [p.id for p in store.get_cluster("c").processes] == ["worker-1"]
    assert sessions.add_worker("c")["cluster"]["workers"] == 2
