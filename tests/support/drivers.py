"""``stoker run`` drivers as real processes, each leading its own process group, and kills."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

from tests.support.core import REPO, stoker_cmd


def start_driver(
    app: Path, *args: str, env: dict[str, str] | None = None, log: Path | None = None
) -> subprocess.Popen[bytes]:
    """Start ``stoker run app`` as its own process group (so a kill takes the JVM with it)."""
    full_env = {**os.environ, **(env or {})}
    out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115 - handed to the child
    return subprocess.Popen(
        stoker_cmd("run", str(app), *args),
        env=full_env,
        stdout=out,
        stderr=subprocess.STDOUT if log else subprocess.DEVNULL,
        start_new_session=True,
        cwd=str(REPO),
    )


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the driver's whole process group and wait until the driver is gone."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    wait_group_gone(proc.pid)


def wait_group_gone(pgid: int, timeout: float = 30.0) -> None:
    """Wait until no process of group ``pgid`` is left (the JVM may outlive the driver)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        except PermissionError:
            return
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    raise AssertionError(f"process group {pgid} still alive after {timeout}s")
