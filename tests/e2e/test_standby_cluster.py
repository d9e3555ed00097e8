"""Warm standbys and zero-downtime upgrades on a standalone cluster (issue 24), for real: a
master and three one-core workers (127.0.0.2-4) started by stoker's own cluster code, a
``stoker server``, jobs on ``spark://`` with ``spark.cores.max`` 1.

- A job's standby holds a second registered Spark application with an executor of its own,
  warmed by its warm-up query. Its driver is SIGKILLed: the standby takes the next attempt
  with the executor it holds, the master removes the dead driver's application and a new
  standby registers with a core of its own. Without ``spark.cores.max`` the submission is
  refused (422, nothing made).
- An upgrade's new code warms the same way (the old code, kept warm for a rollback, holds a
  third application), is swapped in at an epoch boundary and CONFIRMED; the epochs after the
  swap are the new code's.

Every id read reaches the files sink once; once a job is canceled no application is left on
the master."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster import StandaloneCluster
from tests.e2e.test_standby import (
    SPARK,
    _committed_by,
    _job,
    _ready_standby,
    cancel_and_check,
    write_app,
)
from tests.e2e.test_upgrade import (
    V1,
    V2,
    _app,
    _cancel_and_count,
    _codes,
    _committed,
    _upgrade_ends,
)
from tests.e2e.test_upgrade import _job as _upgrade_job
from tests.support import JVM_OPTS, wait_for
from tests.support.manager import Manager, one_manager

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(1500)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    c = StandaloneCluster(tmp_path_factory.mktemp("standby-cluster"), size=3)
    try:
        c.start()
        yield c
    finally:
        c.stop()


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[Manager]:
    with one_manager(tmp_path, "standby-cluster", lease_ttl=10.0) as m:
        yield m


def _conf(cluster: StandaloneCluster) -> dict[str, str]:
    return {
        "spark.master": cluster.url,
        "spark.driver.host": "127.0.0.1",  # the workers are on loopback addresses
        "spark.executor.memory": "512m",
        "stoker.trigger": "200ms",
        "spark.driver.extraJavaOptions": JVM_OPTS,
    }


def test_a_standby_on_a_standalone_master_holds_its_own_executor_and_takes_over(
    tmp_path: Path, cluster: StandaloneCluster, manager: Manager
) -> None:
    m = manager
    app, out = write_app(tmp_path)
    conf = _conf(cluster)  # no core cap yet
    r = m.http.post("/v1/jobs", json={"entrypoint": str(app), "conf": conf, "standby": True})
    assert r.status_code == 422 and "spark.cores.max" in r.text, r.text
    assert m.http.get("/v1/jobs").json() == []  # refused: nothing made

    conf["spark.cores.max"] = "1"
    r = m.http.post("/v1/jobs", json={"entrypoint": str(app), "conf": conf, "standby": True})
    assert r.status_code == 201, r.text
    job = _ready_standby(m)
    first, standby_pid = job["attempt"], job["standby"]["pid"]
    assert first["state"] == "RUNNING" and standby_pid != first["pid"]

    # What the standby holds: an application of its own with a core of the cluster.
    def two_apps() -> list[dict[str, Any]] | None:
        apps = cluster.apps()
        ok = len(apps) == 2 and all(a.get("cores") == 1 for a in apps)
        return apps if ok else None

    wait_for(lambda: f"two applications of a core each: {cluster.apps()}", two_apps, SPARK)

    os.killpg(first["pid"], signal.SIGKILL)

    def handed() -> dict[str, Any] | None:
        att = _job(m)["attempt"]
        return att if att and att["attempt"] > first["attempt"] and att["pid"] > 0 else None

    second = wait_for("the next attempt", handed, 60)
    assert second["pid"] == standby_pid, f"{second} {_job(m)}\n{m.log_tail()}"
    _committed_by(m, second["attempt"])

    # The dead driver's application is gone; a new standby registers with a core of its own.
    job = _ready_standby(m)
    assert job["standby"]["pid"] not in (standby_pid, first["pid"]), job
    wait_for(lambda: f"the new standby's application: {cluster.apps()}", two_apps, SPARK)

    cancel_and_check(m, out, ["FAILED", "CANCELED"])
    wait_for(lambda: f"no application left: {cluster.apps()}", lambda: not cluster.apps(), 60)


def test_an_upgrade_on_a_standalone_master_swaps_with_executors_of_its_own(
    tmp_path: Path, cluster: StandaloneCluster, manager: Manager
) -> None:
    m = manager
    out = tmp_path / "out"
    v1 = _app(tmp_path, "v1", V1, out)
    v2 = _app(tmp_path, "v2", V2, out)
    conf = {**_conf(cluster), "spark.cores.max": "1"}
    r = m.http.post("/v1/jobs", json={"entrypoint": str(v1), "conf": conf})
    assert r.status_code == 201, r.text
    _committed(m)
    first = _upgrade_job(m)["attempt"]
    r = m.http.post("/v1/jobs/up/upgrade", json={"entrypoint": str(v2), "watch_epochs": 3})
    assert r.status_code == 202, r.text
    up = r.json()

    # While it warms: the running job's application, the new code's and the old code's
    # standby's, a core each.
    def three_apps() -> list[dict[str, Any]] | None:
        apps = cluster.apps()
        ok = len(apps) == 3 and all(a.get("cores") == 1 for a in apps)
        return apps if ok else None

    wait_for(lambda: f"three applications of a core each: {cluster.apps()}", three_apps, 600)

    done = _upgrade_ends(m, up)
    assert done["state"] == "CONFIRMED", f"{done}\n{m.log_tail()}"
    assert done["stop_attempt"] == first["attempt"] and done["swap_attempt"] > first["attempt"]
    _cancel_and_count(m, out)
    codes = _codes(out)
    swap_epoch = min(e for e, c in codes.items() if 2 in c)
    assert all(c == {1} for e, c in codes.items() if e < swap_epoch), codes
    assert all(c == {2} for e, c in codes.items() if e >= swap_epoch), codes
    wait_for(lambda: f"no application left: {cluster.apps()}", lambda: not cluster.apps(), 60)
