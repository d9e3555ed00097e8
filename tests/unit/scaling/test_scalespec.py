"""The scaling spec: every way in (text, mapping, spec, None), every error names its key."""

from __future__ import annotations

import json
from typing import Any

import pytest

from stoker.durations import parse_duration
from stoker.errors import InvalidInput
from stoker.scalespec import MODES, ScalingSpec, parse_scaling, with_bounds


def test_none_is_fixed_with_the_defaults() -> None:
    spec = parse_scaling(None)
    assert spec == ScalingSpec()
    assert spec.to_dict() == {
        "mode": "fixed",
        "min_executors": 1,
        "max_executors": None,
        "target_utilization": 0.7,
        "catch_up": 300.0,
        "stabilization": 60.0,
        "cooldown": 120.0,
        "max_rescales_per_hour": 10,
    }


@pytest.mark.parametrize("mode", ["fixed", "reactive", " Reactive ", "FIXED"])
def test_plain_modes(mode: str) -> None:
    assert parse_scaling(mode).mode == mode.strip().lower()


def test_auto_text_with_every_key() -> None:
    spec = parse_scaling(
        "auto:min=2,max=6,target_utilization=0.5,catch_up=90s,stabilization=1m,cooldown=1h"
    )
    assert spec == ScalingSpec("auto", 2, 6, 0.5, 90.0, 60.0, 3600.0)


def test_auto_text_long_key_names_and_defaults() -> None:
    spec = parse_scaling("auto:min_executors=1,max_executors=3")
    assert (spec.mode, spec.min_executors, spec.max_executors) == ("auto", 1, 3)
    assert (spec.catch_up_s, spec.stabilization_s, spec.cooldown_s) == (300.0, 60.0, 120.0)


def test_mapping_with_numbers_and_text_durations() -> None:
    spec = parse_scaling(
        {"mode": "auto", "min_executors": 1, "max_executors": 4, "catch_up": "5m", "cooldown": 30}
    )
    assert spec == ScalingSpec("auto", 1, 4, 0.7, 300.0, 60.0, 30.0)


@pytest.mark.parametrize(
    "spec",
    [
        ScalingSpec(),
        ScalingSpec("reactive"),
        ScalingSpec("reactive", 2, 5),
        ScalingSpec("auto", 1, 4),
        ScalingSpec("auto", 3, 3, 1.0, 0.0, 0.5, 7.5),
        ScalingSpec("auto", 2, 8, 0.65, 1800.0, 120.0, 3600.0),
        ScalingSpec("auto", 1, 4, max_rescales_per_hour=3),
    ],
)
def test_round_trips_through_dict_json_and_text(spec: ScalingSpec) -> None:
    assert parse_scaling(spec.to_dict()) == spec
    assert parse_scaling(json.loads(json.dumps(spec.to_dict()))) == spec
    assert parse_scaling(spec.to_text()) == spec
    assert parse_scaling(spec) is spec


def test_modes_constant() -> None:
    assert MODES == ("fixed", "reactive", "auto")


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("elastic", "mode must be one of fixed, reactive, auto"),
        ("auto:min=1,max=2,max_per_hour=0", "max_rescales_per_hour must be 1 or more, got 0"),
        ("auto:min=1,max=2,max_per_hour=x", "max_rescales_per_hour must be a whole number"),
        ({"min_executors": 1}, "mode is required"),
        ({"mode": 3}, "mode must be one of"),
        ("auto", "max_executors is required"),
        ("auto:min=2", "max_executors is required"),
        ("auto:", "nothing after 'auto'"),
        ("auto:min=1,max", "'max' is not key=value"),
        ("auto:min=1,max=3,speed=2", "unknown key 'speed'"),
        ({"mode": "auto", "max_executors": 3, "catch_up_s": 3}, "unknown key 'catch_up_s'"),
        ("auto:min=1,max=3,min=2", "min is given twice"),
        ("auto:min=1,max=3,min_executors=2", "say the same thing"),
        ("auto:min=0,max=3", "min_executors must be 1 or more"),
        ("auto:min=-1,max=3", "min_executors must be 1 or more"),
        ("auto:min=one,max=3", "min_executors must be a whole number"),
        (
            {"mode": "auto", "min_executors": 1.5, "max_executors": 3},
            "min_executors must be a whole",
        ),
        (
            {"mode": "auto", "min_executors": True, "max_executors": 3},
            "min_executors must be a whole",
        ),
        ({"mode": "auto", "max_executors": "many"}, "max_executors must be a whole number"),
        ("auto:min=4,max=2", "max_executors (2) must be at least min_executors (4)"),
        ("auto:min=1,max=2,target_utilization=0", "target_utilization must be a number above 0"),
        ("auto:min=1,max=2,target_utilization=1.5", "target_utilization must be a number above 0"),
        ("auto:min=1,max=2,target_utilization=high", "target_utilization must be a number"),
        ({"mode": "auto", "max_executors": 2, "target_utilization": None}, "target_utilization"),
        ("auto:min=1,max=2,catch_up=-5s", "catch_up '-5s' is not a duration"),
        ({"mode": "auto", "max_executors": 2, "catch_up": -5}, "catch_up must not be negative"),
        ({"mode": "auto", "max_executors": 2, "stabilization": "soon"}, "stabilization 'soon'"),
        ({"mode": "auto", "max_executors": 2, "cooldown": [1]}, "cooldown [1] is not a duration"),
        ({"mode": "auto", "max_executors": 2, "cooldown": float("inf")}, "cooldown must not be"),
        (42, "expects text like 'auto:min=1,max=4' or an object"),
        (ScalingSpec("auto", 1, None), "max_executors is required"),
        (ScalingSpec("burst"), "mode must be one of"),
    ],
)
def test_bad_specs_name_the_key_and_the_field(value: Any, words: str) -> None:
    with pytest.raises(InvalidInput) as info:
        parse_scaling(value, field="spec.scaling")
    assert info.value.field == "spec.scaling"
    assert words in info.value.message


def test_default_field_is_scaling() -> None:
    with pytest.raises(InvalidInput) as info:
        parse_scaling("sometimes")
    assert info.value.field == "scaling"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90.0),
        ("5m", 300.0),
        ("1h", 3600.0),
        ("500ms", 0.5),
        ("2d", 172800.0),
        ("1.5m", 90.0),
        (" 10 ", 10.0),
        (7, 7.0),
        (2.5, 2.5),
        (0, 0.0),
        ("0s", 0.0),
    ],
)
def test_durations(text: str | float, seconds: float) -> None:
    assert parse_duration(text, "cooldown") == seconds


@pytest.mark.parametrize("bad", ["5 years", "-1s", "m", "", -3, True, float("nan")])
def test_bad_durations_name_the_field(bad: Any) -> None:
    with pytest.raises(InvalidInput) as info:
        parse_duration(bad, "catch_up")
    assert info.value.field == "catch_up"


def test_with_bounds_keeps_the_mode_and_the_rest() -> None:
    spec = parse_scaling("auto:min=1,max=4,cooldown=30s")
    new = with_bounds(spec, 2, 6)
    assert new == ScalingSpec("auto", 2, 6, 0.7, 300.0, 60.0, 30.0)
    assert with_bounds(spec, None, 8).max_executors == 8
    assert with_bounds(spec, 3, None) == ScalingSpec("auto", 3, 4, 0.7, 300.0, 60.0, 30.0)
    assert with_bounds(ScalingSpec("reactive"), 2, None).mode == "reactive"


@pytest.mark.parametrize(
    ("min_e", "max_e", "field", "words"),
    [
        (None, None, "min_executors", "give min_executors, max_executors or both"),
        (0, None, "min_executors", "must be 1 or more"),
        (0, 3, "min_executors", "must be 1 or more"),
        (5, None, "min_executors", "must be at most max_executors (4)"),
        (3, 2, "max_executors", "must be at least min_executors (3)"),
        (None, 0, "max_executors", "must be at least min_executors (1)"),
        ("two", None, "min_executors", "must be a whole number"),
        (None, 2.5, "max_executors", "must be a whole number"),
    ],
)
def test_bad_bounds_name_the_field(min_e: Any, max_e: Any, field: str, words: str) -> None:
    spec = parse_scaling("auto:min=1,max=4")
    with pytest.raises(InvalidInput) as info:
        with_bounds(spec, min_e, max_e)
    assert info.value.field == field
    assert words in info.value.message
