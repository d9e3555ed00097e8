"""Starting an attempt: recorded STARTING under the leader's token, its driver's command line
built from the job's spec, the driver started by the :class:`DriverLauncher`, its owner
recorded.

Two kinds of record have a driver of their own: a job submitted alone (spec kind ``app``:
``stoker.runtime.driver``) and an application (spec kind ``application``:
``stoker.runtime.appdriver``, on the cluster its spec names, which the :class:`ClusterKeeper`
makes ready first). A start that cannot go on after its attempt was recorded raises
:class:`StartFailed`: the reconciler fails the attempt through the job's restart strategy.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from stoker.errors import DuplicateJob, JobTerminal
from stoker.manager import processes
from stoker.manager.cluster_keeper import CannotRun, ClusterKeeper
from stoker.manager.launcher import DriverLauncher, this_host
from stoker.manager.leader import LeaderLease
from stoker.manager.standbys import StandbyKeeper, app_driver_argv, job_driver_argv
from stoker.store import AttemptRecord, JobRecord, Owner, StandbyRecord, Store, UpgradeRecord
from stoker.types import AttemptState, JobId, JobKind, SpecKind, StandbyRole, UpgradeState

log = logging.getLogger("stoker.supervisor")


# How long a start waits, in its step, for the previous attempt's killed processes to go.
KILLED_GONE_WAIT = 0.5


class StartFailed(Exception):
    """The attempt was recorded but its driver cannot start: it fails with ``why``."""

    def __init__(self, attempt: AttemptRecord, why: str) -> None:
        super().__init__(why)
        self.attempt = attempt
        self.why = why


class Dispatcher:
    """Starts the next attempt of a job or an application (leader only)."""

    def __init__(
        self,
        store: Store,
        lease: LeaderLease,
        launcher: DriverLauncher,
        keeper: ClusterKeeper,
        busy: Callable[[JobId], bool],
        state_dir: Path,
        store_url: str,
        lease_ttl: float,
        startup_ttl: float,
        max_starting: int = 0,
        standbys: StandbyKeeper | None = None,
    ) -> None:
        self.store = store
        self.lease = lease
        self.launcher = launcher
        self.keeper = keeper
        self.busy = busy  # the janitor cleans the job now: no attempt may start beside it
        self.state_dir = state_dir
        self.store_url = store_url
        self.lease_ttl = lease_ttl  # drivers' attempt lease
        self.startup_ttl = startup_ttl  # a STARTING attempt's lease, until its driver holds it
        # Drivers (jobs' and applications') starting at once, at most (0: no bound): each
        # start is a Python process, a JVM and a SparkSession, minutes of CPU on a host that
        # restarts with many jobs. The rest wait, oldest due first (JobReconciler.tend_all).
        self.max_starting = max_starting
        self._starting: int | None = None  # counted once a step (new_step), then kept up
        self.started = 0  # drivers started by this manager
        self.standbys = standbys or StandbyKeeper(store, launcher, state_dir, store_url, lease_ttl)

    def new_step(self) -> None:
        """A new pass over the records: the drivers starting now are counted afresh."""
        self._starting = None

    def start(self, job: JobRecord) -> None:
        """Start the job's next attempt if it is the manager's to start and can start now."""
        assert self.lease.held
        kind = job.spec.get("kind")
        if kind == SpecKind.APPLICATION:
            self._start_application(job)
            return
        if kind != SpecKind.MANAGED:
            return  # a job run in-process by `stoker run` without a server: not ours to start
        if self.busy(job.job_id):
            return  # its cleanup still runs (a restart right after the end): wait for it
        job, role, up = self._swap_if_due(job)
        standby = self.standbys.ready(job.job_id, role, job.spec) if role is not None else None
        attempt = self._new_attempt(job, standby)
        if attempt is None:
            return
        if role == StandbyRole.UPGRADE and up is not None:
            # The new code's first attempt (handed over below, or cold if its standby was
            # lost just now): the one the upgrade watches from.
            self.store.upgrade_swap_attempt(up.upgrade_id, attempt.attempt)
        if standby is not None and role is not None and self._hand(job, attempt, standby, role):
            return
        argv = job_driver_argv(job, attempt.attempt, self.store_url, self.state_dir, self.lease_ttl)
        self._spawn(job, attempt, argv)

    def _swap_if_due(
        self, job: JobRecord
    ) -> tuple[JobRecord, StandbyRole | None, UpgradeRecord | None]:
        """The job as its next attempt runs it, which standby may take that attempt, and the
        upgrade that decided so.

        An upgrade whose old code was asked to stop, once that attempt has ended, is swapped
        here: SWAPPED and the job's spec made the new one in one transaction, if the new
        code's standby is READY; otherwise it is refused and the old code goes on. A SWAPPED
        upgrade's first attempt goes to the new code's standby; any other to the job's own
        standby (which runs the job's code, or it is not handed the attempt)."""
        up = self.store.live_upgrade(job.job_id)
        if up is not None and up.swap_due(job.current_attempt):
            if self.standbys.ready(job.job_id, StandbyRole.UPGRADE) is not None:
                swapped = self.store.swap_upgrade(up.upgrade_id)
                if swapped is not None:
                    log.info("job %s: upgrade %s SWAPPED", job.job_id, up.upgrade_id)
                    up, job = swapped, self.store.get_job(job.job_id)
            else:
                why = "the new code's standby was not ready when the old code stopped"
                if self.store.end_upgrade(up.upgrade_id, UpgradeState.REFUSED, why):
                    log.warning("job %s: upgrade %s REFUSED: %s", job.job_id, up.upgrade_id, why)
                up = None
        if up is not None and up.handover_due:
            return job, StandbyRole.UPGRADE, up
        # The job's own standby, if one is READY with the job's code: one the job asked for,
        # or the old code's kept for an upgrade (a rollback's way back).
        return job, StandbyRole.STANDBY, up

    def _start_application(self, app: JobRecord) -> None:
        """Make sure the application's cluster runs, then start its driver on it.

        ``local``: Spark inside the driver. ``spark://``: the user's master, left alone. A
        session cluster's name: its master while it is RUNNING. ``standalone:...``: a cluster
        of the application's own (``app-<id>``), started on a thread; the driver starts on a
        later step, once the cluster is RUNNING. A cluster that cannot take the application
        fails the attempt, and the application's restart strategy decides what comes next.
        """
        spec = app.spec
        try:
            ready, master, cluster_conf = self.keeper.master_for(app)
        except CannotRun as e:
            attempt = self._new_attempt(app)
            if attempt is not None:
                raise StartFailed(attempt, str(e)) from None
            return
        if not ready:
            return
        # A warm standby takes the attempt (applications on ``local`` only, see submission).
        standby = self.standbys.ready(app.job_id, spec=spec) if master is None else None
        attempt = self._new_attempt(app, standby)
        if attempt is None:
            return
        if standby is not None and self._hand(app, attempt, standby, StandbyRole.STANDBY):
            return
        argv = app_driver_argv(
            app,
            attempt.attempt,
            self.store_url,
            self.state_dir,
            self.lease_ttl,
            master,
            cluster_conf,
        )
        self._spawn(app, attempt, argv)

    def _hand(
        self, job: JobRecord, attempt: AttemptRecord, standby: StandbyRecord, role: StandbyRole
    ) -> bool:
        """Hand ``attempt`` to the job's (or application's) READY ``role`` standby; False when
        it could not take it any more (a new driver starts then)."""
        if self.standbys.hand(job.job_id, attempt.attempt, role) is not None:
            log.info(
                "%s %s: attempt %d handed to its %s standby (pid %d)",
                _what(job),
                job.job_id,
                attempt.attempt,
                role,
                standby.owner.pid,
            )
            return True
        log.warning(
            "%s %s: its %s standby (pid %d) could not take attempt %d: a new driver starts",
            _what(job),
            job.job_id,
            role,
            standby.owner.pid,
            attempt.attempt,
        )
        return False

    def _new_attempt(
        self, job: JobRecord, standby: StandbyRecord | None = None
    ) -> AttemptRecord | None:
        """Record the next attempt STARTING (its driver claims it), or None if another
        manager or the job's state got there first, or if the previous attempt's processes
        still run (killed now: the next attempt starts once they are seen gone). For a
        ``standby`` about to be handed the attempt: its log is the standby's."""
        if self._previous_runs(job):
            return None
        if self.max_starting and standby is None:  # a handover starts no Spark
            if self._starting is None:
                self._starting = self.store.count_starting()
            if self._starting >= self.max_starting:
                return None  # queued: a later step starts it once a start has ended
        log_path = self.state_dir / "logs" / job.job_id / f"attempt-{job.current_attempt + 1}.log"
        if standby is not None:
            # Its log; its owner stays "not launched yet" until the standby holds the attempt
            # itself (a leader that dies before the handover leaves an attempt that is
            # replaced after the launch grace, not one that waits out a start lease and has
            # the standby killed as its driver).
            log_path = Path(standby.log_path)
        try:
            made = self.store.start_attempt(
                job.job_id,
                Owner(host=this_host(), pid=0, pid_started="unknown"),
                self.startup_ttl,
                job.current_attempt,
                previous_dead=True,  # only reached when the previous attempt has ended
                restart=False,
                state=AttemptState.STARTING,
                log_path=str(log_path),
                leader=self.lease.fence,
            )
        except (DuplicateJob, JobTerminal) as e:
            log.info("%s %s not started: %s", _what(job), job.job_id, e)
            return None
        if self._starting is not None:
            self._starting += 1
        return made

    def _previous_runs(self, job: JobRecord) -> bool:
        """Whether anything of the job's previous attempt still runs here (a driver whose
        lease lapsed, a JVM outliving its driver); if so it is killed, and the next attempt
        waits for a later step: two drivers of one job never run side by side."""
        if not job.current_attempt:
            return False
        prev = self.store.get_attempt(job.job_id, job.current_attempt)
        if prev is None or not self.launcher.still_running(prev.owner):
            return False
        log.warning(
            "%s %s: processes of attempt %d (pid %d) still run: killed; the next attempt "
            "starts once they are gone",
            _what(job),
            job.job_id,
            prev.attempt,
            prev.owner.pid,
        )
        self.launcher.kill(prev.owner)
        # A group killed is gone within milliseconds, mostly: the start goes on in this step
        # then (a handover's pause is what a user sees), else in a later one.
        deadline = time.monotonic() + KILLED_GONE_WAIT
        while time.monotonic() < deadline:
            if not self.launcher.still_running(prev.owner):
                return False
            time.sleep(0.02)
        return True

    def _spawn(self, job: JobRecord, attempt: AttemptRecord, argv: processes.DriverArgv) -> None:
        """Start the attempt's driver and record who it is."""
        entry = Path(job.spec["entrypoint"])
        env = dict(argv.env)
        if self.lease.address:
            env[processes.MANAGER_URL_ENV] = (
                self.lease.address
            )  # the hints the driver prints name it
        try:
            owner = self.launcher.start(
                job.job_id,
                attempt.attempt,
                list(argv),
                env,
                Path(str(attempt.log_path)),
                cwd=entry.parent,
            )
        except OSError as e:
            raise StartFailed(attempt, f"cannot start the driver: {e}") from None
        self.store.set_attempt_owner(job.job_id, attempt.attempt, owner)
        self.started += 1
        log.info(
            "%s %s: attempt %d started as pid %d",
            _what(job),
            job.job_id,
            attempt.attempt,
            owner.pid,
        )


def _what(job: JobRecord) -> str:
    return "application" if job.kind == JobKind.APPLICATION else "job"
