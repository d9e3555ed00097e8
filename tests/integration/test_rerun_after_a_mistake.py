"""Issue 23 item 3: a job that FAILED before any epoch was decided runs again as it is once the
file is fixed, without ``--restart``; one that committed output still needs it. Real Spark."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import stoker
from stoker import JobState, Pipeline, sinks, sources
from stoker.errors import JobFailed, JobTerminal
from tests.support import file_sink_ids

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _pipeline(out: Path, broken: bool) -> Pipeline:
    p = Pipeline("mistake").source(sources.generator(total=60, max_rows_per_epoch=30))
    if broken:  # analyses fine, fails on real rows (not on the empty batch of the check)
        p.transform(lambda df, ctx: df.selectExpr("id", "assert_true(id < 0) AS never"))
    return p.sink(sinks.files(str(out)))


def test_a_job_that_failed_before_committing_runs_again_without_restart(
    spark: SparkSession, tmp_path: Path
) -> None:
    out, state = tmp_path / "out", tmp_path / "state"
    with pytest.raises(JobFailed):
        stoker.run(_pipeline(out, broken=True), state_dir=state, trigger="100ms", spark=spark)
    fixed = stoker.run(_pipeline(out, broken=False), state_dir=state, trigger="100ms", spark=spark)
    assert fixed.state == JobState.FINISHED
    assert sorted(file_sink_ids(out)) == list(range(60))
    # It committed now: a run of the ended job asks for a restart, as before.
    with pytest.raises(JobTerminal):
        stoker.run(_pipeline(out, broken=False), state_dir=state, trigger="100ms", spark=spark)
