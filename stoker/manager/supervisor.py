"""The leader's work: start attempts as driver processes, watch them, restart or fail jobs
and applications; start and tear down applications' own clusters.

Every manager runs a :class:`Supervisor`; only the one holding the leader lease acts. It keeps
no state that matters: everything it needs is in the store, so a new leader picks up where the
old one stopped, and drivers that are alive are left alone (re-adopted, not restarted).

The supervisor is a composition of small owners, stepped in this order each tick:

- the :class:`DriverLauncher` forgets the drivers whose exit has been judged (every manager);
- the :class:`LeaderLease` records this manager's heartbeat and acquires or renews the lease;
  a standby stops here;
- the leader's tasks: :class:`Retention` prunes ended jobs' epochs, the :class:`Janitor`
  resolves ended jobs' sinks;
- the :class:`JobReconciler` tends every live record of the jobs table (its
  :class:`Dispatcher` starts attempts' drivers through the launcher, or hands an attempt to
  the job's warm standby);
- the :class:`StandbyKeeper` starts, replaces and stops warm standby drivers;
- the :class:`ClusterKeeper` tears down the own clusters of ended applications.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from stoker.errors import StokerError
from stoker.manager import operations
from stoker.manager.cluster_keeper import ClusterKeeper
from stoker.manager.clusters.budget import HostBudget
from stoker.manager.dispatch import Dispatcher
from stoker.manager.janitor import Janitor
from stoker.manager.launcher import DriverLauncher, LocalProcessLauncher
from stoker.manager.leader import LeaderLease
from stoker.manager.lockwatch import StoreLockWatch
from stoker.manager.reconciler import JobReconciler
from stoker.manager.retention import Retention
from stoker.manager.standbys import StandbyKeeper
from stoker.manager.upgrades import SWAP_TICK, UpgradeKeeper
from stoker.store import RetentionPolicy, Store
from stoker.types import JobKind

log = logging.getLogger("stoker.supervisor")


OPERATIONS_SWEEP = 30.0  # s between the leader's looks at operations


@dataclass
class SupervisorConfig:
    """Timings of the leader and of the attempts it starts."""

    state_dir: Path
    store_url: str
    address: str = ""
    leader_ttl: float = 3.0  # a dead leader is replaced within about this long
    tick: float = 0.2
    lease_ttl: float = 10.0  # drivers' attempt lease
    # A STARTING attempt's lease until its driver holds it (the driver renews it from then on,
    # while Spark starts): a Python start and stoker's import, slow on a loaded host.
    startup_ttl: float = 120.0
    max_starting: int = 4  # drivers starting at once (0: no bound); the others queue
    launch_grace: float = 10.0  # an attempt with no driver pid after this was never launched
    cancel_timeout: float = 60.0  # graceful cancel, then the process group is killed
    # Ended jobs' epoch records: what the leader keeps (default: all), looked at this often.
    retention: RetentionPolicy = field(default_factory=RetentionPolicy)
    retention_every: float = 60.0
    # Ended records this manager made are deleted this long after their end (None: kept).
    retention_jobs: float | None = None
    # What the Spark clusters started on this host may take in all (applications' own here).
    budget: HostBudget = field(default_factory=HostBudget)
    holder: str = field(default_factory=lambda: f"manager-{uuid.uuid4().hex[:12]}")


class Supervisor:
    """Leader election plus the dispatch / watch loop, on a thread of its own."""

    def __init__(
        self, store: Store, config: SupervisorConfig, launcher: DriverLauncher | None = None
    ) -> None:
        self.store = store
        self.cfg = config
        cfg = config
        self.lease = LeaderLease(store, cfg.holder, cfg.address, cfg.leader_ttl)
        self.launcher: DriverLauncher = launcher or LocalProcessLauncher()
        self.retention = Retention(
            store, cfg.retention, cfg.retention_every, cfg.retention_jobs, cfg.state_dir
        )
        self.janitor = Janitor(store, cfg.state_dir, cfg.store_url, lease=self.lease)
        self.keeper = ClusterKeeper(store, cfg.state_dir, cfg.budget)
        self.standbys = StandbyKeeper(
            store, self.launcher, cfg.state_dir, cfg.store_url, cfg.lease_ttl
        )
        self.dispatcher = Dispatcher(
            store,
            self.lease,
            self.launcher,
            self.keeper,
            self.janitor.busy,
            cfg.state_dir,
            cfg.store_url,
            cfg.lease_ttl,
            cfg.startup_ttl,
            cfg.max_starting,
            self.standbys,
        )
        self.upgrades = UpgradeKeeper(store, self.launcher, self.standbys)
        self.reconciler = JobReconciler(
            store, self.lease, self.launcher, self.dispatcher, cfg.launch_grace, cfg.cancel_timeout
        )
        # A driver frozen inside a store write: broken on a thread of its own (lockwatch.py).
        self.lockwatch = StoreLockWatch(
            store, self.launcher.kill, cfg.lease_ttl, lambda: self.lease.held
        )
        self._operations_swept = -OPERATIONS_SWEEP  # time.monotonic() of the last sweep
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="stoker-supervisor", daemon=True)

    # lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()
        self.lockwatch.start()

    def stop(self, resign: bool = True) -> None:
        self._stop.set()
        self.lockwatch.stop()
        if self._thread.ident is not None:  # started (a test may step it by hand instead)
            self._thread.join(timeout=10)
        # A cluster start left running is recorded (STARTING, its processes): the next
        # leader gives it up (``cluster_keeper.STALE_START``) and stops what it started.
        if not resign:
            return  # the store left as a crash would leave it
        self.lease.resign()

    @property
    def is_leader(self) -> bool:
        return self.lease.held

    @property
    def token(self) -> int | None:
        """The leader lease's fencing token while this manager leads."""
        return self.lease.token

    @property
    def started_attempts(self) -> int:
        """Drivers this manager started."""
        return self.dispatcher.started

    def wait_cluster_work(self, timeout: float) -> bool:
        """Wait until no cluster start or stop runs here (tests, shutdown); whether none does."""
        return self.keeper.wait(timeout)

    def _loop(self) -> None:
        while not self._stop.wait(
            min(self.cfg.tick, SWAP_TICK) if self.upgrades.swapping else self.cfg.tick
        ):
            try:
                self.step()
            except Exception:  # the loop must survive a bad job or a store hiccup
                log.exception("supervisor step failed")

    def _sweep_operations(self) -> None:
        """Now and then: end the long calls whose manager died, drop old ended ones."""
        now = time.monotonic()
        if now - self._operations_swept < OPERATIONS_SWEEP:
            return
        self._operations_swept = now
        try:
            if operations.sweep(self.store):
                log.info("ended the operations of managers that are gone")
        except StokerError as e:
            log.warning("operations: %s", e)

    # one step ------------------------------------------------------------------------------
    def step(self) -> None:
        """Lead if possible, then bring every live job one step closer to where it should be."""
        self.launcher.reap(self.reconciler.watched)
        self.lease.heartbeat()
        if not self.lease.hold():
            return
        self.retention.sweep()  # ended jobs' old epoch records (stoker server --retention-*)
        self._sweep_operations()  # long calls of managers that died; old ended ones
        self.janitor.sweep()  # ended jobs: their sinks resolved (docs/architecture.md)
        if not self.lease.held:
            return  # the janitor found the lease lost (a refused write, or between slices)
        now = self.store.clock.now()
        # Jobs and applications (the ended ones: none) and their current attempts: one read.
        records, attempts = self.store.live_jobs_and_attempts()
        apps = {r.job_id: r for r in records if r.kind == JobKind.APPLICATION}
        self.lockwatch.know([a.owner for a in attempts.values()] + list(self.standbys.owners))
        if not self.reconciler.tend_all(records, apps, now, attempts):
            return
        try:
            upgrades = self.store.live_upgrades()  # read once for both keepers below
        except StokerError as e:
            log.warning("upgrades: %s", e)
            upgrades = None
        if upgrades is not None:
            # Warm standby drivers (manager/standbys.py), upgrades to new code (upgrades.py).
            for name, keeper in (("standbys", self.standbys), ("upgrades", self.upgrades)):
                try:
                    keeper.tend(records, upgrades)
                except StokerError as e:
                    log.warning("%s: %s", name, e)
        try:
            self.keeper.tend(apps)
        except StokerError as e:
            log.warning("clusters: %s", e)
