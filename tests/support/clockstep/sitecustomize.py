"""A wall-clock step for the tests, in every Python process started with this folder on its
``PYTHONPATH`` (a job manager, its drivers, their zygotes and Spark's Python workers): while
``STOKER_TEST_CLOCK_OFFSET_FILE`` names a file, ``time.time()`` and ``time.time_ns()`` are the
real wall clock plus the seconds the file holds (read again at most every 0.2 s), as NTP or a
resumed VM steps a clock. The monotonic clock is left alone, as a real step leaves it.

libfaketime (Debian 12's 0.9.10) does the same for every process, the JVM's too, but with the
monotonic clock left real its ``clock_nanosleep`` fails: Python's ``time.sleep`` raised EINVAL
in the driver's first second. stoker decides nothing on the JVM's clock, so the Python processes
are where a step matters. Not part of the stoker package; the ``sitecustomize`` this one shadows
(a later entry of the path) is run after it.

While ``STOKER_TEST_FSYNC_LEDGER`` names a file, every ``os.fsync`` that succeeded appends its
file's path to it (the chaos harness's power loss: tests/chaos/protocol.py).
"""

import importlib.util
import os
import sys
import time


def _install(path: str) -> None:
    real_time, real_ns, mono = time.time, time.time_ns, time.monotonic
    cache = [0.0, float("-inf")]  # offset, monotonic time it was read

    def offset() -> float:
        now = mono()
        if now - cache[1] >= 0.2:
            try:
                with open(path) as f:
                    cache[0] = float(f.read().strip() or 0)
            except (OSError, ValueError):
                pass
            cache[1] = now
        return cache[0]

    time.time = lambda: real_time() + offset()
    time.time_ns = lambda: real_ns() + int(offset() * 1e9)


def _chain() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    seen_here = False
    for entry in list(sys.path):
        folder = os.path.abspath(entry or ".")
        if folder == here:
            seen_here = True
            continue
        candidate = os.path.join(folder, "sitecustomize.py")
        if not seen_here or not os.path.isfile(candidate):
            continue
        spec = importlib.util.spec_from_file_location("sitecustomize", candidate)
        if spec is None or spec.loader is None:
            return
        module = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        spec.loader.exec_module(module)
        return


def _ledger(path: str) -> None:
    """Every ``os.fsync`` that succeeded, as the path of its file, appended to ``path``: the
    chaos harness's power loss empties the files no process fsynced (tests/chaos/protocol.py)."""
    real = os.fsync

    def fsync(fd: int) -> None:
        real(fd)
        try:
            line = (os.readlink(f"/proc/self/fd/{fd}") + "\n").encode()
            out = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(out, line)
            finally:
                os.close(out)
        except OSError:
            pass

    os.fsync = fsync


if os.environ.get("STOKER_TEST_FSYNC_LEDGER"):
    _ledger(os.environ["STOKER_TEST_FSYNC_LEDGER"])
if os.environ.get("STOKER_TEST_CLOCK_OFFSET_FILE"):
    _install(os.environ["STOKER_TEST_CLOCK_OFFSET_FILE"])
_chain()
