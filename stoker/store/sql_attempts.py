"""Attempts and their leases in SQL: start (compare and swap), claim, renew, end."""

from __future__ import annotations

from typing import Any

from stoker.errors import (
    DuplicateJob,
    InvalidInput,
    InvalidTransition,
    JobTerminal,
    NotLeader,
    StaleAttempt,
)
from stoker.restart import FailureCause
from stoker.store._sqlbase import SqlBase, owner_params
from stoker.store.records import AttemptRecord, JobRecord, Owner
from stoker.store.sql_control import end_controls_in
from stoker.types import (
    ATTEMPTS,
    JOBS,
    AttemptNo,
    AttemptState,
    JobId,
    JobKind,
    JobState,
)


class AttemptsMixin(SqlBase):
    """Implements :class:`stoker.store.protocols.runs.AttemptStore`."""

    def start_attempt(
        self,
        job_id: JobId,
        owner: Owner,
        lease_ttl: float,
        expected_current: AttemptNo,
        previous_dead: bool = False,
        restart: bool = False,
        state: AttemptState = AttemptState.RUNNING,
        log_path: str | None = None,
        leader: tuple[str, int] | None = None,
        app_attempt: AttemptNo | None = None,
        lapsed: tuple[int, float] | None = None,
    ) -> AttemptRecord:
        ATTEMPTS.check(None, state)  # STARTING or RUNNING; before anything is written
        now = self.clock.now()
        with self._tx() as cur:
            if (
                leader is not None
                and not self._x(cur, "check_leader", holder=leader[0], token=leader[1]).fetchone()
            ):
                raise NotLeader(f"leader lease {leader[1]} of {leader[0]} is no longer held")
            job = self._locked_job(cur, job_id)
            if job.state.terminal and not restart:
                raise JobTerminal(job_id, str(job.state))
            if job.state == JobState.CANCELING:
                raise DuplicateJob(job_id, "it is being canceled")
            if app_attempt is not None:
                self._check_app_attempt(cur, job, app_attempt)
            if job.current_attempt != expected_current:
                raise DuplicateJob(job_id, f"attempt {job.current_attempt} started meanwhile")
            if job.current_attempt > 0:
                prev_row = self._x(
                    cur, "get_attempt", job_id=job_id, attempt=job.current_attempt
                ).fetchone()
                prev = AttemptRecord.from_row(prev_row)
                running = prev.state in (AttemptState.RUNNING, AttemptState.STARTING)
                # A newer application driver re-adopts the job: the older driver's attempt is
                # fenced off whatever its lease says (that driver can decide nothing any more).
                adopted = app_attempt is not None and (
                    prev.app_attempt is None or prev.app_attempt < app_attempt
                )
                # Its lease lapsed only by the caller's own monotonic clock: it saw the row's
                # renewals stand still for a whole TTL (stoker.leases), and they still do. No
                # wall clock is compared: a step or a skew would kill a healthy holder.
                gone = lapsed is not None and prev.lease_seen == tuple(lapsed)
                if running and not (previous_dead or adopted or gone):
                    raise DuplicateJob(
                        job_id,
                        f"attempt {prev.attempt} runs as pid {prev.owner.pid} on "
                        f"{prev.owner.host}, its lease renewed "
                        + ("meanwhile" if lapsed is not None else "(not seen lapse)"),
                    )
                if running:
                    # Whatever that process still does, it can no longer decide an epoch.
                    self._end_attempt_in(
                        cur,
                        job_id,
                        prev.attempt,
                        AttemptState.SUPERSEDED,
                        "superseded by a newer attempt",
                        now,
                    )
            new = AttemptNo(job.current_attempt + 1)
            if job.state not in (JobState.CREATED, JobState.RESTARTING):
                # RUNNING (a dead attempt being replaced) or terminal (an explicit restart):
                # pass through RESTARTING so that the table is respected.
                JOBS.check(job.state, JobState.RESTARTING)
            changed = self._x(
                cur,
                "set_current_attempt",
                job_id=job_id,
                attempt=new,
                state=str(JobState.RUNNING),
                expected=expected_current,
                now=now,
            ).rowcount
            if changed != 1:
                raise DuplicateJob(job_id, "another attempt started meanwhile")
            try:
                self._x(
                    cur,
                    "insert_attempt",
                    job_id=job_id,
                    attempt=new,
                    state=str(state),
                    **owner_params(owner),
                    lease_expires_at=now + lease_ttl,
                    lease_ttl=lease_ttl,
                    now=now,
                    log_path=log_path,
                    app_attempt=app_attempt,
                )
            except Exception as e:
                # The attempt number is the fencing token: a row holding it already means
                # someone else started that attempt. That is a duplicate, not a store failure.
                if not self._is_unique_violation(e):
                    raise
                raise DuplicateJob(job_id, f"attempt {new} exists already") from e
            if job.kind == JobKind.JOB:  # counts() is of jobs (see there)
                self._x(cur, "bump_counter", name="attempts", n=1)
            arow = self._x(cur, "get_attempt", job_id=job_id, attempt=new).fetchone()
        return AttemptRecord.from_row(arow)

    def _check_app_attempt(self, cur: Any, job: JobRecord, app_attempt: AttemptNo) -> None:
        """Inside start_attempt's transaction: ``app_attempt`` must be the current, live attempt
        of ``job``'s application. Its row is held (FOR SHARE on PostgreSQL) until the commit,
        so no newer driver attempt can start in between."""
        if job.app_id is None:
            raise InvalidInput(
                "app_attempt", f"job {job.job_id!r} belongs to no application: give none"
            )
        row = self._x(cur, "share_job", job_id=job.app_id).fetchone()
        if row is None:
            raise StaleAttempt(f"application {job.app_id!r} of job {job.job_id!r} is gone")
        app = JobRecord.from_row(row)
        arow = self._x(cur, "get_attempt", job_id=app.job_id, attempt=app.current_attempt)
        current = arow.fetchone()
        live = current is not None and AttemptRecord.from_row(current).state in (
            AttemptState.STARTING,
            AttemptState.RUNNING,
        )
        if app.current_attempt != app_attempt or not live:
            raise StaleAttempt(
                f"application attempt {app_attempt} of {app.job_id!r} may not start an attempt "
                f"of job {job.job_id!r}: the application's current attempt is "
                f"{app.current_attempt}" + ("" if live else ", and it has ended")
            )

    def claim_attempt(
        self, job_id: JobId, attempt: AttemptNo, owner: Owner, lease_ttl: float
    ) -> AttemptRecord:
        now = self.clock.now()
        with self._tx() as cur:
            n = 0
            before = self._x(cur, "lock_attempt", job_id=job_id, attempt=attempt).fetchone()
            if before is not None:
                current = AttemptRecord.from_row(before).state
                try:
                    ATTEMPTS.check(current, AttemptState.RUNNING)
                except InvalidTransition as e:
                    # For the driver this is the fence: another process owns or ended it.
                    raise StaleAttempt(
                        f"attempt {attempt} of job {job_id!r} cannot be claimed: it is {current}"
                    ) from e
                n = self._x(
                    cur,
                    "claim_attempt",
                    job_id=job_id,
                    attempt=attempt,
                    **owner_params(owner),
                    lease_expires_at=now + lease_ttl,
                    lease_ttl=lease_ttl,
                    from_state=str(current),
                ).rowcount
            row = self._x(cur, "get_attempt", job_id=job_id, attempt=attempt).fetchone()
        if n != 1 or row is None:
            state = "missing" if row is None else AttemptRecord.from_row(row).state
            raise StaleAttempt(
                f"attempt {attempt} of job {job_id!r} cannot be claimed: it is {state} "
                "or no longer the current attempt"
            )
        return AttemptRecord.from_row(row)

    def hold_start(
        self, job_id: JobId, attempt: AttemptNo, owner: Owner, lease_ttl: float
    ) -> AttemptRecord:
        now = self.clock.now()
        with self._tx() as cur:
            n = self._x(
                cur,
                "hold_start",
                job_id=job_id,
                attempt=attempt,
                **owner_params(owner),
                lease_expires_at=now + lease_ttl,
                lease_ttl=lease_ttl,
            ).rowcount
            row = self._x(cur, "get_attempt", job_id=job_id, attempt=attempt).fetchone()
        if n != 1 or row is None:
            rec = None if row is None else AttemptRecord.from_row(row)
            why = "missing" if rec is None else f"{rec.state} or no longer the current attempt"
            raise StaleAttempt(f"attempt {attempt} of job {job_id!r} cannot be held: it is {why}")
        return AttemptRecord.from_row(row)

    def count_starting(self) -> int:
        with self._tx(write=False) as cur:
            row = self._x(cur, "count_starting").fetchone()
        return int(row[0]) if row else 0

    def set_attempt_owner(self, job_id: JobId, attempt: AttemptNo, owner: Owner) -> None:
        with self._tx() as cur:
            self._x(
                cur,
                "set_attempt_owner",
                job_id=job_id,
                attempt=attempt,
                **owner_params(owner),
            )

    def attempt_failed(
        self,
        job_id: JobId,
        attempt: AttemptNo,
        error: str,
        next_attempt_at: float | None,
        cause: FailureCause = FailureCause.JOB,
        reset: bool = False,
        driver_running: bool = False,
    ) -> JobRecord:
        """End ``attempt`` FAILED for ``cause`` and move its job on: RESTARTING at
        ``next_attempt_at``, FAILED when that is None (FAILING while ``driver_running``: the
        caller still sees its processes, and ends it FAILED once they are gone), CANCELED if a
        cancel was asked for. A
        no-op for the job if ``attempt`` is no longer its current one. The job's failure count
        grows only for a cause that counts (the job's own). ``reset``: the earlier failures are
        forgiven (the count starts afresh with this one)."""
        now = self.clock.now()
        with self._tx() as cur:
            job = self._locked_job(cur, job_id)
            self._end_attempt_in(
                cur, job_id, attempt, AttemptState.FAILED, error, now, cause=str(cause)
            )
            # Only a job whose current attempt was live moves on: a second call for the same
            # attempt (two managers that briefly both think they lead) finds the job RESTARTING
            # or ended already, and counts nothing again.
            if job.current_attempt == attempt and job.state in (
                JobState.RUNNING,
                JobState.CANCELING,
            ):
                if job.state == JobState.CANCELING:
                    target, nxt = JobState.CANCELED, None
                elif next_attempt_at is None:
                    target = JobState.FAILING if driver_running else JobState.FAILED
                    nxt = None
                else:
                    target, nxt = JobState.RESTARTING, next_attempt_at
                JOBS.check(job.state, target)
                self._x(
                    cur,
                    "fail_job_attempt",
                    job_id=job_id,
                    state=str(target),
                    failures=(0 if reset else job.failures) + (1 if cause.counted else 0),
                    next_attempt_at=nxt,
                    error=error,
                    now=now,
                )
                end_controls_in(self, cur, job_id, target, now)
            row = self._x(cur, "get_job", job_id=job_id).fetchone()
        return JobRecord.from_row(row)

    def finish_attempt(
        self,
        job_id: JobId,
        attempt: AttemptNo,
        attempt_state: AttemptState,
        job_state: JobState | None,
        error: str | None = None,
    ) -> JobRecord:
        """End ``attempt`` and, if it is still the job's current one, move the job to
        ``job_state`` (None: leave the job alone), in one transaction: a kill between the two
        can no longer leave an ended attempt under a job that still looks RUNNING.

        A RUNNING job asked to become CANCELED passes through CANCELING (the table's path).
        """
        now = self.clock.now()
        with self._tx() as cur:
            job = self._locked_job(cur, job_id)
            self._end_attempt_in(cur, job_id, attempt, attempt_state, error, now)
            if job_state == JobState.CANCELED and error is None and job.state == JobState.CANCELING:
                error = job.last_error  # why the cancel was asked for (fail_application)
            if job_state is not None and job.current_attempt == attempt and job.state != job_state:
                current = job.state
                if job_state == JobState.CANCELED and current == JobState.RUNNING:
                    JOBS.check(current, JobState.CANCELING)
                    current = JobState.CANCELING
                JOBS.check(current, job_state)
                self._x(
                    cur, "set_job_state", job_id=job_id, state=str(job_state), error=error, now=now
                )
                end_controls_in(self, cur, job_id, job_state, now)
            row = self._x(cur, "get_job", job_id=job_id).fetchone()
        return JobRecord.from_row(row)

    def note_main_raised(
        self, app_id: JobId, attempt: AttemptNo, error: str, cause: FailureCause
    ) -> bool:
        with self._tx() as cur:
            n = self._x(
                cur,
                "note_main_raised",
                job_id=app_id,
                attempt=attempt,
                error=error,
                cause=str(cause),
            ).rowcount
        return bool(n == 1)

    def fail_application(
        self,
        app_id: JobId,
        attempt: AttemptNo,
        error: str,
        jobs_why: str,
        driver_running: bool = False,
    ) -> JobRecord:
        now = self.clock.now()
        with self._tx() as cur:
            app = self._locked_job(cur, app_id)
            if app.current_attempt != attempt or app.state != JobState.RUNNING:
                return app  # decided already (or canceled meanwhile): nothing again
            # 1. Its jobs first, each asked to stop with the reason (a RUNNING one stops after
            #    its epoch in flight, its driver being the application's). A crash of the
            #    driver from here on leaves them CANCELING: the leader ends them CANCELED,
            #    keeping the reason, once the application has ended.
            rows = self._x(cur, "list_jobs", state=None, kind=str(JobKind.JOB), app_id=app_id)
            for child in [JobRecord.from_row(r) for r in rows.fetchall()]:
                if child.state.terminal or child.state == JobState.CANCELING:
                    continue
                target = (
                    JobState.CANCELING if child.state == JobState.RUNNING else JobState.CANCELED
                )
                JOBS.check(child.state, target)
                self._x(
                    cur,
                    "cancel_with_reason",
                    job_id=child.job_id,
                    state=str(target),
                    why=jobs_why,
                    now=now,
                )
                if target == JobState.CANCELED and child.current_attempt:
                    self._end_attempt_in(
                        cur, child.job_id, child.current_attempt, AttemptState.CANCELED, None, now
                    )
                end_controls_in(self, cur, child.job_id, target, now)
            # 2. The application: CANCELING while its attempt is live (its driver ends it
            #    FAILED once the jobs have stopped; if it dies, the leader does), else FAILED
            #    (FAILING while the caller still sees the driver's processes).
            arow = self._x(cur, "lock_attempt", job_id=app_id, attempt=attempt).fetchone()
            live = arow is not None and not AttemptRecord.from_row(arow).state.ended
            if live:
                target = JobState.CANCELING
            else:
                target = JobState.FAILING if driver_running else JobState.FAILED
            JOBS.check(app.state, target)
            self._x(
                cur,
                "fail_job_attempt",
                job_id=app_id,
                state=str(target),
                failures=app.failures + 1,
                next_attempt_at=None,
                error=error,
                now=now,
            )
            if live:
                self._x(cur, "request_cancel", job_id=app_id, state=str(target), now=now)
            end_controls_in(self, cur, app_id, target, now)
            row = self._x(cur, "get_job", job_id=app_id).fetchone()
        return JobRecord.from_row(row)

    def note_attempt_error(self, job_id: JobId, attempt: AttemptNo, error: str) -> bool:
        done = str(AttemptState.FINISHED)
        with self._tx() as cur:
            cur = self._x(
                cur,
                "end_attempt",
                job_id=job_id,
                attempt=attempt,
                state=done,
                from_state=done,
                error=error,
                now=self.clock.now(),
                cause=None,  # a FINISHED attempt: no failure's cause
            )
            return bool(cur.rowcount)

    def get_attempt(self, job_id: JobId, attempt: AttemptNo) -> AttemptRecord | None:
        with self._tx(write=False) as cur:
            row = self._x(cur, "get_attempt", job_id=job_id, attempt=attempt).fetchone()
        return None if row is None else AttemptRecord.from_row(row)

    def list_attempts(self, job_id: JobId) -> list[AttemptRecord]:
        with self._tx(write=False) as cur:
            rows = self._x(cur, "list_attempts", job_id=job_id).fetchall()
        return [AttemptRecord.from_row(r) for r in rows]

    def renew_lease(self, job_id: JobId, attempt: AttemptNo, lease_ttl: float) -> bool:
        now = self.clock.now()
        with self._tx() as cur:
            n = self._x(
                cur,
                "renew_lease",
                job_id=job_id,
                attempt=attempt,
                lease_expires_at=now + lease_ttl,
                lease_ttl=lease_ttl,
            ).rowcount
        return bool(n == 1)

    def end_attempt(
        self, job_id: JobId, attempt: AttemptNo, state: AttemptState, error: str | None = None
    ) -> None:
        with self._tx() as cur:
            self._end_attempt_in(cur, job_id, attempt, state, error, self.clock.now())
