"""The nemesis: faults injected into real processes, a real PostgreSQL server, a real disk.

Each function does one fault and returns a line saying what it did, or None when it found
nothing to do it to (no Python worker alive at that moment, say): only a fault that was done
counts as injected.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import time
from pathlib import Path

from tests.pg import ThrowawayPostgres
from tests.support.procs import Proc, process_tree


def _group(driver: int) -> set[Proc]:
    """The driver (which leads its process group) and every process under it."""
    return process_tree(pgid=driver, root=driver)


def jvm_of(driver: int) -> Proc | None:
    jvms = [p for p in _group(driver) if p.argv and p.argv[0].endswith("java")]
    return jvms[0] if jvms else None


def python_workers(driver: int) -> list[Proc]:
    """The Python task workers: the children that pyspark.daemon forks (same command line)."""
    group = _group(driver)
    daemons = {p.pid for p in group if "pyspark.daemon" in p.argv}
    return [p for p in group if p.ppid in daemons and "pyspark.daemon" in p.argv]


def kill_worker(driver: int, rng: random.Random) -> str | None:
    """SIGKILL one Python worker; Spark fails the task it runs and retries it."""
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline:
        workers = sorted(python_workers(driver), key=lambda p: p.pid)
        if workers:
            w = rng.choice(workers)
            with contextlib.suppress(ProcessLookupError):
                os.kill(w.pid, signal.SIGKILL)
                return f"SIGKILL python worker {w.pid} (of {len(workers)})"
        time.sleep(0.1)
    return None


def stall(pid: int, seconds: float, what: str) -> str | None:
    """SIGSTOP ``pid`` for ``seconds``, then SIGCONT."""
    try:
        os.kill(pid, signal.SIGSTOP)
    except ProcessLookupError:
        return None
    try:
        time.sleep(seconds)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
    return f"SIGSTOP {what} {pid} for {seconds:g}s, SIGCONT"


def kill_driver(driver: int) -> str | None:
    """SIGKILL the driver's whole process group (a machine or container dying)."""
    try:
        os.killpg(driver, signal.SIGKILL)
    except ProcessLookupError:
        return None
    return f"SIGKILL driver group {driver}"


def term_driver(driver: int) -> str | None:
    """SIGTERM the driver process (a container stop): it stops gracefully, exit 13."""
    try:
        os.kill(driver, signal.SIGTERM)
    except ProcessLookupError:
        return None
    return f"SIGTERM driver {driver}"


class BouncingPostgres(ThrowawayPostgres):
    """A throwaway server that can also crash and come back on the same port with its data.

    It keeps what it acknowledged (``synchronous_commit=on``): the throwaway default (off)
    loses the last commits in a crash, and no exactly-once protocol survives a database that
    forgets a COMMIT PREPARED it acknowledged (found by the harness's first ``pg_down``)."""

    def __init__(self) -> None:
        super().__init__(settings={"synchronous_commit": "on"})

    def crash(self) -> None:
        """Stop at once, as a crash does (``immediate``: no shutdown checkpoint; prepared
        transactions come back from the WAL at the next start)."""
        assert self._dir is not None and self._proc is not None
        self._run(
            [self._exe("pg_ctl"), "stop", "-D", str(self._dir / "data"), "-m", "immediate", "-w"],
            cwd=self._dir,
            check=False,
        )
        self._proc.wait(timeout=30)

    def come_back(self) -> None:
        """Start the crashed server again on its port, with its data."""
        assert self.port is not None
        self._spawn()
        if not self._wait_ready():
            raise RuntimeError(f"PostgreSQL did not come back:{self._log_tail()}")


def pg_down(server: BouncingPostgres, seconds: float) -> str:
    server.crash()
    try:
        time.sleep(seconds)
    finally:
        server.come_back()
    return f"PostgreSQL server crashed, back after {seconds:g}s"


class SmallDisk:
    """A small tmpfs of its own (root only): a files sink's folder on it can be filled up."""

    def __init__(self, where: Path, size_mb: int = 64) -> None:
        self.path = where
        where.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(where)], check=True
        )

    def fill(self, seconds: float) -> str:
        """Fill the disk to the last byte for ``seconds``, then free it."""
        ballast = self.path / ".ballast"
        chunk = b"\0" * (1 << 20)
        with open(ballast, "wb", buffering=0) as f, contextlib.suppress(OSError):
            while True:  # until ENOSPC
                f.write(chunk)
        try:
            time.sleep(seconds)
        finally:
            ballast.unlink(missing_ok=True)
        return f"disk full for {seconds:g}s"

    def close(self) -> None:
        subprocess.run(["umount", "-l", str(self.path)], check=False)


def can_mount() -> bool:
    return os.geteuid() == 0 and Path("/proc/filesystems").read_text().find("tmpfs") >= 0
