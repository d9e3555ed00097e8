"""The leader's work: start attempts as driver processes, watch them, restart or fail jobs
and applications; start and tear down applications' own clusters.

Every manager runs a :class:`Supervisor`; only the one holding the leader lease acts. It keeps
no state that matters: everything it needs is in the store, so a new leader picks up where the
old one stopped, and drivers that are alive are left alone (re-adopted, not restarted).

One code path tends every record of the jobs table that has a driver of its own: a job
submitted alone (spec kind ``app``: ``stoker.runtime.driver``) and an application (spec kind
``application``: ``stoker.runtime.appdriver``, on its cluster). A job of an application is
its driver's business: never launched, restarted or failed here, only ended once its
application has ended.
"""

from __future__ import annotations

import ipaddress
import logging
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from stoker.errors import (
    ClusterNotFound,
    DuplicateJob,
    InvalidInput,
    JobTerminal,
    NotLeader,
    StokerError,
)
from stoker.manager import clusters, janitor, processes, retention
from stoker.manager.cluster_records import app_cluster_name, cluster_spec_dict
from stoker.manager.restart import Failure, parse_strategy
from stoker.manager.submit import ASSIGNED_STATE_DIR
from stoker.store import AttemptRecord, JobRecord, Owner, RetentionPolicy, Store
from stoker.store.records import ClusterProcess, ClusterRecord
from stoker.types import (
    AttemptNo,
    AttemptState,
    ClusterKind,
    ClusterState,
    JobId,
    JobKind,
    JobState,
    SpecKind,
)

log = logging.getLogger("stoker.supervisor")

_LIVE_ATTEMPT = (AttemptState.STARTING, AttemptState.RUNNING)
# The error of an attempt replaced because its manager died before starting its driver: the
# manager's failure, not the job's, so no restart strategy counts it.
_NEVER_LAUNCHED = "its manager died before starting the driver"
# An application's own cluster recorded STARTING this long ago with no start running here was
# left by a manager that is gone: given up, stopped and started again.
_STALE_START = 180.0
# Seconds between looks at the clusters to tear down, and before a failed stop is tried again.
_CLUSTERS_EVERY = 1.0
_STOP_RETRY = 30.0


class _CannotRun(StokerError):
    """The application's cluster cannot take it now (a session cluster gone, its own cluster
    failed to start): the attempt fails with this, through the restart strategy."""


@dataclass
class SupervisorConfig:
    """Timings of the leader and of the attempts it starts."""

    state_dir: Path
    store_url: str
    address: str = ""
    leader_ttl: float = 3.0  # a dead leader is replaced within about this long
    tick: float = 0.2
    lease_ttl: float = 10.0  # drivers' attempt lease
    startup_ttl: float = 120.0  # a STARTING attempt's lease: Spark takes a while to come up
    launch_grace: float = 10.0  # an attempt with no driver pid after this was never launched
    cancel_timeout: float = 60.0  # graceful cancel, then the process group is killed
    # Ended jobs' epoch records: what the leader keeps (default: all), looked at this often.
    retention: RetentionPolicy = field(default_factory=RetentionPolicy)
    retention_every: float = 60.0
    holder: str = field(default_factory=lambda: f"manager-{uuid.uuid4().hex[:12]}")


class Supervisor:
    """Leader election plus the dispatch / watch loop, on a thread of its own."""

    def __init__(self, store: Store, config: SupervisorConfig) -> None:
        self.store = store
        self.cfg = config
        self.token: int | None = None
        self._children: dict[tuple[JobId, AttemptNo], subprocess.Popen[bytes]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="stoker-supervisor", daemon=True)
        self._renewed = 0.0
        self._beat = float("-inf")  # time.monotonic() of the last heartbeat recorded
        self.started_attempts = 0
        # Cluster starts and stops run on threads of their own (a start takes tens of
        # seconds): the loop never waits for a JVM. One at a time per cluster name.
        self._cluster_work: dict[str, threading.Thread] = {}
        self._cluster_retry: dict[str, float] = {}  # time.monotonic() of a failed stop's retry
        self._clusters_looked = float("-inf")

    # lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def stop(self, resign: bool = True) -> None:
        self._stop.set()
        if self._thread.ident is not None:  # started (a test may step it by hand instead)
            self._thread.join(timeout=10)
        # A cluster start left running is recorded (STARTING, its processes): the next
        # leader gives it up after _STALE_START and stops what it started.
        if not resign:
            return  # the store left as a crash would leave it
        if self.token is not None:
            self.store.resign_leadership(self.cfg.holder, self.token)
            self.token = None
        # Gone at once from the list of managers, instead of when its heartbeat goes stale.
        try:
            self.store.forget_manager(self.cfg.holder)
        except StokerError as e:
            log.warning("%s could not remove its heartbeat: %s", self.cfg.holder, e)

    @property
    def is_leader(self) -> bool:
        return self.token is not None

    def _loop(self) -> None:
        while not self._stop.wait(self.cfg.tick):
            try:
                self.step()
            except Exception:  # the loop must survive a bad job or a store hiccup
                log.exception("supervisor step failed")

    # one step ------------------------------------------------------------------------------
    def step(self) -> None:
        """Lead if possible, then bring every live job one step closer to where it should be."""
        self._reap()
        self._heartbeat()
        if not self._lead():
            return
        retention.sweep(self)  # ended jobs' old epoch records (stoker server --retention-*)
        janitor.sweep(self)  # ended jobs: their sinks resolved (docs/architecture.md)
        now = self.store.clock.now()
        records = self.store.list_jobs(kind=None)  # jobs and applications
        apps = {r.job_id: r for r in records if r.kind == JobKind.APPLICATION}
        for job in records:
            if job.state.terminal:
                continue
            try:
                if job.app_id is not None:
                    self._tend_in_app(job, apps.get(job.app_id))
                else:
                    self._tend(job, now)
            except NotLeader:
                log.warning("lost the leader lease while tending %s", job.job_id)
                self.token = None
                return
            except StokerError as e:
                log.info("job %s: %s", job.job_id, e)
        try:
            self._tend_clusters(apps, now)
        except StokerError as e:
            log.warning("clusters: %s", e)

    def _heartbeat(self) -> None:
        """Say in the store that this manager is alive, leader or standby (the web UI and
        ``GET /v1/managers`` list the managers from it), as often as a leader renews its lease.

        Not every tick: a standby's tick already writes (it tries for the lease), and each
        write to an SQLite store is fsynced under its one write lock, which the drivers'
        epoch decisions wait for. A heartbeat decides nothing, so one that fails costs only
        a warning: the election goes on.
        """
        now = time.monotonic()
        if now - self._beat < self.cfg.leader_ttl / 3:
            return
        try:
            self.store.heartbeat_manager(self.cfg.holder, self.cfg.address)
        except StokerError as e:
            log.warning("%s could not record its heartbeat: %s", self.cfg.holder, e)
            return
        self._beat = now

    def _lead(self) -> bool:
        now = time.monotonic()
        if self.token is not None:
            if now - self._renewed < self.cfg.leader_ttl / 3:
                return True
            if self.store.renew_leadership(self.cfg.holder, self.token, self.cfg.leader_ttl):
                self._renewed = now
                return True
            log.warning("%s lost the leader lease (token %d)", self.cfg.holder, self.token)
            self.token = None
            return False
        lease = self.store.acquire_leadership(
            self.cfg.holder, self.cfg.address, self.cfg.leader_ttl
        )
        if lease is None:
            return False
        self.token = lease.token
        self._renewed = now
        log.info("%s leads with token %d", self.cfg.holder, lease.token)
        return True

    def _tend(self, job: JobRecord, now: float) -> None:
        if job.state in (JobState.CREATED, JobState.RESTARTING):
            if job.next_attempt_at is None or job.next_attempt_at <= now:
                self._launch(job)
            return
        if job.state == JobState.SUSPENDED:
            # Its driver was stopped by a signal (host shutdown, container stop) and let its
            # last epoch commit: resume at once. A suspension is no failure: no restart is
            # used up (Flink does not count one either).
            self._launch(job)
            return
        attempt = (
            self.store.get_attempt(job.job_id, job.current_attempt) if job.current_attempt else None
        )
        if attempt is None:
            return
        if attempt.state in _LIVE_ATTEMPT:
            if self._never_launched(attempt, now):
                # The manager that made it died before starting its driver (no pid recorded
                # within the grace time). A driver it did start cannot claim the attempt once a
                # newer one exists, so replace it at once, without using up a restart.
                self.store.attempt_failed(
                    job.job_id, attempt.attempt, _NEVER_LAUNCHED, now, count=False
                )
                return
            why = self._dead_because(attempt, now)
            if why is not None:
                self._failed(job, attempt, why)
            elif job.state == JobState.CANCELING:
                self._enforce_cancel(job, attempt, now)
        elif attempt.state == AttemptState.FAILED:
            self._failed(job, attempt, attempt.error or "the driver failed")
        else:
            self._repair(job, attempt)

    def _repair(self, job: JobRecord, attempt: AttemptRecord) -> None:
        """A live job whose current attempt has ended otherwise than FAILED.

        A driver ends its attempt and moves its job in one transaction (``finish_attempt``);
        this state is left by an older version that did it in two, killed in between. The job
        goes where the attempt's end says; a suspended attempt under a job being canceled
        ends the job CANCELED (the cancel was asked for explicitly).
        """
        target = {
            AttemptState.FINISHED: JobState.FINISHED,
            AttemptState.CANCELED: JobState.CANCELED,
            AttemptState.SUSPENDED: JobState.SUSPENDED,
        }.get(attempt.state)
        if target is None:
            return  # SUPERSEDED is never current: the newer attempt is
        if target == JobState.SUSPENDED and job.state == JobState.CANCELING:
            target = JobState.CANCELED
        after = self.store.finish_attempt(job.job_id, attempt.attempt, attempt.state, target)
        log.warning(
            "job %s: attempt %d had ended %s under a %s job; job is now %s",
            job.job_id,
            attempt.attempt,
            attempt.state,
            job.state,
            after.state,
        )

    # starting ------------------------------------------------------------------------------
    def _launch(self, job: JobRecord) -> None:
        assert self.token is not None
        kind = job.spec.get("kind")
        if kind == SpecKind.APPLICATION:
            self._launch_application(job)
            return
        if kind != SpecKind.MANAGED:
            return  # a job run in-process by `stoker run` without a server: not ours to start
        if janitor.busy(self, job.job_id):
            return  # its cleanup still runs (a restart right after the end): wait for it
        attempt = self._new_attempt(job)
        if attempt is None:
            return
        spec = job.spec
        # The folder the job was given when it was created (its checkpoint), whichever manager
        # launches this attempt; jobs stored without one run under this manager's folder.
        job_dir = spec.get(ASSIGNED_STATE_DIR) or self.cfg.state_dir / "jobs" / job.job_id
        argv = processes.driver_argv(
            job.job_id,
            attempt.attempt,
            self.cfg.store_url,
            Path(job_dir),
            Path(spec["entrypoint"]),
            list(spec.get("args", [])),
            dict(spec.get("conf", {})),
            self.cfg.lease_ttl,
            from_savepoint=spec.get("from_savepoint"),
        )
        self._spawn(job, attempt, argv)

    def _launch_application(self, app: JobRecord) -> None:
        """Make sure the application's cluster runs, then start its driver on it.

        ``local``: Spark inside the driver. ``spark://``: the user's master, left alone. A
        session cluster's name: its master while it is RUNNING. ``standalone:...``: a cluster
        of the application's own (``app-<id>``), started on a thread; the driver starts on a
        later step, once the cluster is RUNNING. A cluster that cannot take the application
        fails the attempt, and the application's restart strategy decides what comes next.
        """
        spec = app.spec
        try:
            ready, master, cluster_conf = self._master_for(app)
        except _CannotRun as e:
            attempt = self._new_attempt(app)
            if attempt is not None:
                self._failed(app, attempt, str(e))
            return
        if not ready:
            return
        attempt = self._new_attempt(app)
        if attempt is None:
            return
        # The cluster's needs (executors as large as its workers, decommissioning) under the
        # application's own settings, which win.
        conf = {**cluster_conf, **spec.get("conf", {})}
        if master is not None:
            conf["spark.master"] = master
            if _loopback(master):
                # Executors on the loopback "hosts" reach the driver there, whatever this
                # host's name resolves to.
                conf.setdefault("spark.driver.host", "127.0.0.1")
        app_dir = spec.get(ASSIGNED_STATE_DIR) or self.cfg.state_dir / "apps" / app.job_id
        argv = processes.appdriver_argv(
            app.job_id,
            attempt.attempt,
            self.cfg.store_url,
            Path(app_dir),
            Path(spec["entrypoint"]),
            list(spec.get("args", [])),
            conf,
            self.cfg.lease_ttl,
        )
        self._spawn(app, attempt, argv)

    def _master_for(self, app: JobRecord) -> tuple[bool, str | None, dict[str, str]]:
        """(ready, master URL, Spark conf the cluster needs) of the application's cluster; a
        None master is Spark inside the driver."""
        try:
            spec = clusters.parse_cluster(app.spec.get("cluster") or "local")
        except InvalidInput as e:
            raise _CannotRun(f"its cluster {app.spec.get('cluster')!r}: {e.message}") from None
        if spec.kind == "local":
            return True, None, {}
        if spec.kind == "external":
            # Harmless where the master never decommissions; lets a graceful worker removal
            # (a stoker session cluster given by its URL) end in seconds, not at its timeout.
            return True, spec.master_url, dict(clusters.DECOMMISSION_CONF)
        if spec.kind == "session":
            name = str(spec.name)
            rec = self._find_cluster(name)
            if rec is None:
                raise _CannotRun(f"its session cluster {name!r} does not exist")
            if rec.state != ClusterState.RUNNING or not rec.master_url:
                raise _CannotRun(f"its session cluster {name!r} is {rec.state}")
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
        rec = self._find_cluster(name)
        if rec is not None and rec.state == ClusterState.STOPPED:
            self.store.delete_cluster(name)  # an earlier run's: this run gets a fresh one
            rec = None
        if rec is None:
            rec, created = self.store.create_cluster(
                name, ClusterKind.APP, cluster_spec_dict(spec), owner_app=app.job_id
            )
            if created:
                log.info("application %s: starting its cluster %s", app.job_id, name)
                self._in_background(name, self._start_own_cluster, name, spec)
                return False, None
        if rec.state == ClusterState.RUNNING and rec.master_url:
            return True, rec.master_url
        if rec.state == ClusterState.STARTING:
            if self.store.clock.now() - rec.updated_at > _STALE_START:
                self._give_up_start(rec)
            return False, None
        if rec.state == ClusterState.FAILED:
            # Stopped (its processes) and made again for the next attempt, if there is one.
            self._in_background(name, self._stop_cluster, name)
            raise _CannotRun(f"its cluster {name} failed: {rec.error or 'no reason recorded'}")
        self._in_background(name, self._stop_cluster, name)  # STOPPING, left by a manager
        return False, None

    def _new_attempt(self, job: JobRecord) -> AttemptRecord | None:
        """Record the next attempt STARTING (its driver claims it), or None if another
        manager or the job's state got there first."""
        assert self.token is not None
        log_path = (
            self.cfg.state_dir / "logs" / job.job_id / f"attempt-{job.current_attempt + 1}.log"
        )
        try:
            return self.store.start_attempt(
                job.job_id,
                Owner(host=_host(), pid=0, pid_started="unknown"),
                self.cfg.startup_ttl,
                job.current_attempt,
                previous_dead=True,  # only reached when the previous attempt has ended
                restart=False,
                state=AttemptState.STARTING,
                log_path=str(log_path),
                leader=(self.cfg.holder, self.token),
            )
        except (DuplicateJob, JobTerminal) as e:
            log.info("%s %s not started: %s", _what(job), job.job_id, e)
            return None

    def _spawn(self, job: JobRecord, attempt: AttemptRecord, argv: list[str]) -> None:
        """Start the attempt's driver process and record who it is."""
        entry = Path(job.spec["entrypoint"])
        try:
            proc = processes.spawn(argv, Path(str(attempt.log_path)), cwd=entry.parent)
        except OSError as e:
            self._failed(job, attempt, f"cannot start the driver: {e}")
            return
        self._children[(job.job_id, attempt.attempt)] = proc
        from stoker.procs import process_start_marker

        self.store.set_attempt_owner(
            job.job_id,
            attempt.attempt,
            Owner(host=_host(), pid=proc.pid, pid_started=process_start_marker(proc.pid)),
        )
        self.started_attempts += 1
        log.info(
            "%s %s: attempt %d started as pid %d",
            _what(job),
            job.job_id,
            attempt.attempt,
            proc.pid,
        )

    # jobs of applications ------------------------------------------------------------------
    def _tend_in_app(self, job: JobRecord, app: JobRecord | None) -> None:
        """A live job of an application: its driver runs, restarts and ends it. Only once the
        application has ended (or is gone) does the leader end what is still live of it, so
        that no job outlives its application: FAILED with the application's error when it
        failed, CANCELED otherwise."""
        if app is not None and not app.state.terminal:
            return
        if app is None:
            target, why = JobState.FAILED, f"application {job.app_id} is gone"
        elif app.state == JobState.FAILED:
            target = JobState.FAILED
            why = f"application {app.job_id} ended FAILED" + (
                f": {app.last_error}" if app.last_error else ""
            )
        else:
            target, why = JobState.CANCELED, f"application {app.job_id} ended {app.state}"
        if job.current_attempt:
            end = AttemptState.FAILED if target == JobState.FAILED else AttemptState.CANCELED
            after = self.store.finish_attempt(
                job.job_id, job.current_attempt, end, target, error=why
            )
        else:
            after = self.store.set_job_state(job.job_id, target, why)
        log.info("job %s: %s; the job is now %s", job.job_id, why, after.state)

    # clusters of applications --------------------------------------------------------------
    def _tend_clusters(self, apps: dict[JobId, JobRecord], now: float) -> None:
        """Tear down every application's own cluster whose application has ended (or is gone)
        and that is not STOPPED yet, whoever started it: a new leader does it from the store."""
        mono = time.monotonic()
        if mono - self._clusters_looked < _CLUSTERS_EVERY:
            return
        self._clusters_looked = mono
        for rec in self.store.list_clusters():
            if rec.kind != ClusterKind.APP or self._busy(rec.name):
                continue
            owner = apps.get(JobId(rec.owner_app)) if rec.owner_app else None
            if owner is not None and not owner.state.terminal:
                continue  # in use; a stale start is the launch's to give up
            if self._cluster_retry.get(rec.name, float("-inf")) > mono:
                continue
            log.info(
                "cluster %s: its application %s has %s; tearing it down",
                rec.name,
                rec.owner_app,
                "ended" if owner is not None else "gone",
            )
            self._in_background(rec.name, self._stop_cluster, rec.name)

    def _give_up_start(self, rec: ClusterRecord) -> None:
        """A start recorded by a manager that is gone: FAILED, then stopped (on a thread);
        the application's next look starts a new one."""
        log.warning("cluster %s: its start was left unfinished; stopping it", rec.name)
        self.store.update_cluster(
            rec.name,
            state=ClusterState.FAILED,
            error="its start was left unfinished by a job manager that is gone",
        )
        self._in_background(rec.name, self._stop_cluster, rec.name)

    def _start_own_cluster(self, name: str, spec: clusters.ClusterSpec) -> None:
        """On a thread: start the cluster, recording each process as it starts; RUNNING when
        every worker is ALIVE, FAILED with the error otherwise (what started is stopped)."""
        recorded: dict[str, ClusterProcess] = {}  # by id: a JVM started again replaces its try

        def on_process(info: ClusterProcess) -> None:
            recorded[info.id] = info
            self.store.update_cluster(name, processes=list(recorded.values()))

        try:
            started = clusters.start_standalone(
                name, spec, self.cfg.state_dir / "clusters" / name, on_process=on_process
            )
        except Exception as e:
            log.warning("cluster %s failed to start: %s", name, e)
            self.store.update_cluster(name, state=ClusterState.FAILED, error=str(e))
            return
        try:
            self.store.update_cluster(
                name,
                state=ClusterState.RUNNING,
                master_url=started.master_url,
                web_url=started.web_url,
                processes=started.processes,
            )
        except StokerError as e:  # given up meanwhile (a takeover): nothing may stay behind
            log.warning("cluster %s started but cannot be recorded RUNNING (%s); stopping", name, e)
            clusters.stop_processes(started.processes)
            return
        log.info("cluster %s: RUNNING at %s", name, started.master_url)

    def _stop_cluster(self, name: str) -> None:
        """On a thread: STOPPING, every recorded process stopped, STOPPED. A stop that fails
        leaves it FAILED with the error, tried again after ``_STOP_RETRY``."""
        rec = self._find_cluster(name)
        if rec is None or rec.state == ClusterState.STOPPED:
            return
        if rec.state != ClusterState.STOPPING:
            rec = self.store.update_cluster(name, state=ClusterState.STOPPING)
        try:
            clusters.stop_processes(rec.processes)
        except StokerError as e:
            log.warning("cluster %s: stopping failed: %s", name, e)
            self._cluster_retry[name] = time.monotonic() + _STOP_RETRY
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
        self._cluster_work[name] = thread
        thread.start()

    def _busy(self, name: str) -> bool:
        """Whether a start or stop of cluster ``name`` runs on this manager now."""
        thread = self._cluster_work.get(name)
        if thread is not None and not thread.is_alive():
            del self._cluster_work[name]
            return False
        return thread is not None

    def wait_cluster_work(self, timeout: float) -> bool:
        """Wait until no cluster start or stop runs here (tests, shutdown); whether none does."""
        deadline = time.monotonic() + timeout
        for thread in list(self._cluster_work.values()):
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self._cluster_work.values())

    def _find_cluster(self, name: str) -> ClusterRecord | None:
        try:
            return self.store.get_cluster(name)
        except ClusterNotFound:
            return None

    # watching ------------------------------------------------------------------------------
    def _never_launched(self, attempt: AttemptRecord, now: float) -> bool:
        return (
            attempt.state == AttemptState.STARTING
            and attempt.owner.pid == 0
            and (attempt.job_id, attempt.attempt) not in self._children
            and now - attempt.started_at > self.cfg.launch_grace
        )

    def _dead_because(self, attempt: AttemptRecord, now: float) -> str | None:
        """Why a STARTING/RUNNING attempt is to be given up, or None while it may be alive."""
        child = self._children.get((attempt.job_id, attempt.attempt))
        if child is not None and child.poll() is not None:
            return (
                f"the driver exited with code {child.returncode} without ending its attempt"
                + _last_words(attempt.log_path)
            )
        if attempt.owner.pid and processes.is_dead(attempt.owner):
            return f"the driver (pid {attempt.owner.pid}) is gone"
        if attempt.lease_expires_at <= now:
            return f"the lease of attempt {attempt.attempt} expired"
        return None

    def _failed(self, job: JobRecord, attempt: AttemptRecord, why: str) -> None:
        strategy = parse_strategy(job.spec.get("restart_strategy"))
        now = self.store.clock.now()
        decision = strategy.decide(self._failure(job, attempt, now))
        delay = decision.delay
        # attempt_failed counts the failure only if this call moves the job on: a second
        # manager that briefly also thinks it leads counts nothing again.
        after = self.store.attempt_failed(
            job.job_id,
            attempt.attempt,
            why,
            None if delay is None else now + delay,
            reset=decision.reset,
        )
        log.warning(
            "job %s: attempt %d failed (%s); job is now %s",
            job.job_id,
            attempt.attempt,
            why,
            after.state,
        )
        if after.state.terminal:
            self._kill(attempt)  # nothing of a failed or canceled job may keep running

    def _failure(self, job: JobRecord, attempt: AttemptRecord, now: float) -> Failure:
        """What the restart strategy needs to know about this failure, from the store.

        The times of earlier failures are the ends of the job's FAILED attempts (the ones
        counted: not those the manager replaced, and none from before the job's counter was
        last set back by an explicit restart or a reset).
        """
        earlier: list[float] = []
        if job.failures:
            ended = [
                a.ended_at
                for a in self.store.list_attempts(job.job_id)
                if a.state == AttemptState.FAILED
                and a.attempt != attempt.attempt
                and a.ended_at is not None
                and a.error != _NEVER_LAUNCHED
            ]
            earlier = sorted(ended)[-job.failures :]
        ran_for = (attempt.ended_at or now) - attempt.started_at
        return Failure(job.failures, max(0.0, ran_for), now, tuple(earlier))

    def _enforce_cancel(self, job: JobRecord, attempt: AttemptRecord, now: float) -> None:
        asked = job.cancel_requested_at or now
        if now - asked < self.cfg.cancel_timeout:
            return
        log.warning("job %s: cancel timed out, killing attempt %d", job.job_id, attempt.attempt)
        self._kill(attempt)
        self.store.attempt_failed(job.job_id, attempt.attempt, "killed: cancel timed out", None)

    def _kill(self, attempt: AttemptRecord) -> None:
        # Only a process that is provably the attempt's (same host, same pid start time): a
        # driver that died long ago may have left its pid to an unrelated process group.
        owner = attempt.owner
        if owner.pid and owner.host == _host() and not processes.is_dead(owner):
            processes.kill_group(owner.pid)

    def _reap(self) -> None:
        for key, proc in list(self._children.items()):
            if proc.poll() is not None:
                # Keep the exit visible to _dead_because until the attempt has ended.
                att = self.store.get_attempt(*key)
                if att is None or att.state not in _LIVE_ATTEMPT:
                    del self._children[key]


def _last_words(log_path: str | None, max_bytes: int = 4096) -> str:
    """The driver's last error line from its log, to make a failure readable at a glance."""
    if not log_path:
        return ""
    try:
        with open(log_path, "rb") as fh:
            fh.seek(0, 2)
            fh.seek(max(0, fh.tell() - max_bytes))
            lines = fh.read().decode("utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    for line in reversed(lines):
        text = line.strip()
        if text and ("Error" in text or "Exception" in text or text.startswith("stoker")):
            return f": {text[:500]}"
    return ""


def _host() -> str:
    import socket

    return socket.gethostname()


def _what(job: JobRecord) -> str:
    return "application" if job.kind == JobKind.APPLICATION else "job"


def _loopback(master_url: str) -> bool:
    """Whether a ``spark://`` master listens on a loopback address."""
    host = urlsplit(master_url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
