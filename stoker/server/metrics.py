"""Prometheus text exposition, written by hand (a handful of series need no library)."""

from __future__ import annotations

import threading
from bisect import bisect_left

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class Histogram:
    """A cumulative histogram of seconds, as Prometheus expects it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts = [0] * (len(BUCKETS) + 1)
        self.total = 0.0
        self.n = 0

    def observe(self, seconds: float) -> None:
        with self._lock:
            self.counts[bisect_left(BUCKETS, seconds)] += 1
            self.total += seconds
            self.n += 1

    def render(self, name: str, help_text: str) -> list[str]:
        with self._lock:
            lines = [f"# HELP {name} {help_text}", f"# TYPE {name} histogram"]
            acc = 0
            for bound, c in zip(BUCKETS, self.counts, strict=False):
                acc += c
                lines.append(f'{name}_bucket{{le="{bound}"}} {acc}')
            lines.append(f'{name}_bucket{{le="+Inf"}} {self.n}')
            lines.append(f"{name}_sum {self.total:.6f}")
            lines.append(f"{name}_count {self.n}")
        return lines


def gauge(name: str, help_text: str, values: dict[str, float], label: str) -> list[str]:
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
    lines += [f'{name}{{{label}="{k}"}} {v}' for k, v in sorted(values.items())]
    return lines


def counter(name: str, help_text: str, value: float) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} counter", f"{name} {value}"]


def labelled_counter(name: str, help_text: str, values: dict[str, float], label: str) -> list[str]:
    """A counter with one label, a sample per value of it."""
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} counter"]
    lines += [f'{name}{{{label}="{k}"}} {v}' for k, v in sorted(values.items())]
    return lines
