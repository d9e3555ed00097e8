"""Spark's own streaming sources and exactly once (issue 41 item 4), real Spark.

A source that cannot replay an epoch after a crash (``socket``: after a kill -9 the restart
committed the epoch again without the rows it had read) is refused when the pipeline is
checked, exit 2, unless the user asks for at least once (``at_least_once=True``), which the
job then shows. Spark's ``socket`` is refused even so (its restart fails for good), naming
``sources.socket``. Every source format the installed pyspark ships (its jars' DataSourceRegister
service files, read here at test time, and its Python data sources) is either known to replay
or refused: a new pyspark's new source fails this test until it is classified.
"""

from __future__ import annotations

import functools
import json
import os
import pkgutil
import subprocess
import zipfile
from collections.abc import Iterator
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from stoker import Pipeline, sinks, sources
from stoker.errors import InvalidSource, exit_code
from stoker.sources.spark import NEVER, REFUSED, REPLAYABLE, SparkSource
from stoker.store import open_store
from tests.support import file_sink_ids, stoker_cmd, wait_for
from tests.support.background import BackgroundRun

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SERVICES = "META-INF/services/org.apache.spark.sql.sources.DataSourceRegister"


def _registered_classes() -> list[str]:
    """The JVM data sources the pyspark wheel ships: every class its jars register."""
    import pyspark

    found = []
    for jar in sorted((Path(pyspark.__file__).parent / "jars").glob("*.jar")):
        with zipfile.ZipFile(jar) as z:
            if SERVICES not in z.namelist():
                continue
            for line in z.read(SERVICES).decode().splitlines():
                name = line.split("#", 1)[0].strip()
                if name:
                    found.append(name)
    return found


def _python_sources() -> list[str]:
    """The Python data sources Spark finds by itself (modules ``pyspark_*`` with a
    ``DefaultSource``, as pyspark.sql.worker.lookup_data_sources looks them up)."""
    from pyspark.sql.datasource import DataSource

    names = []
    for info in pkgutil.iter_modules():
        if info.name.startswith("pyspark_"):
            source = getattr(import_module(info.name), "DefaultSource", None)
            if isinstance(source, type) and issubclass(source, DataSource):
                names.append(source.name())
    return names


def test_every_source_format_pyspark_ships_is_replayable_or_refused(
    spark: SparkSession,
) -> None:
    classes = _registered_classes()
    assert len(classes) > 10, classes  # the scan found the jars' service files
    jvm = spark._jvm
    assert jvm is not None
    # A DataSourceRegister has a constructor without arguments (the service loader needs it).
    names = {functools.reduce(getattr, c.split("."), jvm)().shortName(): c for c in classes}
    names.update({n: "a Python data source" for n in _python_sources()})
    assert {"socket", "rate", "rate-micro-batch", "json", "parquet"} <= set(names)

    unclassified = {
        n: c for n, c in names.items() if n.lower() not in REPLAYABLE and n.lower() not in REFUSED
    }
    assert not unclassified, (
        f"source formats of this pyspark that stoker does not know: {unclassified}; say in "
        "stoker/sources/spark.py whether each replays an epoch after a crash (REPLAYABLE) "
        "or not (REFUSED)"
    )
    for name in sorted(names):
        src = SparkSource(format=name)
        if name.lower() in REPLAYABLE:
            src.validate()
            continue
        with pytest.raises(InvalidSource) as e:
            src.validate()
        assert exit_code(e.value) == 2
        if name.lower() in NEVER:
            assert "is refused" in str(e.value)
            with pytest.raises(InvalidSource):
                SparkSource(format=name, at_least_once=True).validate()
            continue
        assert repr(name) in str(e.value) and "cannot replay an epoch" in str(e.value)
        SparkSource(format=name, at_least_once=True).validate()
    # Not known at all (another package's, a typo): refused too.
    with pytest.raises(InvalidSource, match="not known to replay"):
        SparkSource(format="some-new-source").validate()


APP = """\
import stoker
from stoker import Pipeline, sinks, sources

p = Pipeline("lines")
p.source(sources.spark("socket", {{"host": "127.0.0.1", "port": "{port}"}}{extra}))
p.sink(sinks.files({out!r}, format="json"))
stoker.run(p, trigger="200ms")
"""


def test_a_socket_source_is_refused_with_exit_2_before_anything_starts(tmp_path: Path) -> None:
    app = tmp_path / "app.py"
    app.write_text(APP.format(port=9, extra="", out=str(tmp_path / "out")))
    proc = subprocess.run(
        stoker_cmd("run", str(app)), cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 2, proc.stderr
    assert "format 'socket' is refused" in proc.stderr, proc.stderr
    assert "Offsets committed out of order" in proc.stderr
    assert "sources.socket(host, port)" in proc.stderr
    assert not (tmp_path / ".stoker").exists()  # nothing recorded
    assert not (tmp_path / "out").exists()


def _register_lines_once(spark: SparkSession) -> str:
    """A Python data source of the test's own that stoker does not know: ids 0..9 once, read
    from memory (it cannot replay): registered as format ``lines_once``. Defined here, so that
    it is pickled by value for Spark's Python workers."""
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

    class Reader(DataSourceStreamReader):
        def initialOffset(self) -> dict[str, int]:
            return {"n": 0}

        def latestOffset(self) -> dict[str, int]:
            return {"n": 10}

        def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
            return [InputPartition((start["n"], end["n"]))]

        def read(self, partition: InputPartition) -> Iterator[tuple[str]]:
            lo, hi = partition.value  # type: ignore[attr-defined]
            for i in range(lo, hi):
                yield (str(i),)

    class LinesOnce(DataSource):
        @classmethod
        def name(cls) -> str:
            return "lines_once"

        def schema(self) -> str:
            return "value string"

        def streamReader(self, schema: object) -> DataSourceStreamReader:
            return Reader()

    spark.dataSource.register(LinesOnce)
    return "lines_once"


def test_a_source_that_cannot_replay_runs_at_least_once_when_asked_and_the_job_shows_it(
    spark: SparkSession, tmp_path: Path
) -> None:
    fmt = _register_lines_once(spark)
    with pytest.raises(InvalidSource, match="cannot replay an epoch"):
        sources.spark(fmt).validate()
    src = sources.spark(fmt, at_least_once=True)
    assert src.describe() == f"spark({fmt!r}, at_least_once=True)"
    out, state = tmp_path / "out", tmp_path / "state"
    p = (
        Pipeline("lines")
        .source(src)
        .transform(lambda df: df.selectExpr("CAST(value AS LONG) AS id"))
    )
    p.sink(sinks.files(str(out)))
    run = BackgroundRun(pipeline=p, state_dir=state, trigger="200ms", spark=spark)
    try:
        wait_for("the lines in the sink", lambda: set(file_sink_ids(out)) == set(range(10)), 180)
    finally:
        for q in spark.streams.active:
            if q.name == "stoker_lines":
                q.stop()
        run.wait()
    assert run.error is None, run.error

    st = open_store(f"sqlite:///{state / 'store.db'}")
    try:
        spec = st.get_job("lines").spec
    finally:
        st.close()
    assert spec["at_least_once_sources"] == [f"spark({fmt!r}, at_least_once=True)"]
    assert spec["sources"] == [f"spark({fmt!r}, at_least_once=True)"]
    shown = subprocess.run(
        stoker_cmd("status", "lines", "--state-dir", str(state)),
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ},
    )
    assert shown.returncode == 0, shown.stderr
    assert (
        f"delivery   at least once, not exactly once: spark({fmt!r}, at_least_once=True) "
        "cannot replay an epoch after a crash"
    ) in shown.stdout, shown.stdout
    as_json = subprocess.run(
        stoker_cmd("status", "lines", "--state-dir", str(state), "--json"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert json.loads(as_json.stdout)["spec"]["at_least_once_sources"] == spec["sources"]
