"""Control events between a user and the store: the one place the REST server and the local
CLI submit and read them.

A request is checked in this order, and nothing is stored unless every check passes: the job
exists (:class:`JobNotFound`) and has not ended (:class:`JobTerminal`), the body is a valid
event for the job's pipeline (:func:`stoker.control.events.validate`: :class:`InvalidInput`
naming the field), a savepoint's folder is allowed; then the store writes the event as a new
control version in one transaction (:meth:`ControlStore.add_control`), which also answers a
retried ``request_id``. The runtime applies the stored events at epoch boundaries, except a
``scaling`` event: it changes the owner's scaling at once and ends COMMITTED without an epoch
(:func:`stoker.manager.rescales.apply_scaling_event`).

The pipeline description a request is checked against, in order: the latest control
snapshot's ``state["pipeline"]`` (the driver declares it when an attempt starts), the job's
spec when it is a pipeline's (a local run records ``sources`` and ``config``), or what
``describe()`` finds (a job manager reads the application file in a child process).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from stoker.clock import Clock
from stoker.control import events
from stoker.errors import ControlNotFound, InvalidInput, JobTerminal, TooManyRequests
from stoker.manager import rescales
from stoker.manager.submit import check_allowed
from stoker.store import ControlEvent, JobRecord, Store
from stoker.types import ControlKind, ControlStatus, ControlVersion, JobId, JobState, SpecKind
from stoker.types import job_id as check_job_id

__all__ = [
    "HISTORY_MAX",
    "REQUEST_ID_MAX",
    "ControlRateLimiter",
    "check_savepoint_dir",
    "config_view",
    "control_history",
    "control_view",
    "display_state",
    "get_control",
    "pipeline_description",
    "submit_control",
]

Describe = Callable[[], Mapping[str, Any]]
REQUEST_ID_MAX = 200
HISTORY_MAX = 1000  # one page of history at most


def control_view(ev: ControlEvent) -> dict[str, Any]:
    """The JSON view of one event, as the REST API and ``--json`` show it."""
    return {
        "control_id": ev.control_id,
        "job_id": str(ev.job_id),
        "version": int(ev.version),
        "kind": str(ev.kind),
        "status": str(ev.status),
        "applied_epoch": None if ev.applied_epoch is None else int(ev.applied_epoch),
        "reason": ev.reason,
        "result": ev.result,
        "request_id": ev.request_id,
        "sender": ev.sender,
        "origin": ev.origin,
        "created_at": ev.created_at,
        "applied_at": ev.applied_at,
        "ended_at": ev.ended_at,
        "body": dict(ev.body),
    }


def _check_request_id(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > REQUEST_ID_MAX:
        raise InvalidInput(
            "request_id", f"expects a non-empty string of at most {REQUEST_ID_MAX} characters"
        )
    return value


def pipeline_description(
    store: Store, job: JobRecord, describe: Describe | None = None
) -> Mapping[str, Any]:
    """What control requests to ``job`` are checked against (declared ``config``,
    ``sources``, registered ``events``): see the module's docstring for the order."""
    declared = store.control_snapshot(job.job_id).state.get("pipeline")
    if isinstance(declared, Mapping):
        return declared
    # A pipeline's spec always lists its sources; a job manager's spec (kind "app") does not,
    # and its "config" holds only the submitted values, not the declared keys.
    if "sources" in job.spec and job.spec.get("kind") != SpecKind.MANAGED:
        return job.spec
    if describe is not None:
        return describe()
    return {}


def check_savepoint_dir(folder: str, allowed_dirs: Sequence[Path]) -> str:
    """``folder`` resolved, if it is an absolute path under one of ``allowed_dirs`` and not a
    non-empty folder already; :class:`InvalidInput` on ``dir`` otherwise."""
    path = Path(folder)
    if not path.is_absolute():
        raise InvalidInput("dir", f"{folder!r} is not an absolute path")
    resolved = path.resolve()
    check_allowed(resolved, folder, allowed_dirs, "dir")
    if resolved.exists() and (not resolved.is_dir() or any(resolved.iterdir())):
        raise InvalidInput("dir", f"{folder!r} exists and is not an empty folder")
    return str(resolved)


def submit_control(
    store: Store,
    job_id: str,
    body: Mapping[str, Any],
    *,
    sender: str,
    origin: str | None = None,
    request_id: str | None = None,
    describe: Describe | None = None,
    savepoint_dirs: Sequence[Path] | None = None,
) -> tuple[ControlEvent, bool]:
    """Check one control request and store it: (the event, whether this call created it).

    ``body`` is ``{"kind": ..., ...kind fields..., "request_id"?}``; ``request_id`` (here or
    in the body) makes the call retry-safe: the same id with the same event returns the stored
    one (created False), with another event :class:`ControlConflict`. ``savepoint_dirs``, when
    given, are the folders a savepoint's ``dir`` must lie under. Raises :class:`JobNotFound`,
    :class:`JobTerminal`, :class:`InvalidInput` (naming the field), :class:`ControlConflict`;
    nothing is stored when it raises.
    """
    jid = check_job_id(job_id)
    if not isinstance(body, Mapping):
        raise InvalidInput("body", "expects a JSON object with a 'kind'")
    rid = _check_request_id(request_id)
    in_body = _check_request_id(body.get("request_id"))
    if rid is not None and in_body is not None and rid != in_body:
        raise InvalidInput("request_id", "given twice with different values")
    rid = rid or in_body
    job = store.get_job(jid)
    # A retry (request_id) of an event stored before the job ended still gets it back: the
    # store looks the request up before it refuses an ended job.
    if job.state.terminal and rid is None:
        raise JobTerminal(jid, str(job.state))
    # A scaling event is checked against nothing of the pipeline: no need to describe it.
    scaling = str(body.get("kind")) == ControlKind.SCALING
    described = {} if scaling else pipeline_description(store, job, describe)
    kind, normalized = events.validate(body, described)
    if kind == ControlKind.SAVEPOINT and normalized.get("dir") and savepoint_dirs is not None:
        normalized["dir"] = check_savepoint_dir(str(normalized["dir"]), savepoint_dirs)
    if scaling and not (job.state.terminal and rid is not None):
        rescales.check_owner_live(rescales.owner_of(store, job))
    ev, created = store.add_control(
        jid, kind, normalized, sender=sender, origin=origin, request_id=rid
    )
    if scaling:
        # Not epoch-bound: the owner's scaling changes now (a retry finishes what a crash
        # left pending).
        ev = rescales.apply_scaling_event(store, job, ev)
    return ev, created


def get_control(
    store: Store, job_id: str, control_id: str, kind: ControlKind | None = None
) -> ControlEvent:
    """One event (:class:`ControlNotFound` also when it is not of ``kind``)."""
    jid = check_job_id(job_id)
    ev = store.get_control(jid, control_id)
    if kind is not None and ev.kind != kind:
        raise ControlNotFound(jid, control_id)
    return ev


def control_history(
    store: Store,
    job_id: str,
    limit: int = 50,
    before: int | None = None,
    kind: ControlKind | None = None,
    status: ControlStatus | None = None,
) -> dict[str, Any]:
    """``{"events": [views, newest first], "next": <before for the next page or None>}``."""
    jid = check_job_id(job_id)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= HISTORY_MAX:
        raise InvalidInput(
            "limit", f"must be a whole number from 1 to {HISTORY_MAX}, got {limit!r}"
        )
    if before is not None and (
        isinstance(before, bool) or not isinstance(before, int) or before < 1
    ):
        raise InvalidInput("before", f"must be a control version >= 1, got {before!r}")
    # One more than asked: whether a next page exists, without an empty last page.
    got = store.list_controls(
        jid,
        limit=limit + 1,
        before_version=None if before is None else ControlVersion(before),
        kind=kind,
        status=status,
    )
    page = got[:limit]
    more = len(got) > limit
    return {
        "events": [control_view(e) for e in page],
        "next": int(page[-1].version) if more and page else None,
    }


def _pending(store: Store, jid: JobId) -> int:
    count, before = 0, None
    while True:
        got = store.list_controls(
            jid, limit=HISTORY_MAX, before_version=before, status=ControlStatus.PENDING
        )
        count += len(got)
        if len(got) < HISTORY_MAX:
            return count
        before = got[-1].version


def config_view(store: Store, job_id: str) -> dict[str, Any]:
    """The job's effective config and control state now, with their version."""
    jid = check_job_id(job_id)
    store.get_job(jid)  # JobNotFound
    snap = store.control_snapshot(jid)
    return {
        "job_id": str(jid),
        "version": int(snap.version),
        "config": dict(snap.config),
        "paused": snap.paused,
        "trigger_s": snap.trigger_s,
        "rate_limit": snap.rate_limit,
        "log_level": snap.log_level,
        "pending": _pending(store, jid),
    }


def display_state(store: Store, job: JobRecord) -> tuple[str, bool]:
    """The state to show for ``job`` and whether control paused it: a RUNNING job whose latest
    control version is paused shows ``PAUSED`` (the store keeps it RUNNING). An ended job is
    not paused, and its control is not read: a page of a list of ended jobs costs no read per
    job."""
    if job.state.terminal:
        return str(job.state), False
    paused = store.control_snapshot(job.job_id).paused
    if paused and job.state == JobState.RUNNING:
        return "PAUSED", True
    return str(job.state), paused


class _Monotonic:
    def now(self) -> float:
        return time.monotonic()

    def monotonic(self) -> float:
        return time.monotonic()


class ControlRateLimiter:
    """Control events per job, in memory: a token bucket of ``rate`` events per second with a
    burst of ``2 * rate`` (at least 1). ``rate`` 0 turns it off.

    :meth:`take` raises :class:`TooManyRequests` with the seconds until the next event would
    pass. Buckets that have refilled are forgotten, so ids that were only probed cost nothing.
    """

    _FORGET_ABOVE = 1024

    def __init__(self, rate: float, clock: Clock | None = None) -> None:
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not rate >= 0:
            raise InvalidInput("control_rate", f"must be a number >= 0, got {rate!r}")
        self.rate = float(rate)
        self.burst = max(1.0, 2.0 * self.rate)
        self._clock: Clock = clock or _Monotonic()
        self._buckets: dict[str, tuple[float, float]] = {}  # job -> (tokens, at)
        self._lock = threading.Lock()

    def _describe(self) -> str:
        rate = f"{self.rate:g}"
        return f"{rate} per second, bursts of {self.burst:g}"

    def take(self, job_id: str) -> None:
        """Count one event for ``job_id``, or raise :class:`TooManyRequests`."""
        if self.rate <= 0:
            return
        now = self._clock.now()
        with self._lock:
            tokens, at = self._buckets.get(job_id, (self.burst, now))
            tokens = min(self.burst, tokens + (now - at) * self.rate)
            if tokens < 1.0:
                self._buckets[job_id] = (tokens, now)
                raise TooManyRequests(job_id, (1.0 - tokens) / self.rate, self._describe())
            self._buckets[job_id] = (tokens - 1.0, now)
            if len(self._buckets) > self._FORGET_ABOVE:
                self._forget_full(now)

    def _forget_full(self, now: float) -> None:
        full = [
            j
            for j, (tokens, at) in self._buckets.items()
            if tokens + (now - at) * self.rate >= self.burst
        ]
        for j in full:
            del self._buckets[j]
