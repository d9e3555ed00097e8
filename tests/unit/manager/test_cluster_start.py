"""One cluster start recorded in the store (session clusters and applications' own): real
SQLite store, the JVMs replaced by a stand-in for clusters.start_standalone."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from stoker.clock import ManualClock
from stoker.errors import ClusterError, StokerError
from stoker.manager import cluster_start, clusters
from stoker.manager.cluster_start import start_recorded
from stoker.store import Store, open_store
from stoker.store.fleet_records import ClusterProcess
from stoker.types import ClusterState

SPEC = clusters.ClusterSpec("standalone", workers=1, cores=1, memory="512m")
MASTER = ClusterProcess.from_json({"role": "master", "id": "master", "pid": 11, "port": 7077})
WORKER = ClusterProcess.from_json({"role": "worker", "id": "worker-1", "pid": 12, "port": 7078})


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = open_store(tmp_path / "store.db", ManualClock())
    s.create_cluster("c", "session", {"cluster": "standalone:workers=1"})
    return s


def _stand_in(
    monkeypatch: pytest.MonkeyPatch, store: Store, fail: BaseException | None = None
) -> list[list[ClusterProcess]]:
    """start_standalone reporting a master, a worker that lost a port race and was started
    again, then ``fail`` raised or the cluster started; the processes stopped are returned."""
    stopped: list[list[ClusterProcess]] = []

    def start(name: str, spec: Any, folder: Path, on_process: Any) -> clusters.StartedCluster:
        on_process(MASTER)
        on_process(dataclasses.replace(WORKER, port=1))
        on_process(WORKER)
        assert [p.port for p in store.get_cluster(name).processes] == [7077, 7078]
        if fail is not None:
            raise fail
        return clusters.StartedCluster("spark://m:1", "http://m:2", [MASTER, WORKER])

    monkeypatch.setattr(cluster_start.clusters, "start_standalone", start)
    monkeypatch.setattr(cluster_start.clusters, "stop_processes", stopped.append)
    return stopped


def test_a_started_cluster_is_recorded_running_with_each_process(
    monkeypatch: pytest.MonkeyPatch, store: Store, tmp_path: Path
) -> None:
    stopped = _stand_in(monkeypatch, store)
    rec = start_recorded(store, "c", SPEC, tmp_path / "c")
    assert (rec.state, rec.master_url, rec.web_url) == (
        ClusterState.RUNNING,
        "spark://m:1",
        "http://m:2",
    )
    assert store.get_cluster("c").processes == [MASTER, WORKER]
    assert stopped == []


@pytest.mark.parametrize(
    ("error", "recorded"),
    [
        (ClusterError("worker-1 exited"), "worker-1 exited"),
        (OSError("no spark-class"), "cluster 'c' did not start: OSError: no spark-class"),
    ],
)
def test_a_start_that_fails_is_recorded_failed_and_raises_a_cluster_error(
    monkeypatch: pytest.MonkeyPatch,
    store: Store,
    tmp_path: Path,
    error: Exception,
    recorded: str,
) -> None:
    _stand_in(monkeypatch, store, error)
    with pytest.raises(ClusterError) as raised:
        start_recorded(store, "c", SPEC, tmp_path / "c")
    assert str(raised.value) == recorded
    rec = store.get_cluster("c")
    assert (rec.state, rec.error) == (ClusterState.FAILED, recorded)


def test_a_cluster_given_up_while_it_started_is_stopped(
    monkeypatch: pytest.MonkeyPatch, store: Store, tmp_path: Path
) -> None:
    stopped = _stand_in(monkeypatch, store)
    real_update = store.update_cluster

    def update(name: str, **changes: Any) -> Any:
        if changes.get("state") == ClusterState.RUNNING:  # a takeover gave it up meanwhile
            real_update(name, state=ClusterState.FAILED, error="given up")
            return real_update(name, **changes)
        return real_update(name, **changes)

    monkeypatch.setattr(store, "update_cluster", update)
    with pytest.raises(StokerError):
        start_recorded(store, "c", SPEC, tmp_path / "c")
    assert stopped == [[MASTER, WORKER]]
    assert store.get_cluster("c").state == ClusterState.FAILED
