"""The files source's reader without Spark running: discovery with a look-back window, and the
new options' validation."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable
from pyspark.sql.types import LongType, StructField, StructType

from stoker import sources
from stoker.errors import SourceError
from stoker.sources._files_reader import _FilesReader
from stoker.sources.files import parse_age

H = 3600 * 10**9
T = 1_800_000_000 * 10**9  # the newest file's mtime (ns)


def _put(folder: Path, name: str, mtime: int) -> Path:
    p = folder / name
    p.write_text('{"id": 1}\n')
    os.utime(p, ns=(mtime, mtime))
    return p


def _reader(folder: Path, state: Path, age: str = "3600") -> _FilesReader:
    opts = {
        "sid": "s0",
        "path": str(folder),
        "format": "json",
        "bounded": "false",
        "log_path": str(state / "s0.files.jsonl"),
        "max_file_age_s": age,
    }
    return _FilesReader(opts, StructType([StructField("id", LongType())]))


def _latest(r: _FilesReader) -> int:
    return int(
        r.latestOffset({"sid": "s0", "seq": 0, "finished": False}, ReadAllAvailable())["seq"]
    )


def test_late_files_inside_the_window_are_taken_and_older_ones_warned_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder, state = tmp_path / "in", tmp_path / "state"
    folder.mkdir()
    _put(folder, "a.json", T)
    r = _reader(folder, state)
    assert _latest(r) == 1

    caplog.set_level(logging.INFO, logger="stoker.sources.files")
    late = _put(folder, "late.json", T - 2 * H)  # past the hour of look-back
    _put(folder, "inside.json", T - H // 2)  # late, but inside it
    assert _latest(r) == 2
    warned = [x for x in caplog.records if x.levelno == logging.WARNING]
    assert len(warned) == 1 and str(late) in warned[0].getMessage()
    assert [Path(e.path).name for e in r.log.files(0, 2)] == ["a.json", "inside.json"]

    _put(folder, "b.json", T + 1)  # the folder is listed again; late.json is not re-examined
    assert _latest(r) == 3
    assert len([x for x in caplog.records if x.levelno == logging.WARNING]) == 1


def test_a_restarted_reader_takes_nothing_twice_and_warns_for_nothing_old(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder, state = tmp_path / "in", tmp_path / "state"
    folder.mkdir()
    for i in range(5):
        _put(folder, f"f{i}.json", T - (4 - i) * H)  # an hour apart: a window holds one
    assert _latest(_reader(folder, state)) == 5
    r = _reader(folder, state)  # a new process: knows nothing but the log
    caplog.set_level(logging.INFO, logger="stoker.sources.files")
    assert _latest(r) == 5
    assert not [x for x in caplog.records if x.levelno == logging.WARNING]


def test_parse_age() -> None:
    assert parse_age("7d") == 7 * 86400
    assert parse_age("12h") == 12 * 3600
    assert parse_age("1ms") == 0.001
    assert parse_age(90) == 90.0
    assert parse_age(None) is None


@pytest.mark.parametrize(
    ("kwargs", "field", "says"),
    [
        ({"max_file_age": "a week"}, "files.max_file_age", "or '7d'"),
        ({"max_file_age": 0}, "files.max_file_age", "a positive duration"),
        ({"clean_source": "move"}, "files.clean_source", "archive, delete"),
        ({"clean_source": "archive"}, "files.archive_dir", "needs an archive_dir"),
        ({"clean_source": "delete", "archive_dir": "x"}, "files.archive_dir", "only used"),
        ({"archive_dir": "x"}, "files.archive_dir", "only used"),
    ],
)
def test_bad_options_are_refused_naming_the_field(
    tmp_path: Path, kwargs: dict[str, object], field: str, says: str
) -> None:
    src = sources.files(str(tmp_path), "json", "id long", **kwargs)  # type: ignore[arg-type]
    with pytest.raises(SourceError, match=says) as err:
        src.validate()
    assert err.value.field == field
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing made


def test_the_archive_folder_must_not_be_the_input_folder(tmp_path: Path) -> None:
    src = sources.files(
        str(tmp_path), "json", "id long", clean_source="archive", archive_dir=str(tmp_path)
    )
    with pytest.raises(SourceError, match="must not be the input folder") as err:
        src.validate()
    assert err.value.field == "files.archive_dir"
