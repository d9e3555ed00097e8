"""The store protocol: every piece of durable metadata goes through it.

Both backends (SQLite, PostgreSQL) implement it with the same SQL (``sql/queries.sql``) and pass
the same contract tests (``tests/integration/test_store_contract.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from stoker.clock import Clock
from stoker.store.records import (
    AttemptRecord,
    ControlSnapshot,
    EpochRecord,
    JobRecord,
    LeaderLease,
    NewJob,
    Owner,
    SinkTxn,
)
from stoker.types import (
    AttemptNo,
    AttemptState,
    ControlVersion,
    Epoch,
    JobId,
    JobState,
    TxnState,
)


class Store(Protocol):
    """Durable metadata: jobs, attempts, control versions, epochs, sink transactions."""

    url: str
    clock: Clock

    def close(self) -> None: ...

    # jobs
    def create_job(
        self, job_id: JobId, name: str, spec: dict[str, Any], config: dict[str, Any]
    ) -> tuple[JobRecord, bool]:
        """Insert the job if its id is free. Returns the job and whether this call created it."""
        ...

    def create_jobs(self, jobs: Sequence[NewJob]) -> list[tuple[JobRecord, bool]]:
        """:meth:`create_job` for each of ``jobs`` in one transaction (a group commit).

        Results in order; an id given twice is created by its first occurrence only.
        """
        ...

    def get_job(self, job_id: JobId) -> JobRecord:
        """The job, or :class:`~stoker.errors.JobNotFound`."""
        ...

    def list_jobs(self, state: JobState | None = None) -> list[JobRecord]: ...

    def set_job_state(self, job_id: JobId, state: JobState, error: str | None = None) -> JobRecord:
        """Move the job to ``state`` if the transition table allows it."""
        ...

    def set_job_spec(self, job_id: JobId, spec: dict[str, Any]) -> None: ...

    # attempts
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
    ) -> AttemptRecord:
        """Make a new attempt the owner of the job.

        Succeeds only if the job's current attempt is still ``expected_current`` (compare and
        swap) and that attempt has ended, its lease has expired, or the caller has seen its
        process gone (``previous_dead``). The new attempt number is one higher.
        Raises :class:`~stoker.errors.DuplicateJob` otherwise, and
        :class:`~stoker.errors.JobTerminal` for an ended job unless ``restart``.
        A job manager makes the attempt ``STARTING`` (its driver claims it) and passes its
        ``leader`` (holder, token): checked in the same transaction, :class:`NotLeader` if lost.
        """
        ...

    def claim_attempt(
        self, job_id: JobId, attempt: AttemptNo, owner: Owner, lease_ttl: float
    ) -> AttemptRecord:
        """A driver adopts its STARTING attempt; :class:`StaleAttempt` if it is not current."""
        ...

    def set_attempt_owner(self, job_id: JobId, attempt: AttemptNo, owner: Owner) -> None: ...

    def request_cancel(self, job_id: JobId) -> JobRecord:
        """RUNNING -> CANCELING (the driver stops after its epoch); CREATED/RESTARTING end."""
        ...

    def set_failures(self, job_id: JobId, failures: int, next_attempt_at: float | None) -> None: ...

    def restart_job(self, job_id: JobId, spec: dict[str, Any]) -> JobRecord:
        """An ended job goes to RESTARTING with ``spec``; a live one is returned unchanged."""
        ...

    def attempt_failed(
        self,
        job_id: JobId,
        attempt: AttemptNo,
        error: str,
        next_attempt_at: float | None,
        count: bool = True,
    ) -> JobRecord:
        """End the attempt FAILED; its job restarts at ``next_attempt_at`` or fails.

        ``count=False``: the failure was the manager's, not the job's (no restart is used up).
        """
        ...

    # leadership
    def acquire_leadership(self, holder: str, address: str, ttl: float) -> LeaderLease | None: ...

    def renew_leadership(self, holder: str, token: int, ttl: float) -> bool: ...

    def resign_leadership(self, holder: str, token: int) -> None: ...

    def get_leader(self) -> LeaderLease | None: ...

    def counts(self) -> dict[str, int]: ...

    def get_attempt(self, job_id: JobId, attempt: AttemptNo) -> AttemptRecord | None: ...

    def list_attempts(self, job_id: JobId) -> list[AttemptRecord]: ...

    def renew_lease(self, job_id: JobId, attempt: AttemptNo, lease_ttl: float) -> bool:
        """Extend the lease; False when the attempt no longer owns the job or its lease lapsed."""
        ...

    def end_attempt(
        self, job_id: JobId, attempt: AttemptNo, state: AttemptState, error: str | None = None
    ) -> None: ...

    # control
    def control_snapshot(
        self, job_id: JobId, version: ControlVersion | None = None
    ) -> ControlSnapshot:
        """The config at ``version`` (default: the latest)."""
        ...

    def declare_defaults(self, job_id: JobId, defaults: dict[str, Any]) -> ControlSnapshot:
        """Record the pipeline's declared config; a new version only if it changed."""
        ...

    # epochs
    def pin_epoch(
        self, job_id: JobId, epoch: Epoch, attempt: AttemptNo, control_version: ControlVersion
    ) -> EpochRecord:
        """Insert the epoch record if absent; either way return the record now stored."""
        ...

    def decide_epoch(
        self, job_id: JobId, epoch: Epoch, attempt: AttemptNo, rows_in: int, final: bool
    ) -> EpochRecord:
        """The commit point: fenced, atomic. Raises :class:`~stoker.errors.StaleAttempt`."""
        ...

    def mark_epoch_committed(self, job_id: JobId, epoch: Epoch) -> None: ...

    def get_epoch(self, job_id: JobId, epoch: Epoch) -> EpochRecord | None: ...

    def list_epochs(self, job_id: JobId, limit: int = 100) -> list[EpochRecord]: ...

    def epochs_in_state(self, job_id: JobId, state: str) -> list[EpochRecord]: ...

    # sink transactions
    def record_txn(
        self,
        job_id: JobId,
        epoch: Epoch,
        sink: str,
        attempt: AttemptNo,
        state: TxnState,
        detail: dict[str, Any],
    ) -> None: ...

    def list_txns(self, job_id: JobId, state: TxnState | None = None) -> list[SinkTxn]: ...
