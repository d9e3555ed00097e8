"""Scaling as users see and change it: an owner's scaling in job and application views, its
rescale history, new bounds (``PUT /v1/jobs/{id}/resources``), the control kind ``scaling``
applied at once, and the per-job series of ``/metrics``.

Scaling is set, decided and recorded per **owner** of executors: a lone job, or the
application whose driver runs a job. A request naming an application's job acts on (and
answers with) its application. The scaler (:mod:`stoker.scaling`) decides executor targets;
this module records what users ask for. Spark-free, store calls only.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from stoker.errors import InvalidInput, JobTerminal
from stoker.scalespec import ScalingSpec, parse_scaling, with_bounds
from stoker.settings import Settings
from stoker.store import ControlEvent, JobRecord, Store
from stoker.store.fleet_records import RescaleRecord
from stoker.types import ControlKind, ControlStatus, JobId, JobKind

__all__ = [
    "MAX_EXECUTORS",
    "RESCALES_MAX",
    "USER_POLICY",
    "RescaleTally",
    "apply_scaling_event",
    "check_owner_live",
    "job_series",
    "owner_of",
    "parse_bounds",
    "rescales_view",
    "scaling_fields",
    "scaling_of",
    "set_bounds",
    "trigger_in_force",
]

RESCALES_MAX = 1000  # one page of history at most
MAX_EXECUTORS = 10_000  # a bound above this is a typo, not a cluster
# The policy a rescale of kind "bounds" names: a person (REST, CLI, control), not the scaler.
USER_POLICY = "user"
_BOUND_KEYS = ("min_executors", "max_executors")


def owner_of(store: Store, record: JobRecord) -> JobRecord:
    """The record whose driver owns ``record``'s executors: its application for a job of
    one, else the record itself (a lone job, or an application)."""
    if record.kind == JobKind.APPLICATION or record.app_id is None:
        return record
    return store.get_job(record.app_id)


def scaling_of(owner: JobRecord) -> ScalingSpec:
    """The owner's scaling spec in force (``fixed`` when none was ever set)."""
    return parse_scaling(owner.scaling)


def check_owner_live(owner: JobRecord) -> None:
    """:class:`JobTerminal` (409) for an owner that has ended: its scaling no longer changes."""
    if owner.state.terminal:
        what = "application" if owner.kind == JobKind.APPLICATION else "job"
        raise JobTerminal(owner.job_id, str(owner.state)).with_message(
            f"{what} {owner.job_id!r} has ended in state {owner.state}: its scaling can no "
            "longer change"
        )


def _executors(record: JobRecord) -> int | None:
    value = (record.resources or {}).get("executors")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def scaling_fields(
    store: Store, record: JobRecord, owner: JobRecord | None = None
) -> dict[str, Any]:
    """What a job or application view shows of its scaling: its owner's ``scaling`` (the
    spec in force) and ``executor_target``, the ``resources`` its driver reports (an
    application's job: its own report, else its application's) and ``max_parallelism``
    (its state partitions, when recorded)."""
    owner = owner or owner_of(store, record)
    return {
        "scaling": scaling_of(owner).to_dict(),
        "executor_target": owner.executor_target,
        "resources": record.resources if record.resources is not None else owner.resources,
        "max_parallelism": record.spec.get("max_parallelism"),
    }


def rescales_view(
    store: Store, record: JobRecord, limit: int = 100, since: float | None = None
) -> dict[str, Any]:
    """``GET /v1/jobs/{id}/rescales``: the owner's scaling, target and resources, and its
    rescales newest first (at most ``limit``; only those at or after ``since`` if given)."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= RESCALES_MAX:
        raise InvalidInput(
            "limit", f"must be a whole number from 1 to {RESCALES_MAX}, got {limit!r}"
        )
    if since is not None and (isinstance(since, bool) or not isinstance(since, int | float)):
        raise InvalidInput("since", f"must be a time in seconds since the epoch, got {since!r}")
    owner = owner_of(store, record)
    rows = store.list_rescales(owner.job_id, limit=limit, since=since)
    return {
        "job_id": record.job_id,
        "kind": str(record.kind),  # job or application: what the CLI calls it
        "owner": owner.job_id,
        "scaling": scaling_of(owner).to_dict(),
        "executor_target": owner.executor_target,
        "resources": owner.resources,
        "rescales": [r.to_dict() for r in rows],
    }


def parse_bounds(body: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """``{"min_executors": n, "max_executors": m}`` (either may be left out or null: that
    bound stays) as two whole numbers from 1 to :data:`MAX_EXECUTORS`; anything else is
    :class:`InvalidInput` naming the field."""
    if not isinstance(body, Mapping):
        raise InvalidInput("body", "expects a JSON object with min_executors and/or max_executors")
    for key in body:
        if key not in _BOUND_KEYS:
            raise InvalidInput(
                str(key),
                "is not a field of a resources request (its fields: min_executors, max_executors)",
            )
    out: list[int | None] = []
    for key in _BOUND_KEYS:
        value = body.get(key)
        # JSON has one number type: 3.0 is the whole number 3 (as JSON Schema's integer says).
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_EXECUTORS
        ):
            raise InvalidInput(
                key, f"expects a whole number from 1 to {MAX_EXECUTORS} (or null), got {value!r}"
            )
        out.append(value)
    if out == [None, None]:
        raise InvalidInput("min_executors", "give min_executors, max_executors or both")
    return out[0], out[1]


def _bounds_text(spec: ScalingSpec) -> str:
    top = "none" if spec.max_executors is None else str(spec.max_executors)
    return f"min={spec.min_executors},max={top}"


def set_bounds(
    store: Store,
    record: JobRecord,
    min_executors: int | None,
    max_executors: int | None,
    *,
    sender: str,
) -> dict[str, Any]:
    """New executor bounds for ``record``'s owner, its mode kept (``None`` keeps a bound):
    checked (:func:`stoker.scalespec.with_bounds`), stored, and kept in the rescale history
    as a rescale of kind ``bounds`` by ``sender``. :class:`JobTerminal` when the owner has
    ended; nothing changes when it raises. The owner's view and the rescale recorded."""
    for key, value in zip(_BOUND_KEYS, (min_executors, max_executors), strict=True):
        if value is not None and value > MAX_EXECUTORS:
            raise InvalidInput(key, f"expects a whole number from 1 to {MAX_EXECUTORS}")
    owner = owner_of(store, record)
    check_owner_live(owner)
    old = scaling_of(owner)
    new = with_bounds(old, min_executors, max_executors)
    store.set_scaling(owner.job_id, new.to_dict())
    rescale = _user_change(
        store, owner, new, f"bounds {_bounds_text(old)} -> {_bounds_text(new)}", sender
    )
    return {
        "job_id": record.job_id,
        "kind": str(record.kind),
        "owner": owner.job_id,
        "scaling": new.to_dict(),
        "executor_target": owner.executor_target,
        "resources": owner.resources,
        "rescale": rescale.to_dict(),
    }


def _user_change(
    store: Store, owner: JobRecord, new: ScalingSpec, reason: str, sender: str | None
) -> RescaleRecord:
    """Keep a user's change of the owner's scaling in its rescale history (kind ``bounds``)."""
    return store.add_rescale(
        owner.job_id,
        kind="bounds",
        policy=USER_POLICY,
        mode=new.mode,
        signals={},
        from_executors=_executors(owner),
        to_executors=None,
        reason=reason,
        status="recorded",
        sender=sender,
    )


def apply_scaling_event(store: Store, record: JobRecord, ev: ControlEvent) -> ControlEvent:
    """Apply a stored control event of kind ``scaling`` at once (it waits for no epoch): the
    owner's scaling becomes the event's spec (an executor target goes with a mode that is
    not ``auto``), the change is kept as a rescale of kind ``bounds`` by the event's sender,
    and the event ends COMMITTED without an epoch, its ``result`` naming the owner, the new
    spec and the rescale. An event that got further already is answered as it is."""
    if ev.kind != ControlKind.SCALING or ev.status != ControlStatus.PENDING:
        return ev
    owner = owner_of(store, record)
    old = scaling_of(owner)
    new = parse_scaling(ev.body["scaling"])
    store.set_scaling(owner.job_id, new.to_dict())
    if new.mode != "auto" and owner.executor_target is not None:
        store.set_executor_target(owner.job_id, None)  # no scaler acts on it any more
    rescale = _user_change(
        store,
        owner,
        new,
        f"scaling {old.to_text()} -> {new.to_text()} (control {ev.control_id})",
        ev.sender,
    )
    result = {"owner": owner.job_id, "scaling": new.to_dict(), "rescale_id": rescale.rescale_id}
    return _commit_now(store, ev, result)


def _commit_now(store: Store, ev: ControlEvent, result: dict[str, Any]) -> ControlEvent:
    """PENDING -> APPLIED -> COMMITTED with ``result`` and no epoch. A driver's pin may take
    the event meanwhile (it marks every pending event applied at its epoch): then it ends
    with that epoch, and an event that epoch committed already is left as it is."""
    now = store.get_control(ev.job_id, ev.control_id)
    if now.status == ControlStatus.PENDING:
        now = store.finish_control(ev.job_id, ev.control_id, ControlStatus.APPLIED, None, result)
    if now.status == ControlStatus.APPLIED:
        now = store.finish_control(ev.job_id, ev.control_id, ControlStatus.COMMITTED, None, result)
    return now


def trigger_in_force(store: Store, record: JobRecord) -> float:
    """The job's trigger interval now, in seconds: control's, else the one it was run with
    (a driver records ``trigger_s``; a submission may give ``stoker.trigger``), else the
    default."""
    snap = store.control_snapshot(record.job_id).trigger_s
    if snap is not None:
        return float(snap)
    recorded = record.spec.get("trigger_s")
    if isinstance(recorded, int | float) and not isinstance(recorded, bool):
        return float(recorded)
    conf = record.spec.get("conf") or {}
    if isinstance(conf, Mapping) and "stoker.trigger" in conf:
        try:
            return (
                Settings().with_overrides({"stoker.trigger": str(conf["stoker.trigger"])}).trigger
            )
        except InvalidInput:
            pass  # checked when it was submitted; a stored value no longer read: the default
    return Settings().trigger


def job_series(store: Store, records: Iterable[JobRecord]) -> dict[str, dict[str, float]]:
    """The per-job gauges of ``/metrics`` for live ``records`` (jobs and applications), by
    series name then job id: ``executors`` (reported by its driver), ``executor_target``
    (its owner's), ``backlog`` (the newest epoch that recorded one) and ``utilization`` (the
    newest epoch's duration over the trigger interval in force; none at trigger 0). A series
    a job has no value for is left out."""
    out: dict[str, dict[str, float]] = {
        "executors": {},
        "executor_target": {},
        "backlog": {},
        "utilization": {},
        # An application's own, by its id (it was labelled job_id).
        "application_executors": {},
        "application_executor_target": {},
    }
    owners: dict[JobId, JobRecord] = {}
    for rec in records:
        if rec.state.terminal:
            continue
        if rec.kind == JobKind.APPLICATION or rec.app_id is None:
            owner = rec
        else:
            if rec.app_id not in owners:
                owners[rec.app_id] = store.get_job(rec.app_id)
            owner = owners[rec.app_id]
        name = str(rec.job_id)
        prefix = "application_" if rec.kind == JobKind.APPLICATION else ""
        fields = scaling_fields(store, rec, owner)
        executors = (fields["resources"] or {}).get("executors")
        if isinstance(executors, int) and not isinstance(executors, bool):
            out[f"{prefix}executors"][name] = float(executors)
        if owner.executor_target is not None:
            out[f"{prefix}executor_target"][name] = float(owner.executor_target)
        if rec.kind == JobKind.APPLICATION:
            continue  # its jobs commit the epochs
        epochs = store.list_epochs(rec.job_id, limit=3)
        backlog = next((e.backlog for e in epochs if e.backlog is not None), None)
        if backlog is not None:
            out["backlog"][name] = float(backlog)
        took = next((e.duration_ms for e in epochs if e.duration_ms is not None), None)
        if took is not None:
            trigger = trigger_in_force(store, rec)
            if trigger > 0:
                out["utilization"][name] = round(took / 1000.0 / trigger, 6)
    return out


class RescaleTally:
    """``stoker_rescales_total{kind}``: rescales recorded in the store by kind, counted
    incrementally per owner (each scrape reads only what came since the last one; an owner
    that has ended is read once more after it ended, then no longer)."""

    _PAGE = 10_000

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._totals: Counter[str] = Counter()
        # owner -> (the newest ``at`` counted, the ids counted at that instant, ended)
        self._seen: dict[str, tuple[float | None, frozenset[int], bool]] = {}

    def totals(self, store: Store, owners: Iterable[JobRecord]) -> dict[str, float]:
        """The totals by kind (every kind shown, 0 when none), after reading what is new."""
        with self._lock:
            for owner in owners:
                self._read(store, owner)
            shown = {k: 0.0 for k in ("decision", "observed", "bounds")}
            shown.update({k: float(v) for k, v in self._totals.items()})
            return shown

    def _read(self, store: Store, owner: JobRecord) -> None:
        key = str(owner.job_id)
        at, ids, ended = self._seen.get(key, (None, frozenset(), False))
        if ended:
            return
        rows = store.list_rescales(owner.job_id, limit=self._PAGE, since=at)
        new = [r for r in rows if at is None or r.at > at or r.rescale_id not in ids]
        self._totals.update(r.kind for r in new)
        if rows:
            newest = max(r.at for r in rows)
            at_newest = frozenset(r.rescale_id for r in rows if r.at == newest)
            ids = at_newest | (ids if newest == at else frozenset())
            at = newest
        self._seen[key] = (at, ids, owner.state.terminal)
