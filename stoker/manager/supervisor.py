"""The leader's work: start attempts as driver processes, watch them, restart or fail jobs.

Every manager runs a :class:`Supervisor`; only the one holding the leader lease acts. It keeps
no state that matters: everything it needs is in the store, so a new leader picks up where the
old one stopped, and drivers that are alive are left alone (re-adopted, not restarted).
"""

from __future__ import annotations

import logging
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from stoker.errors import DuplicateJob, JobTerminal, NotLeader, StokerError
from stoker.manager import janitor, processes, retention
from stoker.manager.restart import Failure, parse_strategy
from stoker.manager.submit import ASSIGNED_STATE_DIR
from stoker.store import AttemptRecord, JobRecord, Owner, RetentionPolicy, Store
from stoker.types import AttemptNo, AttemptState, JobId, JobState

log = logging.getLogger("stoker.supervisor")

_LIVE_ATTEMPT = (AttemptState.STARTING, AttemptState.RUNNING)
# The error of an attempt replaced because its manager died before starting its driver: the
# manager's failure, not the job's, so no restart strategy counts it.
_NEVER_LAUNCHED = "its manager died before starting the driver"


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
        self.started_attempts = 0

    # lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def stop(self, resign: bool = True) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        if resign and self.token is not None:
            self.store.resign_leadership(self.cfg.holder, self.token)
            self.token = None

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
        if not self._lead():
            return
        retention.sweep(self)  # ended jobs' old epoch records (stoker server --retention-*)
        janitor.sweep(self)  # ended jobs: their sinks resolved (docs/architecture.md)
        now = self.store.clock.now()
        for job in self.store.list_jobs():
            if job.state.terminal:
                continue
            try:
                self._tend(job, now)
            except NotLeader:
                log.warning("lost the leader lease while tending %s", job.job_id)
                self.token = None
                return
            except StokerError as e:
                log.info("job %s: %s", job.job_id, e)

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
        spec = job.spec
        if spec.get("kind") != "app":
            return  # a job run in-process by `stoker run` without a server: not ours to start
        if janitor.busy(self, job.job_id):
            return  # its cleanup still runs (a restart right after the end): wait for it
        log_dir = self.cfg.state_dir / "logs" / job.job_id
        nxt = job.current_attempt + 1
        log_path = log_dir / f"attempt-{nxt}.log"
        try:
            attempt = self.store.start_attempt(
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
            log.info("job %s not started: %s", job.job_id, e)
            return
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
        try:
            proc = processes.spawn(argv, log_path, cwd=Path(spec["entrypoint"]).parent)
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
        log.info("job %s: attempt %d started as pid %d", job.job_id, attempt.attempt, proc.pid)

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
