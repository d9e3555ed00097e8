"""Scaling in SQL: an owner's scaling spec, executor target and reported resources, what each
epoch cost, and the rescales (decisions, observations, bounds set by users).

Nothing here moves a job's ``updated_at``: a running driver reports its resources and each
epoch's metrics often, and ``updated_at`` tells when the job's own record last changed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from stoker.errors import InvalidInput, InvalidTransition, JobNotFound, RescaleNotFound
from stoker.store._sqlbase import SqlBase
from stoker.store.fleet_records import (
    RESCALE_KINDS,
    RESCALE_STATUSES,
    RESCALE_TRANSITIONS,
    RESCALES,
    RescaleRecord,
)
from stoker.store.records import EpochRecord, JobRecord
from stoker.types import Epoch, JobId

# An epoch's progress summary: a few operators and sources with their figures (the driver
# keeps it to this; a bigger one is refused rather than stored on every epoch row).
MAX_PROGRESS_BYTES = 16 * 1024


class ScalingMixin(SqlBase):
    """Implements :class:`stoker.store.protocols.fleet.ScalingStore`."""

    def set_scaling(self, job_id: JobId, scaling: dict[str, Any] | None) -> JobRecord:
        doc = None if scaling is None else _json_object("scaling", scaling)
        with self._tx() as cur:
            if self._x(cur, "set_scaling", job_id=job_id, scaling=doc).rowcount != 1:
                raise JobNotFound(job_id)
            row = self._x(cur, "get_job", job_id=job_id).fetchone()
        return JobRecord.from_row(row)

    def set_executor_target(self, job_id: JobId, target: int | None) -> None:
        if target is not None:
            _check_count("executor_target", target)
        with self._tx() as cur:
            if self._x(cur, "set_executor_target", job_id=job_id, target=target).rowcount != 1:
                raise JobNotFound(job_id)

    def report_resources(self, job_id: JobId, resources: dict[str, Any]) -> None:
        doc = _json_object("resources", resources)
        with self._tx() as cur:
            if self._x(cur, "report_resources", job_id=job_id, resources=doc).rowcount != 1:
                raise JobNotFound(job_id)

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
        for label, ms in (("duration_ms", duration_ms), ("work_ms", work_ms)):
            if ms is not None and (
                isinstance(ms, bool) or not isinstance(ms, int | float) or not ms >= 0
            ):
                raise InvalidInput(label, f"must be a number >= 0, got {ms!r}")
        for name, value in (("backlog", backlog), ("executors", executors), ("cores", cores)):
            if value is not None:
                _check_count(name, value)
        progress_doc = None if progress is None else _json_object("progress", progress)
        if progress_doc is not None and len(progress_doc) > MAX_PROGRESS_BYTES:
            raise InvalidInput(
                "progress", f"{len(progress_doc)} bytes of JSON, more than {MAX_PROGRESS_BYTES}"
            )
        if all(v is None for v in (duration_ms, backlog, executors, cores, work_ms, progress)):
            return
        with self._tx() as cur:
            # No row (not pinned yet, or pruned): nothing to add the metrics to.
            self._x(
                cur,
                "set_epoch_metrics",
                job_id=job_id,
                epoch=epoch,
                duration_ms=None if duration_ms is None else float(duration_ms),
                backlog=backlog,
                executors=executors,
                cores=cores,
                work_ms=None if work_ms is None else float(work_ms),
                progress=progress_doc,
            )

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
        if kind not in RESCALE_KINDS:
            raise InvalidInput("kind", f"{kind!r} is not one of {', '.join(RESCALE_KINDS)}")
        if status not in RESCALE_STATUSES[kind]:
            allowed = ", ".join(RESCALE_STATUSES[kind])
            raise InvalidInput("status", f"a {kind} rescale is {allowed}, not {status!r}")
        for name, text in (("policy", policy), ("mode", mode), ("reason", reason)):
            if not isinstance(text, str):
                raise InvalidInput(name, f"must be text, got {text!r}")
        if sender is not None and not isinstance(sender, str):
            raise InvalidInput("sender", f"must be text or None, got {sender!r}")
        for name, value in (("from_executors", from_executors), ("to_executors", to_executors)):
            if value is not None:
                _check_count(name, value)
        signals_doc = _json_object("signals", signals)
        workers_doc = _json_object("workers", _workers(workers))
        when = self.clock.now() if at is None else float(at)
        with self._tx() as cur:
            if self._x(cur, "get_job", job_id=job_id).fetchone() is None:
                raise JobNotFound(job_id)
            # The counter's row lock (PostgreSQL) or the write lock (SQLite) makes the id ours
            # until this transaction ends: two managers never hand out one id.
            self._x(cur, "next_rescale_id")
            rescale_id = int(self._x(cur, "get_counter", name="rescales").fetchone()[0])
            self._x(
                cur,
                "insert_rescale",
                rescale_id=rescale_id,
                job_id=job_id,
                at=when,
                kind=kind,
                policy=policy,
                mode=mode,
                signals=signals_doc,
                from_executors=from_executors,
                to_executors=to_executors,
                workers=workers_doc,
                reason=reason,
                status=status,
                sender=sender,
            )
            row = self._x(cur, "get_rescale", rescale_id=rescale_id).fetchone()
        return RescaleRecord.from_row(row)

    def update_rescale(
        self,
        rescale_id: int,
        *,
        status: str | None = None,
        in_use_at: float | None = None,
        workers: dict[str, Any] | None = None,
        error: str | None = None,
    ) -> RescaleRecord:
        workers_doc = None if workers is None else _json_object("workers", _workers(workers))
        if error is not None and not isinstance(error, str):
            raise InvalidInput("error", f"must be text or None, got {error!r}")
        with self._tx() as cur:
            row = self._x(cur, "lock_rescale", rescale_id=rescale_id).fetchone()
            if row is None:
                raise RescaleNotFound(rescale_id)
            old = RescaleRecord.from_row(row)
            target = old.status if status is None else status
            if not RESCALES.allows(old.status, target):
                allowed = sorted(RESCALE_TRANSITIONS.get(old.status, frozenset()))
                raise InvalidTransition(
                    f"rescale {rescale_id} is {old.status}: it may become "
                    + (", ".join(allowed) if allowed else "nothing else")
                    + f", not {target}"
                )
            when = old.in_use_at if in_use_at is None else float(in_use_at)
            if target == "in_use" and when is None:
                when = self.clock.now()  # in use as of this call, unless told otherwise
            self._x(
                cur,
                "update_rescale",
                rescale_id=rescale_id,
                status=target,
                in_use_at=when,
                workers=json.dumps(old.workers, sort_keys=True)
                if workers_doc is None
                else workers_doc,
                error=old.error if error is None else error,
                from_status=old.status,
            )
            row = self._x(cur, "get_rescale", rescale_id=rescale_id).fetchone()
        return RescaleRecord.from_row(row)

    def list_rescales(
        self, job_id: JobId, limit: int = 100, since: float | None = None
    ) -> list[RescaleRecord]:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise InvalidInput("limit", f"must be a whole number >= 0, got {limit!r}")
        with self._tx(write=False) as cur:
            if self._x(cur, "get_job", job_id=job_id).fetchone() is None:
                raise JobNotFound(job_id)
            rows = self._x(
                cur,
                "list_rescales",
                job_id=job_id,
                limit=limit,
                since=None if since is None else float(since),
            ).fetchall()
        return [RescaleRecord.from_row(r) for r in rows]

    def recent_epochs(self, job_ids: Sequence[JobId], since: float) -> list[EpochRecord]:
        if isinstance(job_ids, str):
            # A lone id would be read as its characters.
            raise InvalidInput("job_ids", f"must be a list of job ids, got {job_ids!r}")
        found: list[EpochRecord] = []
        with self._tx(write=False) as cur:
            # One indexed range read per job in one snapshot: a portable IN list of any length
            # would need the query text built per call.
            for job in dict.fromkeys(job_ids):
                rows = self._x(cur, "recent_epochs", job_id=job, since=float(since)).fetchall()
                found.extend(EpochRecord.from_row(r) for r in rows)
        found.sort(key=lambda e: (e.committed_at or 0.0, e.job_id, e.epoch))
        return found


def _check_count(field: str, value: Any) -> None:
    """``value`` must be a whole number >= 0 (a count of executors, cores, rows)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInput(field, f"must be a whole number >= 0, got {value!r}")


def _workers(workers: dict[str, Any] | None) -> dict[str, Any]:
    """The workers a rescale added and removed; none of either by default."""
    out: dict[str, Any] = {"added": [], "removed": []}
    if workers is not None:
        if not isinstance(workers, dict):
            raise InvalidInput("workers", f"must be an object, got {workers!r}")
        out.update(workers)
    return out


def _json_object(field: str, value: Any) -> str:
    """``value`` as JSON text; it must be a JSON object (InvalidInput naming ``field``)."""
    if not isinstance(value, dict):
        raise InvalidInput(field, f"must be an object, got {type(value).__name__}")
    try:
        return json.dumps(value, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise InvalidInput(field, f"cannot be stored as JSON: {e}") from None
