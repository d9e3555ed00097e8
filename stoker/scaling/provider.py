"""Resource providers: what the scaler acts through besides an owner's executor target.

The executor target (``jobs.executor_target``, applied by the owner's driver with Spark's
``requestTotalExecutors``) says how many executors the Spark application wants; a provider
makes the cluster able to give them. On a standalone cluster stoker manages it starts workers
(one executor each: a worker has the cores of one executor) and removes surplus ones
gracefully; on a master the user gave, it does nothing and the target acts alone.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Protocol

from stoker import procs
from stoker.errors import ClusterError
from stoker.manager import clusters
from stoker.manager.clusters.budget import HostBudget
from stoker.manager.clusters.reserve import WorkerReservation
from stoker.store import JobRecord, Store
from stoker.store.fleet_records import ClusterProcess, ClusterRecord
from stoker.types import ClusterState

log = logging.getLogger("stoker.scaling")


class ResourceProvider(Protocol):
    """Makes room for an owner's executors on its cluster."""

    def describe(self) -> dict[str, Any]:
        """What it is and what it manages (JSON), for logs and rescale records."""
        ...

    def ensure(
        self, owner: JobRecord, executors: int, cores_per_executor: int | None = None
    ) -> dict[str, Any]:
        """Bring the cluster toward room for ``executors`` executors of ``owner``; return
        ``{"added": [worker ids], "removed": [worker ids]}`` (and ``"waiting"``: why a
        removal waits). Idempotent: called again, it changes only what is still missing.
        Raises :class:`~stoker.errors.StokerError` when the room cannot be made."""
        ...


class SparkExecutorsOnly:
    """A cluster stoker does not manage (``spark://`` given by the user, or another cluster
    manager): the owner's driver requests the target from Spark, nothing else happens."""

    def __init__(self, master: str | None = None) -> None:
        self.master = master

    def describe(self) -> dict[str, Any]:
        return {"kind": "executors-only", "master": self.master}

    def ensure(
        self, owner: JobRecord, executors: int, cores_per_executor: int | None = None
    ) -> dict[str, Any]:
        return {"added": [], "removed": []}


class StandaloneProvider:
    """A standalone cluster recorded in the store (a session cluster or an application's
    own): workers started until enough are ALIVE for the owner, surplus ones decommissioned
    once the owner's driver asks Spark for no more executors than the target.

    Room for the owner is an ALIVE worker with no cores in use or one running an executor of
    the owner (its host is among the owner's reported executor hosts). Workers busy with other
    applications are never counted nor removed. Removal prefers idle workers, then the
    newest; a worker stoker did not start is never removed.

    Workers are started within the host's cluster budget, their room reserved in the store
    before their JVMs start (as the REST API's added workers are): past it, :meth:`ensure`
    raises the budget's :class:`~stoker.errors.ClusterConflict` and starts none.
    """

    def __init__(
        self,
        store: Store,
        cluster: str,
        folder: Path,
        *,
        start_timeout: float = 120.0,
        remove_timeout: float = 120.0,
        budget: HostBudget | None = None,
        host: str | None = None,
    ) -> None:
        self.store = store
        self.cluster = cluster
        self.folder = folder  # the cluster's logs and work folders (state_dir/clusters/<name>)
        self.start_timeout = start_timeout
        self.remove_timeout = remove_timeout
        self.budget = budget or HostBudget()
        self.host = host or procs.host_id()  # whose budget its workers count against

    def describe(self) -> dict[str, Any]:
        return {"kind": "standalone", "cluster": self.cluster}

    def ensure(
        self, owner: JobRecord, executors: int, cores_per_executor: int | None = None
    ) -> dict[str, Any]:
        if executors < 1:
            raise ClusterError(f"cluster {self.cluster!r}: {executors} executors asked for")
        added: list[str] = []
        removed: list[str] = []
        out: dict[str, Any] = {"added": added, "removed": removed}
        with clusters.cluster_lock(self.cluster):
            rec = self._running()
            usable, removable = self._room(rec, owner)
            cores = int(cores_per_executor or rec.spec.get("cores", clusters.DEFAULT_CORES))
            memory = str(rec.spec.get("memory", clusters.DEFAULT_MEMORY))
            if len(usable) < executors:
                # Every worker this decision needs, started side by side.
                for info in self._add(rec, cores, memory, executors - len(usable)):
                    added.append(info.id)
                    usable.append(info.address)
                rec = self._running()
            surplus = len(usable) - executors
            if surplus <= 0:
                return out
            requested = (owner.resources or {}).get("requested")
            if requested is not None and int(requested) > executors:
                # Its driver still asks Spark for more: a removed worker's executor would be
                # replaced, or the application would wait for it.
                out["waiting"] = (
                    f"the driver still requests {requested} executors; workers are removed "
                    f"once it requests {executors}"
                )
                return out
            for info in removable[:surplus]:
                rec = self._running()
                remaining = clusters.remove_worker(
                    str(rec.web_url),
                    rec.processes,
                    info.id,
                    graceful=True,
                    timeout=self.remove_timeout,
                )
                gone = clusters.gone_ids(rec.processes, remaining)
                self.store.change_cluster_processes(self.cluster, drop=gone)
                removed.append(info.id)
                log.info(
                    "cluster %s: worker %s removed for %s (%d executors wanted)",
                    self.cluster,
                    info.id,
                    owner.job_id,
                    executors,
                )
            if surplus > len(removable):
                out["waiting"] = (
                    f"{surplus - len(removable)} surplus workers are not stoker's or run "
                    "others' executors: left alone"
                )
        return out

    # helpers ------------------------------------------------------------------------------
    def _running(self) -> ClusterRecord:
        rec = self.store.get_cluster(self.cluster)
        if rec.state != ClusterState.RUNNING or not rec.master_url or not rec.web_url:
            raise ClusterError(f"cluster {self.cluster!r} is {rec.state}: workers cannot change")
        return rec

    def _room(self, rec: ClusterRecord, owner: JobRecord) -> tuple[list[str], list[ClusterProcess]]:
        """(hosts of ALIVE workers with room for the owner, stoker's workers among them in the
        order to remove them: idle first, then the newest)."""
        status = clusters.master_status(str(rec.web_url))
        mine = {str(h) for h in (owner.resources or {}).get("hosts") or []}
        alive = {
            str(w.get("host")): w for w in status.get("workers", []) if w.get("state") == "ALIVE"
        }
        usable = [
            host for host, w in alive.items() if int(w.get("coresused") or 0) == 0 or host in mine
        ]
        ours = [p for p in rec.processes if p.role == "worker" and p.address in usable]

        def order(p: ClusterProcess) -> tuple[int, int]:
            busy = int(alive[p.address].get("coresused") or 0) > 0
            return (1 if busy else 0, -_octet(p.address))

        return usable, sorted(ours, key=order)

    def _add(self, rec: ClusterRecord, cores: int, memory: str, count: int) -> list[ClusterProcess]:
        # Their room is taken in the store before their JVMs start: another manager's (or the
        # REST API's) check counts them from now on; each JVM's record takes a placeholder's
        # place, in the store before the wait (a manager that dies now leaves them findable).
        hold = WorkerReservation(
            self.store,
            self.cluster,
            host=self.host,
            budget=self.budget,
            count=count,
            cores=cores,
            memory=memory,
            what=f"the scaler's {count} more worker(s) for cluster {self.cluster!r}",
        )
        rec = hold.reserve()
        try:
            infos = clusters.add_workers(
                str(rec.master_url),
                str(rec.web_url),
                list(rec.processes),
                self.folder,
                cores,
                memory,
                count,
                timeout=self.start_timeout,
                on_process=hold.on_process,
            )
        except Exception:
            # They were stopped again: their records and their reservations go (only
            # theirs: another manager may have changed the list since).
            hold.release()
            raise
        hold.done(infos)
        for info in infos:
            log.info("cluster %s: worker %s added (%s)", self.cluster, info.id, info.address)
        return infos


def _octet(address: str) -> int:
    tail = address.rpartition(".")[2]
    return int(tail) if tail.isdigit() else 0


__all__ = [
    "ResourceProvider",
    "SparkExecutorsOnly",
    "StandaloneProvider",
]
