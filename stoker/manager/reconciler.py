"""Job reconciliation: each live record of the jobs table brought one step closer to where it
should be, from what the store says and what the launcher sees of the drivers.

A record with a driver of its own (a job submitted alone, an application) gets its next attempt
when it is due; a live attempt whose driver is gone, exited without ending it, or let its lease
lapse fails, and the job's restart strategy decides what comes next; a cancel that the driver
did not honour in time is enforced by killing it. A job of an application is its driver's
business: never launched, restarted or failed here, only ended once its application has ended.
"""

from __future__ import annotations

import logging

from stoker.errors import EXIT_CODES, InvalidInput, JobNotFound, NotLeader, StokerError
from stoker.errortext import one_line
from stoker.leases import FALLBACK_TTL, LeaseWatch
from stoker.manager.dispatch import Dispatcher, StartFailed
from stoker.manager.endings import end_failing, repair
from stoker.manager.judged import JudgedDrivers, seen_alive
from stoker.manager.launcher import DriverLauncher
from stoker.manager.leader import LeaderLease
from stoker.manager.state import repartition_holder
from stoker.manager.submit import job_folder
from stoker.restart import NEVER_LAUNCHED, FailureCause, parse_strategy, restart_decision
from stoker.store import AttemptRecord, JobRecord, Owner, Store
from stoker.types import AttemptNo, AttemptState, JobId, JobState, UpgradeState

log = logging.getLogger("stoker.supervisor")

_LIVE_ATTEMPT = (AttemptState.STARTING, AttemptState.RUNNING)

# Resuming a job suspended again and again (its driver stopped right after each start): the
# second suspension in a row waits this long before the next start, each further one twice as
# long, up to the maximum.
SUSPEND_BACKOFF = 1.0
# A driver's exit code for bad input (stoker.errors), and how long a driver that ended its
# attempt FAILED is waited for to exit (its code decides whether the job restarts).
EXIT_BAD_INPUT = EXIT_CODES[InvalidInput]
EXIT_WAIT = 10.0
SUSPEND_BACKOFF_MAX = 60.0


class JobReconciler:
    """Tends every live record of the jobs table (leader only)."""

    def __init__(
        self,
        store: Store,
        lease: LeaderLease,
        launcher: DriverLauncher,
        dispatcher: Dispatcher,
        launch_grace: float,
        cancel_timeout: float,
    ) -> None:
        self.store = store
        self.lease = lease
        self.launcher = launcher
        self.dispatcher = dispatcher
        self.launch_grace = launch_grace  # an attempt with no driver after this: never launched
        self.cancel_timeout = cancel_timeout  # graceful cancel, then the driver is killed
        self._held_by: dict[JobId, Owner] = {}  # SUSPENDED jobs waiting for a repartition
        # The drivers' leases as this manager saw them, on its monotonic clock. Empty for a
        # new leader: it judges a lease lapsed only after watching it for a whole TTL.
        self._leases = LeaseWatch(store.clock.monotonic)
        # The records whose drivers this term has judged: until then shown RECONCILING.
        self.judged = JudgedDrivers(store, lease)

    def tend_all(
        self,
        records: list[JobRecord],
        apps: dict[JobId, JobRecord],
        now: float,
        attempts: dict[JobId, AttemptRecord] | None = None,
    ) -> bool:
        """One step for every live record (``apps``: the applications among them; an ended
        one is read when a live job of it is tended); False if the leader lease was lost
        meanwhile (the rest waits for the next leader). ``attempts``: their current attempts
        as read with them (one read for the tick; a record without one reads its own).

        Oldest first (by when each record last changed): when the dispatcher bounds the
        drivers starting at once, the records waiting to start are started in the order they
        came to wait, and none waits behind newer ones for ever."""
        self.dispatcher.new_step()
        self.judged.new_tick()
        for job in sorted(records, key=_waiting_since):
            if job.state.terminal:
                continue
            try:
                if job.app_id is not None:
                    self.tend_in_app(job, apps.get(job.app_id) or self._ended_app(job.app_id))
                else:
                    self.tend(job, now, (attempts or {}).get(job.job_id))
            except NotLeader:
                log.warning("lost the leader lease while tending %s", job.job_id)
                self.lease.lost()
                return False
            except StokerError as e:
                log.info("job %s: %s", job.job_id, e)
        return self.judged.record()

    def _ended_app(self, app_id: JobId) -> JobRecord | None:
        """An application not among the live records: its record as it ended, or None if it
        is gone (a job of it still live is then ended by :meth:`tend_in_app`)."""
        try:
            return self.store.get_job(app_id)
        except JobNotFound:
            return None

    def tend(self, job: JobRecord, now: float, read: AttemptRecord | None = None) -> None:
        """A live record with a driver of its own (``read``: its current attempt, read with
        it)."""
        if job.state in (JobState.CREATED, JobState.RESTARTING):
            if job.next_attempt_at is None or job.next_attempt_at <= now:
                self._start(job)
            return
        if job.state == JobState.FAILING:
            end_failing(self.store, self.launcher, job, now)
            return
        if job.state == JobState.SUSPENDED:
            # Its driver was stopped by a signal (host shutdown, container stop) and let its
            # last epoch commit: resume at once. A suspension is no failure: no restart is
            # used up (Flink does not count one either). But not while its cause is known to
            # last, and not in a loop of Spark starts (_suspension_holds).
            if self._swap_due(job) or not self._suspension_holds(job, now):
                self._start(job)
            return
        if read is not None and read.attempt == job.current_attempt:
            attempt: AttemptRecord | None = read
        elif job.current_attempt:
            attempt = self.store.get_attempt(job.job_id, job.current_attempt)
        else:
            attempt = None
        if attempt is None:
            return
        if attempt.state in _LIVE_ATTEMPT:
            if self._never_launched(attempt, now):
                # The manager that made it died before starting its driver (no pid recorded
                # within the grace time). A driver it did start cannot claim the attempt once a
                # newer one exists, so replace it at once, without using up a restart.
                self.store.attempt_failed(
                    job.job_id, attempt.attempt, NEVER_LAUNCHED, now, FailureCause.NEVER_LAUNCHED
                )
                return
            why = self._dead_because(attempt, now)
            if why is None and seen_alive(self.launcher, self._leases, attempt):
                self.judged.judge(job.job_id)
            if why is not None:
                self.fail(job, attempt, why)
                self._take_over(job.job_id)
            elif job.state == JobState.RUNNING and _main_raised(attempt):
                # An application's program raised; its driver keeps the jobs running and
                # waits for this: the strategy's decision, taken once (see fail).
                self.fail(job, attempt, attempt.error or "the application's main raised")
                self._take_over(job.job_id)
            elif job.state == JobState.CANCELING:
                self._enforce_cancel(job, attempt, now)
        elif attempt.state == AttemptState.FAILED:
            if self._exit_pending(attempt, now):
                return  # its exit code says whether a restart can help: judged next tick
            self.fail(job, attempt, attempt.error or "the driver failed")
            self._take_over(job.job_id)
        else:
            repair(self.store, job, attempt)

    def _take_over(self, jid: JobId) -> None:
        """Right after a failure: a job whose warm standby is ready gets its next attempt in
        this step, not the next one (its previous driver's processes are killed already; if
        one is still seen, the start waits for the next step as always)."""
        job = self.store.get_job(jid)
        due = job.next_attempt_at is not None and job.next_attempt_at <= self.store.clock.now()
        if (
            job.state == JobState.RESTARTING
            and due
            and self.dispatcher.standbys.ready(jid, spec=job.spec) is not None
        ):
            self._start(job)

    def _swap_due(self, job: JobRecord) -> bool:
        """Whether the job was suspended by its upgrade's swap (its running attempt asked to
        stop at an epoch boundary): the new code takes over at once, whatever came before
        (a suspension asked for is no loop of Spark starts)."""
        up = self.store.live_upgrade(job.job_id)
        return up is not None and up.swap_due(job.current_attempt)

    def _suspension_holds(self, job: JobRecord, now: float) -> bool:
        """Whether a SUSPENDED job waits instead of resuming now.

        - Its state is being repartitioned (``stoker state repartition`` holds the lock in
          its folder): a driver would find the lock and end SUSPENDED again, after a whole
          Spark start. It resumes once the lock is gone.
        - It was suspended again right after resuming: the n-th suspension in a row waits
          ``SUSPEND_BACKOFF * 2**(n-2)`` seconds after the last one ended (1, 2, 4 ... up to
          ``SUSPEND_BACKOFF_MAX``); the first resumes at once.
        """
        holder = repartition_holder(job_folder(job, self.dispatcher.state_dir))
        if holder is not None:
            if self._held_by.get(job.job_id) != holder:
                self._held_by[job.job_id] = holder
                log.info(
                    "job %s stays SUSPENDED while its state is repartitioned (pid %d on %s); "
                    "it resumes when the repartition ends",
                    job.job_id,
                    holder.pid,
                    holder.host,
                )
            return True
        self._held_by.pop(job.job_id, None)
        attempts = self.store.list_attempts(job.job_id)
        n = 0
        for a in reversed(attempts):
            if a.state != AttemptState.SUSPENDED:
                break
            n += 1
        if n < 2 or attempts[-1].ended_at is None:
            return False
        wait = min(SUSPEND_BACKOFF * 2 ** (n - 2), SUSPEND_BACKOFF_MAX)
        return now < attempts[-1].ended_at + wait

    def _start(self, job: JobRecord) -> None:
        try:
            self.dispatcher.start(job)
        except StartFailed as e:
            self.fail(job, e.attempt, e.why)
            return
        self.judged.judge(job.job_id)  # its driver is this term's: never shown RECONCILING

    # jobs of applications ------------------------------------------------------------------
    def tend_in_app(self, job: JobRecord, app: JobRecord | None) -> None:
        """A live job of an application: its driver runs, restarts and ends it. Only once the
        application has ended (or is gone) does the leader end what is still live of it, so
        that no job outlives its application: FAILED with the application's error when it
        failed, CANCELED otherwise."""
        if app is not None and not app.state.terminal:
            return
        if job.state == JobState.CANCELING:
            # Asked to stop (its application's main raised, a cancel): it ends CANCELED,
            # keeping the reason it was asked with; its driver was the application's.
            ended = "is gone" if app is None else f"ended {app.state}"
            target, why = JobState.CANCELED, job.last_error or f"application {job.app_id} {ended}"
        elif app is None:
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

    # watching ------------------------------------------------------------------------------
    def _never_launched(self, attempt: AttemptRecord, now: float) -> bool:
        return (
            attempt.state == AttemptState.STARTING
            and attempt.owner.pid == 0
            and not self.launcher.launched(attempt.job_id, attempt.attempt)
            and now - attempt.started_at > self.launch_grace
        )

    def _dead_because(self, attempt: AttemptRecord, now: float) -> str | None:
        """Why a STARTING/RUNNING attempt is to be given up, or None while it may be alive."""
        code = self.launcher.exit_code(attempt.job_id, attempt.attempt)
        if code is not None:
            words = _last_words(attempt.log_path)
            return f"the driver exited with code {code} without ending its attempt{words}"
        if self.launcher.is_gone(attempt.owner):
            return f"the driver (pid {attempt.owner.pid}) is gone"
        ttl = attempt.lease_ttl if attempt.lease_ttl is not None else FALLBACK_TTL
        if self._leases.lapsed((attempt.job_id, attempt.attempt), attempt.lease_seen, ttl):
            # Judged on this manager's monotonic clock from the renewals it saw (stoker.leases):
            # a clock step or skew between hosts kills no healthy driver.
            log.warning(
                "job %s: attempt %d renewed its lease last %.1fs ago by this manager's clock",
                attempt.job_id,
                attempt.attempt,
                self._leases.unseen_for((attempt.job_id, attempt.attempt)),
            )
            return f"the lease of attempt {attempt.attempt} expired"
        return None

    def watched(self, job_id: JobId, attempt: AttemptNo) -> bool:
        """Whether the attempt is live (its driver's exit is still to be judged)."""
        att = self.store.get_attempt(job_id, attempt)
        return att is not None and att.state in _LIVE_ATTEMPT

    # failing -------------------------------------------------------------------------------
    def _exit_pending(self, attempt: AttemptRecord, now: float) -> bool:
        """Whether a driver that ended its attempt FAILED is still exiting (briefly): its exit
        code is what tells a mistake no restart fixes (bad input) from a failure."""
        if self.launcher.exit_code(attempt.job_id, attempt.attempt) is not None:
            return False
        if not self.launcher.launched(attempt.job_id, attempt.attempt):
            return False  # not ours (another manager started it): judged as it is
        ended = attempt.ended_at if attempt.ended_at is not None else now
        return now - ended < EXIT_WAIT

    def fail(self, job: JobRecord, attempt: AttemptRecord, why: str) -> None:
        """End the attempt FAILED; the job's restart strategy decides whether it restarts,
        unless the driver said its input is bad (exit 2: an analysis error, an output another
        job owns, a setting Spark refuses): the same input fails the same way, so the job fails
        for good at once, as Flink does with a non-recoverable failure (a restart would only
        repeat it)."""
        if self._roll_back(job, attempt, why):
            return
        if _main_raised(attempt):
            why = attempt.error or why  # main's error, not how its driver ended after it
            if job.state == JobState.CANCELING:
                self._end_main_raised(job, attempt, why)
                return
        strategy = parse_strategy(job.spec.get("restart_strategy"))
        now = self.store.clock.now()
        decision = restart_decision(
            strategy, job.failures, attempt, lambda: self.store.list_attempts(job.job_id), now
        )
        delay = decision.delay
        if delay and self.dispatcher.standbys.ready(job.job_id, spec=job.spec) is not None:
            # A warm standby takes over at once: the delay spares a host a loop of Spark
            # starts, and a handover starts none (a new standby warms in the background).
            delay = 0.0
        if (
            self.launcher.exit_code(job.job_id, attempt.attempt) == EXIT_BAD_INPUT
            or attempt.cause == FailureCause.MAIN_BAD_INPUT
        ):
            delay = None
            why = f"{why}; bad input: a restart cannot fix it (fix it, then restart the job)"
        if delay is None and _main_raised(attempt) and job.state == JobState.RUNNING:
            self._give_up_main(job, attempt, why)
            return
        # attempt_failed counts the failure only if this call moves the job on: a second
        # manager that briefly also thinks it leads counts nothing again. A job that fails for
        # good while its driver's processes still run here is FAILING until they are gone.
        after = self.store.attempt_failed(
            job.job_id,
            attempt.attempt,
            why,
            None if delay is None else now + delay,
            cause=_cause(attempt),
            reset=decision.reset,
            driver_running=delay is None and self.launcher.still_running(attempt.owner),
        )
        log.warning(
            "job %s: attempt %d failed (%s); job is now %s",
            job.job_id,
            attempt.attempt,
            why,
            after.state,
        )
        # Nothing of a failed attempt may keep running: not when the job has ended, and not
        # beside the next attempt (a driver whose lease lapsed in a slow start is alive).
        self.launcher.kill(attempt.owner)

    def _give_up_main(self, job: JobRecord, attempt: AttemptRecord, why: str) -> None:
        """The application's strategy gave up after its ``main`` raised: its jobs are canceled
        with the reason and the application goes CANCELING, in one transaction (the decision,
        recorded once: a later step or another leader reads it, and decides nothing again).
        A driver still alive stops each job after its epoch in flight and ends the application
        FAILED; it is not killed here (a cancel that does not end in time is, as any cancel).
        Its attempt ended already (the driver exited): the application is FAILED at once."""
        after = self.store.fail_application(
            job.job_id,
            attempt.attempt,
            why,
            f"application {job.job_id}'s main raised: " + one_line(why),
            driver_running=self.launcher.still_running(attempt.owner),
        )
        log.warning(
            "application %s: attempt %d: main raised (%s) and the restart strategy gives up: "
            "its jobs are canceled; the application is now %s",
            job.job_id,
            attempt.attempt,
            one_line(why),
            after.state,
        )
        if after.state != JobState.CANCELING:  # FAILED, or FAILING until they are gone
            self.launcher.kill(attempt.owner)

    def _end_main_raised(self, job: JobRecord, attempt: AttemptRecord, why: str) -> None:
        """An application whose ``main`` raised, CANCELING (its strategy gave up, or a cancel
        came meanwhile), whose driver is gone or has ended its attempt: it ends FAILED with
        main's error, no strategy asked again and no failure counted again. Its jobs still
        live end CANCELED once it has (:meth:`tend_in_app`)."""
        self.launcher.kill(attempt.owner)
        # Not FAILED while its driver's processes are still seen (FAILING: its jobs wait).
        running = self.launcher.still_running(attempt.owner)
        target = JobState.FAILING if running else JobState.FAILED
        after = self.store.finish_attempt(
            job.job_id, attempt.attempt, AttemptState.FAILED, target, why
        )
        log.warning(
            "application %s: attempt %d ended after main raised; the application is now %s",
            job.job_id,
            attempt.attempt,
            after.state,
        )

    def _roll_back(self, job: JobRecord, attempt: AttemptRecord, why: str) -> bool:
        """An attempt of an upgrade's new code failed in its watch window: the upgrade is
        ROLLED_BACK and the job's spec the old one again (one transaction), the attempt
        failed without a failure counted, and the next (at once) is the old code's, handed
        to its standby kept warm for this. Whether it was rolled back."""
        up = self.store.live_upgrade(job.job_id)
        if (
            up is None
            or up.state != UpgradeState.SWAPPED
            or up.swap_attempt is None
            or attempt.attempt < up.swap_attempt
        ):
            return False
        detail = f"attempt {attempt.attempt} of the new code failed: {why}"
        if self.store.end_upgrade(up.upgrade_id, UpgradeState.ROLLED_BACK, detail) is None:
            return False
        now = self.store.clock.now()
        self.store.attempt_failed(
            job.job_id, attempt.attempt, why, now, FailureCause.UPGRADE_ROLLED_BACK
        )
        log.warning("job %s: upgrade %s ROLLED_BACK: %s", job.job_id, up.upgrade_id, detail)
        self.launcher.kill(attempt.owner)
        return True

    def _enforce_cancel(self, job: JobRecord, attempt: AttemptRecord, now: float) -> None:
        asked = job.cancel_requested_at or now
        if now - asked < self.cancel_timeout:
            return
        log.warning("job %s: cancel timed out, killing attempt %d", job.job_id, attempt.attempt)
        self.launcher.kill(attempt.owner)
        if _main_raised(attempt):  # it ends FAILED with main's error all the same
            self._end_main_raised(job, attempt, attempt.error or "killed: cancel timed out")
            return
        self.store.attempt_failed(job.job_id, attempt.attempt, "killed: cancel timed out", None)


def _main_raised(attempt: AttemptRecord) -> bool:
    """Whether the attempt's driver said its application's program raised (its cause)."""
    try:
        return attempt.cause is not None and FailureCause(attempt.cause).of_main
    except ValueError:  # a cause of newer code
        return False


def _cause(attempt: AttemptRecord) -> FailureCause:
    """The cause to end a failed attempt with: what its driver said of it, else the job's."""
    if attempt.cause is not None and _main_raised(attempt):
        return FailureCause(attempt.cause)
    return FailureCause.JOB


def _waiting_since(job: JobRecord) -> float:
    """When the record came to wait for a start: its restart's due time, else its last change."""
    return job.next_attempt_at if job.next_attempt_at is not None else job.updated_at


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
