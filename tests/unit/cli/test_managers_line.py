"""``stoker managers`` names the stoker and schema each manager runs (issue 39 item 5), so an
operator upgrading the managers one at a time sees which are done."""

from __future__ import annotations

from typing import Any

from stoker.cli.server import _manager_line

ROW: dict[str, Any] = {
    "holder": "manager-a",
    "address": "http://10.0.0.1:8081",
    "role": "leader",
    "started_at": 900.0,
    "seen_at": 999.0,
}
LEASE = {"holder": "manager-a", "address": "http://10.0.0.1:8081", "token": 4}


def test_a_manager_line_names_its_stoker_and_schema() -> None:
    line = _manager_line({**ROW, "stoker_version": "0.1.0", "schema_version": 20}, LEASE, 1000.0)
    assert line.endswith("token 4  stoker 0.1.0 (schema 20)"), line


def test_a_manager_of_a_stoker_before_schema_20_says_so() -> None:
    line = _manager_line({**ROW, "stoker_version": None, "schema_version": None}, None, 1000.0)
    assert line.endswith("stoker ? (before schema 20)"), line


def test_an_answer_of_a_manager_before_versions_shows_no_version_at_all() -> None:
    line = _manager_line(ROW, None, 1000.0)  # an older manager answered: no such fields
    assert "stoker" not in line.split("seen", 1)[1], line
