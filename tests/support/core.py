"""The ground every test helper stands on: the checkout's paths, the CLI's argv, light JVM
options, the one poll (:func:`wait_for`) and the one free port (:func:`free_port`)."""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
APPS = REPO / "tests" / "apps"
# C1 only and the serial collector: cheaper JVMs for a suite of short Spark runs on two cores
# (tests/conftest.py gives them to every Spark JVM the tests start).
LIGHT_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
# A driver's Java options in tests that set them: stoker's stack size (SPARK_FACTS) and LIGHT_JVM.
JVM_OPTS = f"-Xss16m {LIGHT_JVM}"


def stoker_cmd(*args: str) -> list[str]:
    """argv for the stoker CLI of this checkout."""
    return [sys.executable, "-m", "stoker.cli", *args]


def wait_for(
    what: str | Callable[[], str], cond: Callable[[], Any], timeout: float, every: float = 0.5
) -> Any:
    """Poll ``cond`` until it returns something truthy and return that; fail naming ``what``
    after ``timeout`` (a callable ``what`` is asked only then, for the details as they are at
    the timeout). ``cond`` may raise to fail at once (a process it waits on has exited).

    The one poll of the suite: a test waits for what it asserts, never for a fixed time."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            text = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {text}")
        time.sleep(every)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` now (the OS picks it; a server started next binds it)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
