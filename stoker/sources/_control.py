"""What a stoker source's reader takes from the job's control state at each ``latestOffset``.

The reader runs in a Python process of its own that the driver's JVM starts, so it reads the
control state from the store (one indexed read per trigger; a snapshot is read once per
version). Each offset it returns carries ``cv``, the control version it planned with: Spark
logs the offset before the epoch runs, so a replay reads the same range under the same limit,
and the epoch pins that version (:func:`stoker.runtime.epoch.offsets_of`). A new version
changes the offset even when no data came, so Spark runs an epoch for it at the next trigger:
control applies on an idle stream too.

Pause: the first offset planned under a paused version is the start position with the new
``cv`` (an empty epoch that applies the pause); after that the reader returns ``start``
itself, and Spark runs no epoch until a version that is not paused arrives.

Pacing (``pace_s`` given): the query runs at trigger 0 and Spark asks for an offset every
``spark.sql.streaming.pollingDelay`` (10 ms) while no data comes. The reader reads at the first
call in each slot of the interval in force (slots of wall-clock time, ``floor(now / interval)``,
as Spark's ProcessingTime trigger aligns its ticks) and holds ``start`` for the rest of the
slot; every reader of the job uses the same slots, so their epochs coincide. A new control
version is read at once, whatever the slot: a trigger change or a checkpoint-now applies at the
next poll without a query restart.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Any

from stoker.types import ControlVersion, JobId

CV = "cv"
_log = logging.getLogger("stoker.sources.control")


@dataclass(frozen=True)
class Plan:
    """What one ``latestOffset`` call may do."""

    version: int | None  # the control version planned with; None: the job has no store
    hold: bool  # paused (and the start already was): return ``start`` unchanged
    empty: bool  # paused just now: return the start position under the new version
    limits: dict[str, Any]  # rate limits set by control (absent: the source's own setting)


_FREE = Plan(None, False, False, {})


class ReaderControl:
    """The control state as a source reader sees it."""

    def __init__(
        self, store_url: str | None, job_id: str | None, pace_s: str | float | None = None
    ) -> None:
        self.store_url = store_url or None
        self.job_id = JobId(job_id) if job_id else None
        self.pace_s = float(pace_s) if pace_s not in (None, "") else None
        self._store: Any = None
        self._states: dict[int, dict[str, Any]] = {}
        self._slot: tuple[float, int] | None = None  # the pacing slot last read in

    def _state(self, version: int) -> dict[str, Any]:
        if version not in self._states:
            snap = self._store.control_snapshot(self.job_id, ControlVersion(version))
            self._states[version] = dict(snap.state)
            if len(self._states) > 64:
                self._states.pop(next(iter(self._states)))
        return self._states[version]

    def plan(self, start: dict[str, Any]) -> Plan:
        if self.store_url is None or self.job_id is None:
            return _FREE
        try:
            if self._store is None:
                from stoker.store import open_store

                self._store = open_store(self.store_url)
            version = int(self._store.get_job(self.job_id).control_version)
            state = self._state(version)
        except Exception:
            # The store is briefly unreachable: keep reading at the start's version rather
            # than fail the query; the epoch's own fence decides whether it may commit.
            _log.warning(
                "control state of job %s unreadable; planning without it",
                self.job_id,
                exc_info=True,
            )
            if self._paced_hold({}, same_version=True):
                return Plan(None, hold=True, empty=False, limits={})  # still at the pace
            return _FREE
        start_v = start.get(CV)
        if state.get("paused"):
            was_paused = start_v is not None and self._state(int(start_v)).get("paused", False)
            return Plan(version, hold=bool(was_paused), empty=not was_paused, limits={})
        if self._paced_hold(state, same_version=start_v is not None and int(start_v) == version):
            return Plan(version, hold=True, empty=False, limits={})
        return Plan(version, False, False, dict(state.get("rate_limit") or {}))

    def _paced_hold(self, state: dict[str, Any], same_version: bool) -> bool:
        """True while this slot of the interval in force was read already (pacing only)."""
        if self.pace_s is None:
            return False
        set_by_control = state.get("trigger_s")
        interval = float(self.pace_s if set_by_control is None else set_by_control)
        if interval <= 0:
            return False
        slot = (interval, math.floor(time.time() / interval))
        if same_version and slot == self._slot:
            return True
        self._slot = slot  # read now: this slot is used, a new version or not
        return False

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None


def limit_of(plan: Plan, key: str, declared: float | int | None) -> float | int | None:
    """The limit in force: control's, or else the source's own."""
    if key in plan.limits:
        value: float | int | None = plan.limits[key]
        return value
    return declared
