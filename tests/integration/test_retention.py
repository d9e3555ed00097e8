"""Retention on real jobs: old epoch records go while the job runs, and what recovery needs stays.

Real Spark (an in-process local session, and drivers as real processes killed by the fault
points of :mod:`stoker.testing`), real SQLite.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import stoker
from stoker import JobState, Pipeline, sinks, sources
from stoker.store import EpochRecord, open_store
from stoker.types import AttemptState, EpochState, TxnState, job_id
from tests.support import APPS, exactly_once, file_sink_ids, start_driver, wait_group_gone

# Retention across crashes: the crash steps themselves are test_crash's, in the fast lane too.
pytestmark = pytest.mark.scenario

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

RETAIN = {"stoker.retention.epochs": "5", "stoker.retention.interval": "200ms"}


def _records(state: Path, jid: str) -> dict[int, EpochRecord]:
    st = open_store(state / "store.db")
    try:
        return {int(e.epoch): e for e in st.list_epochs(job_id(jid), limit=100_000)}
    finally:
        st.close()


def test_a_job_with_retention_keeps_the_last_epochs_and_its_restart_finds_the_final_one(
    spark: SparkSession, tmp_path: Path
) -> None:
    state, out = tmp_path / "state", tmp_path / "out"
    p = (
        Pipeline("kept")
        .source(sources.generator(total=2000, max_rows_per_epoch=100))
        .sink(sinks.files(str(out)))
    )

    result = stoker.run(p, state_dir=state, trigger="100ms", spark=spark, conf=RETAIN)

    assert (result.state, result.epochs, result.last_epoch) == (JobState.FINISHED, 20, 19)
    exactly_once(file_sink_ids(out), 2000)
    recs = _records(state, "kept")
    assert sorted(recs) == [15, 16, 17, 18, 19]
    assert {e.state for e in recs.values()} == {EpochState.COMMITTED}
    assert recs[19].final
    st = open_store(state / "store.db")
    try:
        assert sorted(t.epoch for t in st.list_txns(job_id("kept"))) == [15, 16, 17, 18, 19]
        assert st.counts() == {"attempts": 1, "epochs_committed": 20}  # pruning lowers nothing
    finally:
        st.close()

    # The restart of the finished job finds its final epoch (kept) and reads nothing again.
    again = stoker.run(p, state_dir=state, trigger="100ms", spark=spark, conf=RETAIN, restart=True)

    assert (again.state, again.attempt, again.epochs) == (JobState.FINISHED, 2, 0)
    exactly_once(file_sink_ids(out), 2000)
    assert sorted(_records(state, "kept")) == [15, 16, 17, 18, 19]


@pytest.mark.parametrize("step", ["after_decide", "before_spark_commit"])
def test_a_crashed_job_with_retention_recovers_exactly_once(step: str, tmp_path: Path) -> None:
    """Killed at epoch 15 while the pruning thread runs: the restart needs epoch 15's record
    (decided: recovery commits its parts; committed: Spark replays it and stoker skips it)."""
    state, out = tmp_path / "state", tmp_path / "out"
    total, per_epoch, crash = 2000, 100, 15
    env = {
        "IDS_OUT": str(out),
        "IDS_JOB": "ids",
        "IDS_TOTAL": str(total),
        "IDS_PER_EPOCH": str(per_epoch),
        "STOKER_FAULT": "",
    }
    args = ["-D", f"stoker.state_dir={state}", "-D", "stoker.retention.epochs=3"]
    args += ["-D", "stoker.retention.interval=200ms"]
    logs = [tmp_path / "driver-1.log", tmp_path / "driver-2.log"]

    first = start_driver(
        APPS / "ids_app.py", *args, env={**env, "STOKER_FAULT": f"{step}:{crash}"}, log=logs[0]
    )
    assert first.wait(timeout=600) == -9, logs[0].read_text(errors="replace")[-3000:]
    wait_group_gone(first.pid)
    recs = _records(state, "ids")
    assert max(recs) == crash and recs[crash].decided_by == 1
    assert 0 not in recs, f"the pruning thread never ran: {sorted(recs)}"

    second = start_driver(APPS / "ids_app.py", *args, env=env, log=logs[1])
    assert second.wait(timeout=600) == 0, logs[1].read_text(errors="replace")[-3000:]
    wait_group_gone(second.pid)

    exactly_once(file_sink_ids(out), total)
    assert file_sink_ids(out) == Counter(range(total))
    recs = _records(state, "ids")
    assert sorted(recs) == [17, 18, 19]
    assert recs[19].final and {e.state for e in recs.values()} == {EpochState.COMMITTED}
    st = open_store(state / "store.db")
    try:
        assert st.get_job(job_id("ids")).state == JobState.FINISHED
        assert [a.state for a in st.list_attempts(job_id("ids"))] == [
            AttemptState.SUPERSEDED,
            AttemptState.FINISHED,
        ]
        assert st.list_txns(job_id("ids"), TxnState.PREPARED) == []
        assert st.counts()["epochs_committed"] == total // per_epoch
    finally:
        st.close()
    if step == "before_spark_commit":
        assert f"epoch {crash} replayed" in logs[1].read_text(errors="replace")
