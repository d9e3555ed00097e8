"""The files source's ``text`` format (Spark's ``readStream.text``: one row per line, a column
``value``) and the console sink (Spark's ``format("console")``) on real Spark."""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import stoker
from stoker import JobState, Pipeline, sinks, sources
from tests.support import wait_for
from tests.support.background import BackgroundRun

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

TRIGGER = "100ms"


def _put_text(folder: Path, name: str, lines: list[str], end: str = "\n") -> None:
    """Write a text file and rename it into ``folder`` (as writers should)."""
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{name}.tmp"
    tmp.write_bytes(end.join(lines).encode() + (end.encode() if lines else b""))
    os.rename(tmp, folder / name)


def _values(out: Path) -> Counter[str]:
    """Every ``value`` in the committed epochs of a json files sink, with its count."""
    got: Counter[str] = Counter()
    for part in sorted(out.glob("epoch=*/part-*.json")):
        for line in part.read_text().splitlines():
            if line.strip():
                got[json.loads(line).get("value", "")] += 1
    return got


def _stop_query(spark: SparkSession, jid: str) -> None:
    for q in spark.streams.active:
        if q.name == f"stoker_{jid}":
            q.stop()


def test_text_files_unbounded_read_each_line_once_across_a_restart(
    spark: SparkSession, tmp_path: Path
) -> None:
    jid = "text_lines"
    indir, out, state = tmp_path / "in", tmp_path / "out", tmp_path / "state"
    indir.mkdir()
    p = Pipeline(jid).source(sources.files(str(indir), "text")).sink(sinks.files(str(out), "json"))
    want: Counter[str] = Counter()

    run = BackgroundRun(pipeline=p, state_dir=state, trigger=TRIGGER, spark=spark)
    try:
        _put_text(indir, "a.txt", ["alpha 1", "beta 2", ""])  # an empty line is a row
        _put_text(indir, "b.txt", ["crlf 1", "crlf 2"], end="\r\n")
        want.update(["alpha 1", "beta 2", "", "crlf 1", "crlf 2"])
        wait_for(
            lambda: f"a, b in the sink: {_values(out)} {run.error!r}",
            lambda: _values(out) == want or run.ended(),
            120.0,
            every=0.1,
        )
        assert _values(out) == want, run.error
    finally:
        _stop_query(spark, jid)
        run.wait()
    assert run.error is None, run.error

    _put_text(indir, "c.txt", ["while down"])  # arrives while the job is stopped
    want.update(["while down"])
    run = BackgroundRun(pipeline=p, state_dir=state, trigger=TRIGGER, spark=spark, restart=True)
    try:
        wait_for("c in the sink", lambda: _values(out) == want, 120.0, every=0.1)
        _put_text(indir, "d.txt", ["after restart", "last line without an end"], end="\n")
        want.update(["after restart", "last line without an end"])
        wait_for("d in the sink", lambda: _values(out) == want, 120.0, every=0.1)
        time.sleep(1.0)  # a few more triggers: nothing more may come
    finally:
        _stop_query(spark, jid)
        run.wait()
    assert run.error is None, run.error
    assert _values(out) == want  # each line once, none lost, none twice


def test_text_files_bounded_finish_with_each_line_once(spark: SparkSession, tmp_path: Path) -> None:
    indir, out, state = tmp_path / "in", tmp_path / "out", tmp_path / "state"
    _put_text(indir, "a.txt", [f"line {i}" for i in range(5)])
    _put_text(indir, "b.txt", ["x", "y"])
    p = Pipeline("text_bounded")
    p.source(sources.files(str(indir), "text", "line string", bounded=True))
    p.transform(lambda df: df.withColumnRenamed("line", "value"))
    p.sink(sinks.files(str(out), "json"))
    result = stoker.run(p, state_dir=state, trigger=TRIGGER, spark=spark)
    assert result.state == JobState.FINISHED
    assert _values(out) == Counter([f"line {i}" for i in range(5)] + ["x", "y"])


def test_console_sink_prints_each_epoch_as_spark_does(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    p = Pipeline("console_dev")
    p.source(sources.generator(total=6, max_rows_per_epoch=3))
    p.transform(lambda df: df.selectExpr("id", "concat('row ', id) AS word"))
    p.sink(sinks.console(rows=2))
    result = stoker.run(p, state_dir=tmp_path / "state", trigger=TRIGGER, spark=spark)
    assert result.state == JobState.FINISHED
    printed = capsys.readouterr().out
    rule = "-" * 43
    assert f"{rule}\nBatch: 0\n{rule}\n+---+-----+\n| id| word|\n+---+-----+\n" in printed
    assert "|  0|row 0|\n|  1|row 1|\n+---+-----+\nonly showing top 2 rows\n" in printed
    assert f"{rule}\nBatch: 1\n{rule}\n" in printed
    assert "|  3|row 3|\n|  4|row 4|\n" in printed
    assert printed.count("Batch: 0\n") == 1 and printed.count("Batch: 1\n") == 1
