"""stoker.runtime.unported.refuse_unported_file: a file written for Spark alone (it starts its
own streaming query, it never imports stoker) is refused from its source, before it runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from stoker.runtime.unported import UnportedProgram, refuse_unported_file

CHAIN = """\
from pyspark.sql import SparkSession
spark = SparkSession.builder.getOrCreate()
df = spark.readStream.format("rate").load()
q = (df.writeStream
     .format("console")
     .start())
q.awaitTermination()
"""

KEPT = """\
from pyspark.sql import SparkSession
spark = SparkSession.builder.getOrCreate()
w = spark.readStream.format("rate").load().writeStream.format("console")
w.toTable("t")
"""


def _file(tmp_path: Path, text: str) -> Path:
    app = tmp_path / "app.py"
    app.write_text(text)
    return app


def test_a_query_started_through_a_chain_is_named_by_the_line_of_its_start(
    tmp_path: Path,
) -> None:
    app = _file(tmp_path, CHAIN)
    with pytest.raises(UnportedProgram) as e:
        refuse_unported_file(app)
    assert f"{app}:6 starts a Spark streaming query itself (writeStream...start())" in str(e.value)
    assert "nothing of it ran" in str(e.value) and "p.source(" in str(e.value)


def test_a_writer_kept_in_a_variable_is_seen_too(tmp_path: Path) -> None:
    with pytest.raises(UnportedProgram, match=r"app.py:4 .*writeStream...toTable\(\)"):
        refuse_unported_file(_file(tmp_path, KEPT))


@pytest.mark.parametrize(
    "head", ["import stoker\n", "from stoker import sources\n", "import stoker.sinks as s\n"]
)
def test_a_file_that_imports_stoker_is_left_to_the_call_time_check(
    tmp_path: Path, head: str
) -> None:
    refuse_unported_file(_file(tmp_path, head + CHAIN))  # no error: it runs, and is refused there


@pytest.mark.parametrize(
    "text",
    [
        "x = 1\n",  # no query at all: running it says what is missing
        "def f(:\n",  # a syntax error: running it names the line
        "thread.start()\n",  # a start that is not a stream writer's
        "df.writeStream\n",  # a writer never started
        "\udcff",  # not UTF-8
    ],
)
def test_other_files_are_not_judged_here(tmp_path: Path, text: str) -> None:
    app = tmp_path / "app.py"
    app.write_bytes(text.encode("utf-8", "surrogateescape"))
    refuse_unported_file(app)


def test_a_missing_file_is_not_judged_here(tmp_path: Path) -> None:
    refuse_unported_file(tmp_path / "nope.py")
