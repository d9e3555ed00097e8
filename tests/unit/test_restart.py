"""Restart strategies: pure decisions over a failure history, time from a ManualClock, the
jitter's random numbers injected."""

from __future__ import annotations

from typing import Any

import pytest

from stoker.clock import ManualClock
from stoker.errors import InvalidInput
from stoker.restart import (
    DEFAULT_STRATEGY,
    FORMER_DEFAULT,
    Decision,
    ExponentialDelay,
    Failure,
    FailureRate,
    FixedDelay,
    NoRestart,
    parse_strategy,
    seeded_random,
)


class History:
    """A job's failures as the supervisor hands them over: counted ones and their times."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.times: list[float] = []
        self.count = 0

    def fail(self, strategy: Any, ran_for: float = 1.0, seed: str = "job/1") -> Decision:
        now = self.clock.now()
        failure = Failure(self.count, ran_for, now, tuple(self.times), seed)
        d: Decision = strategy.decide(failure)
        self.count = 1 if d.reset else self.count + 1
        self.times = [now] if d.reset else [*self.times, now]
        return d


def test_parse_defaults_and_round_trip() -> None:
    assert isinstance(parse_strategy({"strategy": "none"}), NoRestart)
    specs: list[dict[str, Any]] = [
        {"strategy": "fixed-delay", "attempts": 2, "delay": 0.5, "reset_after": 30},
        {"strategy": "exponential-delay", "initial": 1, "max": 5, "multiplier": 2, "attempts": 5},
        {"strategy": "exponential-delay", "attempts": None, "jitter": 0.25},
        {"strategy": "failure-rate", "max_failures": 3, "interval": 60, "delay": 1},
        {"strategy": "fixed-delay", "reset_after": None},
        DEFAULT_STRATEGY.to_dict(),
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
        ({"strategy": "exponential-delay", "jitter": 1.5}, "restart_strategy.jitter"),
        ({"strategy": "exponential-delay", "jitter": -0.1}, "restart_strategy.jitter"),
        ({"strategy": "exponential-delay", "jitter": "10%"}, "restart_strategy.jitter"),
        ({"strategy": "exponential-delay", "attempts": -1}, "restart_strategy.attempts"),
        ({"strategy": "fixed-delay", "attempts": None}, "restart_strategy.attempts"),
        ({"strategy": "fixed-delay", "jitter": 0.1}, "restart_strategy"),
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
    """The first default failed a streaming job for good at its fourth transient failure over
    its whole life; with reset_after each failure after ten minutes of healthy running counts
    as the first."""
    clock = ManualClock()
    h = History(clock)
    default = parse_strategy({"strategy": "fixed-delay", "attempts": 3, "delay": 1})
    assert default == FORMER_DEFAULT  # how the default before the exponential one is asked for
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


# the default: exponential-delay as Flink 1.19+ has it for a checkpointed job -------------------
def _fixed(u: float) -> ExponentialDelay:
    """The default strategy, its random numbers all ``u``."""
    from dataclasses import replace

    return replace(DEFAULT_STRATEGY, random=lambda seed: u)


def test_the_default_is_exponential_delay_without_limit() -> None:
    assert parse_strategy(None) is DEFAULT_STRATEGY
    assert parse_strategy({}) is DEFAULT_STRATEGY
    flink = ExponentialDelay(
        initial=1.0, max_delay=60.0, multiplier=1.5, attempts=None, reset_after=3600.0, jitter=0.1
    )
    assert parse_strategy(None) == flink
    assert DEFAULT_STRATEGY.to_dict() == {
        "strategy": "exponential-delay",
        "initial": 1.0,
        "max": 60.0,
        "multiplier": 1.5,
        "attempts": None,
        "reset_after": 3600.0,
        "jitter": 0.1,
    }


def test_the_default_backoff_grows_by_half_up_to_a_minute_and_never_gives_up() -> None:
    """A random number of 0.5 is a factor of 1: the backoff itself."""
    h = History(ManualClock())
    middle = _fixed(0.5)
    delays = [h.fail(middle).delay for _ in range(12)]
    assert delays == pytest.approx(
        [1.0, 1.5, 2.25, 3.375, 5.0625, 7.59375, 11.390625, 17.0859375, 25.62890625,
         38.443359375, 57.6650390625, 60.0]
    )  # fmt: skip
    # No limit: a job failing every minute for a day is still restarted, and a count grown
    # past what the multiplier's power fits in a float overflows nothing.
    for _ in range(1440):
        d = h.fail(middle)
        assert d.delay == 60.0 and not d.reset
    assert h.count == 1452
    assert middle.delay(10**9) == 60.0


def test_jitter_stays_within_a_tenth_either_way() -> None:
    h = History(ManualClock())
    low, high = _fixed(0.0), _fixed(0.999_999)
    assert h.fail(low).delay == pytest.approx(0.9)
    assert h.fail(high).delay == pytest.approx(1.5 * 1.1, rel=1e-5)
    d = h.fail(low)
    assert (d.delay, d.jitter, d.backoff) == pytest.approx((2.25 * 0.9, 0.9, 2.25))
    for _ in range(20):
        h.fail(low)
    d = h.fail(high)  # past the maximum the jitter still spreads the restarts
    assert d.delay == pytest.approx(66.0, rel=1e-5) and d.backoff == pytest.approx(60.0)


def test_jitter_is_drawn_from_the_job_and_attempt() -> None:
    """Reproducible for one failure; spread across jobs that fail together and across one
    job's attempts."""
    now = 1000.0
    factors = {
        seed: DEFAULT_STRATEGY.decide(Failure(4, 1.0, now, (), seed)).jitter
        for seed in [f"job-{n}/7" for n in range(200)] + [f"job-0/{a}" for a in range(1, 200)]
    }
    assert all(0.9 <= f <= 1.1 for f in factors.values())
    assert len(set(factors.values())) == len(factors)  # no two alike
    assert min(factors.values()) < 0.92 and max(factors.values()) > 1.08  # the whole range
    again = DEFAULT_STRATEGY.decide(Failure(4, 1.0, now, (), "job-3/7"))
    assert again.jitter == factors["job-3/7"]
    assert again.delay == pytest.approx(5.0625 * factors["job-3/7"])
    assert seeded_random("job-3/7") == seeded_random("job-3/7")


def test_the_default_resets_its_backoff_after_an_hour_of_running() -> None:
    clock = ManualClock()
    h = History(clock)
    middle = _fixed(0.5)
    assert [h.fail(middle, ran_for=5).delay for _ in range(4)] == [1.0, 1.5, 2.25, 3.375]
    # Fifty-nine minutes of running are not enough: the backoff goes on growing.
    assert h.fail(middle, ran_for=3599).delay == 5.0625
    d = h.fail(middle, ran_for=3600)
    assert d == Decision(1.0, reset=True) and h.count == 1
    assert h.fail(middle, ran_for=5).delay == 1.5


def test_explicit_strategies_keep_their_defaults_and_limits() -> None:
    """A strategy a job was given means what it meant before the default changed: the keys it
    leaves out have their former defaults (no jitter, 10 attempts, multiplier 2, 600 s), and
    its spec (stored with the job) is unchanged, without a jitter key."""
    exp = parse_strategy({"strategy": "exponential-delay"})
    assert exp == ExponentialDelay(1.0, 60.0, 2.0, 10, 600.0, jitter=0.0)
    assert "jitter" not in exp.to_dict()
    h = History(ManualClock())
    delays = [h.fail(exp).delay for _ in range(11)]
    assert delays == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0, 60.0, 60.0, None]
    h = History(ManualClock())
    three = parse_strategy({"strategy": "exponential-delay", "attempts": 3, "jitter": 0.1})
    assert [h.fail(three).delay is None for _ in range(4)] == [False, False, False, True]
    h = History(ManualClock())
    fixed = parse_strategy({"strategy": "fixed-delay"})
    assert fixed == FixedDelay(3, 1.0, 600.0)
    assert [h.fail(fixed).delay for _ in range(4)] == [1.0, 1.0, 1.0, None]
