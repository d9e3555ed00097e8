"""The leader's janitor: the sinks of every ended job are resolved, and resolved again once
whatever still ran for the job is gone.

A job that ends leaves nothing prepared. Its driver resolves its sinks itself on every way out
(``runtime/runner.py``), but a driver killed by the manager (the cancel timeout, a job FAILED
after its restarts ran out) cannot, and a fenced zombie attempt may prepare parts after the
healthy attempt's recovery ran. The store says what is owed: ``resolved_at`` is NULL for an
ended job whose sinks nobody resolved since it ended. For such a job the janitor starts a
cleanup process (``python -m stoker.runtime.cleanup``, the runtime layer: the manager imports
neither Spark nor the user's sinks), which rebuilds the job's sinks from the descriptors its
last attempt recorded in the store (no application file is loaded, no user code runs), runs
recovery and sets ``resolved_at``.

When (``settle`` is the grace period, default 60 s):
- **owed** (``resolved_at`` NULL): as soon as no process of the job's attempts can still be
  running: each is provably gone (same host), never launched, or its lease has expired;
- **again**: a job resolved less than ``settle`` after it ended (a zombie might have prepared
  since) is resolved once more when every process of its attempts is provably gone, or else
  at ``settle`` after the end. A job resolved at or after ``settle`` is settled for good
  (store-computable, so a new leader agrees); one resolved by a cleanup that began once every
  process was gone, or for which no driver ever ran, is recorded settled in the store
  (``set_settled``): no leader, this one restarted or the next, resolves it again (a
  manager's start no longer re-runs the cleanup of every ended job).

The janitor walks the unsettled jobs a slice at a time (after an upgrade
over thousands of them, one look took 6.7-56 s of the leader's tick and lost its lease):
``slice`` jobs per read (``Store.unsettled_page``, through an index of the unsettled jobs
only), as many slices as fit in ``budget`` seconds of a tick (one at least), the rest in the
next ticks; between two slices it asks the store whether it still leads, and stops if not.
Every write it makes carries the leader's fencing token: a janitor whose manager was replaced
without noticing changes nothing. A job that is not its to clean (``stoker run``'s), or that
was resolved past the grace (settled by the rule), is settled in the store as it passes: no
janitor reads it again until it ends again.

One cleanup per job at a time, at most ``parallel`` at once; a failed one is retried after
``retry`` seconds, doubling up to ``retry_max``; one that runs longer than ``timeout`` is
killed. Logs go to ``<state dir>/logs/<job>/cleanup.log``. Jobs run in-process without a
manager (spec kind other than ``app``) are not the janitor's: their runner resolves them at
its end, and the next run's recovery does it again if that failed. Jobs of an application
(spec kind ``in_app``) are: their application's driver may be killed as any driver is, and
their sinks were recorded the same way; their folder is ``<application's folder>/jobs/<job>``.
Application records have no sinks of their own and are not looked at.
"""

from __future__ import annotations

import logging
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from stoker.errors import JobNotFound, NotLeader
from stoker.manager import processes
from stoker.manager.leader import LeaderLease
from stoker.manager.submit import ASSIGNED_STATE_DIR, job_folder
from stoker.store import AttemptRecord, JobRecord, Store
from stoker.types import JobId, SpecKind

# Spec kinds of the jobs whose sinks the janitor resolves: a job a manager started alone, and a
# job of an application (both recorded their sinks' descriptors in the store).
_CLEANED_KINDS = (SpecKind.MANAGED, SpecKind.IN_APP)

log = logging.getLogger("stoker.janitor")


@dataclass(frozen=True)
class JanitorConfig:
    """How often and how patiently ended jobs are cleaned."""

    every: float = 1.0  # seconds between looks at the store
    settle: float = 60.0  # after a job's end: resolve once more (a zombie's late parts)
    retry: float = 10.0  # first delay after a failed cleanup; doubles
    retry_max: float = 600.0
    timeout: float = 300.0  # a cleanup running longer is killed (and retried)
    parallel: int = 2  # cleanup processes at once
    slice: int = 50  # unsettled jobs read and judged at a time
    budget: float = 0.01  # seconds of a tick its slices may take (one slice at least)


@dataclass
class _Running:
    proc: subprocess.Popen[bytes]
    started: float  # time.monotonic()
    final: bool  # every process of the job's attempts was gone when it started
    ended_at: float  # the job's updated_at when it started: which end it resolves


@dataclass
class _Backoff:
    delay: float
    next_at: float  # time.monotonic()


@dataclass
class Janitor:
    """Starts and watches the cleanup processes of ended jobs; a task the supervisor owns and
    steps while it leads (``lease``: its writes carry the fencing token, and it checks between
    slices that it still leads; None: unfenced, for a janitor stepped alone)."""

    store: Store
    state_dir: Path
    store_url: str
    config: JanitorConfig = field(default_factory=JanitorConfig)
    lease: LeaderLease | None = None
    _running: dict[JobId, _Running] = field(default_factory=dict)
    _backoff: dict[JobId, _Backoff] = field(default_factory=dict)
    _last: float = float("-inf")  # time.monotonic() when the last walk began
    _cursor: tuple[float, str] | None = None  # where the walk under way goes on
    _walking: bool = False
    slices: list[int] = field(default_factory=list)  # jobs judged per slice, the last step's

    def step(self) -> None:
        """Reap finished cleanups; go on with the walk under way, or begin one every
        ``config.every`` seconds: slices of the unsettled jobs until the tick's budget is
        spent, the walk is done or leadership is lost."""
        self._reap()
        self.slices = []
        mono = time.monotonic()
        if not self._walking:
            if mono - self._last < self.config.every:
                return
            self._last, self._walking, self._cursor = mono, True, None
        while True:
            rows, attempts = self.store.unsettled_slice(self._cursor, self.config.slice)
            try:
                self._slice(rows, attempts)
            except NotLeader:
                self._lost()
                return
            self.slices.append(len(rows))
            if len(rows) < self.config.slice:
                self._walking = False  # the walk is done; the next begins in ``every``
                return
            last = rows[-1]
            self._cursor = (last.updated_at, last.job_id)
            if time.monotonic() - mono >= self.config.budget:
                return  # the rest in the next ticks
            if self.lease is not None and not self.lease.confirm():
                log.warning("the janitor stops: this manager leads no more")
                self._walking = False
                return

    def _slice(self, rows: list[JobRecord], of: dict[JobId, list[AttemptRecord]]) -> None:
        """Judge each job of one slice (``of``: their attempts, read with them); settle in one
        write those it owes nothing."""
        now, mono = self.store.clock.now(), time.monotonic()
        owed_nothing: list[tuple[JobId, float]] = []
        never_ran: list[tuple[JobId, float]] = []
        for job in rows:
            if not job.state.terminal:
                continue
            if job.spec.get("kind") not in _CLEANED_KINDS or (
                job.resolved_at is not None
                and job.resolved_at >= job.updated_at + self.config.settle
            ):
                # Not its to clean (its runner resolves it), or resolved for good by the rule.
                owed_nothing.append((job.job_id, job.updated_at))
                continue
            if job.job_id in self._running or len(self._running) >= self.config.parallel:
                continue  # judged in a later walk
            backoff = self._backoff.get(job.job_id)
            if backoff is not None and backoff.next_at > mono:
                continue
            attempts = of.get(job.job_id, [])
            if all(a.owner.pid == 0 for a in attempts):
                # No driver ever ran for it, so nothing can be prepared: no process needed.
                never_ran.append((job.job_id, job.updated_at))
                continue
            due = self._due(job, attempts, now)
            if due is not None:
                self._start(job, final=due)
        self.store.settle_ends(owed_nothing, leader=self._fence())
        self.store.settle_ends(never_ran, resolve=True, leader=self._fence())

    def _fence(self) -> tuple[str, int] | None:
        """What a write of this janitor carries: the leader's (holder, token)."""
        if self.lease is None:
            return None
        if not self.lease.held:
            raise NotLeader("the janitor's manager leads no more")
        return self.lease.fence

    def _lost(self) -> None:
        if self._walking or (self.lease is not None and self.lease.held):
            log.warning("the janitor's write was refused: this manager leads no more")
        self._walking = False
        if self.lease is not None:
            self.lease.lost()

    def sweep(self) -> None:
        """One step for a leading supervisor. Never raises: a janitor failure must not stop
        the supervisor from tending live jobs."""
        try:
            self.step()
        except Exception:
            log.exception("janitor step failed")

    def busy(self, job_id: JobId) -> bool:
        """Whether a cleanup of ``job_id`` is running now: no attempt may start beside it
        (recovery aborts every undecided part, a new attempt's too)."""
        return job_id in self._running

    # when ----------------------------------------------------------------------------------
    def _due(self, job: JobRecord, attempts: list[AttemptRecord], now: float) -> bool | None:
        """None: not yet. Otherwise start a cleanup; True if it is the job's last one."""
        if all(_gone(a) for a in attempts):
            return True
        if now >= job.updated_at + self.config.settle:
            return True  # resolved_at lands past the grace: settled by the store's rule
        if job.resolved_at is None and all(a.state.ended for a in attempts):
            # Owed now; a process we cannot see may still run: again later. An ended attempt
            # renews nothing (the store refuses it): no clock is compared (stoker.leases).
            return False
        return None

    # processes -----------------------------------------------------------------------------
    def _job_dir(self, job: JobRecord) -> Path:
        """The folder the job's attempts ran in: assigned when it was created; for a job of
        an application, ``jobs/<job>`` in the application's folder."""
        if job.app_id is None or job.spec.get(ASSIGNED_STATE_DIR):
            return job_folder(job, self.state_dir)
        try:
            app_dir = self.store.get_job(job.app_id).spec.get(ASSIGNED_STATE_DIR)
        except JobNotFound:
            app_dir = None
        base = Path(app_dir) if app_dir else self.state_dir / "apps" / job.app_id
        return base / "jobs" / job.job_id

    def _start(self, job: JobRecord, final: bool) -> None:
        argv = processes.cleanup_argv(job.job_id, self.store_url, self._job_dir(job))
        log_path = self.state_dir / "logs" / job.job_id / "cleanup.log"
        try:
            proc = processes.spawn(argv, log_path, cwd=self.state_dir)
        except OSError as e:
            log.warning("job %s: cannot start its cleanup: %s", job.job_id, e)
            self._failed(job.job_id)
            return
        self._running[job.job_id] = _Running(proc, time.monotonic(), final, job.updated_at)
        log.info("job %s (%s): cleanup started as pid %d", job.job_id, job.state, proc.pid)

    def _reap(self) -> None:
        mono = time.monotonic()
        for jid, run in list(self._running.items()):
            code = run.proc.poll()
            if code is None:
                if mono - run.started <= self.config.timeout:
                    continue
                log.warning("job %s: cleanup ran over %.0f s; killed", jid, self.config.timeout)
                processes.kill_group(run.proc.pid)
                code = run.proc.wait()
            del self._running[jid]
            if code == 0:
                self._backoff.pop(jid, None)
                if run.final:
                    try:
                        self.store.set_settled(jid, run.ended_at, leader=self._fence())
                    except NotLeader:
                        self._lost()  # the next leader resolves it once more
                log.info("job %s: cleanup done", jid)
            else:
                log.warning("job %s: cleanup exited with code %s", jid, code)
                self._failed(jid)

    def _failed(self, jid: JobId) -> None:
        prev = self._backoff.get(jid)
        delay = self.config.retry if prev is None else min(prev.delay * 2, self.config.retry_max)
        self._backoff[jid] = _Backoff(delay, time.monotonic() + delay)


def _gone(attempt: AttemptRecord) -> bool:
    """No process of this attempt can run: never launched, or provably gone (same host)."""
    return attempt.owner.pid == 0 or processes.is_dead(attempt.owner)
