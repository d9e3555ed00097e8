"""Session clusters: Spark standalone clusters on this host that outlive applications, started,
changed and stopped synchronously for the REST API, over the store."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stoker import procs
from stoker.errors import ClusterConflict, ClusterError, ClusterNotFound, InvalidInput, JobNotFound
from stoker.manager import clusters
from stoker.manager.cluster_records import check_cluster_name, cluster_spec_dict, cluster_view
from stoker.manager.cluster_start import start_recorded
from stoker.manager.clusters.budget import HostBudget
from stoker.manager.clusters.reserve import WorkerReservation
from stoker.store import Store
from stoker.store.fleet_records import ClusterRecord
from stoker.types import ClusterKind, ClusterState, JobId, JobKind


class SessionClusters:
    """Session clusters (Spark standalone, on this host) over the store: started, changed and
    stopped synchronously, for the REST API. Changes of one cluster's workers are made one at
    a time by this manager: two add-worker calls at once would pick the same loopback
    address. Applications' own clusters are the leader's (``supervisor.py``); here they are
    only listed and looked at."""

    def __init__(
        self,
        store: Store,
        folder: Path,
        budget: HostBudget | None = None,
        host: str | None = None,
    ) -> None:
        self.store = store
        self.folder = folder  # each cluster's logs and work folders: folder/<name>
        self.budget = budget or HostBudget()
        # Whose budget its clusters count against: this host's (a test names one).
        self.host = host or procs.host_id()
        self._lock = threading.Lock()

    def find(self, name: str) -> ClusterRecord | None:
        """The cluster's record, or None if no cluster has that name."""
        try:
            return self.store.get_cluster(name)
        except ClusterNotFound:
            return None

    def start(
        self, name: str | None = None, workers: int = 2, cores: int = 1, memory: str = "1g"
    ) -> dict[str, Any]:
        """Start a Spark standalone cluster that outlives applications (synchronous: it
        answers once every worker is ALIVE): :meth:`begin_start`, then its slow part."""
        return self.begin_start(name, workers, cores, memory)[1]()

    def begin_start(
        self, name: str | None = None, workers: int = 2, cores: int = 1, memory: str = "1g"
    ) -> tuple[str, Callable[[], dict[str, Any]]]:
        """Check and record a new session cluster STARTING; its name and the slow part, which
        starts its processes (each recorded as it starts), then RUNNING, and answers the
        cluster's view; a failure leaves it FAILED with the error (what was started is
        stopped again) and raises :class:`ClusterError`. A name in use by a cluster that is
        not STOPPED or FAILED is :class:`ClusterConflict`; sizes past the host's budget are
        refused here, before anything is recorded: checked first as things are, then again
        in the store's transaction that records the cluster (another manager may have taken
        the room meanwhile)."""
        name = check_cluster_name(name if name is not None else f"cluster-{secrets.token_hex(3)}")
        spec = _session_spec(workers, cores, memory)
        with self._lock:
            old = self.find(name)
            if old is not None and old.state not in (ClusterState.STOPPED, ClusterState.FAILED):
                raise ClusterConflict(
                    f"cluster {name!r} exists ({old.state}): stop it first "
                    f"(stoker cluster stop {name}) or choose another name"
                )
            what = f"cluster {name!r}"
            # Refused now, an old record of its name is left as it is.
            self.budget.check_new(self.store.host_clusters(self.host), spec, what)
            if old is not None:
                self._stop_recorded(old)
                self.store.delete_cluster(name)
            _rec, created = self.store.create_cluster(
                name,
                ClusterKind.SESSION,
                cluster_spec_dict(spec),
                host=self.host,
                admit=self.budget.admit_new(spec, what),
            )
            if not created:
                raise ClusterConflict(f"cluster {name!r} was just created by another call")

        def work() -> dict[str, Any]:
            return cluster_view(start_recorded(self.store, name, spec, self.folder / name))

        return name, work

    def views(self, include_stopped: bool = False) -> list[dict[str, Any]]:
        """Every cluster stoker started (session clusters and applications' own)."""
        return [cluster_view(c) for c in self.store.list_clusters(include_stopped)]

    def view(self, name: str) -> dict[str, Any]:
        """One cluster; while RUNNING with what its master says now (``status``: workers,
        cores used, applications), and the live applications that use it (``used_by``)."""
        rec = self.store.get_cluster(name)
        out = cluster_view(rec)
        out["status"] = None
        if rec.state == ClusterState.RUNNING and rec.web_url:
            try:
                out["status"] = clusters.master_status(rec.web_url)
            except (ClusterError, OSError, ValueError) as e:
                out["status"] = {"error": f"the master does not answer: {e}"}
        out["used_by"] = self._apps_on(rec)
        return out

    def _apps_on(self, rec: ClusterRecord) -> list[str]:
        """The live applications that run on the cluster."""
        if rec.kind == ClusterKind.APP:
            owner = rec.owner_app
            return [owner] if owner and self._live_app(owner) else []
        return [
            a.job_id
            for a in self.store.list_jobs(kind=JobKind.APPLICATION)
            if not a.state.terminal and a.spec.get("cluster") == rec.name
        ]

    def _live_app(self, app_id: str) -> bool:
        try:
            return not self.store.get_job(JobId(app_id)).state.terminal
        except JobNotFound:
            return False

    def _running_cluster(self, name: str) -> ClusterRecord:
        rec = self.store.get_cluster(name)
        if rec.state != ClusterState.RUNNING or not rec.master_url or not rec.web_url:
            raise ClusterConflict(
                f"cluster {name!r} is {rec.state}: workers change on a RUNNING one"
            )
        return rec

    def add_worker(
        self, name: str, cores: int | None = None, memory: str | None = None
    ) -> dict[str, Any]:
        """Start one more worker (default: the cluster's cores and memory per worker) on the
        next free loopback address; answers once the master lists it ALIVE. Running
        applications get executors on it (those without ``spark.cores.max``)."""
        with self._lock, clusters.cluster_lock(name):
            _rec, c, m = self.check_add_worker(name, cores, memory)
            # Its room is taken in the store before its JVM starts: another manager's check
            # counts it from now on.
            hold = WorkerReservation(
                self.store,
                name,
                host=self.host,
                budget=self.budget,
                count=1,
                cores=c,
                memory=m,
                what=f"a worker for cluster {name!r}",
            )
            rec = hold.reserve()
            try:
                info = clusters.add_worker(
                    str(rec.master_url),
                    str(rec.web_url),
                    list(rec.processes),
                    self.folder / name,
                    c,
                    m,
                    # Recorded before the wait: a manager that dies now leaves it findable.
                    on_process=hold.on_process,
                )
            except Exception:
                # It was stopped again: its record and its reservation go.
                hold.release()
                raise
            rec = hold.done([info])
        return {"worker": info.to_json(), "cluster": cluster_view(rec)}

    def check_add_worker(
        self, name: str, cores: int | None, memory: str | None
    ) -> tuple[ClusterRecord, int, str]:
        """What :meth:`add_worker` would refuse at once (the cluster is not RUNNING, sizes
        out of range or past the host's budget), checked without starting anything; the
        cluster and the new worker's cores and memory (default: the cluster's). The budget is
        checked again when :meth:`add_worker` reserves the worker's room."""
        rec = self._running_cluster(name)
        c = int(rec.spec.get("cores", 1)) if cores is None else cores
        m = str(rec.spec.get("memory", "1g")) if memory is None else memory
        _session_spec(1, c, m)  # the same checks as a new cluster's workers
        self.budget.check(
            self.store.host_clusters(self.host),
            clusters=0,
            workers=1,
            cores=c,
            memory=m,
            what=f"a worker for cluster {name!r}",
        )
        return rec, c, m

    def check_remove_worker(self, name: str, worker: str) -> None:
        """What :meth:`remove_worker` would refuse at once: the cluster is not RUNNING or has
        no such worker."""
        rec = self._running_cluster(name)
        clusters.find_worker(rec.processes, worker)

    def remove_worker(self, name: str, worker: str, graceful: bool = False) -> dict[str, Any]:
        """Stop one worker (its ``id`` or address): ``graceful`` decommissions it through the
        master (its executors' blocks move first, running tasks finish) and waits until it
        left; otherwise its process group is killed."""
        with self._lock, clusters.cluster_lock(name):
            rec = self._running_cluster(name)
            remaining = clusters.remove_worker(str(rec.web_url), rec.processes, worker, graceful)
            gone = clusters.gone_ids(rec.processes, remaining)
            rec = self.store.change_cluster_processes(name, drop=gone)
        return cluster_view(rec)

    def stop(self, name: str, force: bool = False) -> dict[str, Any]:
        """Stop a session cluster: STOPPING, every recorded process stopped, STOPPED. A cluster
        live applications use is refused (409 naming them) unless ``force``: then they are
        not stopped (their executors go; each application's restart strategy decides) and
        the answer names them in ``used_by``. An application's own cluster is stopped by the
        leader when that application ends (409 here)."""
        rec = self.store.get_cluster(name)
        if rec.kind == ClusterKind.APP:
            raise ClusterConflict(
                f"cluster {name!r} is application {rec.owner_app}'s own: it is stopped when the "
                f"application ends (stoker app cancel {rec.owner_app})"
            )
        used_by = self._apps_on(rec)
        if used_by and not force:
            raise ClusterConflict(
                f"cluster {name!r} is used by live application(s) {', '.join(used_by)}: stop "
                "them first, or stop it anyway with --force (REST: force=true), and they lose "
                "their executors"
            )
        with self._lock:
            rec = self._stop_recorded(self.store.get_cluster(name))
        out = cluster_view(rec)
        out["used_by"] = used_by
        return out

    def _stop_recorded(self, rec: ClusterRecord) -> ClusterRecord:
        """STOPPING, stop every recorded process (only those still provably the recorded
        ones), STOPPED. A stop that fails leaves the cluster FAILED with the error."""
        if rec.state == ClusterState.STOPPED:
            return rec
        if rec.state != ClusterState.STOPPING:
            rec = self.store.update_cluster(rec.name, state=ClusterState.STOPPING)
        try:
            clusters.stop_processes(rec.processes)
        except ClusterError as e:
            self.store.update_cluster(rec.name, state=ClusterState.FAILED, error=str(e))
            raise
        return self.store.update_cluster(rec.name, state=ClusterState.STOPPED)


def _session_spec(workers: int, cores: int, memory: str) -> clusters.ClusterSpec:
    """A standalone cluster's spec from separate fields, each refusal naming its field."""
    for fld, value in (("workers", workers), ("cores", cores)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidInput(fld, f"expects a whole number >= 1, got {value!r}")
    clusters.normalize_memory(memory, "memory")
    try:
        return clusters.parse_cluster(f"standalone:workers={workers},cores={cores},memory={memory}")
    except InvalidInput as e:
        fld = next((k for k in ("memory", "cores", "workers") if k in e.message), "cluster")
        raise InvalidInput(fld, e.message) from None
