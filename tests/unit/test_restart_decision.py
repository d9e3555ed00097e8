"""The one restart decision (``stoker.restart.restart_decision``), shared by the job manager's
supervisor and an application's driver: a Failure built from attempt records, no store."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import pytest

from stoker.restart import (
    NEVER_LAUNCHED,
    Failure,
    FailureRate,
    FixedDelay,
    NoRestart,
    PastAttempt,
    counted,
    failure_of,
    restart_decision,
)
from stoker.types import AttemptState


@dataclass(frozen=True)
class Att:
    attempt: int
    state: AttemptState
    started_at: float
    ended_at: float | None = None
    error: str | None = None


def _failed(n: int, start: float, end: float, error: str = "boom") -> Att:
    return Att(n, AttemptState.FAILED, start, end, error)


def _never_read() -> Iterable[PastAttempt]:
    raise AssertionError("the attempts are read only when earlier failures count")


def test_an_attempt_never_launched_is_no_failure_of_the_job() -> None:
    assert counted(_failed(1, 0.0, 5.0))
    assert not counted(_failed(1, 0.0, 5.0, NEVER_LAUNCHED))
    assert not counted(Att(1, AttemptState.FINISHED, 0.0, 5.0))
    assert not counted(Att(1, AttemptState.RUNNING, 0.0))


def test_earlier_failures_skip_attempts_never_launched() -> None:
    """Where the two copies differed: the application driver's counted the replaced attempt
    among the earlier failures, pushing out a real one."""
    history = [
        _failed(1, 0.0, 10.0),
        _failed(2, 10.0, 20.0, NEVER_LAUNCHED),  # its manager died before starting it
        _failed(3, 20.0, 30.0),
        Att(4, AttemptState.RUNNING, 30.0),  # the one failing now
    ]
    failure = failure_of(2, history[3], lambda: history, now=40.0)
    assert failure.earlier == (10.0, 30.0)
    assert (failure.failures, failure.ran_for, failure.now) == (2, 10.0, 40.0)


def test_the_failure_rate_is_not_worn_down_by_attempts_never_launched() -> None:
    """One failure a minute is allowed. The job's one real failure was 90 s ago; an attempt
    its manager never launched was replaced 50 s ago. Counting that one as the earlier
    failure (what the application driver's copy did) would have given up on the job."""
    strategy = FailureRate(max_failures=1, interval=60.0, delay_s=1.0)
    history = [
        _failed(1, 0.0, 10.0),
        _failed(2, 10.0, 50.0, NEVER_LAUNCHED),
        Att(3, AttemptState.RUNNING, 50.0),
    ]
    failure = failure_of(1, history[2], lambda: history, now=100.0)
    assert failure.earlier == (10.0,)
    assert restart_decision(strategy, 1, history[2], lambda: history, now=100.0).delay == 1.0
    assert strategy.decide(Failure(1, 50.0, 100.0, (50.0,))).delay is None  # the old count


def test_the_failing_attempt_and_older_failures_past_the_count_are_left_out() -> None:
    history = [
        _failed(1, 0.0, 1.0),  # before the count was set back (a reset)
        _failed(2, 1.0, 2.0),
        _failed(3, 2.0, 3.0),  # the one failing now, already ended by its driver
    ]
    failure = failure_of(1, history[2], lambda: history, now=9.0)
    assert failure.earlier == (2.0,)
    assert failure.ran_for == 1.0  # to its end, not to now


def test_without_earlier_failures_the_attempts_are_not_read() -> None:
    failure = failure_of(0, Att(1, AttemptState.RUNNING, 4.0), _never_read, now=10.0)
    assert (failure.failures, failure.ran_for, failure.earlier) == (0, 6.0, ())


def test_no_attempt_record_ran_for_nothing() -> None:
    failure = failure_of(0, None, _never_read, now=10.0)
    assert failure.ran_for == 0.0


@pytest.mark.parametrize(
    ("failures", "ran_for", "delay", "reset"),
    [(0, 1.0, 2.0, False), (1, 1.0, None, False), (1, 700.0, 2.0, True)],
)
def test_the_strategy_decides(failures: int, ran_for: float, delay: float, reset: bool) -> None:
    strategy = FixedDelay(attempts=1, delay_s=2.0, reset_after=600.0)
    now = 1000.0
    history = [_failed(1, 0.0, 1.0), Att(2, AttemptState.RUNNING, now - ran_for)]
    decision = restart_decision(strategy, failures, history[1], lambda: history, now)
    assert (decision.delay, decision.reset) == (delay, reset)
    assert restart_decision(NoRestart(), failures, history[1], lambda: history, now).delay is None
