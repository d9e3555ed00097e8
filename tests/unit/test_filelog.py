"""stoker.sources._filelog: the durable, append-only list of a file source's input files."""

from __future__ import annotations

import json
import os
from pathlib import Path

from stoker.sources._filelog import Entry, FileLog, list_folder


def _lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# list_folder -----------------------------------------------------------------------------------


def _touch(path: Path, size: int, mtime: float) -> str:
    path.write_bytes(b"x" * size)
    os.utime(path, (mtime, mtime))
    return str(path)


def test_list_folder_gives_visible_files_oldest_first(tmp_path: Path) -> None:
    b = _touch(tmp_path / "b.json", 2, 1_000)
    a = _touch(tmp_path / "a.json", 1, 2_000)
    c = _touch(tmp_path / "c.json", 3, 1_000)  # same mtime as b: the path breaks the tie
    _touch(tmp_path / ".hidden.json", 1, 10)
    _touch(tmp_path / "_tmp.json", 1, 10)
    (tmp_path / "sub").mkdir()
    assert list_folder(tmp_path, None) == [(1_000, b, 2), (1_000, c, 3), (2_000, a, 1)]


def test_list_folder_filters_by_suffix(tmp_path: Path) -> None:
    keep = _touch(tmp_path / "a.csv", 1, 1_000)
    _touch(tmp_path / "a.csv.tmp", 1, 1_000)
    assert list_folder(tmp_path, ".csv") == [(1_000, keep, 1)]


def test_list_folder_of_an_empty_folder(tmp_path: Path) -> None:
    assert list_folder(tmp_path, None) == []


# append, seal, reload --------------------------------------------------------------------------


def test_a_new_log_is_empty_and_creates_no_file(tmp_path: Path) -> None:
    log = FileLog(tmp_path / "log" / "s0.jsonl")
    assert (log.entries, log.sealed) == ([], False)
    log.append([])
    assert not (tmp_path / "log").exists()


def test_append_numbers_entries_in_the_given_order_and_writes_them(tmp_path: Path) -> None:
    path = tmp_path / "log" / "s0.jsonl"
    log = FileLog(path)
    log.append([(2.0, "/in/b", 20), (1.0, "/in/a", 10)])
    assert log.entries == [Entry(0, "/in/b", 20), Entry(1, "/in/a", 10)]
    assert _lines(path) == [
        {"seq": 0, "path": "/in/b", "size": 20},
        {"seq": 1, "path": "/in/a", "size": 10},
    ]


def test_known_files_are_not_appended_again(tmp_path: Path) -> None:
    path = tmp_path / "s0.jsonl"
    log = FileLog(path)
    log.append([(1.0, "/in/a", 10)])
    log.append([(1.0, "/in/a", 10), (3.0, "/in/c", 30)])
    log.append([(1.0, "/in/a", 10)])
    assert log.entries == [Entry(0, "/in/a", 10), Entry(1, "/in/c", 30)]
    assert len(_lines(path)) == 2
    # A reloaded log knows them too.
    again = FileLog(path)
    again.append([(3.0, "/in/c", 30), (4.0, "/in/d", 40)])
    assert again.entries == [Entry(0, "/in/a", 10), Entry(1, "/in/c", 30), Entry(2, "/in/d", 40)]


def test_reload_gives_the_same_entries(tmp_path: Path) -> None:
    path = tmp_path / "s0.jsonl"
    log = FileLog(path)
    log.append([(1.0, "/in/a", 10)])
    log.append([(2.0, "/in/b", 20)])
    again = FileLog(path)
    assert (again.entries, again.sealed) == (log.entries, False)


def test_seal_is_written_once_and_survives_a_reload(tmp_path: Path) -> None:
    path = tmp_path / "s0.jsonl"
    log = FileLog(path)
    log.append([(1.0, "/in/a", 10)], seal=True)
    assert log.sealed
    log.append([], seal=True)
    assert _lines(path) == [{"seq": 0, "path": "/in/a", "size": 10}, {"sealed": True}]
    again = FileLog(path)
    assert (again.entries, again.sealed) == ([Entry(0, "/in/a", 10)], True)
    again.append([], seal=True)
    assert len(_lines(path)) == 2


def test_sealing_an_empty_snapshot_writes_the_seal(tmp_path: Path) -> None:
    path = tmp_path / "s0.jsonl"
    FileLog(path).append([], seal=True)
    again = FileLog(path)
    assert (again.entries, again.sealed) == ([], True)


def test_blank_lines_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "s0.jsonl"
    path.write_text(
        '{"seq": 0, "path": "/in/a", "size": 1}\n\n{"seq": 1, "path": "/in/b", "size": 2}\n'
    )
    assert FileLog(path).entries == [Entry(0, "/in/a", 1), Entry(1, "/in/b", 2)]


# torn last line --------------------------------------------------------------------------------


def test_a_torn_last_line_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "s0.jsonl"
    path.write_text('{"seq": 0, "path": "/in/a", "size": 1}\n{"seq": 1, "pa')
    log = FileLog(path)
    assert (log.entries, log.sealed) == ([Entry(0, "/in/a", 1)], False)


def test_a_last_line_without_its_newline_is_torn_too(tmp_path: Path) -> None:
    # The write of a line and its newline is one write; without the newline it was cut short
    # (and never fsynced, so never acknowledged), even when the text happens to parse.
    path = tmp_path / "s0.jsonl"
    path.write_text(
        '{"seq": 0, "path": "/in/a", "size": 1}\n{"seq": 1, "path": "/in/b", "size": 2}'
    )
    assert FileLog(path).entries == [Entry(0, "/in/a", 1)]


def test_a_torn_seal_does_not_seal(tmp_path: Path) -> None:
    path = tmp_path / "s0.jsonl"
    path.write_text('{"seq": 0, "path": "/in/a", "size": 1}\n{"seal')
    log = FileLog(path)
    assert (log.entries, log.sealed) == ([Entry(0, "/in/a", 1)], False)


def test_entries_appended_after_a_torn_line_survive_the_next_reload(tmp_path: Path) -> None:
    path = tmp_path / "s0.jsonl"
    path.write_text('{"seq": 0, "path": "/in/a", "size": 1}\n{"seq": 1, "pa')
    log = FileLog(path)
    log.append([(2.0, "/in/b", 2), (3.0, "/in/c", 3)], seal=True)
    assert log.entries == [Entry(0, "/in/a", 1), Entry(1, "/in/b", 2), Entry(2, "/in/c", 3)]
    again = FileLog(path)
    assert (again.entries, again.sealed) == (log.entries, True)
    assert _lines(path) == [
        {"seq": 0, "path": "/in/a", "size": 1},
        {"seq": 1, "path": "/in/b", "size": 2},
        {"seq": 2, "path": "/in/c", "size": 3},
        {"sealed": True},
    ]
