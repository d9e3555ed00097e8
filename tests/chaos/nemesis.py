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
from collections.abc import Callable
from pathlib import Path

from stoker import procs
from stoker.store import ClusterProcess, WriteLock
from tests.pg import ThrowawayPostgres
from tests.support.procs import Proc, process_tree, processes
from tests.support.procs import python_workers as spark_python_workers


def _group(driver: int) -> set[Proc]:
    """The driver (which leads its process group) and every process under it."""
    return process_tree(pgid=driver, root=driver)


def jvm_of(driver: int) -> Proc | None:
    jvms = [p for p in _group(driver) if p.argv and p.argv[0].endswith("java")]
    return jvms[0] if jvms else None


def python_workers(driver: int) -> list[Proc]:
    """The Python task workers: the children of Spark's worker daemons (started by the JVM,
    or forked by the driver's zygote)."""
    return spark_python_workers(_group(driver))


def kill_worker(driver: int, rng: random.Random, cluster: SparkCluster | None = None) -> str | None:
    """SIGKILL one Python worker (the driver's, or on a cluster also its executors'); Spark
    fails the task it runs and retries it."""
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline:
        found = python_workers(driver) + (cluster.python_workers() if cluster else [])
        workers = sorted(found, key=lambda p: p.pid)
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
    _continue_after(pid, seconds)
    return f"SIGSTOP {what} {pid} for {seconds:g}s, SIGCONT"


def _continue_after(pid: int, seconds: float) -> None:
    """SIGCONT the stopped ``pid`` after ``seconds`` (whatever interrupts the wait)."""
    try:
        time.sleep(seconds)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def stall_in_write(
    pid: int, seconds: float, what: str, write_lock: Callable[[], WriteLock | None]
) -> str | None:
    """SIGSTOP ``pid`` at a moment it holds the SQLite store's write lock (``write_lock``:
    the store's ``write_lock``; stopped at any other moment it is continued at once and tried
    again, for up to a minute), for ``seconds``, then SIGCONT. Under a job manager the
    leader's lock watch may kill it first."""
    deadline = time.monotonic() + 60.0
    while time.monotonic() < deadline:
        try:
            os.kill(pid, signal.SIGSTOP)
        except ProcessLookupError:
            return None
        holder = _stopped_and(pid, write_lock)
        if holder is not None and holder.pid == pid:
            _continue_after(pid, seconds)
            return f"SIGSTOP {what} {pid} holding the store's write lock for {seconds:g}s, SIGCONT"
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
        time.sleep(0.02)
    return None  # it never held the lock when looked at: nothing injected


def _stopped_and(pid: int, look: Callable[[], WriteLock | None]) -> WriteLock | None:
    """``look()`` once ``pid`` is seen stopped (a stop is taken by the process a moment after
    the signal); None if it does not stop within a second (it exited)."""
    until = time.monotonic() + 1.0
    while time.monotonic() < until:
        st = procs.stat(pid)
        if st is None:
            return None
        if st.state in ("T", "t"):
            return look()
        time.sleep(0.001)
    return None


def kill_driver(driver: int, what: str = "driver") -> str | None:
    """SIGKILL the driver's whole process group (a machine or container dying)."""
    try:
        os.killpg(driver, signal.SIGKILL)
    except ProcessLookupError:
        return None
    return f"SIGKILL {what} group {driver}"


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


class SparkCluster:
    """A Spark standalone master and two one-core workers on 127.0.0.2 and 127.0.0.3, started
    by stoker's own cluster code (as tests/cluster.py does, every JVM by ``spark-class``, each
    leading a process group of its own): the driver runs on it with
    ``-D stoker.master=spark://...`` and the nemesis kills its executors and workers.

    The daemons run without the run's marker (stoker scrubs ``STOKER_*`` from them); the
    executors get it back through ``spark.executorEnv``, so the checker's "no process of the
    run left" covers them and their Python workers. Every JVM ever started is recorded, and
    :meth:`left` says what of their groups is still there after :meth:`stop`."""

    WORKERS = 2

    def __init__(self, folder: Path) -> None:
        from stoker.manager.clusters import ClusterSpec

        self.folder = folder
        self.spec = ClusterSpec("standalone", workers=self.WORKERS, cores=1, memory="1g")
        self.reported: list[ClusterProcess] = []
        self.master_url = ""
        self.web_url = ""
        self.workers: dict[str, ClusterProcess] = {}  # by address: the live one of each host

    def start(self) -> None:
        from stoker.manager.clusters import start_standalone

        started = start_standalone("chaos", self.spec, self.folder, on_process=self.reported.append)
        self.master_url, self.web_url = started.master_url, started.web_url
        self.workers = {p.address: p for p in started.processes if p.role == "worker"}

    def driver_conf(self, marker: str) -> dict[str, str]:
        """``-D`` settings of a driver on this cluster."""
        from stoker.manager.clusters import app_conf

        return {
            "stoker.master": self.master_url,
            "spark.driver.host": "127.0.0.1",  # the workers are on loopback addresses
            **app_conf(self.spec),  # executors as large as a worker; decommissioning on
            "spark.executorEnv.STOKER_CHAOS_RUN": marker,
        }

    def _members(self) -> list[Proc]:
        from stoker.manager.clusters.jvm import group_left

        pids = {pid for w in self.workers.values() for pid in group_left(w)}
        return [p for p in processes() if p.pid in pids]

    def executors(self) -> list[Proc]:
        """The executor JVMs running under the workers now."""
        return sorted(
            (
                p
                for p in self._members()
                if any("CoarseGrainedExecutorBackend" in a for a in p.argv)
            ),
            key=lambda p: p.pid,
        )

    def python_workers(self) -> list[Proc]:
        """The executors' Python task workers (children of their ``pyspark.daemon``)."""
        return spark_python_workers(self._members())

    def _executor(self, rng: random.Random) -> Proc | None:
        deadline = time.monotonic() + 30.0  # after a start or a kill, a new one comes
        while time.monotonic() < deadline:
            found = self.executors()
            if found:
                return rng.choice(found)
            time.sleep(0.2)
        return None

    def kill_executor(self, rng: random.Random) -> str | None:
        """SIGKILL one executor JVM (its Python workers see their stdin close and exit):
        Spark loses its tasks and blocks, and the master starts another executor."""
        e = self._executor(rng)
        if e is None:
            return None
        of = len(self.executors())
        try:
            os.kill(e.pid, signal.SIGKILL)
        except ProcessLookupError:
            return None
        return f"SIGKILL executor JVM {e.pid} (of {of})"

    def stall_executor(self, rng: random.Random, seconds: float) -> str | None:
        e = self._executor(rng)
        return None if e is None else stall(e.pid, seconds, "executor JVM")

    def kill_worker(self, rng: random.Random, seconds: float) -> str | None:
        """SIGKILL one worker's process group (a host lost: the worker, its executor and their
        Python workers), then, ``seconds`` later, a worker started again on that address."""
        from stoker.manager.clusters.jvm import check_gone, signal_group, spark_home, wait_gone
        from stoker.manager.clusters.start import await_workers, fill_worker_ports, spawn_worker

        address = rng.choice(sorted(self.workers))
        target = self.workers[address]
        signal_group(target, signal.SIGKILL)
        wait_gone([target], 30.0)
        check_gone([target], f"worker {target.id}")
        time.sleep(seconds)
        home = spark_home()
        octet = int(address.rsplit(".", 1)[1])
        launch = spawn_worker(
            home,
            self.folder,
            self.master_url,
            octet,
            self.spec.cores,
            self.spec.memory,
            self.reported.append,
        )
        launches = [launch]
        await_workers(
            "chaos",
            home,
            self.folder,
            self.master_url,
            self.web_url,
            launches,
            self.reported.append,
            time.monotonic() + 120.0,
        )
        fill_worker_ports(self.web_url, launches)
        self.workers[address] = launches[0].info
        return (
            f"SIGKILL worker group {target.pid} ({address}); {seconds:g}s later a worker "
            f"started again there (pid {launches[0].info.pid})"
        )

    def stop(self) -> None:
        from stoker.manager.clusters import stop_processes

        stop_processes(self.reported)

    def left(self) -> list[int]:
        """Live pids of the groups of every JVM the cluster ever had."""
        from stoker.manager.clusters.jvm import group_left

        return sorted({pid for p in self.reported for pid in group_left(p)})


def can_mount() -> bool:
    return os.geteuid() == 0 and Path("/proc/filesystems").read_text().find("tmpfs") >= 0
