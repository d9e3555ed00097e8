"""Frozen records of what the job manager runs the jobs on and with: the clusters stoker
started and their processes, the managers and their leader lease, and the rescale history
(the store's fleet side; ``records.py`` holds jobs, attempts, epochs, sink transactions and
control)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from stoker.store.records import Owner
from stoker.types import (
    AttemptNo,
    ClusterKind,
    ClusterState,
    JobId,
    OperationState,
    StandbyRole,
    StandbyState,
    StateMachine,
    UpgradeState,
)


@dataclass(frozen=True)
class ClusterProcess:
    """One JVM (master or worker) of a cluster stoker started: its identity (host, pid and the
    kernel's start time of that pid, which tells it from a later process reusing the pid),
    where it listens and what it offers. Stored as a JSON object (:meth:`to_json`)."""

    role: str  # "master" | "worker"
    id: str  # "master", "worker-1", ...
    host: str
    address: str  # its loopback address: 127.0.0.1 for the master, .2, .3 ... for workers
    pid: int
    pid_started: str  # "unknown" until it runs
    port: int  # RPC; a worker's is Spark's pick, 0 until the master lists it
    web_port: int
    log: str
    cores: int  # 0 for the master
    memory: str  # "" for the master

    @property
    def owner(self) -> Owner:
        """Its identity, as an attempt's owner is written."""
        return Owner(self.host, self.pid, self.pid_started)

    def to_json(self) -> dict[str, Any]:
        """The JSON object the store keeps and the API shows."""
        return {
            "role": self.role,
            "id": self.id,
            "host": self.host,
            "address": self.address,
            "pid": self.pid,
            "pid_started": self.pid_started,
            "port": self.port,
            "web_port": self.web_port,
            "log": self.log,
            "cores": self.cores,
            "memory": self.memory,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ClusterProcess:
        """Back from :meth:`to_json`'s object (a key missing: its empty value)."""
        return cls(
            role=str(d.get("role") or ""),
            id=str(d.get("id") or ""),
            host=str(d.get("host") or ""),
            address=str(d.get("address") or ""),
            pid=int(d.get("pid") or 0),
            pid_started=str(d.get("pid_started") or "unknown"),
            port=int(d.get("port") or 0),
            web_port=int(d.get("web_port") or 0),
            log=str(d.get("log") or ""),
            cores=int(d.get("cores") or 0),
            memory=str(d.get("memory") or ""),
        )


@dataclass(frozen=True)
class ClusterRecord:
    """A Spark standalone cluster stoker started: its processes, so that whichever manager
    leads can tear it down (``stop_processes``) after the one that started it is gone."""

    name: str
    kind: ClusterKind
    owner_app: JobId | None
    spec: dict[str, Any]
    state: ClusterState
    master_url: str | None
    web_url: str | None
    processes: list[ClusterProcess]
    error: str | None
    created_at: float
    updated_at: float
    # The host whose budget it counts against: its creator's (stoker.procs.host_id());
    # None for a row of code before migration 0024, counted against every host's.
    host: str | None = None

    @classmethod
    def from_row(cls, r: Any) -> ClusterRecord:
        return cls(
            name=r[0],
            kind=ClusterKind(r[1]),
            owner_app=None if r[2] is None else JobId(r[2]),
            spec=json.loads(r[3]),
            state=ClusterState(r[4]),
            master_url=r[5],
            web_url=r[6],
            processes=[ClusterProcess.from_json(p) for p in json.loads(r[7])],
            error=r[8],
            created_at=float(r[9]),
            updated_at=float(r[10]),
            host=r[11] if len(r) > 11 else None,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": str(self.kind),
            "owner_app": self.owner_app,
            "spec": self.spec,
            "state": str(self.state),
            "master_url": self.master_url,
            "web_url": self.web_url,
            "processes": [p.to_json() for p in self.processes],
            "error": self.error,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "host": self.host,
        }


@dataclass(frozen=True)
class LeaderLease:
    """Who leads the job managers, until when, under which fencing token."""

    holder: str
    address: str
    token: int
    expires_at: float  # by the holder's wall clock: shown, never compared (stoker.leases)
    renewals: int = 0  # -1: resigned, free at once
    ttl: float | None = None  # the holder's TTL; None: a row of older code

    @property
    def resigned(self) -> bool:
        return self.renewals < 0

    @property
    def seen(self) -> tuple[str, int, int, float]:
        """What changes on every renewal or takeover (older managers renew the expiry
        alone): a standby that saw the same value for a whole TTL may take the lease."""
        return (self.holder, self.token, self.renewals, self.expires_at)

    @classmethod
    def from_row(cls, r: Any) -> LeaderLease:
        return cls(
            holder=r[1],
            address=r[2],
            token=int(r[3]),
            expires_at=float(r[4]),
            renewals=int(r[5]) if len(r) > 5 and r[5] is not None else 0,
            ttl=float(r[6]) if len(r) > 6 and r[6] is not None else None,
        )


@dataclass(frozen=True)
class ManagerRecord:
    """A job manager that takes part in the election, as its last heartbeat left it.

    ``holder`` is the id it takes the leader lease under; ``address`` where it serves.
    Whether it leads is the lease's to say (:class:`LeaderLease`), never this record's.
    """

    holder: str
    address: str
    started_at: float
    seen_at: float
    # The stoker it runs and the newest migration that stoker knows (migration 0020); None
    # for a manager of a stoker before it.
    stoker_version: str | None = None
    schema_version: int | None = None

    @classmethod
    def from_row(cls, r: Any) -> ManagerRecord:
        return cls(
            holder=r[0],
            address=r[1],
            started_at=float(r[2]),
            seen_at=float(r[3]),
            stoker_version=r[4] if len(r) > 4 else None,
            schema_version=int(r[5]) if len(r) > 5 and r[5] is not None else None,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "holder": self.holder,
            "address": self.address,
            "started_at": self.started_at,
            "seen_at": self.seen_at,
            "stoker_version": self.stoker_version,
            "schema_version": self.schema_version,
        }


# Rescales. What made the row: the autoscaler's decision, executors that came or
# went by themselves (reactive mode: joins and losses), or a user setting scaling or bounds.
RESCALE_KINDS = ("decision", "observed", "bounds")
# The statuses a rescale of each kind may be recorded with.
RESCALE_STATUSES: dict[str, tuple[str, ...]] = {
    "decision": ("decided", "in_use", "failed", "superseded"),
    "observed": ("observed",),
    "bounds": ("recorded",),
}
# A decision is in flight while "decided": it ends "in_use" (the executors reached its
# target), "failed" (they could not be had) or "superseded" (a newer decision replaced it).
# Every other status is final. Moving to the status a rescale has already changes no status.
RESCALE_TRANSITIONS: dict[str, frozenset[str]] = {
    "decided": frozenset({"in_use", "failed", "superseded"}),
}
RESCALES: StateMachine[str] = StateMachine("rescale", RESCALE_TRANSITIONS, stay=True)


@dataclass(frozen=True)
class RescaleRecord:
    """One scaling decision or observation of an owner of executors (a lone job or an
    application): how many executors it had and was to have, why, and how far it got."""

    rescale_id: int
    job_id: JobId
    at: float
    kind: str
    policy: str
    mode: str
    signals: dict[str, Any]
    from_executors: int | None
    to_executors: int | None
    workers: dict[str, Any]
    reason: str
    status: str
    in_use_at: float | None
    error: str | None
    sender: str | None

    @classmethod
    def from_row(cls, r: Any) -> RescaleRecord:
        return cls(
            rescale_id=int(r[0]),
            job_id=JobId(r[1]),
            at=float(r[2]),
            kind=r[3],
            policy=r[4],
            mode=r[5],
            signals=dict(json.loads(r[6])),
            from_executors=None if r[7] is None else int(r[7]),
            to_executors=None if r[8] is None else int(r[8]),
            workers=dict(json.loads(r[9])),
            reason=r[10],
            status=r[11],
            in_use_at=None if r[12] is None else float(r[12]),
            error=r[13],
            sender=r[14],
        )

    @property
    def seconds_to_in_use(self) -> float | None:
        """From the decision to its executors in use; None until then."""
        return None if self.in_use_at is None else self.in_use_at - self.at

    def to_dict(self) -> dict[str, Any]:
        return {
            "rescale_id": self.rescale_id,
            "job_id": self.job_id,
            "at": self.at,
            "kind": self.kind,
            "policy": self.policy,
            "mode": self.mode,
            "signals": self.signals,
            "from_executors": self.from_executors,
            "to_executors": self.to_executors,
            "workers": self.workers,
            "reason": self.reason,
            "status": self.status,
            "in_use_at": self.in_use_at,
            "seconds_to_in_use": self.seconds_to_in_use,
            "error": self.error,
            "sender": self.sender,
        }


# Operations: long REST calls that answer 202 and are polled.
OPERATION_COLUMNS = (
    "op_id, kind, target, request, state, holder, result, error, error_type, created_at, ended_at"
)


@dataclass(frozen=True)
class OperationRecord:
    """A long call run in the background of the manager that took it (``holder``): what was
    asked (``kind``, ``target``, ``request``: the canonical JSON a retry matches), and once it
    ended the answer the call would have given (``result``) or why it failed (``error``, and
    ``error_type``: the stoker error's class name, so the API answers the status that call
    would have had)."""

    op_id: str
    kind: str
    target: str
    request: str
    state: OperationState
    holder: str
    result: dict[str, Any] | None
    error: str | None
    error_type: str | None
    created_at: float
    ended_at: float | None

    @classmethod
    def from_row(cls, r: Any) -> OperationRecord:
        return cls(
            op_id=r[0],
            kind=r[1],
            target=r[2],
            request=r[3],
            state=OperationState(r[4]),
            holder=r[5],
            result=None if r[6] is None else json.loads(r[6]),
            error=r[7],
            error_type=r[8],
            created_at=float(r[9]),
            ended_at=None if r[10] is None else float(r[10]),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "operation_id": self.op_id,
            "kind": self.kind,
            "target": self.target,
            "request": json.loads(self.request),
            "state": self.state.value,
            "result": self.result,
            "error": self.error,
            "error_type": self.error_type,
            "created_at": self.created_at,
            "ended_at": self.ended_at,
        }


@dataclass(frozen=True)
class StandbyRecord:
    """A job's warm standby driver (``standbys``): who it is, how far it got, and, once TAKEN,
    the attempt it was handed. Its lease is its own: renewed while it waits, lapsed when it
    froze or died."""

    job_id: JobId
    state: StandbyState
    owner: Owner
    attempt: AttemptNo | None
    log_path: str
    started_at: float
    ready_at: float | None
    lease_expires_at: float
    role: StandbyRole = StandbyRole.STANDBY
    spec_key: str = ""  # the code it runs (``spec_key`` of its job's spec when it started)

    @classmethod
    def from_row(cls, r: Any) -> StandbyRecord:
        return cls(
            job_id=JobId(r[0]),
            state=StandbyState(r[1]),
            owner=Owner(host=r[2], pid=int(r[3]), pid_started=r[4]),
            attempt=None if r[5] is None else AttemptNo(int(r[5])),
            log_path=r[6],
            started_at=float(r[7]),
            ready_at=None if r[8] is None else float(r[8]),
            lease_expires_at=float(r[9]),
            role=StandbyRole(r[10]),
            spec_key=str(r[11]),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "role": str(self.role),
            "state": str(self.state),
            "host": self.owner.host,
            "pid": self.owner.pid,
            "attempt": self.attempt,
            "started_at": self.started_at,
            "ready_at": self.ready_at,
            "lease_expires_at": self.lease_expires_at,
        }


@dataclass(frozen=True)
class UpgradeRecord:
    """An upgrade of a running job to new code (``upgrades``): the job's spec
    before and after, the watch window, what the checks found, and how far it got."""

    upgrade_id: str
    job_id: JobId
    state: UpgradeState
    old_spec: dict[str, Any]
    new_spec: dict[str, Any]
    watch_epochs: int
    watch_seconds: float
    checks: dict[str, Any]
    detail: str | None
    created_at: float
    stop_attempt: AttemptNo | None = None  # the old code's attempt asked to stop
    stop_at: float | None = None
    swap_attempt: AttemptNo | None = None  # the new code's first attempt
    swapped_at: float | None = None
    ended_at: float | None = None

    def swap_due(self, current: AttemptNo) -> bool:
        """Whether the old code's ``current`` attempt was asked to stop for this upgrade (its
        end is the swap's moment)."""
        return self.state == UpgradeState.PENDING and self.stop_attempt == current

    @property
    def handover_due(self) -> bool:
        """Swapped, and the new code's first attempt not recorded yet."""
        return self.state == UpgradeState.SWAPPED and self.swap_attempt is None

    @property
    def swapping(self) -> bool:
        """The old code asked to stop and the new code not yet handed its attempt."""
        return (self.state == UpgradeState.PENDING and self.stop_attempt is not None) or (
            self.handover_due
        )

    @classmethod
    def from_row(cls, r: Any) -> UpgradeRecord:
        return cls(
            upgrade_id=str(r[0]),
            job_id=JobId(r[1]),
            state=UpgradeState(r[2]),
            old_spec=json.loads(r[3]),
            new_spec=json.loads(r[4]),
            watch_epochs=int(r[5]),
            watch_seconds=float(r[6]),
            checks=json.loads(r[7]),
            detail=r[8],
            created_at=float(r[9]),
            stop_attempt=None if r[10] is None else AttemptNo(int(r[10])),
            stop_at=None if r[11] is None else float(r[11]),
            swap_attempt=None if r[12] is None else AttemptNo(int(r[12])),
            swapped_at=None if r[13] is None else float(r[13]),
            ended_at=None if r[14] is None else float(r[14]),
        )

    def to_dict(self) -> dict[str, Any]:
        """As the REST API shows it: the code before and after (entrypoint, config), not
        the whole specs (their conf may hold redacted secrets only, but is no news here)."""
        return {
            "upgrade_id": self.upgrade_id,
            "job_id": self.job_id,
            "state": str(self.state),
            "from": _code_of(self.old_spec),
            "to": _code_of(self.new_spec),
            "watch_epochs": self.watch_epochs,
            "watch_seconds": self.watch_seconds,
            "checks": self.checks,
            "detail": self.detail,
            "created_at": self.created_at,
            "stop_attempt": self.stop_attempt,
            "stop_at": self.stop_at,
            "swap_attempt": self.swap_attempt,
            "swapped_at": self.swapped_at,
            "ended_at": self.ended_at,
        }


def _code_of(spec: dict[str, Any]) -> dict[str, Any]:
    return {"entrypoint": spec.get("entrypoint"), "config": dict(spec.get("config") or {})}
