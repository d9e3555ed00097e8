"""Workers taken away under a running job, on a real standalone cluster.

One cluster serves the module: a master and three one-core workers on 127.0.0.2-4, started
by stoker's own ``stoker.manager.clusters`` (decommissioning on in the master and workers,
as for the clusters stoker manages). Before each test the cluster is brought back to three
live workers (a worker taken away is replaced by a fresh one on the next loopback address).
Each test runs one real driver (``stoker run`` of a program written into the test's folder,
``-D stoker.master=spark://...``) whose executors run on those workers, with the driver's
Spark UI on a free port (which executors it has, which were removed and why, their failed
tasks). A worker is taken away while its executor runs a task of an epoch for certain: the
tasks of the program wait on a hold the test arms and releases (tests/worker_loss_support.py).

1. A worker decommissioned while its executor runs a task of an epoch: no epoch fails, the
   job keeps its one attempt, every id once in the files sink and the PostgreSQL sink.
2. Workers SIGKILLed (the process group: worker JVM, executor, Python workers) while their
   executor runs a task: first a PostgreSQL writer holding its part PREPARED, then a task
   computing an epoch's frame. Each task is lost and run again elsewhere, the job goes on in
   the same attempt and finishes, every id once in both sinks, nothing left prepared.
3. A stateful job (a running count per key in Spark's state store) while workers are removed
   (gracefully, then by SIGKILL) and added: the state keeps its number of partitions (the
   job's maximum parallelism) and every key's count is right at the end.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
from collections import defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from stoker.control import events
from stoker.errors import JobNotFound
from stoker.manager.clusters import (
    StartedCluster,
    add_worker,
    app_conf,
    master_status,
    parse_cluster,
    remove_worker,
    start_standalone,
    stop_processes,
)
from stoker.store import ClusterProcess
from stoker.types import AttemptState, Epoch, EpochState, JobState, TxnState, job_id
from tests.integration.test_crash import (
    assert_finished_exactly_once,
    epochs,
    opened,
    staged_leftovers,
    tail,
    wait_exit,
)
from tests.support import (
    free_port,
    kill_group,
    pg_prepared,
    start_driver,
    wait_for,
    wait_group_gone,
)
from tests.worker_loss_support import LOSS_APP, Executor, SparkUI

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]

WORKERS = 3
SPEC = parse_cluster(f"standalone:workers={WORKERS},cores=1,memory=512m")
# Generous: Spark starts in 10-20 s on an idle 2-core machine, several times that when other
# work shares the CPU. Every wait polls; none of these is a timed assertion.
STARTUP = 240.0
STEP = 180.0
RUN = 420.0
DECOMMISSION_REFUSAL = "BlockSavedOnDecommissionedBlockManagerException"


# The module's cluster ------------------------------------------------------------------------
@dataclass
class LossCluster:
    """The module's cluster: its processes now, and every process ever started (swept at the
    end whatever happened)."""

    folder: Path
    started: StartedCluster
    processes: list[ClusterProcess]
    reported: list[ClusterProcess] = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.started.master_url

    def alive_hosts(self) -> set[str]:
        workers = master_status(self.started.web_url)["workers"]
        return {str(w["host"]) for w in workers if w["state"] == "ALIVE"}

    def add(self) -> ClusterProcess:
        new = add_worker(
            self.url,
            self.started.web_url,
            self.processes,
            self.folder,
            SPEC.cores,
            SPEC.memory,
            on_process=self.reported.append,
        )
        self.processes.append(new)
        return new

    def remove(self, host: str, graceful: bool) -> None:
        self.processes[:] = remove_worker(self.started.web_url, self.processes, host, graceful)


@pytest.fixture(scope="module")
def module_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LossCluster]:
    folder = tmp_path_factory.mktemp("worker-loss") / "cluster"
    reported: list[ClusterProcess] = []
    try:
        started = start_standalone("loss", SPEC, folder, on_process=reported.append)
        yield LossCluster(folder, started, list(started.processes), reported)
    finally:
        stop_processes(reported)


@pytest.fixture
def cluster(module_cluster: LossCluster) -> LossCluster:
    """The module's cluster with three live workers (fresh ones replace those a test took)."""
    while len(module_cluster.alive_hosts()) < WORKERS:
        module_cluster.add()
    return module_cluster


# A driver on the cluster ---------------------------------------------------------------------
@dataclass
class Driver:
    """One ``stoker run`` of :data:`LOSS_APP` on the cluster, and what the test reads of it."""

    proc: subprocess.Popen[bytes]
    state: Path
    out: Path
    log: Path
    hold: Path
    ui: SparkUI
    job: str

    def committed(self) -> list[int]:
        return sorted(
            n for n, e in epochs(self.state, self.job).items() if e.state == EpochState.COMMITTED
        )

    def wait(self, cond: Any, what: str, timeout: float = STEP) -> Any:
        """Poll ``cond`` while the driver runs; fail with its log if it ends or time runs out."""

        def check() -> Any:
            got = cond()
            if not got and self.proc.poll() is not None:
                raise AssertionError(
                    f"driver ended (rc {self.proc.returncode}) while waiting for {what}\n"
                    f"{tail(self.log)}"
                )
            return got

        try:
            return wait_for(what, check, timeout, every=0.1)
        except AssertionError as e:
            raise AssertionError(f"{e}\n{tail(self.log)}") from None

    def wait_epochs_after(self, epoch: int, n: int, last: int) -> None:
        """Wait until epoch ``epoch + n`` is committed (``last``, the job's final one, at most)."""
        want = min(epoch + n, last)
        self.wait(lambda: want in self.committed(), f"epoch {want} committed")

    def wait_epochs(self, n: int) -> None:
        """Wait until ``n`` more epochs than now are committed."""
        before = len(self.committed())
        self.wait(lambda: len(self.committed()) >= before + n, f"{n} more committed epochs")

    def arm(self) -> None:
        """Tasks starting from now wait until :meth:`release`."""
        (self.hold / "armed").touch()

    def release(self) -> None:
        (self.hold / "released").touch()

    def held_executor(self) -> Executor:
        """Arm the hold; return the executor of a task that is held (running, in an epoch)."""
        self.arm()

        def holding() -> Executor | None:
            names = [f.name for f in self.hold.glob("holding.*")]
            hosts = {n.removeprefix("holding.").rpartition(".")[0] for n in names}
            live = [e for e in self.ui.executors() if e.active and e.host in hosts]
            return live[0] if live else None

        return self.wait(holding, "a task held on an executor")

    def send(self, body: dict[str, Any]) -> None:
        """A control event, validated against the job's spec as the manager stores one."""
        with opened(self.state) as st:
            jid = job_id(self.job)
            kind, norm = events.validate(body, st.get_job(jid).spec)
            st.add_control(jid, kind, norm, sender="test")


@contextlib.contextmanager
def driver(
    tmp_path: Path, cluster: LossCluster, env: dict[str, str], *conf: str
) -> Iterator[Driver]:
    """Start the test program on the cluster; on the way out release any hold and kill
    whatever is left of the driver."""
    app = tmp_path / "loss_app.py"
    app.write_text(LOSS_APP)
    state, out, log = tmp_path / "state", tmp_path / "out", tmp_path / "driver.log"
    hold = tmp_path / "hold"
    hold.mkdir()
    ui_port = free_port()
    settings = {
        "stoker.state_dir": str(state),
        "stoker.master": cluster.url,
        "spark.driver.host": "127.0.0.1",  # the workers are on loopback addresses
        **app_conf(SPEC),  # executors as large as a worker; decommissioning on
        "spark.ui.enabled": "true",
        "spark.ui.port": str(ui_port),
        "spark.port.maxRetries": "0",  # the UI on exactly this port, or no start
    }
    args = [a for k, v in settings.items() for a in ("-D", f"{k}={v}")]
    full_env = {"LOSS_OUT": str(out), "LOSS_HOLD_DIR": str(hold), "STOKER_FAULT": "", **env}
    proc = start_driver(app, *args, *conf, env=full_env, log=log)
    d = Driver(proc, state, out, log, hold, SparkUI(ui_port), env["LOSS_JOB"])
    try:
        yield d
    finally:
        d.release()
        if proc.poll() is None:
            kill_group(proc)
        wait_group_gone(proc.pid)


def all_executors_up(d: Driver, hosts: set[str]) -> bool:
    return hosts <= d.ui.active_hosts()


def reported_hosts(d: Driver) -> list[str] | None:
    """The executors' hosts the driver last reported to the store (``JobRecord.resources``,
    written by its ResourceWatch), or None before its first report."""
    if not (d.state / "store.db").exists():
        return None
    with opened(d.state) as st:
        try:
            res = st.get_job(job_id(d.job)).resources
        except JobNotFound:  # the driver has not recorded the job yet
            return None
    if not res or res.get("executors") != len(res.get("hosts") or []):
        return None  # one executor per host here: anything else is not a settled reading
    return list(res["hosts"])


def removed(d: Driver, exec_id: str) -> Executor | None:
    """Executor ``exec_id`` once the driver has removed it (None while it is live)."""
    found = [e for e in d.ui.executors() if e.id == exec_id and not e.active]
    return found[0] if found else None


def one_finished_attempt(state: Path, job: str) -> None:
    """The job ran in one attempt, which pinned and decided every epoch."""
    with opened(state) as st:
        attempts = [(int(a.attempt), a.state) for a in st.list_attempts(job_id(job))]
        recs = st.list_epochs(job_id(job), limit=10_000)
    assert attempts == [(1, AttemptState.FINISHED)], attempts
    assert {e.pinned_by for e in recs} == {1} and {e.decided_by for e in recs} == {1}


def ids_env(dsn: str, total: int, per_epoch: int) -> dict[str, str]:
    return {
        "LOSS_MODE": "ids",
        "LOSS_JOB": "ids",  # the job id tests/integration/test_crash.py's checks read
        "LOSS_PG_DSN": dsn,
        "LOSS_TOTAL": str(total),
        "LOSS_PER_EPOCH": str(per_epoch),
        "LOSS_PARTITIONS": str(WORKERS),
    }


# 1. graceful removal -------------------------------------------------------------------------
def test_graceful_removal_mid_epoch_fails_no_epoch(
    tmp_path: Path, cluster: LossCluster, pg_dsn: str
) -> None:
    total, per_epoch = 600, 100
    hosts = cluster.alive_hosts()
    with driver(tmp_path, cluster, ids_env(pg_dsn, total, per_epoch)) as d:
        d.wait(lambda: all_executors_up(d, hosts), f"executors on {sorted(hosts)}", STARTUP)
        d.wait(lambda: d.committed(), "a committed epoch (executors warm)", STARTUP)
        d.wait(lambda: reported_hosts(d) == sorted(hosts), "the driver to report them")
        victim = d.held_executor()
        in_flight = max(epochs(d.state, "ids"))
        # The master decommissions the worker; remove_worker waits until its executor has
        # left, which it does only once its running task is done: release the hold as soon
        # as the executor knows it is decommissioned.
        pool = ThreadPoolExecutor(1)
        try:
            removal = pool.submit(cluster.remove, victim.host, True)
            pattern = f"work-*/{d.ui.app_id()}/{victim.id}/stderr"
            d.wait(
                lambda: (
                    removal.done()
                    or any(
                        "Decommission executor" in f.read_text(errors="replace")
                        for f in cluster.folder.glob(pattern)
                    )
                ),
                f"executor {victim.id} decommissioned",
            )
        finally:
            d.release()
            pool.shutdown(wait=True)
        removal.result()
        print(f"\ndecommissioned {victim.host} (executor {victim.id}) in epoch {in_flight}")
        gone = d.wait(lambda: removed(d, victim.id), f"executor {victim.id} removed")
        failed = d.ui.failed_tasks()  # the executor has left: it runs no task any more
        print(f"executor {victim.id}: {gone.remove_reason!r}")
        for t in failed:
            print(f"  failed: task {t['taskId']} on {t['executorId']}: {t.get('errorMessage')}")
        # The driver's report of its executors follows (what the scaler and the sources read).
        left = sorted(hosts - {victim.host})
        d.wait(lambda: reported_hosts(d) == left, f"the driver to report executors on {left}")
        d.wait_epochs_after(in_flight, 2, total // per_epoch - 1)
        rc = wait_exit(d.proc, d.log, RUN)
        assert rc == 0, f"driver failed, rc {rc}\n{tail(d.log)}"

    recs = assert_finished_exactly_once(d.state, d.out, pg_dsn, total, d.log)
    assert len(recs) == total // per_epoch
    one_finished_attempt(d.state, "ids")
    # Decommissioned, not lost: no task was lost with an executor. A task that fills the
    # epoch's cached frame (persisted while two sinks write it) on the decommissioned
    # executor may fail once and run again elsewhere: Spark refuses to store a new block on a
    # decommissioning executor (BlockSavedOnDecommissionedBlockManagerException).
    assert "decommission" in (gone.remove_reason or "").lower(), gone
    assert all(DECOMMISSION_REFUSAL in str(t.get("errorMessage")) for t in failed), failed


# 2. SIGKILL of a worker ----------------------------------------------------------------------
SLOW_WRITER = re.compile(r"injected slow task after PREPARE of (stoker:ids:\S+): \d")


def slow_writer(d: Driver, cluster: LossCluster) -> tuple[str, str] | None:
    """(executor id, gid) of the PostgreSQL writer task that the ``task_slow`` fault holds
    right after its PREPARE TRANSACTION (it says so in its executor's stderr)."""
    for f in cluster.folder.glob(f"work-*/{d.ui.app_id()}/*/stderr"):
        m = SLOW_WRITER.search(f.read_text(errors="replace"))
        if m:
            return f.parent.name, m.group(1)
    return None


def kept_gids(state: Path, epoch: int) -> list[str]:
    """The PostgreSQL parts recorded for ``epoch`` by the attempt that decided it."""
    with opened(state) as st:
        rec = st.get_epoch(job_id("ids"), Epoch(epoch))
        assert rec is not None and rec.decided_by is not None, rec
        txn = st.get_txn(job_id("ids"), Epoch(epoch), "postgres:ids", rec.decided_by)
    assert txn is not None
    return list(txn.detail["gids"])


def test_sigkill_of_a_worker_mid_epoch_retries_tasks_exactly_once(
    tmp_path: Path, cluster: LossCluster, pg_dsn: str
) -> None:
    """Two kills: of the executor of a PostgreSQL writer task that holds its part PREPARED
    (epoch 2, by stoker's ``task_slow`` fault), and of an executor running a task that
    computes an epoch's frame for the files sink (the hold)."""
    total, per_epoch, slow_epoch = 800, 100, 2
    hosts = cluster.alive_hosts()
    slow = ("-D", f"spark.executorEnv.STOKER_FAULT=task_slow:{slow_epoch}:0:120")
    with driver(tmp_path, cluster, ids_env(pg_dsn, total, per_epoch), *slow) as d:
        d.wait(lambda: all_executors_up(d, hosts), f"executors on {sorted(hosts)}", STARTUP)
        d.wait(lambda: reported_hosts(d) == sorted(hosts), "the driver to report them")

        # Kill 1: the writer has prepared its part and sleeps; its executor dies with it.
        writer, gid = d.wait(
            lambda: slow_writer(d, cluster), f"a writer of epoch {slow_epoch} held after PREPARE"
        )
        victim = d.wait(
            lambda: next((e for e in d.ui.executors() if e.id == writer), None),
            f"executor {writer} in the UI",
        )
        assert gid in pg_prepared(pg_dsn), (gid, pg_prepared(pg_dsn))
        cluster.remove(victim.host, graceful=False)  # SIGKILL to the worker's process group
        print(f"\nSIGKILLed {victim.host} (executor {victim.id}) holding {gid} prepared")
        d.wait(lambda: slow_epoch in d.committed(), f"epoch {slow_epoch} committed", RUN)
        # The retried writer's part was kept; the dead one's was rolled back by the commit.
        kept = kept_gids(d.state, slow_epoch)
        assert gid not in kept, (gid, kept)
        assert gid not in pg_prepared(pg_dsn), (gid, pg_prepared(pg_dsn))

        # Kill 2: a task computing the next epoch's frame (first stage, files sink).
        victim2 = d.held_executor()
        in_flight = max(epochs(d.state, "ids"))
        cluster.remove(victim2.host, graceful=False)
        d.release()
        print(f"SIGKILLed {victim2.host} (executor {victim2.id}) in epoch {in_flight}")
        # Each kill took a running task with it (Spark ran it again elsewhere).
        for v in (victim, victim2):
            failed = d.wait(
                lambda v=v: [t for t in d.ui.failed_tasks() if t["executorId"] == v.id],
                f"Spark's record of a task lost with executor {v.id}",
            )
            for t in failed:
                print(f"  failed: task {t['taskId']} on {v.id}: {t.get('errorMessage')}")
            lost = d.wait(lambda v=v: removed(d, v.id), f"executor {v.id} removed")
            assert "lost" in (lost.remove_reason or ""), lost
        left = sorted(hosts - {victim.host, victim2.host})
        d.wait(lambda: reported_hosts(d) == left, f"the driver to report executors on {left}")
        d.wait_epochs_after(in_flight, 2, total // per_epoch - 1)
        rc = wait_exit(d.proc, d.log, RUN)
        assert rc == 0, f"driver failed, rc {rc}\n{tail(d.log)}"

    # The job noticed nothing but retried tasks: one attempt, every epoch committed once, each
    # id once in both sinks, no part left prepared in PostgreSQL, the files sink or the store.
    recs = assert_finished_exactly_once(d.state, d.out, pg_dsn, total, d.log)
    assert len(recs) == total // per_epoch
    one_finished_attempt(d.state, "ids")
    with opened(d.state) as st:
        txns = st.list_txns(job_id("ids"))
    assert {t.state for t in txns} == {TxnState.COMMITTED}, txns


# 3. a stateful job scaled down and up -------------------------------------------------------
def state_partitions(state: Path) -> list[int]:
    """The partitions of the stateful operator's state in the checkpoint (state/0/<p>)."""
    folder = state / "checkpoint" / "state" / "0"
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit())


def pinned_shuffle_partitions(state: Path) -> set[str]:
    """``spark.sql.shuffle.partitions`` as every offset log entry of the query records it."""
    found = set()
    for f in (state / "checkpoint" / "offsets").iterdir():
        if f.name.isdigit():
            meta = json.loads(f.read_text().splitlines()[1])
            found.add(str(meta["conf"]["spark.sql.shuffle.partitions"]))
    return found


def counts_by_epoch(out: Path) -> dict[int, list[tuple[int, int]]]:
    """``(k, n)`` rows of each committed epoch of the files sink."""
    import pyarrow.parquet as pq

    rows: dict[int, list[tuple[int, int]]] = {}
    for epoch_dir in sorted(out.glob("epoch=*")):
        n = int(epoch_dir.name.partition("=")[2])
        for f in sorted(epoch_dir.glob("*.parquet")):
            t = pq.read_table(f, columns=["k", "n"]).to_pydict()
            rows.setdefault(n, []).extend(zip(t["k"], t["n"], strict=True))
    return rows


def test_stateful_job_keeps_its_state_partitions_across_scaling(
    tmp_path: Path, cluster: LossCluster
) -> None:
    total, per_epoch, keys, partitions = 3_000, 30, 10, 6
    env = {
        "LOSS_MODE": "counts",
        "LOSS_JOB": "counts",
        "LOSS_TOTAL": str(total),
        "LOSS_PER_EPOCH": str(per_epoch),
        "LOSS_KEYS": str(keys),
        "LOSS_PARTITIONS": str(WORKERS),
    }
    conf = ("-D", f"spark.sql.shuffle.partitions={partitions}")
    hosts = cluster.alive_hosts()
    with driver(tmp_path, cluster, env, *conf) as d:
        d.wait(lambda: all_executors_up(d, hosts), f"executors on {sorted(hosts)}", STARTUP)
        d.wait(lambda: len(d.committed()) >= 2, "two committed epochs", STARTUP)
        assert state_partitions(d.state) == list(range(partitions))

        # Down by one, gracefully (decommissioned: it leaves once its tasks are done).
        cluster.remove(sorted(hosts)[0], graceful=True)
        d.wait_epochs(2)
        assert state_partitions(d.state) == list(range(partitions))
        # Up by one: a fresh worker; its executor runs tasks of the following epochs.
        new = cluster.add().address
        d.wait(
            lambda: any(e.completed_tasks > 0 for e in d.ui.executors() if e.host == new),
            f"a task done by the executor on {new}",
        )
        d.wait_epochs(2)
        assert state_partitions(d.state) == list(range(partitions))
        # Down by one the hard way: SIGKILL while the executor runs a held task of the keyed
        # state (its state store instance dies with it and is loaded again elsewhere).
        victim = d.held_executor()
        cluster.remove(victim.host, graceful=False)
        d.release()
        d.wait_epochs(2)
        # The rest of the input in one epoch: the job ends.
        d.send({"kind": "rate_limit", "max_rows_per_epoch": total})
        rc = wait_exit(d.proc, d.log, RUN)
        assert rc == 0, f"driver failed, rc {rc}\n{tail(d.log)}"

    one_finished_attempt(d.state, "counts")
    with opened(d.state) as st:
        job = st.get_job(job_id("counts"))
        recs = {int(e.epoch): e for e in st.list_epochs(job.job_id, limit=10_000)}
    assert job.state == JobState.FINISHED, job.last_error
    assert sorted(recs) == list(range(len(recs)))
    assert all(e.state == EpochState.COMMITTED for e in recs.values())
    # The state kept the partitions it was created with: the job's maximum parallelism.
    max_parallelism = (job.spec or {}).get("max_parallelism", partitions)
    assert max_parallelism == partitions, job.spec
    assert state_partitions(d.state) == list(range(partitions))
    assert pinned_shuffle_partitions(d.state) == {str(partitions)}
    # A stage retried after the SIGKILL (its shuffle input was lost) may leave an attempt of a
    # task running after the epoch's commit, which Spark kills later: none left a staged part.
    assert staged_leftovers(d.out) == [], staged_leftovers(d.out)
    # Every key's running count grows by exactly its rows of each epoch, and ends right.
    rows = counts_by_epoch(d.out)
    with_rows = sorted(n for n, r in rows.items() if r)
    assert with_rows == sorted(n for n, e in recs.items() if e.rows_in), with_rows
    seen: dict[int, list[int]] = defaultdict(list)
    for n in sorted(rows):
        ks = [k for k, _ in rows[n]]
        assert len(ks) == len(set(ks)), f"epoch {n} emitted a key twice: {rows[n]}"
        for k, c in rows[n]:
            seen[k].append(c)
    want = {k: len(range(k, total, keys)) for k in range(keys)}
    final = {k: cs[-1] for k, cs in seen.items()}
    assert final == want, f"final counts {final}, expected {want}"
    for k, cs in seen.items():
        assert cs == sorted(set(cs)), f"key {k}: counts not strictly growing: {cs}"
