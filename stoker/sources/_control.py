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

Cores: the job's record also carries what its driver last reported of its executors
(``resources``, written by :class:`stoker.runtime.resources.ResourceWatch`); a plan carries
their total cores, so that a reader splits an epoch into as many partitions as can run at once
(reactive parallelism: an executor that joins is used from the next epoch planned).
"""

from __future__ import annotations

import logging
import math
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from stoker.errors import SourceError
from stoker.types import ControlVersion, JobId

CV = "cv"
T = TypeVar("T")
_log = logging.getLogger("stoker.sources.control")


@dataclass(frozen=True)
class Plan:
    """What one ``latestOffset`` call may do."""

    version: int | None  # the control version planned with; None: the job has no store
    hold: bool  # paused (and the start already was): return ``start`` unchanged
    empty: bool  # paused just now: return the start position under the new version
    limits: dict[str, Any]  # rate limits set by control (absent: the source's own setting)
    cores: int | None = None  # the cores the job's driver reported last; None: unknown


_FREE = Plan(None, False, False, {})

# Partitions of an epoch when the cores present are unknown (no store, no report yet).
FALLBACK_PARTITIONS = 2


def partitions_for(explicit: int | None, cores: int | None) -> int:
    """How many partitions a stoker source splits an epoch into: the source's own setting
    when given, else one per core the job's executors have now (at least one), else
    :data:`FALLBACK_PARTITIONS`."""
    if explicit is not None:
        return max(1, int(explicit))
    if cores is not None and cores > 0:
        return int(cores)
    return FALLBACK_PARTITIONS


def contiguous_groups(items: Sequence[T], parts: int) -> list[list[T]]:
    """``items`` in order, cut into at most ``parts`` contiguous groups whose sizes differ by
    one at most (no empty group): an epoch's files or lines, one group per partition."""
    n = min(len(items), max(1, parts))
    if n == 0:
        return []
    size, extra = divmod(len(items), n)
    out, i = [], 0
    for k in range(n):
        j = i + size + (1 if k < extra else 0)
        out.append(list(items[i:j]))
        i = j
    return out


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
        self._cores: int | None = None  # from the job's reported resources, last read
        self._cores_read = False

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
            return self._plan(start)
        except Exception as e:
            # Planning without the control state would ignore a pause and every rate limit
            # (an endless source without a limit of its own plans 10,000,000 rows at once),
            # and the offset Spark logs is replayed as it is. So the trigger fails instead:
            # the query stops with this error and the job's restart policy decides what next.
            self.close_quietly()
            raise SourceError(
                "control",
                f"cannot read the control state of job {self.job_id} from the store "
                f"({type(e).__name__}: {e}); no epoch is planned without its pause and "
                "rate limits",
            ) from e

    def _plan(self, start: dict[str, Any]) -> Plan:
        if self._store is None:
            from stoker.store import open_store

            self._store = open_store(str(self.store_url))
        job = self._store.get_job(self.job_id)
        version = int(job.control_version)
        self._note_cores(job)
        state = self._state(version)
        start_v = start.get(CV)
        cores = self._cores
        if state.get("paused"):
            was_paused = start_v is not None and self._state(int(start_v)).get("paused", False)
            return Plan(version, bool(was_paused), not was_paused, {}, cores=cores)
        if self._paced_hold(state, same_version=start_v is not None and int(start_v) == version):
            return Plan(version, hold=True, empty=False, limits={}, cores=cores)
        return Plan(version, False, False, dict(state.get("rate_limit") or {}), cores=cores)

    def _note_cores(self, job: Any) -> None:
        resources = getattr(job, "resources", None)
        self._cores_read = True
        if isinstance(resources, dict):
            cores = resources.get("cores")
            if isinstance(cores, int) and not isinstance(cores, bool) and cores > 0:
                self._cores = cores

    def cores(self) -> int | None:
        """The cores the job's driver reported, as of the last plan; read from the store once
        if no plan was made yet (an epoch replayed from Spark's offset log right after a
        start is split before any ``latestOffset``). None: unknown."""
        if self._cores_read or self.store_url is None or self.job_id is None:
            return self._cores
        try:
            if self._store is None:
                from stoker.store import open_store

                self._store = open_store(self.store_url)
            self._note_cores(self._store.get_job(self.job_id))
        except Exception:
            _log.warning("resources of job %s unreadable", self.job_id, exc_info=True)
            self._cores_read = True
        return self._cores

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

    def close_quietly(self) -> None:
        """Drop the store after a failed read, so the next plan opens it afresh."""
        try:
            self.close()
        except Exception:
            _log.debug("closing the store of job %s failed", self.job_id, exc_info=True)
            self._store = None


def hush_if_spark_hung_up() -> None:
    """Silence the rest of a source runner whose JVM has closed the connection.

    Call from a reader's ``stop()``. Spark's Python source runner leaves its command loop only
    by an exception and calls ``stop()`` on the way out; ``EOFError`` there means the driver's
    JVM closed the socket because the query stopped. The runner then reports the error on that
    closed socket and, when the close has landed first, prints the broken pipe as a traceback on
    the job's stderr: noise at every stop of a healthy job. Nothing more can reach a JVM that
    hung up, so the process's remaining stderr goes to /dev/null. Any other exception (a
    reader's own error, which the runner sends to the JVM) leaves stderr as it is.
    """
    if isinstance(sys.exc_info()[1], EOFError):
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - lives until the process exits


def limit_of(plan: Plan, key: str, declared: float | int | None) -> float | int | None:
    """The limit in force: control's, or else the source's own."""
    if key in plan.limits:
        value: float | int | None = plan.limits[key]
        return value
    return declared
