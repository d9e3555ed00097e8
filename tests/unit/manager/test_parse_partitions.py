"""A number of state partitions as the API and the CLI take it (issue 23 item 12: JSON's 211.0
is the integer 211 to JSON Schema, and was refused)."""

from __future__ import annotations

import pytest

from stoker.durations import parse_partitions
from stoker.errors import InvalidInput


@pytest.mark.parametrize("value", [211, "211", " 211 ", 211.0])
def test_a_whole_number_is_taken_in_every_spelling(value: object) -> None:
    assert parse_partitions(value) == 211


@pytest.mark.parametrize("value", [0, -3, 2.5, 0.0, float("inf"), float("nan"), True, "x", "1e3"])
def test_anything_else_is_refused_naming_the_field(value: object) -> None:
    with pytest.raises(InvalidInput) as e:
        parse_partitions(value)
    assert e.value.field == "partitions"
