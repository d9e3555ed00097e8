"""The store's protocols, one per concept; :class:`~stoker.store.base.Store` is their union."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from stoker.store._retention import PruneResult, RetentionPolicy
from stoker.store.records import (
    AttemptRecord,
    ClusterRecord,
    ControlEvent,
    ControlSnapshot,
    EpochRecord,
    JobRecord,
    LeaderLease,
    ManagerRecord,
    NewJob,
    Owner,
    RescaleRecord,
    SinkTxn,
)
from stoker.types import (
    AttemptNo,
    AttemptState,
    ClusterState,
    ControlKind,
    ControlStatus,
    ControlVersion,
    Epoch,
    JobId,
    JobKind,
    JobState,
    TxnState,
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

    def set_job_state(self, job_id: JobId, state: JobState, error: str | None = None) -> JobRecord:
        """Move the job to ``state`` if the transition table allows it."""
        ...

    def set_job_spec(self, job_id: JobId, spec: dict[str, Any]) -> None: ...

    def request_cancel(self, job_id: JobId) -> JobRecord:
        """RUNNING -> CANCELING (the driver stops after its epoch); CREATED/RESTARTING end."""
        ...

    def set_failures(self, job_id: JobId, failures: int, next_attempt_at: float | None) -> None: ...

    def restart_job(self, job_id: JobId, spec: dict[str, Any]) -> JobRecord:
        """An ended job goes to RESTARTING with ``spec``; a live one is returned unchanged."""
        ...

    def set_resolved(self, job_id: JobId) -> None:
        """The ended job's sinks are resolved (decided parts committed, the rest aborted)."""
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
    ) -> AttemptRecord:
        """Make a new attempt the owner of the job.

        Succeeds only if the job's current attempt is still ``expected_current`` (compare and
        swap) and that attempt has ended, its lease has expired, or the caller has seen its
        process gone (``previous_dead``). The new attempt number is one higher.
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

    def set_attempt_owner(self, job_id: JobId, attempt: AttemptNo, owner: Owner) -> None: ...

    def attempt_failed(
        self,
        job_id: JobId,
        attempt: AttemptNo,
        error: str,
        next_attempt_at: float | None,
        count: bool = True,
        reset: bool = False,
    ) -> JobRecord:
        """End the attempt FAILED; its job restarts at ``next_attempt_at`` or fails.

        ``count=False``: the failure was the manager's, not the job's (no restart is used up).
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
        transaction. ``job_state`` None leaves the job to the job manager."""
        ...

    def get_attempt(self, job_id: JobId, attempt: AttemptNo) -> AttemptRecord | None: ...

    def note_attempt_error(self, job_id: JobId, attempt: AttemptNo, error: str) -> bool:
        """Record ``error`` on an attempt that ended FINISHED (its driver crashed after the
        job's end); its state stays. Whether it was recorded."""
        ...

    def list_attempts(self, job_id: JobId) -> list[AttemptRecord]: ...

    def renew_lease(self, job_id: JobId, attempt: AttemptNo, lease_ttl: float) -> bool:
        """Extend the lease; False when the attempt no longer owns the job or its lease lapsed,
        or (an attempt with ``app_attempt``) its application attempt is no longer current."""
        ...

    def end_attempt(
        self, job_id: JobId, attempt: AttemptNo, state: AttemptState, error: str | None = None
    ) -> None:
        """End a live attempt as ``state``, checked against ``ATTEMPT_TRANSITIONS``
        (:class:`InvalidTransition` otherwise). An attempt that has ended already is left as it
        ended: ends are idempotent. The same holds wherever the store ends an attempt."""
        ...


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

    def list_epochs(self, job_id: JobId, limit: int = 100) -> list[EpochRecord]: ...

    def epochs_in_state(self, job_id: JobId, state: str) -> list[EpochRecord]: ...


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


class ClusterStore(Protocol):
    """Spark standalone clusters stoker started, and their processes: whichever manager leads
    can stop them. States move only along ``CLUSTER_TRANSITIONS``."""

    def create_cluster(
        self, name: str, kind: str, spec: dict[str, Any], owner_app: JobId | None = None
    ) -> tuple[ClusterRecord, bool]:
        """Insert the cluster STARTING if the name is free; the record and whether this call
        created it (an existing one is returned as it is). ``kind`` is 'app' (``owner_app``,
        an existing application, required) or 'session' (no ``owner_app``): else
        :class:`InvalidInput` or :class:`ApplicationNotFound`."""
        ...

    def get_cluster(self, name: str) -> ClusterRecord:
        """The cluster, or :class:`~stoker.errors.ClusterNotFound`."""
        ...

    def list_clusters(self, include_stopped: bool = False) -> list[ClusterRecord]:
        """Clusters oldest first; STOPPED ones only with ``include_stopped``."""
        ...

    def update_cluster(
        self,
        name: str,
        *,
        state: ClusterState | None = None,
        master_url: str | None = None,
        web_url: str | None = None,
        processes: list[dict[str, Any]] | None = None,
        error: str | None = None,
    ) -> ClusterRecord:
        """Change what is given (None: unchanged), in one transaction; a new ``state`` is
        checked with ``CLUSTERS.check`` (:class:`InvalidTransition`)."""
        ...

    def delete_cluster(self, name: str) -> None:
        """Forget a STOPPED cluster; :class:`InvalidTransition` for any other state (its
        processes may still run), :class:`ClusterNotFound` for an unknown name."""
        ...


class ScalingStore(Protocol):
    """Scaling of owners of executors (a lone job, or an application whose jobs share its
    driver's executors): the spec, the scaler's executor target, what the driver reports, each
    epoch's cost, and the history of rescales. None of these moves a job's ``updated_at``."""

    def set_scaling(self, job_id: JobId, scaling: dict[str, Any] | None) -> JobRecord:
        """Record the owner's scaling spec (``ScalingSpec.to_dict()``; None: mode fixed) and
        return the record. :class:`JobNotFound` for an unknown id; :class:`InvalidInput` for
        anything but a JSON object."""
        ...

    def set_executor_target(self, job_id: JobId, target: int | None) -> None:
        """The executor count the scaler wants for the owner (None: no target). A whole number
        >= 0 (:class:`InvalidInput`); :class:`JobNotFound` for an unknown id."""
        ...

    def report_resources(self, job_id: JobId, resources: dict[str, Any]) -> None:
        """What the driver has now, replacing the last report: ``{"executors", "cores",
        "executor_ids", "hosts", "requested", "at"}``. :class:`JobNotFound` for an unknown
        id."""
        ...

    def set_epoch_metrics(
        self,
        job_id: JobId,
        epoch: Epoch,
        *,
        duration_ms: float | None = None,
        backlog: int | None = None,
        executors: int | None = None,
        cores: int | None = None,
    ) -> None:
        """Record what the epoch cost and left behind; only the values given (None keeps
        what is recorded). An epoch with no record (not pinned, or pruned) is left alone."""
        ...

    def add_rescale(
        self,
        job_id: JobId,
        *,
        kind: str,
        policy: str,
        mode: str,
        signals: dict[str, Any],
        from_executors: int | None,
        to_executors: int | None,
        reason: str,
        status: str,
        workers: dict[str, Any] | None = None,
        sender: str | None = None,
        at: float | None = None,
    ) -> RescaleRecord:
        """Record one rescale of the owner ``job_id`` under a new id (growing across the
        store). ``kind`` is one of ``RESCALE_KINDS`` and ``status`` one its kind allows
        (``RESCALE_STATUSES``): else :class:`InvalidInput`, nothing stored. ``workers``
        defaults to ``{"added": [], "removed": []}``, ``at`` to now; ``signals`` and
        ``workers`` must be JSON objects (finite numbers). :class:`JobNotFound` for an
        unknown id."""
        ...

    def update_rescale(
        self,
        rescale_id: int,
        *,
        status: str | None = None,
        in_use_at: float | None = None,
        workers: dict[str, Any] | None = None,
        error: str | None = None,
    ) -> RescaleRecord:
        """Change what is given (None: unchanged). A new ``status`` follows
        ``RESCALE_TRANSITIONS`` (decided -> in_use | failed | superseded; the same status
        again changes only the other fields): else :class:`InvalidTransition`. Becoming
        in_use with no ``in_use_at`` recorded or given sets it to now.
        :class:`RescaleNotFound` for an unknown id."""
        ...

    def list_rescales(
        self, job_id: JobId, limit: int = 100, since: float | None = None
    ) -> list[RescaleRecord]:
        """The owner's rescales at or after ``since`` (None: all), newest first (by ``at``,
        then id), at most ``limit``. :class:`JobNotFound` for an unknown id."""
        ...

    def recent_epochs(self, job_ids: Sequence[JobId], since: float) -> list[EpochRecord]:
        """The COMMITTED epochs of ``job_ids`` committed at or after ``since``, oldest first
        (by commit time, then job id and epoch). Unknown ids have none."""
        ...


class LeaderStore(Protocol):
    """Leadership among job managers: one lease with a growing token; and who the candidates
    are (a heartbeat per manager, shown to people, never deciding anything)."""

    def acquire_leadership(self, holder: str, address: str, ttl: float) -> LeaderLease | None: ...

    def renew_leadership(self, holder: str, token: int, ttl: float) -> bool: ...

    def resign_leadership(self, holder: str, token: int) -> None: ...

    def get_leader(self) -> LeaderLease | None: ...

    def heartbeat_manager(self, holder: str, address: str) -> None:
        """Record that manager ``holder`` (the id it takes the lease under), serving at
        ``address``, is alive now: its row made (``started_at`` now) or its ``seen_at`` and
        address refreshed. Rows of managers not seen for an hour
        (``sql_leader.MANAGERS_FORGOTTEN_AFTER``) are dropped in the same transaction."""
        ...

    def forget_manager(self, holder: str) -> None:
        """Drop manager ``holder``'s row (it stopped cleanly); unknown holders are ignored."""
        ...

    def list_managers(self, fresh_for: float) -> list[ManagerRecord]:
        """The managers seen within the last ``fresh_for`` seconds (a number > 0), oldest
        first (by ``started_at``, then holder). :class:`InvalidInput` for another value."""
        ...


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
