"""Time, injected: production code asks a :class:`Clock`, tests hand in a :class:`ManualClock`."""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    """A source of wall-clock seconds, and of monotonic seconds for timing intervals.

    Wall time is for records and people; what decides (whether a lease lapsed) is timed on the
    monotonic clock, which no clock step moves (stoker.leases)."""

    def now(self) -> float: ...

    def monotonic(self) -> float: ...


class SystemClock:
    """The machine's clock."""

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()


class ManualClock:
    """A clock that moves only when told to."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self._t = start
        self._mono = 0.0
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._t

    def monotonic(self) -> float:
        """Moves with :meth:`advance` (a test's time passes for both), never with :meth:`step`."""
        with self._lock:
            return self._mono

    def step(self, seconds: float) -> None:
        """Step the wall clock alone, as NTP or a resumed VM does: intervals do not move."""
        with self._lock:
            self._t += seconds

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._t += seconds
            self._mono += seconds
