"""The console sink without Spark: what commit prints, its descriptor, and its refusal under a
job manager (a submission's inspection, a driver's plan); and the text format's schema and
lines (the rest runs on real Spark: tests/integration/test_text_and_console.py)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from pyspark.sql.types import StringType, StructField, StructType

from stoker import Pipeline, sinks, sources
from stoker.errors import InvalidInput, InvalidPipeline, InvalidSink, InvalidSource
from stoker.runtime.appfile import inspect_pipeline
from stoker.runtime.job.plan import RunOptions, job_basics
from stoker.runtime.launch import LaunchContext
from stoker.sinks.base import SinkOwner
from stoker.sources._files_format import read_file
from stoker.types import AttemptNo, Epoch, JobId

OWNER = SinkOwner(JobId("j"), "uid")
TABLE = "+---+\n| id|\n+---+\n|  0|\n+---+\n"


def test_commit_prints_a_batch_header_and_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    sink = sinks.console()
    sink.validate(OWNER)
    sink.commit(Epoch(3), AttemptNo(1), {"table": TABLE})
    sink.commit(Epoch(3), AttemptNo(1), {"table": TABLE})  # once per process
    rule = "-" * 43
    assert capsys.readouterr().out == f"{rule}\nBatch: 3\n{rule}\n{TABLE}\n"
    assert sink.committed_epochs(OWNER) == []
    assert "not exactly once" in sink.describe()


def test_a_console_sink_rebuilt_from_its_descriptor_prints_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    sink = sinks.console(rows=5, truncate=False)
    sink.accept_output_mode("complete")
    rebuilt = sinks.from_descriptor(sink.descriptor())
    assert isinstance(rebuilt, sinks.ConsoleSink)
    assert (rebuilt.rows, rebuilt.truncate, rebuilt.name) == (5, False, "console")
    rebuilt.commit(Epoch(0), AttemptNo(1), {"table": TABLE})
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"rows": 0}, "console.rows"), ({"truncate": 0}, "console.truncate")],
)
def test_bad_settings_are_refused(kwargs: dict[str, int], field: str) -> None:
    with pytest.raises(InvalidSink) as e:
        sinks.console(**kwargs).validate(OWNER)  # type: ignore[arg-type]
    assert e.value.field == field


def _pipeline(allow: bool = False) -> Pipeline:
    p = Pipeline("dev").source(sources.generator(total=3))
    return p.sink(sinks.console(allow_under_manager=allow))


def test_a_job_managers_driver_refuses_a_console_sink_unless_allowed() -> None:
    managed = LaunchContext(attempt=1)
    with pytest.raises(InvalidPipeline) as e:
        job_basics(_pipeline(), RunOptions(state_dir="/tmp/x"), None, managed)
    assert e.value.field == "sinks[0]"
    assert "allow_under_manager=True" in e.value.message and "not exactly once" in e.value.message
    job_basics(_pipeline(allow=True), RunOptions(state_dir="/tmp/x"), None, managed)
    job_basics(_pipeline(), RunOptions(state_dir="/tmp/x"), None, LaunchContext())  # local


APP = """\
import stoker
from stoker import Pipeline, sinks, sources

p = Pipeline("dev")
p.source(sources.generator(total=3))
p.sink(sinks.console({args}))
"""


def test_a_submission_of_a_console_sink_is_refused_unless_allowed(tmp_path: Path) -> None:
    app = tmp_path / "app.py"
    app.write_text(textwrap.dedent(APP.format(args="")))
    with pytest.raises(InvalidPipeline, match="allow_under_manager=True"):
        inspect_pipeline(app)
    app.write_text(textwrap.dedent(APP.format(args="allow_under_manager=True")))
    assert inspect_pipeline(app).name == "dev"


def test_the_managers_inspection_refuses_it_as_bad_input(tmp_path: Path) -> None:
    from stoker.manager.appinspect import inspect_app

    app = tmp_path / "app.py"
    app.write_text(textwrap.dedent(APP.format(args="")))
    with pytest.raises(InvalidInput) as e:
        inspect_app(app, {})
    assert e.value.field == "entrypoint" and "sinks.console()" in e.value.message


# the text format ------------------------------------------------------------------------------


def test_text_needs_no_schema_and_reads_value_string(tmp_path: Path) -> None:
    src = sources.files(str(tmp_path), "text")
    src.validate()
    assert src.struct() == StructType([StructField("value", StringType(), True)])
    sources.files(str(tmp_path), "text", "line string").validate()
    for bad in ("id long", "a string, b string", "m map<string,string>"):
        with pytest.raises(InvalidSource, match="one string column"):
            sources.files(str(tmp_path), "text", bad).validate()
    with pytest.raises(InvalidSource, match="explicit schema"):
        sources.files(str(tmp_path), "json").struct()


def test_text_lines_end_as_hadoops_line_reader_ends_them(tmp_path: Path) -> None:
    path = tmp_path / "a.txt"
    path.write_bytes(b"a\nb\r\nc\rd\n\nlast \xff")
    schema = StructType([StructField("value", StringType(), True)])
    rows = [r["value"] for b in read_file(str(path), "text", schema) for r in b.to_pylist()]
    assert rows == ["a", "b", "c", "d", "", "last \ufffd"]
    path.write_bytes(b"")
    assert list(read_file(str(path), "text", schema)) == []
