"""Applications' clusters, as the leader keeps them: which master an application's driver uses,
its own standalone cluster started before it and torn down after it.

An application names its cluster in its spec: ``local`` (Spark inside the driver), a
``spark://`` master (the user's, left alone), a session cluster's name (started and stopped
through the REST API, used while RUNNING), or ``standalone:...``: a cluster of its own
(``app-<id>``), started by the leader on a thread when the application is to start, and torn
down by the leader once the application has ended, whoever started it: everything needed is in
the store, so a new leader finishes what an old one left.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stoker import procs
from stoker.errors import ClusterConflict, ClusterError, ClusterNotFound, InvalidInput, StokerError
from stoker.manager import clusters
from stoker.manager.cluster_records import app_cluster_name, cluster_spec_dict
from stoker.manager.cluster_start import start_recorded
from stoker.manager.clusters.budget import HostBudget
from stoker.store import JobRecord, Store
from stoker.store.fleet_records import ClusterRecord
from stoker.types import ClusterKind, ClusterState, JobId

log = logging.getLogger("stoker.supervisor")

# An application's own cluster recorded STARTING this long ago with no start running here was
# left by a manager that is gone: given up, stopped and started again.
STALE_START = 180.0
# Seconds between looks at the clusters to tear down, and before a failed stop is tried again.
CLUSTERS_EVERY = 1.0
STOP_RETRY = 30.0


class CannotRun(StokerError):
    """The application's cluster cannot take it now (a session cluster gone, its own cluster
    failed to start): the attempt fails with this, through the restart strategy."""


class ClusterKeeper:
    """The leader's view of applications' clusters. Starts and stops run on threads of their
    own (a start takes tens of seconds): the supervisor's loop never waits for a JVM. One
    piece of work at a time per cluster name."""

    def __init__(
        self,
        store: Store,
        state_dir: Path,
        budget: HostBudget | None = None,
        host: str | None = None,
    ) -> None:
        self.store = store
        self.state_dir = state_dir
        self.budget = budget or HostBudget()
        # Whose budget the clusters it starts count against: this host's (a test names one).
        self.host = host or procs.host_id()
        self._work: dict[str, threading.Thread] = {}
        self._retry: dict[str, float] = {}  # time.monotonic() of a failed stop's retry
        self._looked = float("-inf")

    # the master of an application ----------------------------------------------------------
    def master_for(self, app: JobRecord) -> tuple[bool, str | None, dict[str, str]]:
        """(ready, master URL, Spark conf the cluster needs) of the application's cluster; a
        None master is Spark inside the driver. :class:`CannotRun` if it cannot take it."""
        try:
            spec = clusters.parse_cluster(app.spec.get("cluster") or "local")
        except InvalidInput as e:
            raise CannotRun(f"its cluster {app.spec.get('cluster')!r}: {e.message}") from None
        if spec.kind == "local":
            return True, None, {}
        if spec.kind == "external":
            # Harmless where the master never decommissions; lets a graceful worker removal
            # (a stoker session cluster given by its URL) end in seconds, not at its timeout.
            return True, spec.master_url, dict(clusters.DECOMMISSION_CONF)
        if spec.kind == "session":
            name = str(spec.name)
            rec = self._find(name)
            if rec is None:
                raise CannotRun(f"its session cluster {name!r} does not exist")
            if rec.state != ClusterState.RUNNING or not rec.master_url:
                raise CannotRun(f"its session cluster {name!r} is {rec.state}")
            shape = clusters.ClusterSpec(
                "standalone",
                workers=int(rec.spec.get("workers", 1)),
                cores=int(rec.spec.get("cores", 1)),
                memory=str(rec.spec.get("memory", "1g")),
            )
            return True, rec.master_url, clusters.app_conf(shape)
        ready, master = self._own_cluster(app, spec)
        return ready, master, clusters.app_conf(spec)

    def _own_cluster(self, app: JobRecord, spec: clusters.ClusterSpec) -> tuple[bool, str | None]:
        """The application's own standalone cluster: started if absent, waited for while it
        starts or stops here, its master once RUNNING."""
        name = app_cluster_name(app.job_id)
        if self._busy(name):
            return False, None
        rec = self._find(name)
        if rec is not None and rec.state == ClusterState.STOPPED:
            self.store.delete_cluster(name)  # an earlier run's: this run gets a fresh one
            rec = None
        if rec is None:
            # Checked and recorded in one transaction of the store: the REST API or another
            # manager cannot take the same room meanwhile.
            admit = self.budget.admit_new(spec, f"application {app.job_id}'s own cluster")
            try:
                rec, created = self.store.create_cluster(
                    name,
                    ClusterKind.APP,
                    cluster_spec_dict(spec),
                    owner_app=app.job_id,
                    host=self.host,
                    admit=admit,
                )
            except ClusterConflict as e:
                raise CannotRun(str(e)) from None  # its restart strategy decides what next
            if created:
                log.info("application %s: starting its cluster %s", app.job_id, name)
                self._in_background(name, self._start, name, spec)
                return False, None
        if rec.state == ClusterState.RUNNING and rec.master_url:
            return True, rec.master_url
        if rec.state == ClusterState.STARTING:
            if self.store.clock.now() - rec.updated_at > STALE_START:
                self._give_up_start(rec)
            return False, None
        if rec.state == ClusterState.FAILED:
            # Stopped (its processes) and made again for the next attempt, if there is one.
            self._in_background(name, self._stop, name)
            raise CannotRun(f"its cluster {name} failed: {rec.error or 'no reason recorded'}")
        self._in_background(name, self._stop, name)  # STOPPING, left by a manager
        return False, None

    # tearing down --------------------------------------------------------------------------
    def tend(self, apps: dict[JobId, JobRecord]) -> None:
        """Tear down every application's own cluster whose application has ended (or is gone)
        and that is not STOPPED yet, whoever started it: a new leader does it from the store;
        and every session cluster whose start a dead manager left unfinished."""
        mono = time.monotonic()
        if mono - self._looked < CLUSTERS_EVERY:
            return
        self._looked = mono
        for rec in self.store.list_clusters():
            if self._busy(rec.name):
                continue
            if rec.kind == ClusterKind.SESSION:
                # A session cluster is started synchronously by an API call; one left
                # STARTING that long was left by a manager that died in it, its JVMs perhaps
                # running: given up and stopped, so that it holds no budget and no process.
                if (
                    rec.state == ClusterState.STARTING
                    and self.store.clock.now() - rec.updated_at > STALE_START
                ):
                    self._give_up_start(rec)
                continue
            if rec.kind != ClusterKind.APP:
                continue
            owner = apps.get(JobId(rec.owner_app)) if rec.owner_app else None
            if owner is not None and not owner.state.terminal:
                continue  # in use; a stale start is the launch's to give up
            if self._retry.get(rec.name, float("-inf")) > mono:
                continue
            log.info(
                "cluster %s: its application %s has ended (or is gone); tearing it down",
                rec.name,
                rec.owner_app,
            )
            self._in_background(rec.name, self._stop, rec.name)

    def _give_up_start(self, rec: ClusterRecord) -> None:
        """A start recorded by a manager that is gone: FAILED, then stopped (on a thread);
        an application's next look starts a new one, a session cluster is started again by
        ``stoker cluster start``."""
        log.warning("cluster %s: its start was left unfinished; stopping it", rec.name)
        self.store.update_cluster(
            rec.name,
            state=ClusterState.FAILED,
            error="its start was left unfinished by a job manager that is gone",
        )
        self._in_background(rec.name, self._stop, rec.name)

    # work on threads -----------------------------------------------------------------------
    def _start(self, name: str, spec: clusters.ClusterSpec) -> None:
        """On a thread: start the cluster, recording each process as it starts; RUNNING when
        every worker is ALIVE, FAILED with the error otherwise (what started is stopped)."""
        try:
            rec = start_recorded(self.store, name, spec, self.state_dir / "clusters" / name)
        except ClusterError as e:
            log.warning("cluster %s failed to start: %s", name, e)
            return
        except StokerError as e:  # given up meanwhile (a takeover): nothing stayed behind
            log.warning("cluster %s started but cannot be recorded RUNNING (%s); stopping", name, e)
            return
        log.info("cluster %s: RUNNING at %s", name, rec.master_url)

    def _stop(self, name: str) -> None:
        """On a thread: STOPPING, every recorded process stopped, STOPPED. A stop that fails
        leaves it FAILED with the error, tried again after ``STOP_RETRY``."""
        rec = self._find(name)
        if rec is None or rec.state == ClusterState.STOPPED:
            return
        if rec.state != ClusterState.STOPPING:
            rec = self.store.update_cluster(name, state=ClusterState.STOPPING)
        try:
            clusters.stop_processes(rec.processes)
        except StokerError as e:
            log.warning("cluster %s: stopping failed: %s", name, e)
            self._retry[name] = time.monotonic() + STOP_RETRY
            self.store.update_cluster(name, state=ClusterState.FAILED, error=str(e))
            return
        self.store.update_cluster(name, state=ClusterState.STOPPED)
        log.info("cluster %s: STOPPED", name)

    def _in_background(self, name: str, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn(*args)`` on a thread of its own, the one piece of work on cluster ``name``."""

        def run() -> None:
            try:
                fn(*args)
            except Exception:
                log.exception("cluster %s: background work failed", name)

        thread = threading.Thread(target=run, name=f"stoker-cluster-{name}", daemon=True)
        self._work[name] = thread
        thread.start()

    def _busy(self, name: str) -> bool:
        """Whether a start or stop of cluster ``name`` runs on this manager now."""
        thread = self._work.get(name)
        if thread is not None and not thread.is_alive():
            del self._work[name]
            return False
        return thread is not None

    def wait(self, timeout: float) -> bool:
        """Wait until no cluster start or stop runs here (tests, shutdown); whether none does."""
        deadline = time.monotonic() + timeout
        for thread in list(self._work.values()):
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self._work.values())

    def _find(self, name: str) -> ClusterRecord | None:
        try:
            return self.store.get_cluster(name)
        except ClusterNotFound:
            return None
