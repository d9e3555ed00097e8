"""Standalone clusters started, changed and stopped by stoker.manager.clusters: real
``spark-class`` JVMs on loopback hosts, real signals, the kernel's process table as witness.

One cluster (a master and two 512m workers) serves the tests of this module in order: start,
add a worker, remove one gracefully, kill one, stop everything. Every process it ever reported
is stopped at the end whatever happened, so a failing test leaves no JVM behind.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from stoker import procs
from stoker.errors import ClusterError, InvalidInput
from stoker.manager.clusters import (
    ClusterSpec,
    StartedCluster,
    add_worker,
    master_status,
    parse_cluster,
    remove_worker,
    start_standalone,
    stop_processes,
)
from stoker.manager.clusters import start as cluster_start
from stoker.procs import host_id, process_start_marker
from stoker.store import ClusterProcess

pytestmark = pytest.mark.cluster

SECRET = "s3cr3t-value-never-in-a-jvm"


@dataclass
class Cluster:
    """The module's cluster: what start_standalone returned, the processes it has now, and
    every process dict ever reported (for the final sweep)."""

    folder: Path
    started: StartedCluster
    processes: list[ClusterProcess]
    reported: list[ClusterProcess] = field(default_factory=list)


def _group(pgid: int) -> list[int]:
    """Live pids of process group ``pgid`` (zombies excluded), as /proc shows them."""
    return procs.group_pids(pgid)


def _environ(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/environ", "rb") as fh:
        pairs = [e.decode(errors="replace").partition("=") for e in fh.read().split(b"\0") if e]
    return {k: v for k, _, v in pairs}


def _alive_workers(web_url: str) -> dict[str, dict[str, Any]]:
    return {w["host"]: w for w in master_status(web_url)["workers"] if w["state"] == "ALIVE"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    folder = tmp_path_factory.mktemp("clusters") / "c1"
    reported: list[ClusterProcess] = []
    spec = parse_cluster("standalone:workers=2,cores=1,memory=512m")
    try:
        with pytest.MonkeyPatch.context() as mp:
            # the manager's credentials must not reach the JVMs (executors run user code)
            mp.setenv("STOKER_TOKEN", SECRET)
            mp.setenv("PGPASSWORD", SECRET)
            started = start_standalone("c1", spec, folder, on_process=reported.append)
        yield Cluster(folder, started, list(started.processes), reported)
    finally:
        stop_processes(reported)


def test_start_records_each_process_and_the_master_lists_the_workers(cluster: Cluster) -> None:
    started = cluster.started
    ids = [p.id for p in cluster.reported]
    assert ids == ["master", "worker-1", "worker-2"]
    assert [p.id for p in started.processes] == ids
    host = host_id()
    for p in started.processes:
        assert p.host == host
        assert p.pid_started == process_start_marker(p.pid) != "unknown"
        assert _group(p.pid), f"{p.id} is not running"
        assert Path(p.log) == cluster.folder.resolve() / f"{p.id}.log"
        env = _environ(p.pid)
        assert SECRET not in env.values(), f"{p.id} got a secret in its environment"
        assert not [k for k in env if k.startswith("STOKER_")]
        assert env["SPARK_LOCAL_IP"] == p.address
    master = started.processes[0]
    assert (master.role, master.address) == ("master", "127.0.0.1")
    assert started.master_url == f"spark://127.0.0.1:{master.port}"
    assert started.web_url == f"http://127.0.0.1:{master.web_port}"
    workers = started.processes[1:]
    assert [w.address for w in workers] == ["127.0.0.2", "127.0.0.3"]
    assert all((w.role, w.cores, w.memory) == ("worker", 1, "512m") for w in workers)
    alive = _alive_workers(started.web_url)
    assert set(alive) == {"127.0.0.2", "127.0.0.3"}
    for w in workers:
        assert alive[w.address]["port"] == w.port
        assert alive[w.address]["memory"] == 512


def test_add_worker_takes_the_next_loopback_host(cluster: Cluster) -> None:
    seen: list[ClusterProcess] = []

    def record(info: ClusterProcess) -> None:
        seen.append(info)
        cluster.reported.append(info)

    new = add_worker(
        cluster.started.master_url,
        cluster.started.web_url,
        cluster.processes,
        cluster.folder,
        1,
        "512m",
        on_process=record,
    )
    cluster.processes.append(new)
    assert (new.id, new.address, new.role) == ("worker-3", "127.0.0.4", "worker")
    assert [s.pid for s in seen] == [new.pid]
    assert set(_alive_workers(cluster.started.web_url)) == {"127.0.0.2", "127.0.0.3", "127.0.0.4"}


def test_remove_worker_gracefully_decommissions_it(cluster: Cluster) -> None:
    target = next(p for p in cluster.processes if p.id == "worker-3")
    begun = time.monotonic()
    left = remove_worker(cluster.started.web_url, cluster.processes, "127.0.0.4", graceful=True)
    print(f"graceful removal of an idle worker: {time.monotonic() - begun:.2f} s")
    assert [p.id for p in left] == ["master", "worker-1", "worker-2"]
    assert _group(target.pid) == []
    assert set(_alive_workers(cluster.started.web_url)) == {"127.0.0.2", "127.0.0.3"}
    states = {w["state"] for w in master_status(cluster.started.web_url)["workers"]}
    assert states <= {"ALIVE", "DECOMMISSIONED", "DEAD"}
    log = Path(target.log).read_text(errors="replace")
    assert "Decommission worker" in log
    assert "SIGKILL" not in log
    cluster.processes[:] = left

    # the master still lists 127.0.0.4 (DEAD): a new worker goes past it
    new = add_worker(
        cluster.started.master_url,
        cluster.started.web_url,
        cluster.processes,
        cluster.folder,
        1,
        "512m",
        on_process=cluster.reported.append,
    )
    assert (new.id, new.address) == ("worker-4", "127.0.0.5")
    cluster.processes[:] = remove_worker(
        cluster.started.web_url, [*cluster.processes, new], "worker-4", graceful=False
    )
    assert _group(new.pid) == []


def test_remove_worker_without_grace_kills_its_group(cluster: Cluster) -> None:
    with pytest.raises(InvalidInput) as caught:
        remove_worker(cluster.started.web_url, cluster.processes, "worker-9", graceful=False)
    assert caught.value.field == "worker"
    assert "worker-1 (127.0.0.2), worker-2 (127.0.0.3)" in caught.value.message

    target = next(p for p in cluster.processes if p.id == "worker-2")
    left = remove_worker(cluster.started.web_url, cluster.processes, "worker-2", graceful=False)
    assert [p.id for p in left] == ["master", "worker-1"]
    assert _group(target.pid) == []
    cluster.processes[:] = left
    # already gone: removing it again from the old list is a no-op
    again = remove_worker(cluster.started.web_url, [*left, target], "worker-2", graceful=True)
    assert again == left


def test_stop_processes_leaves_no_process_of_any_group(cluster: Cluster) -> None:
    assert all(_group(p.pid) for p in cluster.processes)
    stop_processes(cluster.processes)
    for p in cluster.reported:
        assert _group(p.pid) == [], f"{p.id} (group {p.pid}) is still running"
    stop_processes(cluster.reported)  # nothing left to stop: returns at once


def test_a_failed_start_raises_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The master's first port is taken (it is started again on fresh ports); then its worker
    cannot start (no memory): ClusterError naming the worker, and no process left."""
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    taken_port = int(taken.getsockname()[1])
    real_free_port = cluster_start._free_port
    handed: list[int] = []

    def first_one_taken(address: str) -> int:
        port = taken_port if not handed else real_free_port(address)
        handed.append(port)
        return port

    monkeypatch.setattr(cluster_start, "_free_port", first_one_taken)
    reported: list[ClusterProcess] = []
    spec = ClusterSpec("standalone", workers=1, cores=1, memory="0m")
    try:
        with pytest.raises(ClusterError) as caught:
            start_standalone("broken", spec, tmp_path / "c", on_process=reported.append)
    finally:
        taken.close()
        stop_processes(reported)
    message = str(caught.value)
    print(message)
    assert "cluster 'broken': worker-1 (127.0.0.2) exited with code" in message
    assert "IllegalStateException: Memory is below 1MB" in message
    masters = [p for p in reported if p.id == "master"]
    assert len(masters) == 2, "the master was not started again after losing its port"
    assert masters[0].port == taken_port != masters[1].port
    for p in reported:
        assert _group(p.pid) == [], f"{p.id} (group {p.pid}) is still running"
