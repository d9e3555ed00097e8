"""A job (or an application) and its config: the records a user's requests change."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from stoker.store.records import (
    AttemptRecord,
    ControlEvent,
    ControlSnapshot,
    FleetSnapshot,
    JobRecord,
    NewJob,
)
from stoker.types import (
    ControlKind,
    ControlStatus,
    ControlVersion,
    Epoch,
    JobId,
    JobKind,
    JobState,
)


class JobStore(Protocol):
    """Jobs: created once per id, moved only along ``JOB_TRANSITIONS``."""

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
        """Insert the record if its id is free. Returns it and whether this call created it.

        ``uid`` (default: a new random one) identifies this job record; an existing job keeps
        its own. ``kind`` APPLICATION makes an application (``app_id`` must be None: else
        :class:`InvalidInput`); a job with ``app_id`` belongs to that application, which must
        exist (:class:`ApplicationNotFound`). Jobs and applications share one id space: an
        existing record of another kind or another ``app_id`` is
        :class:`~stoker.errors.JobOwnedElsewhere` naming its owner, and nothing changes.
        """
        ...

    def create_jobs(self, jobs: Sequence[NewJob]) -> list[tuple[JobRecord, bool]]:
        """:meth:`create_job` for each of ``jobs`` in one transaction (a group commit).

        Results in order; an id given twice is created by its first occurrence only.
        """
        ...

    def get_job(self, job_id: JobId) -> JobRecord:
        """The job, or :class:`~stoker.errors.JobNotFound`."""
        ...

    def list_jobs(
        self,
        state: JobState | None = None,
        kind: JobKind | None = JobKind.JOB,
        app_id: JobId | None = None,
    ) -> list[JobRecord]:
        """Records oldest first, those in ``state`` of ``kind`` (None: every kind, what the
        supervisor tends) belonging to ``app_id`` (None: to any application or none).
        The default lists jobs only (lone ones and applications' jobs), never applications."""
        ...

    def list_jobs_page(
        self,
        kind: JobKind,
        limit: int,
        after: tuple[float, str] | None = None,
        state: JobState | None = None,
    ) -> list[JobRecord]:
        """At most ``limit`` records of ``kind`` (only those in ``state``) in (created_at,
        job_id) order, after the record ``after`` names (None: from the first): one page of a
        list, through an index; a record made meanwhile never shifts a page already read."""
        ...

    def list_unsettled_jobs(self, settle: float) -> list[JobRecord]:
        """Ended jobs (not applications) never resolved, or resolved within ``settle`` seconds
        of their last change: what the janitor may still owe a cleanup, least recently changed
        first."""
        ...

    def list_live_jobs(self) -> list[JobRecord]:
        """Every record that has not ended, jobs and applications, oldest first: what the
        leader tends each tick (found through an index on the state, not a scan of every job
        the store keeps)."""
        ...

    def live_jobs_and_attempts(self) -> tuple[list[JobRecord], dict[JobId, AttemptRecord]]:
        """:meth:`list_live_jobs`, and the current attempt of each that has one, by job, from
        one read transaction: the leader's tick (a query for both, not one per job)."""
        ...

    def mark_judged(self, job_ids: Sequence[JobId], leader: tuple[str, int]) -> None:
        """The leader (holder, fencing token) has judged these records' drivers: it started
        their current attempts, or saw their drivers alive. Their ``judged_by`` becomes its
        token (never lower); :class:`~stoker.errors.NotLeader` if its lease is no longer the
        one recorded, and nothing is written. Until then the API shows such a record
        RECONCILING under a new leader."""
        ...

    def set_job_state(self, job_id: JobId, state: JobState, error: str | None = None) -> JobRecord:
        """Move the job to ``state`` if the transition table allows it."""
        ...

    def set_job_spec(self, job_id: JobId, spec: dict[str, Any]) -> None: ...

    def request_cancel(self, job_id: JobId) -> JobRecord:
        """RUNNING -> CANCELING (the driver stops after its epoch); CREATED/RESTARTING end."""
        ...

    def set_failures(self, job_id: JobId, failures: int, next_attempt_at: float | None) -> None: ...

    def restart_job(self, job_id: JobId, spec: dict[str, Any]) -> JobRecord:
        """An ended job goes to RESTARTING with ``spec``; a live one is returned unchanged.
        An ended application's jobs that ended CANCELED or FAILED go to RESTARTING with it,
        in the same transaction (FINISHED ones stay)."""
        ...

    def set_resolved(self, job_id: JobId) -> None:
        """The ended job's sinks are resolved (decided parts committed, the rest aborted)."""
        ...

    def ended_before(self, before: float, limit: int = 100) -> list[JobId]:
        """Lone jobs and applications that ended before ``before`` (a lone job: its sinks
        resolved), oldest first, at most ``limit``: what ended-job retention may delete."""
        ...

    def delete_ended(self, job_id: JobId, before: float) -> list[JobId]:
        """Delete an ended record and everything of it (attempts, epochs, sink transactions,
        control events and versions, rescales), in one transaction; an application with its
        jobs. Only while it ended before ``before``, resolved, and (an application) every job
        of it ended and resolved; else nothing. The ids deleted, jobs before their application.
        """
        ...

    def set_settled(
        self, job_id: JobId, ended_at: float, leader: tuple[str, int] | None = None
    ) -> bool:
        """The job's end at ``ended_at`` (its ``updated_at``) is resolved for good: every
        process of its attempts was gone when its last resolution began. It leaves
        :meth:`list_unsettled_jobs` until it ends again. False (nothing changed) when the job
        is not resolved, or changed since ``ended_at``. ``leader`` (holder, fencing token):
        the janitor's write, checked in the same transaction, :class:`NotLeader` if lost."""
        ...

    def unsettled_page(self, after: tuple[float, str] | None, limit: int) -> list[JobRecord]:
        """At most ``limit`` ended jobs (not applications) not settled, in (updated_at,
        job_id) order after ``after`` (None: from the first), through an index of those
        only: the janitor walks them a slice at a time. A job resolved past any grace is
        among them until the janitor settles it (:meth:`settle_ends`)."""
        ...

    def unsettled_slice(
        self, after: tuple[float, str] | None, limit: int
    ) -> tuple[list[JobRecord], dict[JobId, list[AttemptRecord]]]:
        """:meth:`unsettled_page`, and the attempts of each of its jobs (by job, oldest
        first; a job without any is absent), from one read transaction: a janitor's slice."""
        ...

    def settle_ends(
        self,
        ends: Sequence[tuple[JobId, float]],
        resolve: bool = False,
        leader: tuple[str, int] | None = None,
    ) -> int:
        """Settle each (job, ``updated_at`` the janitor saw) in one transaction: the janitor
        owes that end no cleanup (not its to clean, or resolved for good), so no janitor
        reads it again until the job ends again. ``resolve``: resolved now as well (no driver
        ever ran for it). A job changed since is left as it is. ``leader`` as for
        :meth:`set_settled`. How many were settled."""
        ...

    def set_job_sinks(self, job_id: JobId, sinks: list[dict[str, Any]]) -> None:
        """Record the descriptors of the job's sinks (``TwoPhaseSink.descriptor``), replacing
        earlier ones: what the janitor's cleanup rebuilds them from. Not part of the job's
        record or any API answer (a DSN may carry a password)."""
        ...

    def get_job_sinks(self, job_id: JobId) -> list[dict[str, Any]]:
        """The recorded sink descriptors; ``[]`` if no attempt ever opened the job's sinks."""
        ...

    def counts(self) -> dict[str, int]:
        """``{"attempts", "epochs_committed"}``: totals for metrics, of jobs only (an
        application's driver attempts are not in ``attempts``)."""
        ...

    def fleet_snapshot(self) -> FleetSnapshot:
        """What a ``/metrics`` scrape reads, in one read transaction: the live records (as
        :meth:`list_live_jobs`), the number of records of each kind and state, and the
        counters table (``attempts``, ``epochs_committed``, ``rescales``)."""
        ...


class ControlStore(Protocol):
    """A job's config, as numbered control versions."""

    def control_snapshot(
        self, job_id: JobId, version: ControlVersion | None = None
    ) -> ControlSnapshot:
        """The config at ``version`` (default: the latest)."""
        ...

    def declare_defaults(
        self,
        job_id: JobId,
        defaults: dict[str, Any],
        pipeline: dict[str, Any] | None = None,
    ) -> ControlSnapshot:
        """Record the pipeline's declared config (a new attempt's defaults with the submitted
        values on top). The config becomes ``defaults`` with the keys control has set kept on
        top (:func:`stoker.control.events.declare`); overrides of keys no longer declared are
        dropped. ``pipeline`` (the pipeline's description: declared config, sources,
        registered event names) is kept as ``state["pipeline"]``, what control requests are
        checked against. A new version only if the config or the state changed."""
        ...

    def add_control(
        self,
        job_id: JobId,
        kind: ControlKind,
        body: dict[str, Any],
        *,
        sender: str,
        origin: str | None = None,
        request_id: str | None = None,
    ) -> tuple[ControlEvent, bool]:
        """Store one validated control event as a new control version, in one transaction.

        The new version's (config, state) is :func:`stoker.control.events.apply` of the latest
        one. Returns (event, created). The same ``request_id`` with the same kind and body
        returns the stored event (created False); with another body it raises
        :class:`ControlConflict`. A job that has ended raises :class:`JobTerminal`; an event the
        state refuses (pause of a paused job) raises :class:`ControlConflict`. Nothing is stored
        when it raises. Savepoint events make a version too (they change no state).
        """
        ...

    def get_control(self, job_id: JobId, control_id: str) -> ControlEvent:
        """One event; :class:`ControlNotFound` (or :class:`JobNotFound`) if there is none."""
        ...

    def list_controls(
        self,
        job_id: JobId,
        limit: int = 50,
        before_version: ControlVersion | None = None,
        kind: ControlKind | None = None,
        status: ControlStatus | None = None,
    ) -> list[ControlEvent]:
        """Newest first; ``before_version`` pages on (versions below it)."""
        ...

    def applied_controls(self, job_id: JobId, epoch: Epoch) -> list[ControlEvent]:
        """The events applied at ``epoch`` (APPLIED or COMMITTED, not REJECTED), oldest first:
        what a replay of that epoch applies again."""
        ...

    def reject_control(self, job_id: JobId, control_id: str, reason: str) -> ControlEvent:
        """PENDING or APPLIED -> REJECTED with ``reason``; an ended event is left as it is."""
        ...

    def finish_control(
        self,
        job_id: JobId,
        control_id: str,
        status: ControlStatus,
        epoch: Epoch | None = None,
        result: dict[str, Any] | None = None,
    ) -> ControlEvent:
        """Move an event the runtime handles itself (a savepoint) to APPLIED or COMMITTED,
        with the epoch it happened at and its result. Follows CONTROL_TRANSITIONS; moving to
        the status it has already only updates ``result``."""
        ...
