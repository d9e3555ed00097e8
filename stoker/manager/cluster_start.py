"""Starting a standalone cluster recorded in the store: the one way both kinds of stoker cluster
start (a session cluster through the REST API, an application's own through the leader's
:class:`~stoker.manager.cluster_keeper.ClusterKeeper`).
"""

from __future__ import annotations

from pathlib import Path

from stoker.errors import ClusterError
from stoker.manager import clusters
from stoker.store import Store
from stoker.store.fleet_records import ClusterProcess, ClusterRecord
from stoker.types import ClusterState


def start_recorded(
    store: Store, name: str, spec: clusters.ClusterSpec, folder: Path
) -> ClusterRecord:
    """Start cluster ``name`` (recorded STARTING by the caller) with its logs and work folders
    in ``folder``; its record once RUNNING, with its URLs, when every worker is ALIVE.

    Each process is recorded as it starts, before the wait for it: a manager that dies
    meanwhile leaves a record whose processes can still be found and stopped (a JVM started
    again under the same id replaces its earlier try). A start that fails is recorded FAILED
    with the error, what was started is stopped, and :class:`ClusterError` raised. A cluster
    that started but cannot be recorded RUNNING (given up meanwhile, by a takeover) is
    stopped, and the store's error raised: nothing may stay behind.
    """
    recorded: dict[str, ClusterProcess] = {}  # by id: a JVM started again replaces its try

    def on_process(info: ClusterProcess) -> None:
        recorded[info.id] = info
        store.update_cluster(name, processes=list(recorded.values()))

    try:
        started = clusters.start_standalone(name, spec, folder, on_process=on_process)
    except ClusterError as e:
        store.update_cluster(name, state=ClusterState.FAILED, error=str(e))
        raise
    except Exception as e:
        error = ClusterError(f"cluster {name!r} did not start: {type(e).__name__}: {e}")
        store.update_cluster(name, state=ClusterState.FAILED, error=str(error))
        raise error from e
    try:
        return store.update_cluster(
            name,
            state=ClusterState.RUNNING,
            master_url=started.master_url,
            web_url=started.web_url,
            processes=started.processes,
        )
    except Exception:
        clusters.stop_processes(started.processes)
        raise
