"""Control events as data: validation names the field, apply/declare compute the new state."""

from __future__ import annotations

from typing import Any

import pytest

from stoker.control.events import (
    Step,
    apply,
    declare,
    parse_duration,
    replay,
    same_request,
    validate,
)
from stoker.errors import ControlConflict, InvalidInput
from stoker.types import ControlKind

SPEC: dict[str, Any] = {
    "config": {"min_amount": 10.0, "tag": "a", "limit": 5, "opt": None},
    "sources": ["generator(total=None, rows_per_second=None, max_rows_per_epoch=50)"],
    "events": ["reload_rules"],
}


def _bad(body: dict[str, Any], field: str, spec: dict[str, Any] = SPEC) -> str:
    with pytest.raises(InvalidInput) as e:
        validate(body, spec)
    assert e.value.field == field, str(e.value)
    return str(e.value)


def test_each_kind_validates_to_its_normal_form() -> None:
    assert validate({"kind": "config", "set": {"min_amount": 20}}, SPEC) == (
        ControlKind.CONFIG,
        {"set": {"min_amount": 20.0}, "unset": []},
    )
    assert validate({"kind": "rate_limit", "rows_per_second": 500}, SPEC)[1] == {
        "rows_per_second": 500.0
    }
    assert validate({"kind": "rate_limit", "max_rows_per_epoch": None}, SPEC)[1] == {
        "max_rows_per_epoch": None
    }
    assert validate({"kind": "log_level", "level": "warning", "logger": "my.mod"}, SPEC)[1] == {
        "level": "WARN",
        "logger": "my.mod",
    }
    assert validate({"kind": "trigger", "interval": "500ms"}, SPEC)[1]["seconds"] == 0.5
    for kind in ("pause", "resume", "checkpoint"):
        assert validate({"kind": kind}, SPEC) == (ControlKind(kind), {})
    assert validate({"kind": "event", "name": "reload_rules", "payload": {"x": 1}}, SPEC)[1] == {
        "name": "reload_rules",
        "payload": {"x": 1},
    }
    # request_id is the caller's, not part of the event
    assert validate({"kind": "pause", "request_id": "r1"}, SPEC) == (ControlKind.PAUSE, {})


def test_bad_input_names_the_field_and_what_is_allowed() -> None:
    assert "allowed: config" in _bad({"kind": "nope"}, "kind")
    assert "declared: limit, min_amount, opt, tag" in _bad(
        {"kind": "config", "set": {"nope": 1}}, "config.nope"
    )
    assert "expects number" in _bad(
        {"kind": "config", "set": {"min_amount": "x"}}, "config.min_amount"
    )
    _bad({"kind": "config", "set": {}}, "set")
    _bad({"kind": "config", "unset": ["nope"]}, "config.nope")
    _bad({"kind": "config", "set": {"tag": "b"}, "unset": ["tag"]}, "config.tag")
    _bad({"kind": "rate_limit", "rows_per_second": -5}, "rows_per_second")
    _bad({"kind": "rate_limit", "rows_per_second": True}, "rows_per_second")
    _bad({"kind": "rate_limit", "max_rows_per_epoch": 2.5}, "max_rows_per_epoch")
    assert "its sources take" in _bad(
        {"kind": "rate_limit", "max_files_per_epoch": 3}, "max_files_per_epoch"
    )
    _bad({"kind": "rate_limit"}, "rows_per_second")
    _bad({"kind": "log_level", "level": "LOUD"}, "level")
    _bad({"kind": "log_level", "level": "INFO", "logger": "bad name"}, "logger")
    _bad({"kind": "trigger", "interval": "soon"}, "interval")
    _bad({"kind": "trigger", "interval": "-1s"}, "interval")
    _bad({"kind": "trigger", "interval": "2d"}, "interval")
    assert "registered: reload_rules" in _bad({"kind": "event", "name": "other"}, "name")
    _bad({"kind": "event", "name": "reload_rules", "payload": "x" * 70_000}, "payload")
    _bad({"kind": "pause", "extra": 1}, "extra")
    _bad({"kind": "savepoint", "stop": "yes"}, "stop")
    _bad(["not", "an", "object"], "body")  # type: ignore[arg-type]


def test_config_overrides_survive_new_defaults_and_unset_reverts_to_the_declared_value() -> None:
    config, state = dict(SPEC["config"]), {}
    config, state = apply(
        "j", config, state, ControlKind.CONFIG, {"set": {"tag": "b"}, "unset": []}
    )
    assert config["tag"] == "b" and state["overrides"] == {"tag": "b"}
    # A new attempt declares new defaults: the override stays on top, a dropped key goes.
    config, state = declare(config, state, {"min_amount": 15.0, "tag": "a"})
    assert config == {"min_amount": 15.0, "tag": "b"}
    config, state = apply("j", config, state, ControlKind.CONFIG, {"set": {}, "unset": ["tag"]})
    assert config == {"min_amount": 15.0, "tag": "a"} and "tag" not in state["overrides"]


def test_pause_resume_checkpoint_conflicts_and_the_rest_of_the_state() -> None:
    config: dict[str, Any] = {}
    _, s = apply("j", config, {}, ControlKind.PAUSE, {})
    assert s["paused"] is True
    with pytest.raises(ControlConflict):
        apply("j", config, s, ControlKind.PAUSE, {})
    with pytest.raises(ControlConflict):
        apply("j", config, s, ControlKind.CHECKPOINT, {})
    _, s = apply("j", config, s, ControlKind.RESUME, {})
    with pytest.raises(ControlConflict):
        apply("j", config, s, ControlKind.RESUME, {})
    _, s = apply("j", config, s, ControlKind.RATE_LIMIT, {"rows_per_second": 5.0})
    _, s = apply("j", config, s, ControlKind.RATE_LIMIT, {"max_rows_per_epoch": 7})
    _, s = apply("j", config, s, ControlKind.RATE_LIMIT, {"max_rows_per_epoch": None})
    assert s["rate_limit"] == {"rows_per_second": 5.0}  # null: back to the source's own
    _, s = apply("j", config, s, ControlKind.LOG_LEVEL, {"level": "DEBUG"})
    _, s = apply("j", config, s, ControlKind.LOG_LEVEL, {"level": "WARN", "logger": "x"})
    assert s["log_level"] == {"root": "DEBUG", "loggers": {"x": "WARN"}}
    _, s = apply("j", config, s, ControlKind.TRIGGER, {"interval": "2s", "seconds": 2.0})
    assert s["trigger_s"] == 2.0


def test_durations_and_retried_requests() -> None:
    assert parse_duration("2s") == 2.0 and parse_duration(0) == 0.0 and parse_duration("1m") == 60
    assert same_request(ControlKind.PAUSE, {}, "pause", {})
    assert not same_request(ControlKind.CONFIG, {"set": {"a": 1}}, "config", {"set": {"a": 2}})


def test_a_pydantic_model_declares_config_with_types_and_constraints() -> None:
    from pydantic import BaseModel, Field

    from stoker.pipeline import Pipeline

    class Conf(BaseModel):
        min_amount: float = Field(10.0, ge=0)
        mode: str = Field("fast", pattern="^(fast|safe)$")

    p = Pipeline("typed", config=Conf)
    assert p.config == {"min_amount": 10.0, "mode": "fast"}
    assert p.check_config({"mode": "safe"}) == {"min_amount": 10.0, "mode": "safe"}
    spec = p.spec()
    assert validate({"kind": "config", "set": {"min_amount": 3}}, spec)[1]["set"] == {
        "min_amount": 3
    }
    with pytest.raises(InvalidInput) as e:
        validate({"kind": "config", "set": {"min_amount": -1}}, spec)
    assert e.value.field == "config.min_amount" and "minimum" in str(e.value)
    with pytest.raises(InvalidInput) as e:
        validate({"kind": "config", "set": {"mode": "slow"}}, spec)
    assert e.value.field == "config.mode"
    with pytest.raises(InvalidInput) as e:
        p.check_config({"other": 1})
    assert "declared: min_amount, mode" in str(e.value)


def test_replay_leaves_out_what_does_not_count_and_redoes_the_rest() -> None:
    config, state = declare({}, {}, {"limit": 5, "tag": "a"})
    steps = [
        Step(ControlKind.PAUSE, {}),
        Step(ControlKind.RESUME, {}, counts=False),  # rejected: the job stays paused
        Step(ControlKind.PAUSE, {}),  # conflicts once the resume is out: changes nothing
        Step(ControlKind.CONFIG, {"set": {"tag": "b"}, "unset": []}, counts=False),
        Step(defaults={"limit": 7, "tag": "a"}),  # a new attempt's declared defaults
        Step(ControlKind.CONFIG, {"set": {"limit": 9}, "unset": []}),
        Step(),  # an earlier undo
    ]
    config, state = replay("job-1", config, state, steps)
    assert config == {"limit": 9, "tag": "a"}
    assert state == {"base": {"limit": 7, "tag": "a"}, "overrides": {"limit": 9}, "paused": True}
