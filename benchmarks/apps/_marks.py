"""Timestamps from a benchmark driver to the benchmark: one JSON line per event, with the pid.

``BENCH_MARKS`` names the file; every process of one benchmark appends to it.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

_PATH = os.environ.get("BENCH_MARKS")


def mark(event: str, t: float | None = None, **fields: Any) -> None:
    """Append ``event`` at wall-clock time ``t`` (default: now)."""
    if not _PATH:
        return
    line = json.dumps({"pid": os.getpid(), "event": event, "t": t or time.time(), **fields})
    fd = os.open(_PATH, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)
