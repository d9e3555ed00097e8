"""Restart strategies: pure decisions over a failure history, time from a ManualClock."""

from __future__ import annotations

from typing import Any

import pytest

from stoker.clock import ManualClock
from stoker.errors import InvalidInput
from stoker.restart import (
    Decision,
    ExponentialDelay,
    Failure,
    FailureRate,
    FixedDelay,
    NoRestart,
    parse_strategy,
)


class History:
    """A job's failures as the supervisor hands them over: counted ones and their times."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.times: list[float] = []
        self.count = 0

    def fail(self, strategy: Any, ran_for: float = 1.0) -> Decision:
        now = self.clock.now()
        d: Decision = strategy.decide(Failure(self.count, ran_for, now, tuple(self.times)))
        self.count = 1 if d.reset else self.count + 1
        self.times = [now] if d.reset else [*self.times, now]
        return d


def test_parse_defaults_and_round_trip() -> None:
    assert parse_strategy(None) == FixedDelay(3, 1.0, 600.0)
    assert isinstance(parse_strategy({"strategy": "none"}), NoRestart)
    specs: list[dict[str, Any]] = [
        {"strategy": "fixed-delay", "attempts": 2, "delay": 0.5, "reset_after": 30},
        {"strategy": "exponential-delay", "initial": 1, "max": 5, "multiplier": 2, "attempts": 5},
        {"strategy": "failure-rate", "max_failures": 3, "interval": 60, "delay": 1},
        {"strategy": "fixed-delay", "reset_after": None},
    ]
    for spec in specs:
        s = parse_strategy(spec)
        assert parse_strategy(s.to_dict()) == s
    assert parse_strategy({"strategy": "failure-rate"}) == FailureRate(3, 60.0, 1.0)


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ({"strategy": "sometimes"}, "restart_strategy.strategy"),
        ({"strategy": "fixed-delay", "tries": 2}, "restart_strategy"),
        ({"strategy": "fixed-delay", "delay": -1}, "restart_strategy.delay"),
        ({"strategy": "fixed-delay", "attempts": 1.5}, "restart_strategy.attempts"),
        ({"strategy": "fixed-delay", "reset_after": 0}, "restart_strategy.reset_after"),
        ({"strategy": "fixed-delay", "reset_after": "1h"}, "restart_strategy.reset_after"),
        ({"strategy": "exponential-delay", "multiplier": 0.5}, "restart_strategy.multiplier"),
        ({"strategy": "failure-rate", "max_failures": 0}, "restart_strategy.max_failures"),
        ({"strategy": "failure-rate", "interval": 0}, "restart_strategy.interval"),
        ({"strategy": "failure-rate", "interval": "1m"}, "restart_strategy.interval"),
        ({"strategy": "failure-rate", "attempts": 3}, "restart_strategy"),
        (["fixed-delay"], "restart_strategy"),
    ],
)
def test_bad_strategies_name_the_field(bad: Any, field: str) -> None:
    with pytest.raises(InvalidInput) as info:
        parse_strategy(bad)
    assert info.value.field == field


def test_fixed_delay_gives_up_after_its_restarts_in_a_row() -> None:
    h = History(ManualClock())
    fixed = parse_strategy({"strategy": "fixed-delay", "attempts": 2, "delay": 0.5})
    assert [h.fail(fixed).delay for _ in range(3)] == [0.5, 0.5, None]


def test_fixed_delay_forgives_after_a_healthy_run() -> None:
    """The old default failed a streaming job for good at its fourth transient failure over
    its whole life; now each failure after ten minutes of healthy running counts as the first."""
    clock = ManualClock()
    h = History(clock)
    default = parse_strategy(None)
    for _ in range(20):
        clock.advance(3600)
        d = h.fail(default, ran_for=3600)
        assert d == Decision(1.0, reset=True)
    # Quick failures in a row still use the budget up.
    assert [h.fail(default, ran_for=5).delay for _ in range(3)] == [1.0, 1.0, None]


def test_never_reset_keeps_counting() -> None:
    h = History(ManualClock())
    s = parse_strategy({"strategy": "fixed-delay", "attempts": 1, "reset_after": None})
    assert [h.fail(s, ran_for=1e9).delay for _ in range(2)] == [1.0, None]


def test_exponential_delay_grows_and_resets() -> None:
    h = History(ManualClock())
    exp = parse_strategy(
        {"strategy": "exponential-delay", "initial": 1, "max": 5, "multiplier": 2, "attempts": 5}
    )
    assert exp == ExponentialDelay(1.0, 5.0, 2.0, 5, 600.0)
    assert [h.fail(exp).delay for _ in range(3)] == [1.0, 2.0, 4.0]
    assert h.fail(exp, ran_for=601).delay == 1.0  # back to the initial delay
    assert [h.fail(exp).delay for _ in range(5)] == [2.0, 4.0, 5.0, 5.0, None]


def test_failure_rate_counts_failures_within_the_interval() -> None:
    clock = ManualClock()
    h = History(clock)
    rate = parse_strategy({"strategy": "failure-rate", "max_failures": 3, "interval": 60})
    # Three failures within a minute are restarted; a fourth within that minute is not.
    assert [h.fail(rate).delay for _ in range(3)] == [1.0, 1.0, 1.0]
    clock.advance(30)
    assert h.fail(rate).delay is None


def test_failure_rate_forgets_failures_older_than_the_interval() -> None:
    clock = ManualClock()
    h = History(clock)
    rate = FailureRate(max_failures=2, interval=60.0, delay_s=5.0)
    for _ in range(50):  # one failure every 40 s: never more than two within a minute
        assert h.fail(rate).delay == 5.0
        clock.advance(40)
    assert h.fail(rate).delay == 5.0
    clock.advance(10)
    assert h.fail(rate).delay is None  # three within 60 s: 40 s, 10 s apart
