"""The ground every test helper stands on: the checkout's paths, the CLI's argv, light JVM
options, the one poll (:func:`wait_for`) and the one free port (:func:`free_port`)."""

from __future__ import annotations

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
    """A TCP port free on ``host`` now (the OS picks it; a server started next binds it)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


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
