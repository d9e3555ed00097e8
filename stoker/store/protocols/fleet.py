"""What the job manager runs the jobs on and with: clusters, the scaling of executors, and
leadership among managers; long REST calls as operations; warm standby drivers."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from stoker.store.fleet_records import (
    ClusterProcess,
    ClusterRecord,
    LeaderLease,
    ManagerRecord,
    OperationRecord,
    RescaleRecord,
    StandbyRecord,
    UpgradeRecord,
)
from stoker.store.records import EpochRecord, JobRecord, Owner
from stoker.types import (
    AttemptNo,
    ClusterState,
    Epoch,
    JobId,
    OperationState,
    StandbyRole,
    UpgradeState,
)

# A host's budget as the store checks it: given what the budget counts (the live clusters of
# the host, and those of no host), it returns if what is asked fits, else raises (the caller's
# error, e.g. ClusterConflict naming the budget) and nothing is written. The store knows no
# budget: the manager's HostBudget makes the callable.
Admit = Callable[[list[ClusterRecord]], None]


class ClusterStore(Protocol):
    """Spark standalone clusters stoker started, and their processes: whichever manager leads
    can stop them. States move only along ``CLUSTER_TRANSITIONS``.

    A host's cluster budget is checked and what it admits recorded in one transaction
    (``admit`` of :meth:`create_cluster` and :meth:`change_cluster_processes`), and those
    transactions run one at a time across every manager of the store: two managers, or the
    REST API and the leader, never both take the last room."""

    def create_cluster(
        self,
        name: str,
        kind: str,
        spec: dict[str, Any],
        owner_app: JobId | None = None,
        *,
        host: str | None = None,
        admit: Admit | None = None,
    ) -> tuple[ClusterRecord, bool]:
        """Insert the cluster STARTING if the name is free; the record and whether this call
        created it (an existing one is returned as it is). ``kind`` is 'app' (``owner_app``,
        an existing application, required) or 'session' (no ``owner_app``): else
        :class:`InvalidInput` or :class:`ApplicationNotFound`. ``host``: whose budget it
        counts against (:meth:`host_clusters`). With ``admit`` (``host`` then required),
        a new cluster is first checked against what :meth:`host_clusters` says in the same
        transaction, one such check at a time across managers: what ``admit`` raises leaves
        nothing written. A name already taken is returned without a check."""
        ...

    def host_clusters(self, host: str) -> list[ClusterRecord]:
        """What ``host``'s budget counts, oldest first: its clusters STARTING, RUNNING or
        STOPPING, and those recorded with no host (by stoker before the host was recorded;
        they may run anywhere, so every host counts them)."""
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
        processes: list[ClusterProcess] | None = None,
        error: str | None = None,
    ) -> ClusterRecord:
        """Change what is given (None: unchanged), in one transaction; a new ``state`` is
        checked with ``CLUSTERS.check`` (:class:`InvalidTransition`)."""
        ...

    def change_cluster_processes(
        self,
        name: str,
        put: Sequence[ClusterProcess] = (),
        drop: Iterable[str] = (),
        *,
        host: str | None = None,
        admit: Admit | None = None,
    ) -> ClusterRecord:
        """Change the cluster's process list as it is now, in one transaction on its locked
        row: each of ``put`` replaces the process of its ``id`` or is added, each id of
        ``drop`` is removed. Two managers changing one cluster's workers at once keep each
        other's (a list read earlier and written back whole would lose one). A ``put`` whose
        id is recorded as another live process (both started meanwhile under one id) is
        :class:`ClusterConflict`, nothing changed: the caller stops what it started.
        :class:`ClusterNotFound` for an unknown name. With ``admit`` (``host`` required), the
        change is first checked against ``host``'s budget as :meth:`create_cluster` checks a
        new cluster: how a worker is reserved before its JVM starts."""
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
        work_ms: float | None = None,
        progress: dict[str, Any] | None = None,
    ) -> None:
        """Record what the epoch cost and left behind; only the values given (None keeps
        what is recorded). An epoch with no record (not pinned, or pruned) is left alone.
        ``work_ms``: the part of ``duration_ms`` spent on its rows (its sinks' writes).
        ``progress``: what Spark's progress says of it, a JSON object of at most
        ``MAX_PROGRESS_BYTES`` (:class:`~stoker.errors.InvalidInput` otherwise)."""
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

    def acquire_leadership(
        self,
        holder: str,
        address: str,
        ttl: float,
        lapsed: tuple[str, int, int, float] | None = None,
    ) -> LeaderLease | None:
        """Take or keep the lease: when free (never held, resigned), ours, or ``lapsed`` (the
        lease's ``seen`` value, unchanged for a TTL by the caller's monotonic clock, and still
        what the row shows). None if another holds it."""
        ...

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


class OperationStore(Protocol):
    """Long REST calls run as operations: made RUNNING by the manager that
    runs them (``holder``), ended once (``OPERATIONS``), found again by a retry of the same
    request, dropped by retention some time after they end."""

    def create_operation(
        self,
        op_id: str,
        kind: str,
        target: str,
        request: dict[str, Any],
        holder: str,
        idem_key: str | None = None,
    ) -> OperationRecord:
        """Insert the operation RUNNING, made now. ``request`` (a JSON object) is kept as its
        canonical JSON: what :meth:`find_operation` matches; ``idem_key`` (the client's
        Idempotency-Key) what :meth:`keyed_operation` finds. A taken ``op_id`` or
        ``idem_key`` is a :class:`StoreError`."""
        ...

    def get_operation(self, op_id: str) -> OperationRecord:
        """The operation, or :class:`~stoker.errors.OperationNotFound`."""
        ...

    def find_operation(
        self, kind: str, target: str, request: dict[str, Any], since: float
    ) -> OperationRecord | None:
        """The newest operation of this ``kind`` on ``target`` with an equal ``request`` (as
        canonical JSON: key order does not matter) that is RUNNING or ended at or after
        ``since``; None if there is none."""
        ...

    def keyed_operation(self, idem_key: str) -> OperationRecord | None:
        """The operation made with this Idempotency-Key, or None."""
        ...

    def running_operations(self) -> list[OperationRecord]:
        """Every RUNNING operation, oldest first."""
        ...

    def end_operation(
        self,
        op_id: str,
        state: OperationState,
        *,
        result: dict[str, Any] | None = None,
        error: str | None = None,
        error_type: str | None = None,
    ) -> OperationRecord:
        """End a RUNNING operation SUCCEEDED (with the call's ``result``) or FAILED (with
        ``error`` and ``error_type``), now; the record as ended. An operation that ended
        already: :class:`InvalidTransition` (the first end stays); unknown:
        :class:`OperationNotFound`. RUNNING is not an end (:class:`InvalidTransition`)."""
        ...

    def delete_ended_operations(self, before: float) -> int:
        """Drop the operations that ended before ``before``; how many."""
        ...


class StandbyStore(Protocol):
    """Warm standby drivers: per job and role (``standby``: the job's own;
    ``upgrade``: an upgrade's new code), recorded WARMING by the manager that starts it, READY
    once warm (the standby says so), TAKEN when the leader hands it the job's next attempt
    (``STANDBYS``). The standby renews its own lease while it warms and waits."""

    def add_standby(
        self,
        job_id: JobId,
        owner: Owner,
        log_path: str,
        lease_ttl: float,
        role: StandbyRole = StandbyRole.STANDBY,
        spec_key: str = "",
    ) -> StandbyRecord:
        """Record the job's ``role`` standby ``owner`` WARMING, started now, its lease
        ``lease_ttl`` from now, running the code ``spec_key`` names. A job with such a standby
        recorded already: :class:`InvalidTransition` (remove that one first)."""
        ...

    def get_standby(
        self, job_id: JobId, role: StandbyRole = StandbyRole.STANDBY
    ) -> StandbyRecord | None:
        """The job's ``role`` standby, or None."""
        ...

    def list_standbys(self) -> list[StandbyRecord]:
        """Every standby recorded, by job id and role."""
        ...

    def renew_standby(
        self,
        job_id: JobId,
        owner: Owner,
        lease_ttl: float,
        ready: bool = False,
        role: StandbyRole = StandbyRole.STANDBY,
    ) -> StandbyRecord | None:
        """The standby ``owner`` renews its lease (WARMING or READY; with ``ready``, WARMING
        becomes READY); the record as it is now (TAKEN: the attempt handed to it), or None
        when the job's ``role`` standby is no longer ``owner`` (removed, replaced)."""
        ...

    def take_standby(
        self, job_id: JobId, attempt: AttemptNo, role: StandbyRole = StandbyRole.STANDBY
    ) -> StandbyRecord | None:
        """Hand ``attempt`` to the job's ``role`` standby: READY with its lease not lapsed
        becomes TAKEN with ``attempt``; the record, or None when there is no such standby."""
        ...

    def remove_standby(
        self,
        job_id: JobId,
        owner: Owner | None = None,
        role: StandbyRole = StandbyRole.STANDBY,
    ) -> bool:
        """Forget the job's ``role`` standby (only if it is ``owner``, when given); whether a
        row went."""
        ...


class UpgradeStore(Protocol):
    """Upgrades of running jobs to new code (``upgrades``): PENDING -> SWAPPED ->
    CONFIRMED | ROLLED_BACK, or PENDING -> REFUSED; at most one live (PENDING, SWAPPED) per
    job. Each move is one statement's condition; the moves that change which code the job
    runs (SWAPPED, ROLLED_BACK) set the job's spec in the same transaction."""

    def add_upgrade(
        self,
        job_id: JobId,
        upgrade_id: str,
        old_spec: dict[str, Any],
        new_spec: dict[str, Any],
        watch_epochs: int,
        watch_seconds: float,
        checks: dict[str, Any],
    ) -> UpgradeRecord:
        """Record an upgrade PENDING. The job unknown: :class:`JobNotFound`; one live
        already: :class:`InvalidTransition` naming it."""
        ...

    def get_upgrade(self, upgrade_id: str) -> UpgradeRecord | None:
        """The upgrade, or None."""
        ...

    def live_upgrade(self, job_id: JobId) -> UpgradeRecord | None:
        """The job's PENDING or SWAPPED upgrade, or None."""
        ...

    def live_upgrades(self) -> list[UpgradeRecord]:
        """Every PENDING or SWAPPED upgrade, oldest first."""
        ...

    def list_upgrades(self, job_id: JobId, limit: int = 100) -> list[UpgradeRecord]:
        """The job's upgrades, newest first."""
        ...

    def upgrade_stopping(self, upgrade_id: str, attempt: AttemptNo) -> UpgradeRecord | None:
        """Record that the old code's ``attempt`` was asked to stop (PENDING, once); the
        record, or None when it was not PENDING or was asked already."""
        ...

    def swap_upgrade(self, upgrade_id: str) -> UpgradeRecord | None:
        """PENDING -> SWAPPED and the job's spec := the new spec, in one transaction; None
        when it was not PENDING."""
        ...

    def upgrade_swap_attempt(self, upgrade_id: str, attempt: AttemptNo) -> bool:
        """Record the new code's first attempt (SWAPPED, once); whether it was recorded."""
        ...

    def end_upgrade(
        self, upgrade_id: str, state: UpgradeState, detail: str | None = None
    ) -> UpgradeRecord | None:
        """SWAPPED -> CONFIRMED; SWAPPED -> ROLLED_BACK (the job's spec := the old spec in
        the same transaction); PENDING -> REFUSED. None when it is not in the state the move
        starts from; another end: :class:`InvalidTransition`."""
        ...
