"""The PostgreSQL sink under real Spark task retries, zombie task attempts and speculation.

Each test runs the ids app (files sink + PostgreSQL sink) as a real ``stoker run`` process,
with task fault points of :mod:`stoker.testing` that fire inside a Spark task on its first
attempt only, then kills the driver in the same epoch with a driver fault point and runs the
job again, so that recovery runs over whatever the retries left. Each ends asserting every id
exactly once in both sinks and nothing left in ``pg_prepared_xacts``, and checks from the
store's record that the fault really happened (the kept part was made by a later attempt of
the task).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stoker.runtime.recovery import recover
from stoker.sinks._pg_parts import parse_gid
from stoker.sinks.base import SinkOwner
from stoker.sinks.postgres import PostgresSink
from stoker.types import AttemptNo, Epoch, job_id
from tests.cluster import StandaloneCluster, spark_cluster  # noqa: F401 - the fixture
from tests.integration.test_crash import (
    JOB,
    assert_finished_exactly_once,
    ids_env,
    opened,
    tail,
    wait_exit,
)
from tests.support import pg_prepared, start_driver, wait_for, wait_group_gone

pytestmark = pytest.mark.timeout(1500)

TOTAL, PER_EPOCH = 4_000, 400  # 10 epochs of 2 generator partitions each


def kept_part(state: Path, epoch: int, partition: int) -> dict[str, object]:
    """The part of (epoch, partition) recorded for the PostgreSQL sink, by the deciding attempt."""
    with opened(state) as st:
        rec = st.get_epoch(JOB, Epoch(epoch))
        assert rec is not None and rec.decided_by is not None, rec
        txn = st.get_txn(JOB, Epoch(epoch), "postgres:ids", rec.decided_by)
    assert txn is not None
    parts = [p for p in txn.detail["parts"] if p["partition"] == partition]
    assert len(parts) == 1, txn.detail
    assert sorted(txn.detail["gids"]) == sorted(p["id"] for p in txn.detail["parts"])
    return dict(parts[0])


def run_to_death(state: Path, env: dict[str, str], log: Path, *args: str) -> None:
    p = start_driver(
        Path(__file__).parent.parent / "apps" / "ids_app.py",
        "-D",
        f"stoker.state_dir={state}",
        *args,
        env=env,
        log=log,
    )
    rc = wait_exit(p, log)
    wait_group_gone(p.pid)
    assert rc == -9, f"expected the injected SIGKILL, got rc {rc}\n{tail(log)}"


def run_to_end(state: Path, env: dict[str, str], log: Path, *args: str) -> None:
    p = start_driver(
        Path(__file__).parent.parent / "apps" / "ids_app.py",
        "-D",
        f"stoker.state_dir={state}",
        *args,
        env=env,
        log=log,
    )
    rc = wait_exit(p, log)
    wait_group_gone(p.pid)
    assert rc == 0, f"driver failed, rc {rc}\n{tail(log)}"


def prepared_of(dsn: str, epoch: int, partition: int) -> list[str]:
    out = []
    for gid in pg_prepared(dsn):
        g = parse_gid(gid)
        if g is not None and (g.epoch, g.part) == (epoch, partition):
            out.append(gid)
    return out


# (a) + (c): a task that dies right after PREPARE; the retry's part is the one kept ----------
def test_worker_death_after_prepare_retried_then_driver_killed(tmp_path: Path, pg_dsn: str) -> None:
    state, out = tmp_path / "state", tmp_path / "out"
    env = ids_env(out, pg_dsn, TOTAL, PER_EPOCH)
    master = ("-D", "stoker.master=local[2,3]")
    # Epoch 1: the retried task's part is committed, the dead attempt's rolled back by the
    # commit. Epoch 3: the same, then the driver dies with both parts of partition 0 prepared.
    fault = "task_after_prepare:1:0,task_after_prepare:3:0,after_prepare:3"
    log1, log2 = tmp_path / "driver-1.log", tmp_path / "driver-2.log"
    run_to_death(state, {**env, "STOKER_FAULT": fault}, log1, *master)
    text = log1.read_text(errors="replace")
    assert text.count("injected worker death after PREPARE") >= 2, tail(log1)
    assert kept_part(state, 1, 0)["task_attempt_number"] == 1
    left = prepared_of(pg_dsn, 3, 0)
    assert len(left) == 2, f"epoch 3 partition 0 should hold two prepared copies: {left}"
    assert {parse_gid(g).attempt for g in pg_prepared(pg_dsn)} == {1}  # type: ignore[union-attr]
    assert not prepared_of(pg_dsn, 1, 0), "the dead attempt's part of epoch 1 was left"

    run_to_end(state, env, log2, *master)
    assert_finished_exactly_once(state, out, pg_dsn, TOTAL, log2)


# (a) + (c): a zombie task attempt that prepares only after the epoch's commit --------------
def wait_zombie(folder: Path, epoch: int, log: Path, timeout: float = 120.0) -> dict[str, str]:
    path = folder / f"zombie-{epoch}-0.json"

    def prepared() -> dict[str, str] | None:
        if path.exists():
            note = json.loads(path.read_text())
            if note["state"] != "holding":
                return dict(note)
        return None

    got: dict[str, str] = wait_for(
        lambda: f"the zombie of epoch {epoch} to prepare\n{tail(log)}", prepared, timeout, 0.1
    )
    return got


def test_zombie_task_attempt_that_prepares_after_the_commit(tmp_path: Path, pg_dsn: str) -> None:
    state, out, notes = tmp_path / "state", tmp_path / "out", tmp_path / "faults"
    notes.mkdir()
    env = {**ids_env(out, pg_dsn, TOTAL, PER_EPOCH), "STOKER_FAULT_DIR": str(notes)}
    master = ("-D", "stoker.master=local[2,3]")
    # Epoch 1: the zombie prepares after the commit of epoch 1. Epoch 3: the driver dies right
    # after deciding, so the zombie of epoch 3 prepares after the next attempt's recovery
    # committed it.
    fault = "task_zombie_prepare:1:0,task_zombie_prepare:3:0,after_decide:3"
    log1, log2 = tmp_path / "driver-1.log", tmp_path / "driver-2.log"
    run_to_death(state, {**env, "STOKER_FAULT": fault}, log1, *master)
    z1 = wait_zombie(notes, 1, log1)
    assert z1["state"] == "prepared", z1
    assert kept_part(state, 1, 0)["task_attempt_number"] == 1
    assert kept_part(state, 1, 0)["id"] != z1["gid"]

    run_to_end(state, env, log2, *master)
    z3 = wait_zombie(notes, 3, log2)
    assert z3["state"] == "prepared", z3
    assert kept_part(state, 3, 0)["id"] != z3["gid"]
    # Run 2's recovery rolled the first zombie's part back; its later commits the second's,
    # unless the zombie prepared after the last one: the janitor's recovery (what runs for an
    # ended job) takes it. Either way nothing of a zombie is ever committed.
    left = pg_prepared(pg_dsn)
    assert set(left) <= {z3["gid"]}, left
    with opened(state) as st:
        job = st.get_job(JOB)
        sink = PostgresSink(pg_dsn, "ids")
        sink.open(SinkOwner(job_id(JOB), job.uid), state)
        recover(st, job_id(JOB), [sink], up_to=job.current_attempt)
    assert_finished_exactly_once(state, out, pg_dsn, TOTAL, log2)


# (b) + (c): speculation for real on a standalone cluster -----------------------------------
@pytest.mark.cluster
def test_speculative_copy_wins_over_a_slow_prepared_first_attempt(
    tmp_path: Path,
    pg_dsn: str,
    spark_cluster: StandaloneCluster,  # noqa: F811 - the fixture
) -> None:
    state, out = tmp_path / "state", tmp_path / "out"
    env = ids_env(out, pg_dsn, TOTAL, PER_EPOCH)
    # The first attempt of partition 0's writer in epochs 1 and 3 sleeps 40 s right after its
    # PREPARE: prepared, and then not kept once the speculative copy on the other worker wins.
    slow = "task_slow:1:0:40,task_slow:3:0:40"
    args = [
        *spark_cluster.speculating_driver_args(slow),
        *("-D", f"spark.executorEnv.STOKER_FAULT_DIR={tmp_path}"),
    ]
    log1, log2 = tmp_path / "driver-1.log", tmp_path / "driver-2.log"
    # The driver dies right after preparing epoch 3: the slow attempt's part and the
    # speculative copy's are both prepared then; recovery must roll back both.
    run_to_death(state, {**env, "STOKER_FAULT": "after_prepare:3"}, log1, *args)
    kept = kept_part(state, 1, 0)
    assert int(str(kept["task_attempt_number"])) >= 1, f"no speculative copy was kept: {kept}"
    logs = spark_cluster.executor_logs()
    assert "slow task after PREPARE of stoker:ids:1:1:0:" in logs, logs[-3000:]
    left = prepared_of(pg_dsn, 3, 0)
    assert len(left) == 2, f"epoch 3 partition 0: slow and speculative parts expected: {left}"
    assert not prepared_of(pg_dsn, 1, 0), "epoch 1's slow part was not rolled back"

    run_to_end(state, env, log2, *args)
    assert_finished_exactly_once(state, out, pg_dsn, TOTAL, log2)
    with opened(state) as st:
        assert st.get_job(JOB).current_attempt == AttemptNo(2)
