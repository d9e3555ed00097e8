"""One grammar of durations and of partition counts for every setting, flag, field and event
(stoker/durations.py): the parsers that had three grammars now agree."""

from __future__ import annotations

import math

import pytest

from stoker.control.events import parse_duration as trigger_interval
from stoker.durations import parse_duration, parse_partitions
from stoker.errors import InvalidInput, InvalidSource
from stoker.scalespec import parse_scaling
from stoker.settings import Settings
from stoker.sources.files import parse_age


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("500ms", 0.5),
        ("2s", 2.0),
        ("10 sec", 10.0),
        ("3 seconds", 3.0),
        ("2m", 120.0),
        ("1.5 minutes", 90.0),
        ("1h", 3600.0),
        ("2 hours", 7200.0),
        ("7d", 604800.0),
        ("1w", 604800.0),
        ("90S", 90.0),
        ("12", 12.0),
        (0.25, 0.25),
    ],
)
def test_every_place_reads_a_duration_alike(text: object, seconds: float) -> None:
    assert parse_duration(text, "f") == seconds
    # the places that had grammars of their own read it the same now
    if seconds <= 86400:
        assert trigger_interval(text) == seconds
    assert parse_age(text) == seconds  # type: ignore[arg-type]
    assert parse_scaling({"mode": "auto", "max_executors": 2, "cooldown": text}).cooldown_s == (
        seconds
    )
    assert Settings().with_overrides({"stoker.retention.interval": text}).retention_interval == (
        seconds
    )


@pytest.mark.parametrize("bad", [True, None, [1], "soon", "-1s", "1e3ms", "5 years", math.nan])
def test_what_is_not_a_duration_is_refused_naming_the_field(bad: object) -> None:
    with pytest.raises(InvalidInput) as info:
        parse_duration(bad, "stoker.trigger")
    assert info.value.field == "stoker.trigger"


def test_bounds_the_caller_asks_for() -> None:
    with pytest.raises(InvalidInput, match="must not be negative"):
        parse_duration(-1, "f")
    with pytest.raises(InvalidInput, match="must not be negative or infinite"):
        parse_duration(math.inf, "f")
    with pytest.raises(InvalidInput, match="a positive duration"):
        parse_duration("0s", "f", positive=True)
    with pytest.raises(InvalidInput, match=r"at most 1d, got '2d'"):
        trigger_interval("2d")
    with pytest.raises(InvalidSource, match="a positive duration"):
        parse_age(0)


@pytest.mark.parametrize(("value", "n"), [(4, 4), ("8", 8), (" 16 ", 16), (211.0, 211)])
def test_one_partitions_parser(value: object, n: int) -> None:
    assert parse_partitions(value, "N") == n


@pytest.mark.parametrize("bad", [0, -1, "0", 2.5, True, "many", None])
def test_partitions_refused(bad: object) -> None:
    with pytest.raises(InvalidInput, match="whole number of at least 1"):
        parse_partitions(bad, "N")
