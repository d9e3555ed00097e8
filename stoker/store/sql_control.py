"""Control versions and control events of a job in SQL.

A control version is a job's whole control state (config and the rest, see
:mod:`stoker.control.events`); a control event makes one new version, in the transaction that
stores the event. Epochs move events on: the pin of an epoch applies the PENDING events up to
its version, the epoch's commit commits them (``sql_epochs.py``), the job's end rejects what
is left (:func:`end_controls_in`, called wherever the store ends a job).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from stoker.control import events
from stoker.errors import ControlConflict, ControlNotFound, InvalidInput, JobNotFound, JobTerminal
from stoker.store._sqlbase import SqlBase
from stoker.store.records import ControlEvent, ControlSnapshot
from stoker.types import (
    CONTROLS,
    ControlKind,
    ControlStatus,
    ControlVersion,
    Epoch,
    JobId,
    JobState,
)

_DECLARED = "declared defaults changed"  # the reason of a version declare_defaults makes


def _dump(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _without_pipeline(state: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in state.items() if k != "pipeline"}


def _event(row: Any) -> ControlEvent:
    """The event of a row of the control_events queries (their shared column order)."""
    return ControlEvent(
        job_id=JobId(row[0]),
        control_id=str(row[1]),
        version=ControlVersion(int(row[2])),
        kind=ControlKind(row[3]),
        body=json.loads(row[4]),
        status=ControlStatus(row[5]),
        applied_epoch=None if row[6] is None else Epoch(int(row[6])),
        reason=row[7],
        result=None if row[8] is None else json.loads(row[8]),
        request_id=row[9],
        sender=str(row[10]),
        origin=row[11],
        created_at=float(row[12]),
        applied_at=None if row[13] is None else float(row[13]),
        ended_at=None if row[14] is None else float(row[14]),
    )


def _version_in(
    store: SqlBase, cur: Any, job_id: JobId, version: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    row = store._x(cur, "get_control_version", job_id=job_id, version=version).fetchone()
    if row is None:
        raise JobNotFound(f"{job_id} (control version {version})")
    return json.loads(row[1]), json.loads(row[2])


def _new_version_in(
    store: SqlBase,
    cur: Any,
    job_id: JobId,
    version: int,
    config: dict[str, Any],
    state: dict[str, Any],
    reason: str,
    now: float,
) -> None:
    store._x(
        cur,
        "insert_control_version",
        job_id=job_id,
        version=version,
        config=_dump(config),
        state=_dump(state),
        reason=reason,
        now=now,
    )
    store._x(cur, "set_control_version", job_id=job_id, version=version, now=now)


def end_controls_in(store: SqlBase, cur: Any, job_id: JobId, state: JobState, now: float) -> None:
    """The job has just become ``state`` (terminal) in ``cur``'s transaction: its control
    events that can no longer take effect become REJECTED.

    PENDING events: no epoch will apply them. APPLIED events whose epoch has not reached its
    commit point (PINNED, or gone): that epoch's output will never be committed as it was.
    Events applied at a DECIDED epoch stay APPLIED: recovery commits the epoch, and them.
    Both moves are allowed by ``CONTROL_TRANSITIONS``; the statements name their from-state.
    """
    if not state.terminal:
        return
    open_before = [_event(r) for r in store._x(cur, "open_controls", job_id=job_id).fetchall()]
    reason = f"the job ended ({state}) before the event applied"
    store._x(cur, "reject_pending_controls", job_id=job_id, reason=reason, now=now)
    store._x(cur, "reject_unfinished_controls", job_id=job_id, now=now)
    undone = undo_rejected_in(store, cur, job_id, open_before, now)
    if undone is not None:
        after, version = undone
        store._x(cur, "repin_unfinished_epochs", job_id=job_id, after=after, version=version)


def undo_rejected_in(
    store: SqlBase, cur: Any, job_id: JobId, candidates: list[ControlEvent], now: float
) -> tuple[int, int] | None:
    """Those of ``candidates`` that are REJECTED now leave no trace in the job's control state.

    A rejected event's version stays in the history (versions only grow, and an epoch may be
    pinned at it), so the undo is a new latest version: the state the versions since the one
    before the first rejected event make without the rejected events (a new attempt's declared
    defaults are declared again). A restart then starts from it, not from a config or pause
    nobody ever saw applied. Returns ``(base version, new version)``, or None when there was
    nothing to undo (only events that change no state, such as a custom event or a savepoint).
    """
    watched = {e.control_id for e in candidates if e.kind in events.STATE_KINDS}
    if not watched:
        return None
    first = min(int(e.version) for e in candidates if e.control_id in watched)
    later = {
        e.version: e
        for e in map(
            _event, store._x(cur, "controls_after", job_id=job_id, version=first - 1).fetchall()
        )
    }
    rejected = [
        e for e in later.values() if e.control_id in watched and e.status == ControlStatus.REJECTED
    ]
    if not rejected:
        return None
    base = min(int(e.version) for e in rejected)
    config, state = _version_in(store, cur, job_id, base - 1)
    steps: list[events.Step] = []
    latest: tuple[int, dict[str, Any], dict[str, Any]] = (base - 1, config, state)
    rows = store._x(cur, "control_versions_after", job_id=job_id, version=base - 1).fetchall()
    for row in rows:
        version, v_state, why = int(row[0]), json.loads(row[2]), str(row[3])
        latest = (version, json.loads(row[1]), v_state)
        ev = later.get(ControlVersion(version))
        if ev is not None:
            ok = ev.status != ControlStatus.REJECTED
            steps.append(events.Step(kind=ev.kind, body=ev.body, counts=ok))
        elif why == _DECLARED:
            steps.append(events.Step(defaults=v_state.get("base") or {}))
        else:
            steps.append(events.Step())  # an earlier undo: the replay makes it again
    new_config, new_state = events.replay(job_id, config, state, steps)
    version, latest_config, latest_state = latest
    if "pipeline" in latest_state:
        new_state["pipeline"] = latest_state["pipeline"]
    new_config, new_state = json.loads(_dump(new_config)), json.loads(_dump(new_state))
    if (new_config, new_state) == (latest_config, latest_state):
        return None
    _new_version_in(
        store,
        cur,
        job_id,
        version + 1,
        new_config,
        new_state,
        "undo of rejected control " + ", ".join(e.control_id for e in rejected),
        now,
    )
    return base - 1, version + 1


class ControlMixin(SqlBase):
    """Implements :class:`stoker.store.protocols.jobs.ControlStore`."""

    # versions -------------------------------------------------------------------------------
    def control_snapshot(
        self, job_id: JobId, version: ControlVersion | None = None
    ) -> ControlSnapshot:
        with self._tx(write=False) as cur:
            if version is None:
                row = self._x(cur, "get_job", job_id=job_id).fetchone()
                if row is None:
                    raise JobNotFound(job_id)
                version = ControlVersion(int(row[5]))
            config, state = _version_in(self, cur, job_id, version)
        return ControlSnapshot(version, config, state)

    def declare_defaults(
        self,
        job_id: JobId,
        defaults: dict[str, Any],
        pipeline: dict[str, Any] | None = None,
    ) -> ControlSnapshot:
        now = self.clock.now()
        with self._tx() as cur:
            version = int(self._locked_job(cur, job_id).control_version)
            config, state = _version_in(self, cur, job_id, version)
            new_config, new_state = events.declare(config, state, defaults)
            if pipeline is not None:
                new_state["pipeline"] = pipeline
            # Compared as they read back (a tuple comes back a list): no version for nothing.
            new_config, new_state = json.loads(_dump(new_config)), json.loads(_dump(new_state))
            if (new_config, new_state) == (config, state):
                return ControlSnapshot(ControlVersion(version), config, state)
            if new_config == config and _without_pipeline(new_state) == _without_pipeline(state):
                # Only the description (what a manager validates control with) changed: it is
                # no part of what an epoch applies, so the version keeps its number.
                self._x(
                    cur,
                    "set_control_state",
                    job_id=job_id,
                    version=version,
                    state=_dump(new_state),
                )
                return ControlSnapshot(ControlVersion(version), new_config, new_state)
            version += 1
            _new_version_in(self, cur, job_id, version, new_config, new_state, _DECLARED, now)
        return ControlSnapshot(ControlVersion(version), new_config, new_state)

    # events ---------------------------------------------------------------------------------
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
        try:
            kind = ControlKind(kind)
        except ValueError:
            allowed = ", ".join(k.value for k in ControlKind)
            raise InvalidInput(
                "kind", f"unknown control kind {kind!r} (allowed: {allowed})"
            ) from None
        now = self.clock.now()
        with self._tx() as cur:
            # The job's row lock orders the writers of one job's versions (and its end).
            job = self._locked_job(cur, job_id)
            if request_id is not None:
                row = self._x(
                    cur, "get_control_by_request", job_id=job_id, request_id=request_id
                ).fetchone()
                if row is not None:
                    seen = _event(row)
                    if events.same_request(kind, body, seen.kind, seen.body):
                        return seen, False
                    raise ControlConflict(
                        job_id,
                        f"request_id {request_id!r} was used for another event "
                        f"({seen.kind} {seen.control_id}, version {seen.version})",
                    )
            if job.state.terminal:
                raise JobTerminal(job_id, str(job.state))
            latest = int(job.control_version)
            config, state = _version_in(self, cur, job_id, latest)
            # ControlConflict (pause of a paused job) leaves here before anything is written.
            config, state = events.apply(job_id, config, state, kind, body)
            control_id = uuid.uuid4().hex[:16]
            version = latest + 1
            _new_version_in(
                self, cur, job_id, version, config, state, f"control {kind} {control_id}", now
            )
            self._x(
                cur,
                "insert_control_event",
                job_id=job_id,
                control_id=control_id,
                version=version,
                kind=str(kind),
                body=_dump(body),
                request_id=request_id,
                sender=sender,
                origin=origin,
                now=now,
            )
            row = self._x(cur, "get_control_event", job_id=job_id, control_id=control_id).fetchone()
        return _event(row), True

    def get_control(self, job_id: JobId, control_id: str) -> ControlEvent:
        with self._tx(write=False) as cur:
            row = self._x(cur, "get_control_event", job_id=job_id, control_id=control_id).fetchone()
            if row is None:
                self._require_job(cur, job_id)
                raise ControlNotFound(job_id, control_id)
        return _event(row)

    def list_controls(
        self,
        job_id: JobId,
        limit: int = 50,
        before_version: ControlVersion | None = None,
        kind: ControlKind | None = None,
        status: ControlStatus | None = None,
    ) -> list[ControlEvent]:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise InvalidInput("limit", f"must be a whole number >= 1, got {limit!r}")
        with self._tx(write=False) as cur:
            rows = self._x(
                cur,
                "list_controls",
                job_id=job_id,
                limit=limit,
                before=None if before_version is None else int(before_version),
                kind=None if kind is None else str(ControlKind(kind)),
                status=None if status is None else str(ControlStatus(status)),
            ).fetchall()
            if not rows:
                self._require_job(cur, job_id)
        return [_event(r) for r in rows]

    def applied_controls(self, job_id: JobId, epoch: Epoch) -> list[ControlEvent]:
        with self._tx(write=False) as cur:
            rows = self._x(cur, "applied_controls", job_id=job_id, epoch=epoch).fetchall()
        return [_event(r) for r in rows]

    def reject_control(self, job_id: JobId, control_id: str, reason: str) -> ControlEvent:
        now = self.clock.now()
        with self._tx() as cur:
            # The job's row first, as add_control takes it: an undo writes the next version.
            self._locked_job(cur, job_id)
            current = self._locked_event(cur, job_id, control_id)
            if not current.status.ended:
                CONTROLS.check(current.status, ControlStatus.REJECTED)
                self._x(
                    cur,
                    "reject_control",
                    job_id=job_id,
                    control_id=control_id,
                    reason=reason,
                    now=now,
                    from_state=str(current.status),
                )
                undo_rejected_in(self, cur, job_id, [current], now)
            row = self._x(cur, "get_control_event", job_id=job_id, control_id=control_id).fetchone()
        return _event(row)

    def finish_control(
        self,
        job_id: JobId,
        control_id: str,
        status: ControlStatus,
        epoch: Epoch | None = None,
        result: dict[str, Any] | None = None,
    ) -> ControlEvent:
        if status not in (ControlStatus.APPLIED, ControlStatus.COMMITTED):
            raise InvalidInput("status", f"expects APPLIED or COMMITTED, got {status!r}")
        with self._tx() as cur:
            current = self._locked_event(cur, job_id, control_id).status
            if current != status:
                CONTROLS.check(current, status)
            self._x(
                cur,
                "finish_control",
                job_id=job_id,
                control_id=control_id,
                status=str(status),
                from_state=str(current),
                epoch=None if epoch is None else int(epoch),
                result=None if result is None else _dump(result),
                now=self.clock.now(),
            )
            row = self._x(cur, "get_control_event", job_id=job_id, control_id=control_id).fetchone()
        return _event(row)

    # helpers --------------------------------------------------------------------------------
    def _locked_event(self, cur: Any, job_id: JobId, control_id: str) -> ControlEvent:
        """The event's row, locked for this transaction (FOR UPDATE on PostgreSQL)."""
        row = self._x(cur, "lock_control_event", job_id=job_id, control_id=control_id).fetchone()
        if row is None:
            self._require_job(cur, job_id)
            raise ControlNotFound(job_id, control_id)
        return _event(row)

    def _require_job(self, cur: Any, job_id: JobId) -> None:
        if self._x(cur, "get_job", job_id=job_id).fetchone() is None:
            raise JobNotFound(job_id)
