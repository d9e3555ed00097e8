"""A warm standby on a standalone cluster (issue 24), for real: a master and two one-core
workers (127.0.0.2, .3) started by stoker's own cluster code, a ``stoker server``, a job on
``spark://`` with ``spark.cores.max`` 1 and a standby.

What the standby holds there: a second registered Spark application with an executor of its
own (the cluster's other core), warmed by its warm-up query. Its driver is SIGKILLed: the
standby takes the next attempt with the executor it holds, the dead driver's application is
removed by the master (its core freed) and a new standby registers on that core. Without
``spark.cores.max`` the submission is refused (422, nothing made). Every id read reaches the
files sink once; once the job is canceled no application is left on the master.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stoker.manager.clusters import master_status
from tests.cluster import StandaloneCluster
from tests.e2e.test_standby import (
    SPARK,
    _committed_by,
    _job,
    _ready_standby,
    cancel_and_check,
    write_app,
)
from tests.support import JVM_OPTS, wait_for
from tests.support.manager import Manager, one_manager

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(1500)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    c = StandaloneCluster(tmp_path_factory.mktemp("standby-cluster"), size=2)
    try:
        c.start()
        yield c
    finally:
        c.stop()


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[Manager]:
    with one_manager(tmp_path, "standby-cluster", lease_ttl=10.0) as m:
        yield m


def _apps(cluster: StandaloneCluster) -> list[dict[str, Any]]:
    assert cluster.started is not None
    return list(master_status(cluster.started.web_url).get("activeapps", []))


def test_a_standby_on_a_standalone_master_holds_its_own_executor_and_takes_over(
    tmp_path: Path, cluster: StandaloneCluster, manager: Manager
) -> None:
    m = manager
    app, out = write_app(tmp_path)
    conf = {
        "spark.master": cluster.url,
        "spark.driver.host": "127.0.0.1",  # the workers are on loopback addresses
        "spark.executor.memory": "512m",
        "stoker.trigger": "200ms",
        "spark.driver.extraJavaOptions": JVM_OPTS,
    }
    r = m.http.post("/v1/jobs", json={"entrypoint": str(app), "conf": conf, "standby": True})
    assert r.status_code == 422 and "spark.cores.max" in r.text, r.text
    assert m.http.get("/v1/jobs").json() == []  # refused: nothing made

    conf["spark.cores.max"] = "1"
    r = m.http.post("/v1/jobs", json={"entrypoint": str(app), "conf": conf, "standby": True})
    assert r.status_code == 201, r.text
    job = _ready_standby(m)
    first, standby_pid = job["attempt"], job["standby"]["pid"]
    assert first["state"] == "RUNNING" and standby_pid != first["pid"]

    # What the standby holds: an application of its own with the cluster's other core.
    def two_apps() -> list[dict[str, Any]] | None:
        apps = _apps(cluster)
        ok = len(apps) == 2 and all(a.get("cores") == 1 for a in apps)
        return apps if ok else None

    wait_for(lambda: f"two applications of a core each: {_apps(cluster)}", two_apps, SPARK)

    os.killpg(first["pid"], signal.SIGKILL)

    def handed() -> dict[str, Any] | None:
        att = _job(m)["attempt"]
        return att if att and att["attempt"] > first["attempt"] and att["pid"] > 0 else None

    second = wait_for("the next attempt", handed, 60)
    assert second["pid"] == standby_pid, f"{second} {_job(m)}\n{m.log_tail()}"
    _committed_by(m, second["attempt"])

    # The dead driver's application is gone; a new standby registers on the core it freed.
    job = _ready_standby(m)
    assert job["standby"]["pid"] not in (standby_pid, first["pid"]), job
    wait_for(lambda: f"the new standby's application: {_apps(cluster)}", two_apps, SPARK)

    cancel_and_check(m, out, ["FAILED", "CANCELED"])
    wait_for(lambda: f"no application left: {_apps(cluster)}", lambda: not _apps(cluster), 60)
