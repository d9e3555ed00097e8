"""Speculative copies of the table sinks' writer tasks, for real, on a standalone cluster (issue
43 item 3): one job writing each epoch into a Delta table and an Iceberg table. The first
attempt of partition 0's writer, in epochs 1 and 3 of each sink, sleeps 40 s right after
writing its Parquet files and their intent; Spark's speculation runs a copy on the other
worker, which wins and is the part recorded. The slow attempt's files are never in the Delta
log or an Iceberg snapshot, and are deleted: by the epoch's commit (epoch 1), by the next
run's recovery after the driver is killed right after preparing epoch 3. Every id once in each
table, each read by its own reader; no data file outside the log or the snapshots.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from stoker.store import open_store
from stoker.types import Epoch, EpochState, JobState, TxnState, job_id
from tests.cluster import StandaloneCluster, spark_cluster  # noqa: F401 - the fixture
from tests.integration import test_delta_sink as d
from tests.integration import test_iceberg_sink as i
from tests.support import APPS, exactly_once, start_driver, wait_group_gone

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(1500)]

JOB = "tids"
TOTAL, PER_EPOCH = 2_000, 400  # 5 epochs of 2 partitions each


def run(state: Path, env: dict[str, str], log: Path, args: list[str], expect: int) -> None:
    proc = start_driver(
        APPS / "tables_ids_app.py", "-D", f"stoker.state_dir={state}", *args, env=env, log=log
    )
    try:
        rc = proc.wait(timeout=d.RUN)
    except Exception:
        d.kill_group(proc)
        raise
    wait_group_gone(proc.pid)
    assert rc == expect, f"driver ended with rc {rc}, expected {expect}\n{d.tail(log)}"


def kept(state: Path, sink: str, epoch: int, partition: int) -> dict[str, object]:
    """The part of (epoch, partition) the deciding attempt recorded for ``sink``."""
    st = open_store(state / "store.db")
    try:
        rec = st.get_epoch(job_id(JOB), Epoch(epoch))
        assert rec is not None and rec.decided_by is not None, rec
        txn = st.get_txn(job_id(JOB), Epoch(epoch), sink, rec.decided_by)
    finally:
        st.close()
    assert txn is not None, sink
    parts = [p for p in txn.detail["parts"] if p["partition"] == partition]
    assert len(parts) == 1, txn.detail
    return dict(parts[0])


def test_speculative_copies_of_table_writers_never_reach_the_tables(
    tmp_path: Path,
    spark_cluster: StandaloneCluster,  # noqa: F811 - the fixture
) -> None:
    state, table = tmp_path / "state", tmp_path / "delta"
    url, wh = i.catalog_url(tmp_path), tmp_path / "warehouse"
    env = {
        "TIDS_DELTA": str(table),
        "TIDS_CATALOG": url,
        "TIDS_WAREHOUSE": str(wh),
        "TIDS_TOTAL": str(TOTAL),
        "TIDS_PER_EPOCH": str(PER_EPOCH),
        "TIDS_JOB": JOB,
        "STOKER_FAULT": "",
    }
    args = spark_cluster.speculating_driver_args("task_slow:1:0:40,task_slow:3:0:40")
    log1, log2 = tmp_path / "driver-1.log", tmp_path / "driver-2.log"
    run(state, {**env, "STOKER_FAULT": "after_prepare:3"}, log1, args, -9)
    delta_sink = f"delta:{table.resolve()}"
    for sink in (delta_sink, "iceberg:db.t"):
        part = kept(state, sink, 1, 0)
        assert int(str(part["task_attempt_number"])) >= 1, f"{sink}: no speculative copy: {part}"

    run(state, env, log2, args, 0)
    try:
        exactly_once(d.delta_ids(table), TOTAL)
        exactly_once(d.duckdb_ids(table), TOTAL)
        exactly_once(i.ice_ids(url, wh), TOTAL)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{d.tail(log2)}") from None
    assert d.data_files(table) == d.logged_files(table)
    assert i.data_files(wh) == i.snapshot_files(url, wh)
    st = open_store(state / "store.db")
    try:
        job = st.get_job(job_id(JOB))
        assert job.state == JobState.FINISHED, f"{job.state}: {job.last_error}\n{d.tail(log2)}"
        recs = st.list_epochs(job.job_id, limit=10_000)
        assert all(e.state == EpochState.COMMITTED for e in recs), recs
        assert st.list_txns(job.job_id, TxnState.PREPARED) == []
    finally:
        st.close()
    with_rows = sorted(e.epoch for e in recs if (e.rows_in or 0) > 0)
    assert i.epochs_in(url, wh) == with_rows
