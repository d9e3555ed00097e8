"""Reactive scaling and the executor target, seen from the driver, on a real standalone cluster.

One cluster serves the module (a master and one 512m one-core worker, started by stoker's own
``stoker.manager.clusters``), and one lone-job driver runs on it for the whole module: ``stoker
run`` of a program written into the module's folder, ``-D spark.master=spark://...`` (a master
the user gave: not one stoker manages), a rate-paced generator whose partitions follow the cores
present, a files sink, and the driver's Spark UI on a free port (its REST API tells which
executor ran how many tasks). The tests run in order on that job:

1. reactive: a second worker joins while the job runs; from the second epoch planned after the
   driver reported the new executor warm (its Python workers started by a warm-up job of the
   driver's, outside any epoch), tasks run on both executors; the epochs record 2
   executors and 2 cores; no task or epoch failed;
2. auto: scaling ``auto`` and an executor target set through the store: target 1 -> the driver
   asks Spark for 1 and removes an idle executor (no task fails), the reported resources come
   down to 1; target 2 -> a new executor, the reported resources reach 2;
3. the job is canceled: one attempt, every epoch committed, every id once in the sink.

First, in local mode (no cluster): an epoch prepared on one core, its driver killed, and
replayed by the next attempt on three cores, so split three ways instead of one: every id once
in the files sink and the PostgreSQL sink (whose prepared parts are keyed by epoch, attempt,
partition and Spark task attempt, so a different split cannot meet the old one's parts).
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

from stoker.manager.clusters import (
    StartedCluster,
    add_worker,
    app_conf,
    parse_cluster,
    start_standalone,
    stop_processes,
)
from stoker.scalespec import parse_scaling
from stoker.store import ClusterProcess, Store, open_store
from stoker.types import EpochState, JobState, job_id
from tests import support
from tests.integration.test_crash import assert_finished_exactly_once, ids_env, wait_exit
from tests.support import (
    APPS,
    exactly_once,
    file_sink_ids,
    free_port,
    kill_group,
    pg_prepared,
    start_driver,
    wait_group_gone,
)

pytestmark = pytest.mark.timeout(1200)

JOB = job_id("reactive")
SPEC = "standalone:workers=1,cores=1,memory=512m"
WAIT_S = 240.0  # generous: a 2-core machine shared with other Spark tests

APP = """\
import os

import stoker
from stoker import Pipeline, sinks, sources

p = Pipeline("reactive")
p.source(sources.generator(rows_per_second=float(os.environ["R_RATE"])))
p.sink(sinks.files(os.environ["R_OUT"]))

if __name__ == "__main__":
    stoker.run(p, trigger="1s")
"""

T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = WAIT_S) -> T:
    """Poll ``probe`` until it returns something truthy; fail naming ``what``."""
    t0 = time.monotonic()
    got: T = support.wait_for(what, probe, timeout, every=0.2)
    print(f"{time.strftime('%H:%M:%S')} {what}: {time.monotonic() - t0:.1f} s")
    return got


# 0. a replay split differently -------------------------------------------------------------------
def test_a_replay_on_more_cores_is_split_differently_and_exactly_once(
    tmp_path: Path, pg_dsn: str
) -> None:
    state, out = tmp_path / "state", tmp_path / "out"
    log1, log2 = tmp_path / "driver-1.log", tmp_path / "driver-2.log"
    total, per_epoch, crash = 3_000, 600, 2
    env = ids_env(out, pg_dsn, total, per_epoch)
    ids_job = env["IDS_JOB"]

    def run(master: str, fault: str, log: Path) -> int:
        p = start_driver(
            APPS / "ids_app.py",
            *("-D", f"stoker.state_dir={state}", "-D", f"stoker.master={master}"),
            env={**env, "STOKER_FAULT": fault},
            log=log,
        )
        rc = wait_exit(p, log)
        wait_group_gone(p.pid)
        return rc

    # Attempt 1, one core: epoch 2 is prepared in one part per sink, then the driver dies.
    assert run("local[1]", f"after_prepare:{crash}", log1) == -9, tail(log1)
    assert len(pg_prepared(pg_dsn)) == 1
    st = open_store(state / "store.db")
    try:
        assert (st.get_job(job_id(ids_job)).resources or {}).get("cores") == 1
    finally:
        st.close()
    # Attempt 2, three cores: recovery aborts those parts; the replay is split three ways.
    assert run("local[3]", "", log2) == 0, tail(log2)
    recs = assert_finished_exactly_once(state, out, pg_dsn, total, log2)
    assert recs[crash].decided_by == 2
    assert (recs[crash - 1].cores, recs[crash].cores) == (1, 3)
    parts = {n: len(list((out / f"epoch={n}").glob("*.parquet"))) for n in (crash - 1, crash)}
    assert parts == {crash - 1: 1, crash: 3}, parts


@dataclass
class Module:
    folder: Path
    cluster: StartedCluster
    processes: list[ClusterProcess]
    reported: list[ClusterProcess]
    driver: subprocess.Popen[bytes]
    log: Path
    out: Path
    state: Path
    ui_port: int
    store: Store
    notes: dict[str, Any] = field(default_factory=dict)

    def job(self) -> Any:
        return self.store.get_job(JOB)

    def resources(self) -> dict[str, Any]:
        try:
            return dict(self.job().resources or {})
        except Exception:  # the driver has not recorded the job yet
            return {}

    def committed(self) -> list[Any]:
        epochs = self.store.list_epochs(JOB, limit=1000)
        return [e for e in epochs if e.state == EpochState.COMMITTED]

    def last_pinned(self) -> int:
        found = self.store.list_epochs(JOB, limit=1)
        return int(found[0].epoch) if found else -1

    def executors(self, every: bool = False) -> list[dict[str, Any]]:
        """The driver's Spark REST API: executors (``every``: dead ones too), not the driver."""
        base = f"http://127.0.0.1:{self.ui_port}/api/v1/applications"
        try:
            with urllib.request.urlopen(base, timeout=30) as r:
                app = json.load(r)[0]["id"]
            kind = "allexecutors" if every else "executors"
            with urllib.request.urlopen(f"{base}/{app}/{kind}", timeout=30) as r:
                return [e for e in json.load(r) if e["id"] != "driver"]
        except (OSError, ValueError, IndexError, KeyError) as e:
            self.notes["ui_error"] = f"{type(e).__name__}: {e}"
            return []

    def alive(self) -> None:
        if self.driver.poll() is not None:
            raise AssertionError(f"the driver exited {self.driver.returncode}:\n{tail(self.log)}")


def tail(path: Path, lines: int = 60) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


@pytest.fixture(scope="module")
def mod(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Module]:
    folder = tmp_path_factory.mktemp("reactive")
    reported: list[ClusterProcess] = []
    spec = parse_cluster(SPEC)
    driver: subprocess.Popen[bytes] | None = None
    store: Store | None = None
    try:
        cluster = start_standalone("reactive", spec, folder / "cluster", on_process=reported.append)
        app, out, state, log = folder / "app.py", folder / "out", folder / "state", folder / "d.log"
        app.write_text(APP)
        ui_port = free_port()
        conf = {
            **app_conf(spec),
            "spark.master": cluster.master_url,
            "spark.ui.enabled": "true",
            "spark.ui.port": str(ui_port),
            "spark.port.maxRetries": "0",
            "stoker.state_dir": str(state),
        }
        args = [x for k, v in conf.items() for x in ("-D", f"{k}={v}")]
        driver = start_driver(
            app, *args, "--debug", env={"R_RATE": "40", "R_OUT": str(out)}, log=log
        )
        store_path = state / "store.db"
        wait_for("the driver's store", lambda: store_path.exists() or driver.poll() is not None)
        store = open_store(store_path)
        m = Module(
            folder,
            cluster,
            list(cluster.processes),
            reported,
            driver,
            log,
            out,
            state,
            ui_port,
            store,
        )
        yield m
    finally:
        if driver is not None and driver.poll() is None:
            kill_group(driver)
        if store is not None:
            store.close()
        stop_processes(reported)


@pytest.mark.cluster
def test_a_worker_that_joins_runs_tasks_from_the_second_epoch_after_it_registers(
    mod: Module,
) -> None:
    def one_executor_and_epochs() -> bool:
        mod.alive()
        return mod.resources().get("executors") == 1 and len(mod.committed()) >= 2

    wait_for("one executor and two committed epochs", one_executor_and_epochs)
    first = mod.resources()
    assert first["cores"] == 1 and len(first["executor_ids"]) == 1
    mod.store.set_scaling(JOB, parse_scaling("reactive").to_dict())

    worker = add_worker(
        mod.cluster.master_url,
        mod.cluster.web_url,
        mod.processes,
        mod.folder / "cluster",
        1,
        "512m",
        on_process=mod.reported.append,
    )
    mod.processes.append(worker)

    def reported_two() -> dict[str, Any] | None:
        mod.alive()
        res = mod.resources()
        return res if res.get("executors") == 2 and not res.get("warming") else None

    # The new executor is reported at once, and its cores count once its Python workers
    # are warm (a small job of the driver's own ran there, outside any epoch).
    res = wait_for("the driver to report the new executor, warm", reported_two)
    # Every epoch planned from here on sees the two cores.
    planned_before = mod.last_pinned()
    assert res["cores"] == 2
    assert sorted(res["hosts"]) == sorted({"127.0.0.2", worker.address})
    new_id = next(i for i in res["executor_ids"] if i not in first["executor_ids"])

    second = planned_before + 2
    wait_for(
        f"epoch {second} (the second planned after the report) committed",
        lambda: mod.alive() or any(int(e.epoch) >= second for e in mod.committed()),
    )
    tasks = wait_for(
        "the driver's UI to list the executors",
        lambda: {e["id"]: e for e in mod.executors()},
        timeout=120,
    )
    assert set(tasks) == set(res["executor_ids"]), (tasks, mod.notes.get("ui_error"))
    assert tasks[new_id]["totalTasks"] > 0, f"the new executor ran no task: {tasks}"
    assert all(e["totalTasks"] > 0 for e in tasks.values()), tasks
    assert sum(e["failedTasks"] for e in mod.executors(every=True)) == 0

    # An epoch's metrics come from Spark's progress event, written just after its commit:
    # the newest epoch may not have them yet (every older one must).
    after = [e for e in mod.committed() if int(e.epoch) > planned_before]
    newest = max((int(e.epoch) for e in after), default=-1)
    after = [e for e in after if e.executors is not None or int(e.epoch) != newest]
    assert after and all((e.executors, e.cores) == (2, 2) for e in after), [
        (e.epoch, e.executors, e.cores) for e in after
    ]
    assert all(e.duration_ms is not None and e.duration_ms > 0 for e in after)
    # The rows' part of it (the sinks' writes), which more executors share: within it.
    assert all(e.work_ms is not None and 0 < e.work_ms <= e.duration_ms for e in after), [
        (e.epoch, e.work_ms, e.duration_ms) for e in after
    ]
    # A rate-paced generator knows what it has produced beyond each epoch's end.
    assert all(e.backlog is not None and e.backlog >= 0 for e in after)
    assert len(mod.store.list_attempts(JOB)) == 1
    mod.notes["executors"] = sorted(res["executor_ids"])


@pytest.mark.cluster
def test_an_executor_target_is_requested_and_an_idle_surplus_removed(mod: Module) -> None:
    wait_for("two executors", lambda: mod.alive() or mod.resources().get("executors") == 2)
    mod.store.set_scaling(JOB, parse_scaling("auto:min=1,max=2").to_dict())
    mod.store.set_executor_target(JOB, 1)

    def at(n: int) -> Callable[[], dict[str, Any] | None]:
        def probe() -> dict[str, Any] | None:
            mod.alive()
            res = mod.resources()
            reached = (res.get("executors"), res.get("requested")) == (n, n)
            # A new executor counts its cores once warm (its Python workers started).
            return res if reached and not res.get("warming") else None

        return probe

    down = wait_for("the driver down to one executor", at(1))
    assert down["cores"] == 1
    removed = sorted(set(mod.notes.get("executors", [])) - set(down["executor_ids"]))
    marker = max(int(e.epoch) for e in mod.committed())
    wait_for(
        "an epoch on one executor",
        lambda: mod.alive() or any(int(e.epoch) > marker + 1 for e in mod.committed()),
    )
    gone = {e["id"]: e for e in mod.executors(every=True) if not e["isActive"]}
    assert not removed or set(removed) <= set(gone), (removed, gone)
    assert sum(e["failedTasks"] for e in mod.executors(every=True)) == 0

    mod.store.set_executor_target(JOB, 2)
    up = wait_for("the driver back at two executors, warm", at(2))
    assert up["cores"] == 2
    assert len(mod.store.list_attempts(JOB)) == 1


@pytest.mark.cluster
def test_the_job_ends_with_every_id_once(mod: Module) -> None:
    mod.alive()
    mod.store.request_cancel(JOB)
    code = mod.driver.wait(timeout=WAIT_S)
    assert code == 0, tail(mod.log)
    job = mod.job()
    assert job.state == JobState.CANCELED
    assert len(mod.store.list_attempts(JOB)) == 1
    epochs = mod.store.list_epochs(JOB, limit=1000)
    assert all(e.state == EpochState.COMMITTED for e in epochs), [
        (e.epoch, e.state) for e in epochs if e.state != EpochState.COMMITTED
    ]
    rows = sum(int(e.rows_in or 0) for e in epochs)
    assert rows > 0
    exactly_once(file_sink_ids(mod.out), rows)
