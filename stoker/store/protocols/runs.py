"""An attempt's run: its lease, its epochs and their sink transactions, and how the committed
epochs are pruned."""

from __future__ import annotations

from typing import Any, Protocol

from stoker.restart import FailureCause
from stoker.store._retention import PruneResult, RetentionPolicy
from stoker.store.records import (
    AttemptRecord,
    EpochRecord,
    JobRecord,
    Owner,
    RecoveryHold,
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


class AttemptStore(Protocol):
    """Attempts of a job and their leases: who may run it now."""

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
        """Make a new attempt the owner of the job.

        Succeeds only if the job's current attempt is still ``expected_current`` (compare and
        swap) and that attempt has ended, the caller has seen its process gone
        (``previous_dead``), or its lease lapsed: ``lapsed`` is the attempt's
        :attr:`~stoker.store.AttemptRecord.lease_seen` that the caller saw unchanged for a whole
        TTL on its own monotonic clock (:mod:`stoker.leases`), and the row still shows it. No
        wall clock is compared. The new attempt number is one higher.
        Raises :class:`~stoker.errors.DuplicateJob` otherwise, and
        :class:`~stoker.errors.JobTerminal` for an ended job unless ``restart``.
        A job manager makes the attempt ``STARTING`` (its driver claims it) and passes its
        ``leader`` (holder, token): checked in the same transaction, :class:`NotLeader` if lost.

        ``app_attempt``: an application's driver makes the attempt, under its own application
        attempt. The job must belong to an application (:class:`InvalidInput` otherwise) whose
        current attempt, read in the same transaction, is ``app_attempt`` and STARTING or
        RUNNING (:class:`StaleAttempt` otherwise). A live current attempt of the job made under
        an older application attempt (or by no application) is then ended SUPERSEDED whatever
        its lease: the newer driver re-adopts the job. ``expected_current`` still applies.
        """
        ...

    def claim_attempt(
        self, job_id: JobId, attempt: AttemptNo, owner: Owner, lease_ttl: float
    ) -> AttemptRecord:
        """A driver adopts its STARTING attempt (-> RUNNING); :class:`StaleAttempt` if it is not
        current or ``ATTEMPT_TRANSITIONS`` refuses the claim (it is RUNNING or ended)."""
        ...

    def hold_start(
        self, job_id: JobId, attempt: AttemptNo, owner: Owner, lease_ttl: float
    ) -> AttemptRecord:
        """A driver takes its STARTING attempt before its app is imported and Spark starts: it
        becomes the owner and renews the lease from then on; the attempt stays STARTING until
        :meth:`claim_attempt`. :class:`StaleAttempt` if the attempt is not the current one, not
        STARTING (a job manager gave it up: it ends the attempt)."""
        ...

    def count_starting(self) -> int:
        """How many live records' current attempts are STARTING (drivers starting now)."""
        ...

    def set_attempt_owner(self, job_id: JobId, attempt: AttemptNo, owner: Owner) -> None: ...

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
        """End the attempt FAILED; its job restarts at ``next_attempt_at`` or fails (FAILING
        while ``driver_running``: its processes are still seen, being killed; the caller ends
        the job FAILED once they are gone).

        ``cause``: whose failure it was, recorded on the attempt; one that is not the job's
        (the manager's: :attr:`~stoker.restart.FailureCause.counted` False) uses no restart up.
        ``reset=True``: the restart strategy forgave the earlier failures (count starts at this
        one). Either way a failure is counted only by the call that moves the job on.
        """
        ...

    def finish_attempt(
        self,
        job_id: JobId,
        attempt: AttemptNo,
        attempt_state: AttemptState,
        job_state: JobState | None,
        error: str | None = None,
    ) -> JobRecord:
        """End the attempt and, while it is current, move its job to ``job_state``: one
        transaction. ``job_state`` None leaves the job to the job manager. A job that ends
        CANCELED without an ``error`` keeps the reason its cancel was asked for with
        (:meth:`fail_application`)."""
        ...

    def note_main_raised(
        self, app_id: JobId, attempt: AttemptNo, error: str, cause: FailureCause
    ) -> bool:
        """Record on a live application attempt that its program raised (``error``, and
        ``cause``: :attr:`~stoker.restart.FailureCause.of_main`); the attempt stays live, its
        driver keeping the application's jobs running until the job manager's restart
        strategy for the application has decided. Whether it was recorded (False: the attempt
        has ended or is not live)."""
        ...

    def fail_application(
        self,
        app_id: JobId,
        attempt: AttemptNo,
        error: str,
        jobs_why: str,
        driver_running: bool = False,
    ) -> JobRecord:
        """The application's restart strategy gave up after its program raised in
        ``attempt``: one transaction, which does nothing unless the application is RUNNING
        with ``attempt`` current (decided once). Every job of the application that has not
        ended is canceled with ``jobs_why`` as its error (a RUNNING one CANCELING: its driver
        stops it after its epoch in flight; the others CANCELED at once). The application,
        its failure counted and ``error`` its error, goes CANCELING while ``attempt`` is live
        (its driver ends it FAILED once the jobs have stopped), else FAILED at once (FAILING
        while ``driver_running``: the caller still sees its processes and ends it FAILED once
        they are gone)."""
        ...

    def get_attempt(self, job_id: JobId, attempt: AttemptNo) -> AttemptRecord | None: ...

    def note_attempt_error(self, job_id: JobId, attempt: AttemptNo, error: str) -> bool:
        """Record ``error`` on an attempt that ended FINISHED (its driver crashed after the
        job's end); its state stays. Whether it was recorded."""
        ...

    def list_attempts(self, job_id: JobId) -> list[AttemptRecord]: ...

    def renew_lease(self, job_id: JobId, attempt: AttemptNo, lease_ttl: float) -> bool:
        """Extend the lease (one more renewal counted); False when the attempt no longer owns
        the job (ended, superseded), or (an attempt with ``app_attempt``) its application
        attempt is no longer current. The holder judges its own lease on its monotonic clock
        (:class:`~stoker.runtime.attempt.LeaseKeeper`); no wall clock is compared here."""
        ...

    def end_attempt(
        self, job_id: JobId, attempt: AttemptNo, state: AttemptState, error: str | None = None
    ) -> None:
        """End a live attempt as ``state``, checked against ``ATTEMPT_TRANSITIONS``
        (:class:`InvalidTransition` otherwise). An attempt that has ended already is left as it
        ended: ends are idempotent. The same holds wherever the store ends an attempt."""
        ...


class RecoveryHoldStore(Protocol):
    """The per-job hold of whoever resolves leftover sink parts (recovery), so that it never
    overlaps the next attempt's epochs. A lease: renewed by its holder, lapsing at
    ``expires_at`` by the store's clock."""

    def take_recovery_hold(
        self,
        job_id: JobId,
        attempt: AttemptNo,
        owner: Owner,
        ttl: float,
        gone: RecoveryHold | None = None,
    ) -> RecoveryHold:
        """Take the job's hold for ``owner`` resolving ``attempt``, until now + ``ttl``: when
        there is none, it has lapsed, it is this holder's already (renewed), or it is exactly
        ``gone`` (a holder the caller saw dead; any other holder meanwhile is not taken
        over). Returns the hold as it is after the call: the caller's when taken, else the
        live holder's (to wait for, or to see gone)."""
        ...

    def renew_recovery_hold(self, hold: RecoveryHold, ttl: float) -> bool:
        """Extend ``hold`` to now + ``ttl``; False when it is no longer this holder's (it
        lapsed and someone took it over)."""
        ...

    def release_recovery_hold(self, hold: RecoveryHold) -> None:
        """Give ``hold`` up; nothing when it is no longer this holder's."""
        ...

    def get_recovery_hold(self, job_id: JobId) -> RecoveryHold | None: ...


class EpochStore(Protocol):
    """Epochs: pinned, decided (the commit point, fenced), committed."""

    def pin_epoch(
        self, job_id: JobId, epoch: Epoch, attempt: AttemptNo, control_version: ControlVersion
    ) -> EpochRecord:
        """Insert the epoch record if absent; either way return the record now stored.

        In the same transaction, every PENDING control event (except savepoints, which the
        runtime performs itself) with a version at or below the record's control version
        becomes APPLIED at this epoch. A replay finds the record and its events as they were.
        """
        ...

    def decide_epoch(
        self, job_id: JobId, epoch: Epoch, attempt: AttemptNo, rows_in: int, final: bool
    ) -> EpochRecord:
        """The commit point (PINNED -> DECIDED): fenced, atomic. The same attempt deciding again
        gets the record back; otherwise :class:`~stoker.errors.StaleAttempt`. An attempt with
        ``app_attempt`` decides only while that is its application's current attempt (in the
        same statement)."""
        ...

    def mark_epoch_committed(self, job_id: JobId, epoch: Epoch) -> None:
        """DECIDED -> COMMITTED. Again, or for an epoch pruned since, nothing changes; a PINNED
        epoch is :class:`~stoker.errors.InvalidTransition` (``EPOCH_TRANSITIONS``). In the same
        transaction the control events APPLIED at this epoch become COMMITTED."""
        ...

    def get_epoch(self, job_id: JobId, epoch: Epoch) -> EpochRecord | None: ...

    def list_epochs(
        self, job_id: JobId, limit: int = 100, before: int | None = None
    ) -> list[EpochRecord]:
        """The job's newest ``limit`` epochs, newest first; with ``before``, those below that
        epoch (the next page of the list: stable while the job commits new epochs)."""
        ...

    def epochs_in_state(self, job_id: JobId, state: str) -> list[EpochRecord]: ...

    def decided_range(self, job_id: JobId) -> tuple[Epoch, Epoch] | None:
        """The oldest and newest epoch of the job the store holds DECIDED or COMMITTED (the
        ones kept: retention may have pruned older ones); None when it holds none. What the
        job's Spark checkpoint must not be behind (``checkpoint_layout.behind_store``)."""
        ...

    def reset_epochs(self, job_id: JobId, attempt: AttemptNo, uid: str) -> int:
        """Start the job's epochs afresh under a new ``uid`` (``stoker run
        --reset-checkpoint``: its Spark checkpoint is lost and its batches are numbered from 0
        again): every epoch record and sink transaction of the job is deleted and its uid
        replaced, in one transaction, so a sink takes the new epochs for a new owner's and the
        epoch pin no longer finds the old ones as replays. Fenced: only the job's current
        attempt ``attempt`` may (:class:`~stoker.errors.StaleAttempt` otherwise). Attempts,
        control history and counters stay. Returns how many epoch records went."""
        ...


class TxnStore(Protocol):
    """Sink transactions of each epoch, moved only along ``TXN_TRANSITIONS``."""

    def record_txn(
        self,
        job_id: JobId,
        epoch: Epoch,
        sink: str,
        attempt: AttemptNo,
        state: TxnState,
        detail: dict[str, Any],
    ) -> SinkTxn:
        """Move the transaction to ``state`` (PREPARED -> COMMITTED | ABORTED, checked);
        ``detail`` is merged into what was recorded. :class:`InvalidTransition` otherwise."""
        ...

    def get_txn(
        self, job_id: JobId, epoch: Epoch, sink: str, attempt: AttemptNo
    ) -> SinkTxn | None: ...

    def list_txns(self, job_id: JobId, state: TxnState | None = None) -> list[SinkTxn]: ...


class RetentionStore(Protocol):
    """Bounded growth: old committed epochs go, what recovery needs stays (``_retention.py``)."""

    def prune_epochs(
        self,
        job_id: JobId,
        policy: RetentionPolicy,
        batch_size: int = 1000,
        max_batches: int | None = None,
    ) -> PruneResult:
        """Delete the epochs (and their sink transactions) ``policy`` does not keep, in
        transactions of at most ``batch_size`` epochs, at most ``max_batches`` of them."""
        ...
