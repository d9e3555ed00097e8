"""Sources that log what their offsets name in the job's state folder say what that log lacks
against a checkpoint's offset (the plan-time check of a lost ``state/sources/``, issue 40)."""

from __future__ import annotations

from pathlib import Path

from stoker import sources
from stoker.sources._socket_log import LineLog


def test_a_files_sources_missing_log_is_named_against_the_offset(tmp_path: Path) -> None:
    src = sources.files(str(tmp_path / "in"), "json", "id long")
    assert src.state_behind("s0", tmp_path, {"sid": "s0", "seq": 0}) is None  # read nothing
    said = src.state_behind("s0", tmp_path, {"sid": "s0", "seq": 3})
    log = tmp_path / "sources" / "s0.files.jsonl"
    assert said == f"has read files 0..2 of source s0, whose log {log} is missing"


def test_a_socket_sources_log_must_reach_the_offset(tmp_path: Path) -> None:
    src = sources.socket("127.0.0.1", 9)
    folder = tmp_path / "sources" / "s1.socket"
    said = src.state_behind("s1", tmp_path, {"sid": "s1", "next": 2})
    assert said == f"has read lines 0..1 of source s1, whose log {folder} is missing"
    folder.mkdir(parents=True)
    LineLog(folder).append(0, [("a", 1), ("b", 2)])
    assert src.state_behind("s1", tmp_path, {"sid": "s1", "next": 2}) is None
    said = src.state_behind("s1", tmp_path, {"sid": "s1", "next": 5})
    assert said == f"has read lines 0..4 of source s1, whose log {folder} ends at line 2"
