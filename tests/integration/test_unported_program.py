"""A Structured Streaming program run by ``stoker run`` as it was written for Spark alone
(issue 41): before, it ran as it is (its own query, its own checkpoint, none of stoker's
guarantees) and nothing said so. Now the query it starts itself is refused at that line, exit
2, naming what replaces it; nothing is left running and nothing recorded. A file that never
imports stoker is refused from its source, before Spark starts (a newcomer walk found the
refusal buried under Spark's start-up lines); one that imports stoker and still starts a query
of its own is refused at that call."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support import stoker_cmd
from tests.support.cli_runs import LIGHT

SPARK_PROGRAM = """\
from pyspark.sql import SparkSession

spark = SparkSession.builder.appName("RateCount").getOrCreate()
rows = spark.readStream.format("rate").option("rowsPerSecond", 5).load()
query = (
    rows.groupBy().count().writeStream.outputMode("complete")
    .format("console")
    .option("checkpointLocation", {checkpoint!r})
    .start()
)
query.awaitTermination()
"""


def _run(app: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        stoker_cmd("run", *LIGHT, str(app)), cwd=cwd, capture_output=True, text=True, timeout=600
    )


def test_a_spark_program_not_ported_is_refused_where_it_starts_its_query(tmp_path: Path) -> None:
    app = tmp_path / "rate_count.py"
    checkpoint = tmp_path / "checkpoint"
    app.write_text(SPARK_PROGRAM.format(checkpoint=str(checkpoint)))
    proc = _run(app, tmp_path)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"{app}:9 starts a Spark streaming query itself (writeStream...start())" in proc.stderr
    assert "call stoker.run(p) instead of start() and awaitTermination()" in proc.stderr
    assert "From a Structured Streaming job" in proc.stderr
    assert "and does not use stoker; nothing of it ran" in proc.stderr
    assert not checkpoint.exists()  # the query never started
    assert not (tmp_path / ".stoker").exists()  # no job recorded
    assert "SparkContext" not in proc.stderr and "WARN" not in proc.stderr  # Spark never started
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_a_program_using_stoker_that_starts_its_own_query_is_refused_at_that_call(
    tmp_path: Path,
) -> None:
    app = tmp_path / "mixed.py"
    checkpoint = tmp_path / "checkpoint"
    app.write_text(
        "import stoker  # noqa: F401\n" + SPARK_PROGRAM.format(checkpoint=str(checkpoint))
    )
    proc = _run(app, tmp_path)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"{app}:10 starts a Spark streaming query itself (writeStream...start())" in proc.stderr
    assert "does not use stoker" not in proc.stderr  # refused where it ran, not from its source
    assert not checkpoint.exists()
    assert not (tmp_path / ".stoker").exists()
