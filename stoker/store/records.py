"""Frozen records the store returns."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from stoker.types import (
    AttemptNo,
    AttemptState,
    ControlKind,
    ControlStatus,
    ControlVersion,
    Epoch,
    EpochState,
    JobId,
    JobKind,
    JobState,
    TxnState,
)

# What ``Store.create_job`` takes, as one value: (job id, name, spec, config).
NewJob = tuple[JobId, str, dict[str, Any], dict[str, Any]]


@dataclass(frozen=True)
class JobRecord:
    """One job: its state, its spec and the attempt that owns it now."""

    job_id: JobId
    name: str
    state: JobState
    spec: dict[str, Any]
    current_attempt: AttemptNo
    control_version: ControlVersion
    last_error: str | None
    created_at: float
    updated_at: float
    cancel_requested_at: float | None = None
    failures: int = 0
    next_attempt_at: float | None = None
    # Random per job record: tells this job from an earlier one of the same id whose store is
    # gone (sinks use it to recognise their own output). Empty for jobs made before it existed.
    uid: str = ""
    # When the sinks of the ended job were last resolved; None while that is owed.
    resolved_at: float | None = None
    # A pipeline (JOB) or a user program's driver (APPLICATION): one id space, one lifecycle.
    kind: JobKind = JobKind.JOB
    # The application whose driver runs this job; None for a job whose driver is its own.
    app_id: JobId | None = None
    # Scaling, set on an owner of executors (a lone job or an application): its
    # ScalingSpec.to_dict() (None: mode fixed), the executor count the scaler wants (None: none
    # set) and what its driver last reported having (see ``ScalingStore.report_resources``).
    scaling: dict[str, Any] | None = None
    executor_target: int | None = None
    resources: dict[str, Any] | None = None
    # The fencing token of the leader that last judged the record's driver (migration 0025).
    judged_by: int | None = None

    @classmethod
    def from_row(cls, r: Any) -> JobRecord:
        return cls(
            job_id=JobId(r[0]),
            name=r[1],
            state=JobState(r[2]),
            spec=json.loads(r[3]),
            current_attempt=AttemptNo(int(r[4])),
            control_version=ControlVersion(int(r[5])),
            last_error=r[6],
            created_at=float(r[7]),
            updated_at=float(r[8]),
            cancel_requested_at=None if r[9] is None else float(r[9]),
            failures=int(r[10]),
            next_attempt_at=None if r[11] is None else float(r[11]),
            uid=r[12] or "",
            resolved_at=None if r[13] is None else float(r[13]),
            kind=JobKind(r[14]),
            app_id=None if r[15] is None else JobId(r[15]),
            scaling=_json_or_none(r[16]),
            executor_target=None if r[17] is None else int(r[17]),
            resources=_json_or_none(r[18]),
            judged_by=None if len(r) < 20 or r[19] is None else int(r[19]),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "name": self.name,
            "state": str(self.state),
            "spec": self.spec,
            "current_attempt": self.current_attempt,
            "control_version": self.control_version,
            "last_error": self.last_error,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "cancel_requested_at": self.cancel_requested_at,
            "failures": self.failures,
            "next_attempt_at": self.next_attempt_at,
            "resolved_at": self.resolved_at,
            "kind": str(self.kind),
            "app_id": self.app_id,
            "scaling": self.scaling,
            "executor_target": self.executor_target,
            "resources": self.resources,
        }


@dataclass(frozen=True)
class Owner:
    """Who runs an attempt: enough to tell later whether that process still lives."""

    host: str
    pid: int
    pid_started: str


@dataclass(frozen=True)
class WriteLock:
    """Who holds the store's write lock now (:meth:`~stoker.store.base.Store.write_lock`)."""

    pid: int  # the holding process, as this host's kernel names it
    wal_mark: tuple[int, int]  # changes with each commit (a holder that makes progress)


@dataclass(frozen=True)
class RecoveryHold:
    """Who resolves a job's leftover sink parts now, for which attempt, and until when: the
    next attempt waits for it (``recovery_holds``, migration 10)."""

    job_id: JobId
    attempt: AttemptNo  # recovery touches parts of this attempt and earlier ones only
    owner: Owner
    expires_at: float

    @classmethod
    def from_row(cls, r: Any) -> RecoveryHold:
        return cls(
            job_id=JobId(r[0]),
            attempt=AttemptNo(int(r[1])),
            owner=Owner(host=r[2], pid=int(r[3]), pid_started=r[4]),
            expires_at=float(r[5]),
        )


@dataclass(frozen=True)
class AttemptRecord:
    """One run of a job's driver; ``attempt`` is the fencing token."""

    job_id: JobId
    attempt: AttemptNo
    state: AttemptState
    owner: Owner
    lease_expires_at: float
    started_at: float
    ended_at: float | None
    error: str | None
    log_path: str | None = None
    # The application attempt whose driver made this attempt (None: the job's own driver).
    # It holds the job only while that is still the application's current attempt.
    app_attempt: AttemptNo | None = None
    # How often the lease was renewed (claim and hold count), and the holder's TTL: what an
    # observer times on its own monotonic clock (stoker.leases). None: a row of older code.
    renewals: int = 0
    lease_ttl: float | None = None
    # Whose failure ended it FAILED (stoker.restart.FailureCause's value), as its ender said.
    # None: it did not fail, or a row of older code (the cause is then read from its error).
    cause: str | None = None

    @property
    def lease_seen(self) -> tuple[int, float]:
        """What changes on every renewal: the counter, and the expiry that older code
        renews alone. An observer that saw the same value for a whole TTL may take over."""
        return (self.renewals, self.lease_expires_at)

    @classmethod
    def from_row(cls, r: Any) -> AttemptRecord:
        return cls(
            job_id=JobId(r[0]),
            attempt=AttemptNo(int(r[1])),
            state=AttemptState(r[2]),
            owner=Owner(host=r[3], pid=int(r[4]), pid_started=r[5]),
            lease_expires_at=float(r[6]),
            started_at=float(r[7]),
            ended_at=None if r[8] is None else float(r[8]),
            error=r[9],
            log_path=r[10],
            app_attempt=None if r[11] is None else AttemptNo(int(r[11])),
            renewals=int(r[12]) if len(r) > 12 and r[12] is not None else 0,
            lease_ttl=float(r[13]) if len(r) > 13 and r[13] is not None else None,
            cause=str(r[14]) if len(r) > 14 and r[14] is not None else None,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "attempt": self.attempt,
            "state": str(self.state),
            "host": self.owner.host,
            "pid": self.owner.pid,
            "lease_expires_at": self.lease_expires_at,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "error": self.error,
            "pid_started": self.owner.pid_started,
            "app_attempt": self.app_attempt,
            "cause": self.cause,
        }


@dataclass(frozen=True)
class EpochRecord:
    """stoker's record of one Spark micro-batch."""

    job_id: JobId
    epoch: Epoch
    control_version: ControlVersion
    state: EpochState
    pinned_by: AttemptNo
    decided_by: AttemptNo | None
    rows_in: int | None
    final: bool
    pinned_at: float
    decided_at: float | None
    committed_at: float | None
    # What the epoch cost and left behind; None where unknown: Spark's
    # triggerExecution, the rows/files the sources had beyond its end, and the executors and
    # their cores at its end.
    duration_ms: float | None = None
    backlog: int | None = None
    executors: int | None = None
    cores: int | None = None
    # The part of it spent on its rows: its sinks' Spark writes, timed by the driver.
    work_ms: float | None = None
    # What Spark's progress says of it (rates, phases, sources, stateful operators): the
    # driver's summary, a small JSON object (stoker.runtime.progress_summary).
    progress: dict[str, Any] | None = None

    @property
    def rows_read(self) -> int | None:
        """The rows the epoch read from its sources: Spark's ``numInputRows`` where its
        progress was recorded, else the rows it wrote (``rows_in``, the epoch's output rows:
        the same for a job that keeps its rows, fewer for an aggregation or a filter)."""
        n = (self.progress or {}).get("numInputRows")
        if isinstance(n, int | float) and not isinstance(n, bool) and n >= 0:
            return int(n)
        return self.rows_in

    @classmethod
    def from_row(cls, r: Any) -> EpochRecord:
        return cls(
            job_id=JobId(r[0]),
            epoch=Epoch(int(r[1])),
            control_version=ControlVersion(int(r[2])),
            state=EpochState(r[3]),
            pinned_by=AttemptNo(int(r[4])),
            decided_by=None if r[5] is None else AttemptNo(int(r[5])),
            rows_in=None if r[6] is None else int(r[6]),
            final=bool(r[7]),
            pinned_at=float(r[8]),
            decided_at=None if r[9] is None else float(r[9]),
            committed_at=None if r[10] is None else float(r[10]),
            duration_ms=None if r[11] is None else float(r[11]),
            backlog=None if r[12] is None else int(r[12]),
            executors=None if r[13] is None else int(r[13]),
            cores=None if r[14] is None else int(r[14]),
            work_ms=None if r[15] is None else float(r[15]),
            progress=_progress(r[16]) if len(r) > 16 else None,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "state": str(self.state),
            "control_version": self.control_version,
            "pinned_by": self.pinned_by,
            "decided_by": self.decided_by,
            "rows": self.rows_in,
            "final": self.final,
            "pinned_at": self.pinned_at,
            "decided_at": self.decided_at,
            "committed_at": self.committed_at,
            "duration_ms": self.duration_ms,
            "backlog": self.backlog,
            "executors": self.executors,
            "cores": self.cores,
            "work_ms": self.work_ms,
            "progress": self.progress,
        }


def _progress(value: Any) -> dict[str, Any] | None:
    """An epoch's progress summary as stored (JSON text); None for none or for text that is
    not a JSON object (a summary is read by dashboards only: never an error for a reader)."""
    if value is None:
        return None
    try:
        doc = json.loads(value) if isinstance(value, str | bytes) else value
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


@dataclass(frozen=True)
class SinkTxn:
    """One sink's prepared part of one epoch, as written by one attempt."""

    job_id: JobId
    epoch: Epoch
    sink: str
    attempt: AttemptNo
    state: TxnState
    detail: dict[str, Any] = field(default_factory=dict)
    updated_at: float = 0.0

    @classmethod
    def from_row(cls, r: Any) -> SinkTxn:
        return cls(
            job_id=JobId(r[0]),
            epoch=Epoch(int(r[1])),
            sink=r[2],
            attempt=AttemptNo(int(r[3])),
            state=TxnState(r[4]),
            detail=json.loads(r[5]),
            updated_at=float(r[6]),
        )


@dataclass(frozen=True)
class ControlSnapshot:
    """A job's control state as of one control version: the user config the transform sees,
    and the rest (rate limit, log levels, trigger, paused; see :mod:`stoker.control.events`)."""

    version: ControlVersion
    config: dict[str, Any]
    state: dict[str, Any] = field(default_factory=dict)

    @property
    def paused(self) -> bool:
        return bool(self.state.get("paused"))

    @property
    def trigger_s(self) -> float | None:
        t = self.state.get("trigger_s")
        return None if t is None else float(t)

    @property
    def rate_limit(self) -> dict[str, Any]:
        return dict(self.state.get("rate_limit") or {})

    @property
    def log_level(self) -> dict[str, Any]:
        return dict(self.state.get("log_level") or {})


@dataclass(frozen=True)
class ControlEvent:
    """One control event: what was asked (kind, body), by whom, and how far it got.

    ``version`` is the control version the event made; an epoch that pins a version at or
    above it applies the event (``applied_epoch``), and its commit makes it COMMITTED.
    ``result`` holds what the event produced (a savepoint's path, a checkpoint's epoch).
    """

    job_id: JobId
    control_id: str
    version: ControlVersion
    kind: ControlKind
    body: dict[str, Any]
    status: ControlStatus
    sender: str
    created_at: float
    request_id: str | None = None
    origin: str | None = None
    applied_epoch: Epoch | None = None
    reason: str | None = None
    result: dict[str, Any] | None = None
    applied_at: float | None = None
    ended_at: float | None = None


@dataclass(frozen=True)
class FleetSnapshot:
    """What one ``/metrics`` scrape reads, in one read transaction: the live records (jobs
    and applications, as ``list_live_jobs``), how many records there are of each kind and
    state (the ended ones counted, not read), and the counters (``counts``)."""

    live: list[JobRecord]
    by_state: dict[tuple[JobKind, JobState], int]
    counters: dict[str, int]


def _json_or_none(text: str | None) -> dict[str, Any] | None:
    """A JSON object column that may be NULL."""
    return None if text is None else dict(json.loads(text))
