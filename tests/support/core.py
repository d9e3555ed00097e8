"""The ground every test helper stands on: the checkout's paths, the CLI's argv, light JVM
options, the one poll (:func:`wait_for`) and the one free port (:func:`free_port`)."""

from __future__ import annotations

import os
import random
import site
import socket
import sys
import time
import venv
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
    """A TCP port free on ``host`` now, for a server the test starts next.

    Taken below the kernel's ephemeral range: a port the OS hands out for ``bind(0)`` is also
    what every outgoing connection and every Spark listener on port 0 gets, so one of them could
    take it between this check and the server's bind (seen in CI: a dashboard's manager failed
    with "address already in use" on port 39969). Below the range only servers given a port
    explicitly bind, and those take theirs from here: each pytest worker draws from a slice of
    its own, and this process never hands a port out twice."""
    low, _high = _ephemeral_range()
    first, last = 10000, max(10001, low - 1)
    slices = max(1, _WORKERS)
    width = (last - first) // slices
    start = first + width * (_WORKER % slices)
    for _ in range(200):
        port = _rng.randrange(start, start + width)
        if port in _given:
            continue
        try:
            with socket.socket() as s:
                s.bind((host, port))
        except OSError:
            continue
        _given.add(port)
        return port
    with socket.socket() as s:  # a crowded slice: the OS's pick, as before
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def _worker_number(name: str) -> int:
    digits = name.removeprefix("gw")
    return int(digits) if digits.isdigit() else 0


_WORKER = _worker_number(os.environ.get("PYTEST_XDIST_WORKER", ""))
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
_rng = random.Random(os.getpid() ^ time.time_ns())
_given: set[int] = set()


def venv_over_this_python(env_dir: Path) -> Path:
    """A venv in ``env_dir`` that sees the packages of the interpreter running the tests (PySpark,
    stoker's dependencies) without a download, as a venv with its own install would: when the
    tests run from a venv themselves (``.ci/run`` makes ``.venv``), ``system_site_packages``
    reaches only the base interpreter's packages, so a ``.pth`` file adds this one's. Returns
    the venv's ``python``."""
    venv.EnvBuilder(system_site_packages=True, with_pip=False, symlinks=True).create(env_dir)
    python = env_dir / "bin" / "python"
    ours = [p for p in site.getsitepackages() if Path(p).is_dir()]
    (purelib,) = (env_dir / "lib").glob("python*/site-packages")
    (purelib / "_tests_parent.pth").write_text("".join(f"{p}\n" for p in ours))
    return python
