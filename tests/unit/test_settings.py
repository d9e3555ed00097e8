"""stoker.settings: durations, ``-D key=value`` pairs and how they land in :class:`Settings`."""

from __future__ import annotations

from pathlib import Path

import pytest

from stoker.durations import EXAMPLES, parse_duration
from stoker.errors import InvalidInput
from stoker.settings import Settings, parse_pairs

# durations -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("500ms", 0.5),
        ("100 ms", 0.1),
        ("2s", 2.0),
        ("2", 2.0),
        ("1.5s", 1.5),
        ("10 sec", 10.0),
        ("1 second", 1.0),
        ("3 seconds", 3.0),
        ("1m", 60.0),
        ("2min", 120.0),
        ("1 minute", 60.0),
        ("1.5 minutes", 90.0),
        ("  250ms  ", 0.25),
        ("0", 0.0),
        (3, 3.0),
        (0.25, 0.25),
    ],
)
def test_parse_duration_gives_seconds(text: str | float, seconds: float) -> None:
    assert parse_duration(text, "trigger") == seconds


@pytest.mark.parametrize("text", ["", "fast", "5 years", "ms", "1.2.3s", "-1s", "1e3ms", "1 hr"])
def test_parse_duration_rejects_what_is_not_a_duration(text: str) -> None:
    with pytest.raises(InvalidInput) as info:
        parse_duration(text, "stoker.trigger")
    assert info.value.field == "stoker.trigger"
    assert info.value.message == f"{text!r} is not a duration like {EXAMPLES}"


def test_parse_duration_rejects_a_negative_number() -> None:
    with pytest.raises(InvalidInput) as info:
        parse_duration(-1, "trigger")
    assert info.value.field == "trigger"
    assert info.value.message == "must not be negative or infinite, got -1"


# -D pairs --------------------------------------------------------------------------------------


def test_parse_pairs_splits_at_the_first_equals_sign() -> None:
    assert parse_pairs(["a=1", "b=x=y", " c =", "spark.x=  v "]) == {
        "a": "1",
        "b": "x=y",
        "c": "",
        "spark.x": "  v ",
    }


def test_parse_pairs_of_nothing_is_empty() -> None:
    assert parse_pairs([]) == {}
    assert parse_pairs(()) == {}


@pytest.mark.parametrize("pair", ["badkey", "=1", " =1", ""])
def test_parse_pairs_names_the_malformed_pair(pair: str) -> None:
    with pytest.raises(InvalidInput) as info:
        parse_pairs(["ok=1", pair])
    assert info.value.field == "-D"
    assert info.value.message == f"{pair!r} is not key=value"


# Settings --------------------------------------------------------------------------------------


def test_defaults() -> None:
    s = Settings()
    assert (s.trigger, s.state_dir, s.store, s.master, s.lease_ttl, s.spark_conf) == (
        0.5,
        None,
        None,
        "local[*]",
        30.0,
        {},
    )


def test_overrides_set_stoker_keys_and_collect_spark_conf() -> None:
    s = Settings().with_overrides(
        {
            "stoker.trigger": "100ms",
            "stoker.state_dir": "/tmp/st",
            "stoker.store": "postgresql://h/db",
            "stoker.master": "local[2]",
            "stoker.lease_ttl": "5s",
            "spark.sql.shuffle.partitions": "4",
            "spark.driver.memory": "1g",
        }
    )
    assert s == Settings(
        trigger=0.1,
        state_dir=Path("/tmp/st"),
        store="postgresql://h/db",
        master="local[2]",
        lease_ttl=5.0,
        spark_conf={"spark.sql.shuffle.partitions": "4", "spark.driver.memory": "1g"},
    )


def test_overrides_return_a_new_settings_and_leave_the_old_one_alone() -> None:
    base = Settings(spark_conf={"spark.a": "1"})
    s = base.with_overrides({"spark.b": "2", "spark.a": "3"})
    assert s.spark_conf == {"spark.a": "3", "spark.b": "2"}
    assert base.spark_conf == {"spark.a": "1"}
    assert base.with_overrides({}) == base


def test_unknown_stoker_key_names_the_key_and_the_known_ones() -> None:
    with pytest.raises(InvalidInput) as info:
        Settings().with_overrides({"stoker.nope": "1"})
    assert info.value.field == "stoker.nope"
    assert info.value.message == (
        "unknown stoker setting; known: trigger, state_dir, store, master, lease_ttl, "
        "retention.epochs, retention.time, retention.interval, paced_trigger, progress_timeout, "
        "cancel_timeout, startup_timeout"
    )


def test_key_without_a_known_prefix_is_refused() -> None:
    with pytest.raises(InvalidInput) as info:
        Settings().with_overrides({"trigger": "1s"})
    assert info.value.field == "trigger"
    assert info.value.message == (
        "unknown setting: use spark.<conf> or stoker.<key> with key one of "
        "trigger, state_dir, store, master, lease_ttl, retention.epochs, retention.time, "
        "retention.interval, paced_trigger, progress_timeout, cancel_timeout, startup_timeout"
    )


def test_bad_trigger_names_the_stoker_key() -> None:
    with pytest.raises(InvalidInput) as info:
        Settings().with_overrides({"stoker.trigger": "soon"})
    assert info.value.field == "stoker.trigger"
    assert info.value.message == "'soon' is not a duration like '500ms', '2s', '5m', '1h' or '7d'"


@pytest.mark.parametrize("value", ["500ms", "0", "0.9"])
def test_lease_ttl_under_one_second_is_refused(value: str) -> None:
    with pytest.raises(InvalidInput) as info:
        Settings().with_overrides({"stoker.lease_ttl": value})
    assert info.value.field == "stoker.lease_ttl"
    assert info.value.message == "must be at least 1s"


def test_lease_ttl_of_one_second_is_accepted() -> None:
    assert Settings().with_overrides({"stoker.lease_ttl": "1s"}).lease_ttl == 1.0


# retention -------------------------------------------------------------------------------------


def test_retention_keys_land_in_settings() -> None:
    s = Settings().with_overrides(
        {
            "stoker.retention.epochs": "5",
            "stoker.retention.time": "7d",
            "stoker.retention.interval": "2s",
        }
    )
    assert (s.retention_epochs, s.retention_time, s.retention_interval) == (5, 7 * 86400, 2.0)


def test_retention_is_off_by_default() -> None:
    s = Settings()
    assert (s.retention_epochs, s.retention_time) == (None, None)


@pytest.mark.parametrize(
    ("text", "seconds"), [("12h", 43200.0), ("1 day", 86400.0), ("30m", 1800.0), ("90", 90.0)]
)
def test_retention_time_takes_hours_and_days(text: str, seconds: float) -> None:
    assert Settings().with_overrides({"stoker.retention.time": text}).retention_time == seconds


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("stoker.retention.epochs", "0"),
        ("stoker.retention.epochs", "-3"),
        ("stoker.retention.epochs", "many"),
        ("stoker.retention.time", "0"),
        ("stoker.retention.time", "a week"),
        ("stoker.retention.interval", "0"),
    ],
)
def test_bad_retention_values_name_the_key(key: str, value: str) -> None:
    with pytest.raises(InvalidInput) as err:
        Settings().with_overrides({key: value})
    assert err.value.field == key


def test_paced_trigger_is_a_boolean() -> None:
    assert Settings().paced_trigger is True
    assert Settings().with_overrides({"stoker.paced_trigger": "false"}).paced_trigger is False
    with pytest.raises(InvalidInput) as info:
        Settings().with_overrides({"stoker.paced_trigger": "maybe"})
    assert info.value.field == "stoker.paced_trigger"


def test_cancel_timeout_is_a_positive_duration() -> None:
    assert Settings().cancel_timeout == 60.0
    assert Settings().with_overrides({"stoker.cancel_timeout": "5s"}).cancel_timeout == 5.0
    for bad in ("0s", "soon"):
        with pytest.raises(InvalidInput) as info:
            Settings().with_overrides({"stoker.cancel_timeout": bad})
        assert info.value.field == "stoker.cancel_timeout"


def test_progress_timeout_is_a_duration_or_off() -> None:
    assert Settings().progress_timeout == 300.0
    assert Settings().with_overrides({"stoker.progress_timeout": "90s"}).progress_timeout == 90.0
    assert Settings().with_overrides({"stoker.progress_timeout": "2m"}).progress_timeout == 120.0
    for off in ("0", "off", "none"):
        assert Settings().with_overrides({"stoker.progress_timeout": off}).progress_timeout == 0
    with pytest.raises(InvalidInput) as info:
        Settings().with_overrides({"stoker.progress_timeout": "soon"})
    assert info.value.field == "stoker.progress_timeout"
