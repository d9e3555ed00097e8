"""A small Spark standalone cluster for tests: one master, workers on distinct loopback hosts.

Spark never runs a speculative copy of a task on the host of the original, so the workers
bind to different loopback addresses (127.0.0.2, 127.0.0.3, ...): one machine, several
"hosts". Every JVM is started with ``spark-class`` (it execs java: the Popen pid is the JVM)
as the leader of its own process group; :meth:`StandaloneCluster.stop` kills the groups and
waits until nothing of them is left. Use the session fixture ``spark_cluster`` (in
tests/conftest.py style: import it into a test module) so that tests share one cluster.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support import wait_group_gone


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


@dataclass
class StandaloneCluster:
    """``spark://127.0.0.1:<port>`` with ``len(worker_hosts)`` one-core workers."""

    folder: Path
    worker_hosts: tuple[str, ...] = ("127.0.0.2", "127.0.0.3")
    worker_memory: str = "1g"
    port: int = 0
    web_port: int = 0
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _spawn(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        home = spark_home()
        log = open(self.folder / f"{name}.log", "ab")  # noqa: SIM115 - handed to the child
        env = {**os.environ, "SPARK_HOME": str(home), "SPARK_NO_DAEMONIZE": "1"}
        env.pop("STOKER_FAULT", None)
        proc = subprocess.Popen(
            [str(home / "bin" / "spark-class"), *args],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=str(self.folder),
        )
        log.close()
        self.procs.append(proc)
        return proc

    def start(self, timeout: float = 180.0) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.port, self.web_port = free_port(), free_port()
        self._spawn(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--webui-port",
            str(self.web_port),
        )
        for i, host in enumerate(self.worker_hosts):
            work = self.folder / f"worker-{i}"
            work.mkdir(exist_ok=True)
            self._spawn(
                f"worker-{i}",
                "org.apache.spark.deploy.worker.Worker",
                self.url,
                "--host",
                host,
                "--cores",
                "1",
                "--memory",
                self.worker_memory,
                "--webui-port",
                str(free_port()),
                "--work-dir",
                str(work),
            )
        deadline = time.monotonic() + timeout
        while True:
            alive = [w for w in self.workers() if w.get("state") == "ALIVE"]
            if len(alive) == len(self.worker_hosts):
                return
            dead = [p.args for p in self.procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(
                    f"standalone cluster did not come up (exited: {dead}); logs in {self.folder}"
                )
            time.sleep(0.5)

    def workers(self) -> list[dict[str, object]]:
        """The master's view of its workers (its /json/ page), or [] while it is not up."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.web_port}/json/", timeout=2) as r:
                return list(json.load(r).get("workers", []))
        except OSError:
            return []

    def executor_logs(self) -> str:
        """Everything the executors wrote to stderr (their Python workers' included)."""
        return "\n".join(
            p.read_text(errors="replace") for p in sorted(self.folder.glob("worker-*/*/*/stderr"))
        )

    def stop(self) -> None:
        for p in self.procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
        for p in self.procs:
            p.wait()
            wait_group_gone(p.pid)
        self.procs.clear()


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    """One standalone cluster (master + two one-core workers on 127.0.0.2 and 127.0.0.3)
    for the whole session, killed (process groups and all) at its end."""
    cluster = StandaloneCluster(tmp_path_factory.mktemp("spark-cluster"))
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
