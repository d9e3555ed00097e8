"""Driver processes: started in their own process group, with a log file per attempt."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

from stoker.runtime.attempt import owner_is_dead
from stoker.store import Owner


def driver_argv(
    job: str,
    attempt: int,
    store: str,
    state_dir: Path,
    entrypoint: Path,
    args: list[str],
    conf: dict[str, str],
    lease_ttl: float,
) -> list[str]:
    """argv of a driver for one attempt. A list, never a shell string: no user input is parsed."""
    argv = [
        sys.executable,
        "-m",
        "stoker.runtime.driver",
        "--job",
        job,
        "--attempt",
        str(attempt),
        "--store",
        store,
        "--state-dir",
        str(state_dir),
        "--lease-ttl",
        repr(float(lease_ttl)),
    ]
    for k, v in sorted(conf.items()):
        argv += ["-D", f"{k}={v}"]
    return [*argv, "--", str(entrypoint), *args]


def spawn(argv: list[str], log_path: Path, cwd: Path) -> subprocess.Popen[bytes]:
    """Start a driver as the leader of a new process group (its JVM and workers join it)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=str(cwd),
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )


def kill_group(pgid: int, sig: int = signal.SIGKILL) -> None:
    """Signal a whole driver process group; no error if it is gone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def is_dead(owner: Owner) -> bool:
    """The attempt's process is provably gone (same host only)."""
    return owner_is_dead(owner)
