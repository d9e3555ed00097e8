"""Jobs in SQL: creation (insert-if-absent), states by the transition table, cancel, restart.

Applications are records of the same table (``kind``), so they share all of this."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any

from stoker.errors import (
    ApplicationNotFound,
    InvalidInput,
    JobNotFound,
    JobOwnedElsewhere,
    JobTerminal,
    NotLeader,
)
from stoker.store._sqlbase import SqlBase
from stoker.store.records import AttemptRecord, FleetSnapshot, JobRecord, NewJob
from stoker.store.sql_control import end_controls_in
from stoker.types import JOBS, AttemptState, JobId, JobKind, JobState


def _owner(job: JobRecord) -> str:
    """Who holds ``job``'s id, in the words of :class:`JobOwnedElsewhere`."""
    if job.kind == JobKind.APPLICATION:
        return "it is an application"
    if job.app_id is not None:
        return f"application {job.app_id!r} owns it"
    return "it is a job submitted alone"


class JobsMixin(SqlBase):
    """Implements :class:`stoker.store.protocols.jobs.JobStore`."""

    def create_job(
        self,
        job_id: JobId,
        name: str,
        spec: dict[str, Any],
        config: dict[str, Any],
        uid: str | None = None,
        kind: JobKind = JobKind.JOB,
        app_id: JobId | None = None,
    ) -> tuple[JobRecord, bool]:
        with self._tx() as cur:
            return self._create_job_in(cur, job_id, name, spec, config, uid, kind, app_id)

    def create_jobs(self, jobs: Sequence[NewJob]) -> list[tuple[JobRecord, bool]]:
        if not jobs:
            return []
        with self._tx() as cur:
            return [self._create_job_in(cur, *job) for job in jobs]

    def _create_job_in(
        self,
        cur: Any,
        job_id: JobId,
        name: str,
        spec: dict[str, Any],
        config: dict[str, Any],
        uid: str | None = None,
        kind: JobKind = JobKind.JOB,
        app_id: JobId | None = None,
    ) -> tuple[JobRecord, bool]:
        kind = JobKind(kind)
        if app_id is not None:
            self._check_application(cur, kind, app_id)
        now = self.clock.now()
        # The primary key decides: of concurrent callers exactly one inserts.
        created = (
            self._x(
                cur,
                "insert_job",
                job_id=job_id,
                name=name,
                state=str(JobState.CREATED),
                spec=json.dumps(spec, sort_keys=True),
                now=now,
                uid=uid or uuid.uuid4().hex,
                kind=str(kind),
                app_id=app_id,
            ).rowcount
            == 1
        )
        if created:
            self._x(
                cur,
                "insert_control_version",
                job_id=job_id,
                version=0,
                config=json.dumps(config, sort_keys=True),
                # The declared config is the base control's overrides go on top of.
                state=json.dumps({"base": config}, sort_keys=True),
                reason="declared defaults",
                now=now,
            )
        job = JobRecord.from_row(self._x(cur, "get_job", job_id=job_id).fetchone())
        if job.kind != kind or job.app_id != app_id:
            # One id, one owner: a re-run of an application's main finds its own jobs, never
            # another application's, a lone job's or an application under that id.
            raise JobOwnedElsewhere(job_id, _owner(job))
        return job, created

    def _check_application(self, cur: Any, kind: JobKind, app_id: JobId) -> None:
        """A job may name as its ``app_id`` only an application that exists."""
        if kind == JobKind.APPLICATION:
            raise InvalidInput("app_id", "an application belongs to no application: give none")
        row = self._x(cur, "get_job", job_id=app_id).fetchone()
        if row is None or JobRecord.from_row(row).kind != JobKind.APPLICATION:
            raise ApplicationNotFound(app_id)

    def get_job(self, job_id: JobId) -> JobRecord:
        with self._tx(write=False) as cur:
            row = self._x(cur, "get_job", job_id=job_id).fetchone()
        if row is None:
            raise JobNotFound(job_id)
        return JobRecord.from_row(row)

    def list_jobs(
        self,
        state: JobState | None = None,
        kind: JobKind | None = JobKind.JOB,
        app_id: JobId | None = None,
    ) -> list[JobRecord]:
        with self._tx(write=False) as cur:
            rows = self._x(
                cur,
                "list_jobs",
                state=None if state is None else str(JobState(state)),
                kind=None if kind is None else str(JobKind(kind)),
                app_id=app_id,
            ).fetchall()
        return [JobRecord.from_row(r) for r in rows]

    def list_jobs_page(
        self,
        kind: JobKind,
        limit: int,
        after: tuple[float, str] | None = None,
        state: JobState | None = None,
    ) -> list[JobRecord]:
        with self._tx(write=False) as cur:
            rows = self._x(
                cur,
                "list_jobs_page",
                kind=str(JobKind(kind)),
                state=None if state is None else str(JobState(state)),
                after_at=None if after is None else float(after[0]),
                after_id=None if after is None else str(after[1]),
                limit=int(limit),
            ).fetchall()
        return [JobRecord.from_row(r) for r in rows]

    def list_unsettled_jobs(self, settle: float) -> list[JobRecord]:
        with self._tx(write=False) as cur:
            rows = self._x(cur, "list_unsettled_jobs", settle=float(settle)).fetchall()
        return [JobRecord.from_row(r) for r in rows]

    def list_live_jobs(self) -> list[JobRecord]:
        with self._tx(write=False) as cur:
            rows = self._x(cur, "list_live_jobs").fetchall()
        return [JobRecord.from_row(r) for r in rows]

    def live_jobs_and_attempts(self) -> tuple[list[JobRecord], dict[JobId, AttemptRecord]]:
        with self._tx(write=False) as cur:
            rows = self._x(cur, "list_live_jobs").fetchall()
            attempts = self._x(cur, "live_attempts").fetchall()
        live = [JobRecord.from_row(r) for r in rows]
        return live, {JobId(str(r[0])): AttemptRecord.from_row(r) for r in attempts}

    def set_job_state(self, job_id: JobId, state: JobState, error: str | None = None) -> JobRecord:
        now = self.clock.now()
        with self._tx() as cur:
            JOBS.check(self._locked_job(cur, job_id).state, state)
            self._x(cur, "set_job_state", job_id=job_id, state=str(state), error=error, now=now)
            end_controls_in(self, cur, job_id, state, now)
            row = self._x(cur, "get_job", job_id=job_id).fetchone()
        return JobRecord.from_row(row)

    def set_job_spec(self, job_id: JobId, spec: dict[str, Any]) -> None:
        with self._tx() as cur:
            self._x(
                cur,
                "set_job_spec",
                job_id=job_id,
                spec=json.dumps(spec, sort_keys=True),
                now=self.clock.now(),
            )

    def request_cancel(self, job_id: JobId) -> JobRecord:
        now = self.clock.now()
        with self._tx() as cur:
            job = self._locked_job(cur, job_id)
            if job.state.terminal:
                raise JobTerminal(job_id, str(job.state))
            if job.state != JobState.CANCELING:
                # Nothing runs for CREATED and RESTARTING jobs: they end at once. A RUNNING job
                # is asked to stop after its current epoch (the driver sees CANCELING).
                target = JobState.CANCELING if job.state == JobState.RUNNING else JobState.CANCELED
                JOBS.check(job.state, target)
                self._x(cur, "request_cancel", job_id=job_id, state=str(target), now=now)
                if target == JobState.CANCELED and job.current_attempt:
                    self._end_attempt_in(
                        cur, job_id, job.current_attempt, AttemptState.CANCELED, None, now
                    )
                end_controls_in(self, cur, job_id, target, now)
            row = self._x(cur, "get_job", job_id=job_id).fetchone()
        return JobRecord.from_row(row)

    def set_failures(self, job_id: JobId, failures: int, next_attempt_at: float | None) -> None:
        with self._tx() as cur:
            self._x(
                cur,
                "set_failures",
                job_id=job_id,
                failures=failures,
                next_attempt_at=next_attempt_at,
                now=self.clock.now(),
            )

    def restart_job(self, job_id: JobId, spec: dict[str, Any]) -> JobRecord:
        """An ended job goes to RESTARTING (with ``spec``) for the manager to start anew. An
        application takes its jobs that were canceled or failed with it, in the same
        transaction: its next ``main`` resumes them from their checkpoints (a FINISHED job
        stays finished, as a restarted ``main`` goes past it)."""
        now = self.clock.now()
        with self._tx() as cur:
            job = self._locked_job(cur, job_id)
            if job.state.terminal:
                JOBS.check(job.state, JobState.RESTARTING)
                self._x(
                    cur,
                    "restart_job",
                    job_id=job_id,
                    spec=json.dumps(spec, sort_keys=True),
                    now=now,
                )
                if job.kind == JobKind.APPLICATION:
                    self._restart_app_jobs(cur, job_id, now)
            row = self._x(cur, "get_job", job_id=job_id).fetchone()
        return JobRecord.from_row(row)

    def _restart_app_jobs(self, cur: Any, app_id: JobId, now: float) -> None:
        rows = self._x(cur, "list_jobs", state=None, kind=str(JobKind.JOB), app_id=app_id)
        for child in [JobRecord.from_row(r) for r in rows.fetchall()]:
            if child.state in (JobState.CANCELED, JobState.FAILED):
                JOBS.check(child.state, JobState.RESTARTING)
                self._x(
                    cur,
                    "restart_job",
                    job_id=child.job_id,
                    spec=json.dumps(child.spec, sort_keys=True),
                    now=now,
                )

    def set_resolved(self, job_id: JobId) -> None:
        with self._tx() as cur:
            self._x(cur, "set_resolved", job_id=job_id, now=self.clock.now())

    def ended_before(self, before: float, limit: int = 100) -> list[JobId]:
        with self._tx(write=False) as cur:
            rows = self._x(cur, "ended_before", before=float(before), limit=int(limit)).fetchall()
        return [JobId(str(r[0])) for r in rows]

    def delete_ended(self, job_id: JobId, before: float) -> list[JobId]:
        with self._tx() as cur:
            job = self._locked_job(cur, job_id)
            if not job.state.terminal or job.updated_at >= before or job.app_id is not None:
                return []
            if job.kind != JobKind.APPLICATION and job.resolved_at is None:
                return []
            doomed = [job.job_id]
            if job.kind == JobKind.APPLICATION:
                rows = self._x(cur, "jobs_of_app", app_id=job.job_id).fetchall()
                terminal = {str(s) for s in JobState if s.terminal}
                if any(str(r[1]) not in terminal or r[2] is None for r in rows):
                    return []  # a job of it still runs, or is owed its resolution
                doomed = [JobId(str(r[0])) for r in rows] + doomed
            for jid in doomed:
                for what in (
                    "txns", "epochs", "control_events", "control_versions", "rescales",
                    "attempts", "hold", "standby", "upgrades", "row",
                ):  # fmt: skip
                    self._x(cur, f"delete_job_{what}", job_id=jid)
        return doomed

    def set_settled(
        self, job_id: JobId, ended_at: float, leader: tuple[str, int] | None = None
    ) -> bool:
        with self._tx() as cur:
            self._check_fence(cur, leader)
            n = self._x(cur, "set_settled", job_id=job_id, ended_at=float(ended_at)).rowcount
        return bool(n)

    def unsettled_page(self, after: tuple[float, str] | None, limit: int) -> list[JobRecord]:
        with self._tx(write=False) as cur:
            rows = self._x(
                cur,
                "unsettled_page",
                after_at=None if after is None else float(after[0]),
                after_id=None if after is None else str(after[1]),
                limit=int(limit),
            ).fetchall()
        return [JobRecord.from_row(r) for r in rows]

    def unsettled_slice(
        self, after: tuple[float, str] | None, limit: int
    ) -> tuple[list[JobRecord], dict[JobId, list[AttemptRecord]]]:
        params = {
            "after_at": None if after is None else float(after[0]),
            "after_id": None if after is None else str(after[1]),
            "limit": int(limit),
        }
        with self._tx(write=False) as cur:
            rows = self._x(cur, "unsettled_page", **params).fetchall()
            arows = self._x(cur, "unsettled_attempts", **params).fetchall()
        attempts: dict[JobId, list[AttemptRecord]] = {}
        for r in arows:
            attempts.setdefault(JobId(str(r[0])), []).append(AttemptRecord.from_row(r))
        return [JobRecord.from_row(r) for r in rows], attempts

    def settle_ends(
        self,
        ends: Sequence[tuple[JobId, float]],
        resolve: bool = False,
        leader: tuple[str, int] | None = None,
    ) -> int:
        if not ends:
            return 0
        now, n = self.clock.now(), 0
        with self._tx() as cur:
            self._check_fence(cur, leader)
            for jid, ended_at in ends:
                n += self._x(
                    cur,
                    "settle_end",
                    job_id=jid,
                    ended_at=float(ended_at),
                    resolve=int(resolve),
                    now=now,
                ).rowcount
        return n

    def mark_judged(self, job_ids: Sequence[JobId], leader: tuple[str, int]) -> None:
        with self._tx() as cur:
            self._check_fence(cur, leader)
            for jid in job_ids:
                self._x(cur, "mark_judged", job_id=jid, token=leader[1])

    def _check_fence(self, cur: Any, leader: tuple[str, int] | None) -> None:
        """A write the leader makes as the leader: :class:`NotLeader` unless its lease (holder,
        fencing token) is still the one recorded, read in the write's own transaction."""
        if (
            leader is not None
            and not self._x(cur, "check_leader", holder=leader[0], token=leader[1]).fetchone()
        ):
            raise NotLeader(f"leader lease {leader[1]} of {leader[0]} is no longer held")

    def set_job_sinks(self, job_id: JobId, sinks: list[dict[str, Any]]) -> None:
        with self._tx() as cur:
            self._locked_job(cur, job_id)  # JobNotFound for an unknown id
            self._x(cur, "set_job_sinks", job_id=job_id, sinks=json.dumps(sinks, sort_keys=True))

    def get_job_sinks(self, job_id: JobId) -> list[dict[str, Any]]:
        with self._tx(write=False) as cur:
            row = self._x(cur, "get_job_sinks", job_id=job_id).fetchone()
        if row is None:
            raise JobNotFound(job_id)
        return list(json.loads(row[0])) if row[0] else []

    def counts(self) -> dict[str, int]:
        """Totals for metrics: attempts started, epochs committed. One read of the counters
        table (migration 0004), kept in the transactions that change them: O(1) per scrape,
        and pruning old epochs does not lower them. Jobs only: an application's driver
        attempts are not counted (they commit no epoch; its jobs' attempts are)."""
        with self._tx(write=False) as cur:
            rows = self._x(cur, "get_counters").fetchall()
        totals = {str(name): int(value) for name, value in rows}
        return {
            "attempts": totals.get("attempts", 0),
            "epochs_committed": totals.get("epochs_committed", 0),
        }

    def fleet_snapshot(self) -> FleetSnapshot:
        """One read for ``/metrics``: the live records through the state
        index, a count per kind and state (ended records are counted, never read: the scrape
        stays bounded by the live ones at any number of jobs) and the counters table."""
        with self._tx(write=False) as cur:
            live = [JobRecord.from_row(r) for r in self._x(cur, "list_live_jobs").fetchall()]
            grouped = self._x(cur, "count_jobs_by_state").fetchall()
            counters = self._x(cur, "get_counters").fetchall()
        return FleetSnapshot(
            live=live,
            by_state={(JobKind(k), JobState(s)): int(n) for k, s, n in grouped},
            counters={str(name): int(value) for name, value in counters},
        )
