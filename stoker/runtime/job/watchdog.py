"""The progress watchdog: an attempt whose query makes no progress for a bounded time fails.

Spark waits without a timeout in several places of a streaming query's driver: a Python data
source's reader process (``python_streaming_source_runner``: ``latestOffset``, partitions,
commit) or planner that stops answering without dying (stopped, stuck in user code or I/O)
holds the query's thread in a socket read for ever; a task whose Python worker hangs holds its
batch. The attempt would stay RUNNING with its lease renewed and no epoch: a job manager sees
a live driver, nothing restarts it. The watchdog turns that into an attempt failure
(:class:`~stoker.errors.QueryStalled`, exit 8), which the restart strategy handles.

Progress is any of: the query (re)started; an epoch begun or ended (``foreachBatch``); a
query progress event (a trigger that ran a batch); an idle event (a trigger that found no
data: Spark posts one every ``spark.sql.streaming.noDataProgressEventInterval``, 10 s by
default, while the query is idle, so an idle job is not a stalled one); and, while an epoch
runs, a task of the query completing (a slow batch that moves is not a stalled one). Time held
does not count (a pause that stops the query).

The bound is ``stoker.progress_timeout`` (0 turns the watchdog off) when it is given. Not
given, it adapts to the job: 5 minutes, or three times the longest quiet time between two
signs of progress among the job's last ones (``RECENT_GAPS``), whichever is longer, so a job
whose single tasks take ten minutes is not failed at five (the quiet time before the first
epoch after a query start is not counted: it is Spark starting). Either way it is never
below two idle-event intervals (and, until the first epoch after the query starts has ended,
which starts the sources' reader processes and Spark's Python workers, never below a minute),
plus the trigger interval in force (a
long processing-time trigger waits that long between triggers legitimately). Two stalls are
told apart in the failure: the query planning the next epoch (no epoch begun: a source's
reader or a planner not answering) and an epoch running without a task completing.

This module is the decision alone, on an injected clock (unit-tested with a fake one); the
signals come from :mod:`stoker.runtime.job.spark_signals` and the epoch processor, and
:func:`stoker.runtime.job.query.supervise` acts on the decision.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

DEFAULT_IDLE_INTERVAL_S = 10.0  # Spark's spark.sql.streaming.noDataProgressEventInterval
# The first plan and the first epoch after the query (re)starts start the sources' reader
# processes and Spark's Python workers (Python starts with pyspark's imports): on a loaded
# host each took over 5 s. Until that first epoch ends the bound is never below this,
# whatever stoker.progress_timeout says.
FIRST_EPOCH_S = 60.0
QUERY_STARTED = "the query started"
# While an epoch runs and nothing else moved for this long, the query's tasks are looked at
# (a few JVM calls) at most this often.
PROBE_AFTER_S = 5.0
# The adaptive bound: this many times the longest of the last RECENT_GAPS quiet times.
ADAPT_FACTOR = 3.0
RECENT_GAPS = 64


@dataclass(frozen=True)
class Stall:
    """What the watchdog found: how long the query has been quiet, against which bound."""

    quiet_s: float
    bound_s: float
    last: str  # the last progress seen
    epoch: int | None  # the epoch running (foreachBatch entered, not left); None: planning

    def describe(self) -> str:
        where = (
            f"epoch {self.epoch} is running and no task of it completed in that time"
            if self.epoch is not None
            else "the query is planning its next epoch (no epoch begun, no progress or idle "
            "event: a source's reader or a Spark planner process is not answering)"
        )
        return (
            f"no progress for {self.quiet_s:.0f} s (bound {self.bound_s:.0f} s, "
            f"stoker.progress_timeout): {where}; last progress: {self.last}"
        )


class ProgressWatchdog:
    """When the query of an attempt last made progress, and whether that is too long ago.

    Fed from three threads (Spark's callbacks for epochs, its listener bus for progress and
    idle events, the supervise loop for tasks and holds); read by the supervise loop.
    """

    def __init__(
        self,
        timeout_s: float,
        *,
        idle_interval_s: float = DEFAULT_IDLE_INTERVAL_S,
        probe_after_s: float = PROBE_AFTER_S,
        clock: Callable[[], float] = time.monotonic,
        adaptive: bool = False,
    ) -> None:
        self.timeout_s = max(0.0, float(timeout_s))
        self.adaptive = adaptive
        self._gaps: deque[float] = deque(maxlen=RECENT_GAPS)
        self.idle_interval_s = max(0.0, float(idle_interval_s))
        self.probe_after_s = probe_after_s
        self.clock = clock
        self._lock = threading.Lock()
        self._last = clock()
        self._what = "the watch began"
        self._epoch: int | None = None
        self._held = False
        self._probed = self._last
        self._first_epoch = False  # the query started and no epoch has ended since

    @property
    def enabled(self) -> bool:
        return self.timeout_s > 0

    def _moved(self, what: str) -> None:
        """Progress now (under the lock): the quiet time it ends is remembered, unless it was
        Spark starting (before the first epoch after a query start ended)."""
        now = self.clock()
        if not self._first_epoch:
            self._gaps.append(now - self._last)
        self._last = now
        self._what = what

    def saw(self, what: str) -> None:
        """Progress: ``what`` happened now."""
        with self._lock:
            self._moved(what)

    def query_started(self) -> None:
        """Progress: the query (re)started; its first epoch is on its way (FIRST_EPOCH_S)."""
        with self._lock:
            self._first_epoch = True
            self._moved(QUERY_STARTED)

    def epoch_begun(self, epoch: int) -> None:
        with self._lock:
            self._epoch = epoch
            self._moved(f"epoch {epoch} begun")

    def epoch_ended(self, epoch: int, how: str = "ended") -> None:
        with self._lock:
            if self._epoch == epoch:
                self._epoch = None
            first, self._first_epoch = self._first_epoch, False
            if first:
                self._last = self.clock()  # the start's quiet time is not the job's
                self._what = f"epoch {epoch} {how}"
            else:
                self._moved(f"epoch {epoch} {how}")

    def hold(self, held: bool) -> None:
        """The query is stopped on purpose (a pause of sources stoker does not own) while
        ``held``; its quiet time counts from the release."""
        with self._lock:
            if held == self._held:
                return
            self._held = held
            self._last = self.clock()
            self._what = "paused (query stopped)" if held else "resumed"

    @property
    def epoch(self) -> int | None:
        """The epoch running now (its ``foreachBatch`` entered and not left), if any."""
        return self._epoch

    def bound(self, trigger_s: float) -> float:
        """How long the query may be quiet: the timeout (never below two idle-event
        intervals; adaptive: never below ADAPT_FACTOR times the longest recent quiet time)
        plus the trigger interval in force."""
        base = max(self.timeout_s, 2 * self.idle_interval_s)
        if self.adaptive and self._gaps:
            base = max(base, ADAPT_FACTOR * max(self._gaps))
        return base + max(0.0, trigger_s)

    def probe_due(self) -> bool:
        """Whether to look at the running epoch's tasks now: an epoch runs, nothing else
        moved for ``probe_after_s`` (a quarter of the timeout when that is shorter), and the
        last look is that long ago."""
        if not self.enabled or self._held or self._epoch is None:
            return False
        # Two looks fit in the timeout however small it is: the first one is the reference.
        every = min(self.probe_after_s, max(0.5, self.timeout_s / 4))
        now = self.clock()
        with self._lock:
            if now - self._last < every or now - self._probed < every:
                return False
            self._probed = now
            return True

    def overdue(self, trigger_s: float) -> Stall | None:
        """The stall, when the query has been quiet longer than its bound; else None."""
        if not self.enabled:
            return None
        with self._lock:
            if self._held:
                return None
            quiet = self.clock() - self._last
            bound = self.bound(trigger_s)
            if self._first_epoch:
                bound = max(bound, FIRST_EPOCH_S)
            if quiet <= bound:
                return None
            return Stall(quiet, bound, self._what, self._epoch)


def spark_duration_s(value: str | None, default: float) -> float:
    """Seconds from a Spark time setting (``10000ms``, ``10s``, ``1min``, a bare number of
    milliseconds); ``default`` when it is absent or unreadable."""
    if value is None:
        return default
    text = str(value).strip().lower()
    units = (("ms", 0.001), ("min", 60.0), ("s", 1.0), ("m", 60.0), ("h", 3600.0))
    try:
        for suffix, factor in units:
            if text.endswith(suffix):
                return float(text[: -len(suffix)]) * factor
        return float(text) / 1000.0  # Spark reads a bare number as milliseconds here
    except ValueError:
        return default
