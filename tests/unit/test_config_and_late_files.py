"""Issue 8 items 9 and 6 without Spark: checking pipeline config given from outside, and a
bounded files source naming (once) a file that arrived after its snapshot."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable
from pyspark.sql.types import LongType, StructField, StructType

from stoker.cli._run_args import parse_config_pairs
from stoker.errors import InvalidInput
from stoker.pipeline import merge_config
from stoker.runtime.appfile import inspect_app
from stoker.sources._files_reader import _FilesReader

DEFAULTS = {"n": 1, "ratio": 0.5, "name": "a", "on": False, "tags": ["x"], "any": None}


def test_values_of_the_defaults_types_are_merged_over_them() -> None:
    got = merge_config(DEFAULTS, {"n": 3, "ratio": 2, "on": True, "tags": [], "any": {"k": 1}})
    assert got == {**DEFAULTS, "n": 3, "ratio": 2.0, "on": True, "tags": [], "any": {"k": 1}}
    assert isinstance(got["ratio"], float)


@pytest.mark.parametrize(
    ("values", "field", "words"),
    [
        ({"m": 1}, "config.m", "declared: any, n, name, on, ratio, tags"),
        ({"n": True}, "config.n", "expects integer"),
        ({"n": 1.5}, "config.n", "expects integer"),
        ({"on": 1}, "config.on", "expects boolean"),
        ({"ratio": "x"}, "config.ratio", "expects number"),
        ({"tags": "x"}, "config.tags", "expects list"),
    ],
)
def test_an_undeclared_key_or_another_type_names_the_key(
    values: dict[str, object], field: str, words: str
) -> None:
    with pytest.raises(InvalidInput) as e:
        merge_config(DEFAULTS, values)
    assert e.value.field == field and words in e.value.message


def test_command_line_values_are_json_when_they_parse() -> None:
    got = parse_config_pairs(["a=5", "b=true", 'c="5"', "d=text", "e=[1, 2]", "f=", "g=a=b"])
    assert got == {"a": 5, "b": True, "c": "5", "d": "text", "e": [1, 2], "f": "", "g": "a=b"}
    with pytest.raises(InvalidInput, match="key=value"):
        parse_config_pairs(["novalue"])


def test_the_name_and_config_of_a_file_that_calls_stoker_run_in_its_main(tmp_path: Path) -> None:
    """Learned without running it: the main's stoker.run hands the pipeline back."""
    app = tmp_path / "mainrun.py"
    app.write_text(
        "import stoker\n"
        "from stoker import Pipeline, sinks, sources\n"
        "def main():\n"
        "    p = Pipeline('from-main', config={'k': 1})\n"
        "    p.source(sources.generator(total=1)).sink(sinks.files('out'))\n"
        "    stoker.run(p)\n"
        "    raise SystemExit('must not get here')\n"
        "if __name__ == '__main__':\n"
        "    main()\n"
    )
    assert inspect_app(app, {"k": 2}) == ("from-main", {"k": 2})
    with pytest.raises(InvalidInput) as e:
        inspect_app(app, {"j": 2})
    assert e.value.field == "config.j"


def test_a_file_that_calls_stoker_run_at_module_level_is_read_not_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A script with no main guard (the README's shape, as a newcomer writes it) read by a job
    manager's inspection: its module-level stoker.run hands the pipeline back. Before, the
    inspection ran the whole job in the manager's inspecting process (found by a newcomer
    walk: it took the sink's table and committed epochs before the job was even recorded)."""
    monkeypatch.chdir(tmp_path)
    app = tmp_path / "noguard.py"
    app.write_text(
        "import stoker\n"
        "from stoker import Pipeline, sinks, sources\n"
        "p = Pipeline('no-guard', config={'k': 1})\n"
        "p.source(sources.generator(total=1)).sink(sinks.files('out'))\n"
        "stoker.run(p)\n"
        "raise SystemExit('must not get here')\n"
    )
    assert inspect_app(app, {"k": 2}) == ("no-guard", {"k": 2})
    assert not (tmp_path / ".stoker").exists() and not (tmp_path / "out").exists()


def _reader(folder: Path, state: Path) -> _FilesReader:
    opts = {
        "sid": "s0",
        "path": str(folder),
        "format": "json",
        "bounded": "true",
        "log_path": str(state / "s0.files.jsonl"),
    }
    return _FilesReader(opts, StructType([StructField("id", LongType())]))


def _latest(r: _FilesReader) -> int:
    start = r.initialOffset()
    return int(r.latestOffset(start, ReadAllAvailable())["seq"])


def test_a_file_added_to_a_sealed_bounded_folder_is_named_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder, state = tmp_path / "in", tmp_path / "state"
    folder.mkdir()
    (folder / "a.json").write_text('{"id": 1}\n')
    caplog.set_level(logging.WARNING, logger="stoker.sources.files")
    assert _latest(_reader(folder, state)) == 1  # the snapshot: a.json
    assert not caplog.records

    late = folder / "late.json"
    late.write_text('{"id": 2}\n')
    r = _reader(folder, state)  # the job resumed: its snapshot stays
    assert _latest(r) == 1
    assert _latest(r) == 1
    warned = [x.getMessage() for x in caplog.records]
    assert len(warned) == 1 and str(late) in warned[0] and "not read" in warned[0], warned
