"""sources.kafka's arguments, its offsets' arithmetic, and how a reader's bad input reaches the
driver: no broker, no Spark session."""

from __future__ import annotations

import datetime as dt

import pytest

from stoker.errors import InvalidSource, exit_code
from stoker.sources import kafka
from stoker.sources._kafka_client import flat, nest, parse_starting
from stoker.sources._kafka_reader import apportion
from stoker.sources.base import invalid_source_in


@pytest.mark.parametrize(
    ("kwargs", "field", "words"),
    [
        ({"bootstrap_servers": "nohostport"}, "kafka.bootstrap_servers", "host:port"),
        ({"topics": None}, "kafka.topics", "either topics"),
        ({"pattern": "a.*"}, "kafka.topics", "not both"),
        ({"topics": None, "pattern": "(["}, "kafka.pattern", "no regex"),
        ({"starting_offsets": "newest"}, "kafka.starting_offsets", "'earliest', 'latest'"),
        ({"starting_offsets": {"t": {0: -3}}}, "kafka.starting_offsets", "-2 earliest"),
        ({"max_records_per_epoch": 0}, "kafka.max_records_per_epoch", ">= 1"),
        ({"isolation": "snapshot"}, "kafka.isolation", "read_committed"),
        ({"options": {"group.id": "g"}}, "kafka.options['group.id']", "set by the source"),
    ],
)
def test_bad_arguments_name_the_field(kwargs: dict, field: str, words: str) -> None:
    args = {"bootstrap_servers": "h:9092", "topics": ["t"], **kwargs}
    with pytest.raises(InvalidSource) as e:
        kafka(**args).validate()
    assert e.value.field == field and words in e.value.message, str(e.value)
    assert exit_code(e.value) == 2


def test_starting_offsets_forms() -> None:
    assert parse_starting("latest") == "latest"
    assert parse_starting(1_700_000_000_000) == 1_700_000_000_000
    when = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    assert parse_starting(when) == int(when.timestamp() * 1000)
    assert parse_starting({"t": {"0": 5, 1: -2}}) == {("t", 0): 5, ("t", 1): -2}
    with pytest.raises(InvalidSource):
        parse_starting(dt.datetime(2026, 1, 1))  # no zone: which instant?


def test_offsets_round_trip_in_sparks_kafka_shape() -> None:
    offsets = {("b", 10): 3, ("b", 2): 7, ("a", 0): 1}
    assert nest(offsets) == {"a": {"0": 1}, "b": {"2": 7, "10": 3}}
    assert flat(nest(offsets)) == offsets


def test_apportion_shares_a_cap_by_backlog_and_never_exceeds_a_partition() -> None:
    avail = {("t", 0): 70, ("t", 1): 30, ("t", 2): 0}
    assert apportion(avail, None) == avail
    assert apportion(avail, 1000) == avail
    assert apportion(avail, 10) == {("t", 0): 7, ("t", 1): 3, ("t", 2): 0}
    got = apportion({("t", 0): 1, ("t", 1): 1, ("t", 2): 1}, 2)
    assert sum(got.values()) == 2 and all(v <= 1 for v in got.values())


def test_a_readers_invalid_source_is_found_in_the_querys_error() -> None:
    text = (
        "[PYTHON_DATA_SOURCE_ERROR] ...\nTraceback (most recent call last):\n  File ...\n"
        "stoker.errors.InvalidSource: kafka.fail_on_data_loss: topic 't' partition 0: "
        "offsets 5..19 were deleted\n\nJVM stacktrace: ..."
    )
    err = invalid_source_in(text)
    assert isinstance(err, InvalidSource) and exit_code(err) == 2
    assert err.field == "kafka.fail_on_data_loss"
    assert err.message == "topic 't' partition 0: offsets 5..19 were deleted"
    assert invalid_source_in("java.lang.RuntimeException: boom") is None


def test_control_rate_limits_are_taken_for_a_kafka_source() -> None:
    from stoker import Pipeline, sinks
    from stoker.control.events import supported_rate_keys

    p = Pipeline("k").source(kafka("h:9092", topics="t")).sink(sinks.files("/tmp/k-out"))
    assert supported_rate_keys(p.spec()) == {"rows_per_second", "max_rows_per_epoch"}


def test_an_invalid_source_raised_by_a_sql_expression_loses_its_sqlstate() -> None:
    text = (
        "[USER_RAISED_EXCEPTION] stoker.errors.InvalidSource: kafka.value: topic 't' "
        "partition 0 offset 3 holds no JSON: x{ SQLSTATE: P0001"
    )
    err = invalid_source_in(text)
    assert err is not None and err.field == "kafka.value"
    assert err.message == "topic 't' partition 0 offset 3 holds no JSON: x{"
