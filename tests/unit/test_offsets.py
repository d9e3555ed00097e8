"""Reading Spark's offset log: a stoker source's offset line and whether every source finished.

The files are written by hand in Spark's format: ``v1``, the batch metadata, then one line per
source (its offset JSON, or ``-`` when the source has none yet).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from stoker.runtime.epoch import all_sources_finished
from stoker.sources.base import parse_offset_line

META = json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 1, "conf": {}})


def _write(checkpoint: Path, epoch: int, *sources: Any) -> None:
    lines = ["v1", META] + [s if isinstance(s, str) else json.dumps(s) for s in sources]
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    (checkpoint / "offsets" / str(epoch)).write_text("\n".join(lines))


def _gen(sid: str, finished: bool) -> dict[str, Any]:
    return {"sid": sid, "next": 5000, "finished": finished}


# parse_offset_line -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "parsed"),
    [
        (
            '{"sid": "s0", "next": 10, "finished": false}',
            {"sid": "s0", "next": 10, "finished": False},
        ),
        (
            '  {"sid": "s1", "seq": 2, "finished": true}  ',
            {"sid": "s1", "seq": 2, "finished": True},
        ),
        ('{"sid": "s0", "next": 10}', None),  # no finished flag: not a stoker offset
        ('{"next": 10, "finished": true}', None),  # no sid
        ('{"0": 12}', None),  # e.g. a Kafka or rate source
        ("12", None),
        ('["sid", "finished"]', None),
        ("-", None),
        ("", None),
        ("{not json", None),
    ],
)
def test_parse_offset_line(line: str, parsed: dict[str, Any] | None) -> None:
    assert parse_offset_line(line) == parsed


# all_sources_finished --------------------------------------------------------------------------


def test_one_finished_source(tmp_path: Path) -> None:
    _write(tmp_path, 4, _gen("s0", True))
    assert all_sources_finished(tmp_path, 4) is True


def test_one_unfinished_source(tmp_path: Path) -> None:
    _write(tmp_path, 3, _gen("s0", False))
    assert all_sources_finished(tmp_path, 3) is False


def test_every_source_must_have_finished(tmp_path: Path) -> None:
    _write(tmp_path, 0, _gen("s0", True), {"sid": "s1", "seq": 3, "finished": False})
    _write(tmp_path, 1, _gen("s0", True), {"sid": "s1", "seq": 3, "finished": True})
    assert all_sources_finished(tmp_path, 0) is False
    assert all_sources_finished(tmp_path, 1) is True


def test_the_epoch_number_picks_the_file(tmp_path: Path) -> None:
    _write(tmp_path, 7, _gen("s0", False))
    _write(tmp_path, 8, _gen("s0", True))
    assert [all_sources_finished(tmp_path, n) for n in (7, 8)] == [False, True]


def test_a_missing_offset_file_is_not_finished(tmp_path: Path) -> None:
    assert all_sources_finished(tmp_path, 0) is False
    _write(tmp_path, 0, _gen("s0", True))
    assert all_sources_finished(tmp_path, 1) is False


def test_a_source_that_is_not_stokers_never_finishes(tmp_path: Path) -> None:
    _write(tmp_path, 0, _gen("s0", True), '{"topic": {"0": 42}}')
    _write(tmp_path, 1, '{"topic": {"0": 42}}')
    assert all_sources_finished(tmp_path, 0) is False
    assert all_sources_finished(tmp_path, 1) is False


def test_a_source_without_an_offset_yet_is_not_finished(tmp_path: Path) -> None:
    _write(tmp_path, 0, _gen("s0", True), "-")
    assert all_sources_finished(tmp_path, 0) is False


def test_an_offset_file_without_source_lines_is_not_finished(tmp_path: Path) -> None:
    _write(tmp_path, 0)
    assert all_sources_finished(tmp_path, 0) is False


@pytest.mark.parametrize("flag", ["true", 1, "yes", None])
def test_only_json_true_counts_as_finished(tmp_path: Path, flag: object) -> None:
    _write(tmp_path, 0, {"sid": "s0", "next": 1, "finished": flag})
    assert all_sources_finished(tmp_path, 0) is False


def test_a_torn_source_line_is_not_finished(tmp_path: Path) -> None:
    _write(tmp_path, 0, _gen("s0", True), '{"sid": "s1", "seq": 3, "fini')
    assert all_sources_finished(tmp_path, 0) is False
