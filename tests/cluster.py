"""A small Spark standalone cluster for tests, started and stopped by stoker's own cluster code
(:mod:`stoker.manager.clusters`): one master, workers on distinct loopback hosts.

Spark never runs a speculative copy of a task on the host of the original, so the workers
bind to different loopback addresses (127.0.0.2, 127.0.0.3, ...): one machine, several
"hosts". Every JVM leads its own process group; :meth:`StandaloneCluster.stop` stops every
process ever recorded and returns once nothing of their groups is left. Use the session
fixture ``spark_cluster`` (in tests/conftest.py style: import it into a test module) so that
tests share one cluster.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from stoker.manager.clusters import (
    ClusterSpec,
    StartedCluster,
    master_status,
    start_standalone,
    stop_processes,
)
from stoker.store import ClusterProcess


@dataclass
class StandaloneCluster:
    """``spark://127.0.0.1:<port>`` with ``size`` one-core workers of ``worker_memory``."""

    folder: Path
    size: int = 2
    worker_memory: str = "1g"
    started: StartedCluster | None = None
    # Every process a start reported (a JVM started again replaces nothing here: all are
    # stopped at the end).
    reported: list[ClusterProcess] = field(default_factory=list)

    @property
    def url(self) -> str:
        assert self.started is not None, "the cluster is not started"
        return self.started.master_url

    def start(self, timeout: float = 180.0) -> None:
        spec = ClusterSpec("standalone", workers=self.size, cores=1, memory=self.worker_memory)
        self.started = start_standalone(
            "tests", spec, self.folder, timeout, on_process=self.reported.append
        )

    def workers(self) -> list[dict[str, Any]]:
        """The master's view of its workers (its /json/ page)."""
        assert self.started is not None, "the cluster is not started"
        return list(master_status(self.started.web_url).get("workers", []))

    def apps(self) -> list[dict[str, Any]]:
        """The master's running applications (its /json/ page's ``activeapps``: id, name,
        cores, state, ...)."""
        assert self.started is not None, "the cluster is not started"
        return list(master_status(self.started.web_url).get("activeapps", []))

    def executor_logs(self) -> str:
        """Everything the executors wrote to stderr (their Python workers' included)."""
        return "\n".join(
            p.read_text(errors="replace") for p in sorted(self.folder.glob("work-*/*/*/stderr"))
        )

    def speculating_driver_args(self, executor_fault: str) -> list[str]:
        """``-D`` arguments of a driver on this cluster with two one-core executors and Spark's
        speculation quick to copy a slow task (a task 1.5x the median of half its stage's done
        tasks, after 1 s); ``executor_fault`` is the executors' ``STOKER_FAULT`` (a
        ``task_slow`` plan, say)."""
        conf = {
            "stoker.master": self.url,
            "spark.driver.host": "127.0.0.1",
            "spark.cores.max": "2",
            "spark.executor.cores": "1",
            "spark.executor.memory": "512m",
            "spark.speculation": "true",
            "spark.speculation.interval": "100ms",
            "spark.speculation.multiplier": "1.5",
            "spark.speculation.quantile": "0.5",
            "spark.speculation.minTaskRuntime": "1s",
            "spark.executorEnv.STOKER_FAULT": executor_fault,
        }
        return [a for k, v in conf.items() for a in ("-D", f"{k}={v}")]

    def stop(self) -> None:
        stop_processes(self.reported)
        self.reported.clear()


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    """One standalone cluster (master + two one-core workers on 127.0.0.2 and 127.0.0.3)
    for the whole session, stopped (process groups and all) at its end."""
    cluster = StandaloneCluster(tmp_path_factory.mktemp("spark-cluster"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
