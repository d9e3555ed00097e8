"""The one restart decision (``stoker.restart.restart_decision``), shared by the job manager's
supervisor and an application's driver: a Failure built from attempt records, no store."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import pytest

from stoker.restart import (
    DEFAULT_STRATEGY,
    HANDOVER_LOST,
    NEVER_LAUNCHED,
    Failure,
    FailureCause,
    FailureRate,
    FixedDelay,
    NoRestart,
    PastAttempt,
    cause_of,
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
    job_id: str = "job"
    cause: str | None = None  # None: a record of code before causes were recorded


def _failed(n: int, start: float, end: float, error: str = "boom") -> Att:
    return Att(n, AttemptState.FAILED, start, end, error)


def _never_read() -> Iterable[PastAttempt]:
    raise AssertionError("the attempts are read only when earlier failures count")


def test_an_attempt_never_launched_is_no_failure_of_the_job() -> None:
    assert counted(_failed(1, 0.0, 5.0))
    assert not counted(_failed(1, 0.0, 5.0, NEVER_LAUNCHED))
    assert not counted(Att(1, AttemptState.FINISHED, 0.0, 5.0))
    assert not counted(Att(1, AttemptState.RUNNING, 0.0))


def test_the_cause_of_a_failure_says_whose_it_was() -> None:
    """The manager's failures (the store counted none of them) use up no restart; a standby's
    lost handover is one of them too (it was counted among the earlier failures)."""
    assert cause_of(_failed(1, 0.0, 5.0, "boom")) is FailureCause.JOB
    assert cause_of(_failed(1, 0.0, 5.0, None)) is FailureCause.JOB
    assert cause_of(_failed(1, 0.0, 5.0, NEVER_LAUNCHED)) is FailureCause.NEVER_LAUNCHED
    assert cause_of(_failed(1, 0.0, 5.0, HANDOVER_LOST)) is FailureCause.HANDOVER_LOST
    assert cause_of(Att(1, AttemptState.FINISHED, 0.0, 5.0)) is None
    # An application's main that raised is the application's own failure (issue 39 item 7).
    assert [c for c in FailureCause if c.counted] == [
        FailureCause.JOB,
        FailureCause.MAIN_RAISED,
        FailureCause.MAIN_BAD_INPUT,
    ]
    assert [c for c in FailureCause if c.of_main] == [
        FailureCause.MAIN_RAISED,
        FailureCause.MAIN_BAD_INPUT,
    ]
    assert not counted(_failed(1, 0.0, 5.0, HANDOVER_LOST))


def test_a_recorded_cause_wins_over_the_text() -> None:
    """Records of this code carry their cause; only older ones are read by their text."""
    rolled_back = Att(
        1, AttemptState.FAILED, 0.0, 5.0, "ValueError: boom", cause="upgrade-rolled-back"
    )
    assert cause_of(rolled_back) is FailureCause.UPGRADE_ROLLED_BACK and not counted(rolled_back)
    said_job = Att(1, AttemptState.FAILED, 0.0, 5.0, NEVER_LAUNCHED, cause="job")
    assert cause_of(said_job) is FailureCause.JOB
    newer = Att(1, AttemptState.FAILED, 0.0, 5.0, "x", cause="a-cause-of-newer-code")
    assert cause_of(newer) is FailureCause.JOB


def test_the_manager_writes_the_texts_the_causes_are_told_by() -> None:
    from stoker.manager import reconciler, standbys

    assert standbys.HANDOVER_LOST == HANDOVER_LOST
    assert reconciler.NEVER_LAUNCHED is NEVER_LAUNCHED


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


def test_a_run_re_adopted_by_the_applications_next_main_is_one_healthy_run() -> None:
    """Issue 39 item 7: a rerun of the application's main supersedes the job's attempt; the
    run goes on, so the healthy time that forgives earlier failures counts from before it."""
    past = [
        _failed(1, 0.0, 5.0),
        Att(2, AttemptState.SUPERSEDED, 6.0, 500.0, "superseded by a newer attempt"),
        Att(3, AttemptState.SUPERSEDED, 500.0, 700.0, "superseded by a newer attempt"),
        _failed(4, 700.0, 720.0),
    ]
    f = failure_of(1, past[-1], lambda: past, 720.0)
    assert f.ran_for == 714.0  # from attempt 2's start, not attempt 4's (20 s)
    d = restart_decision(FixedDelay(1, 1.0, reset_after=600.0), 1, past[-1], lambda: past, 720.0)
    assert (d.delay, d.reset) == (1.0, True)  # forgiven, not the second failure in a row
    # A failure in between ends the run: counted from the attempt after it.
    past[1] = _failed(2, 6.0, 500.0)
    assert failure_of(1, past[-1], lambda: past, 720.0).ran_for == 220.0


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


def test_the_jitter_is_seeded_with_the_job_and_its_failed_attempt(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Two jobs failing at the same moment (an outage of a server both use) restart at
    different times; the same failure decided again (by a second manager that briefly also
    leads) gets the same delay. The log says the delay and how it was made."""
    now = 500.0

    def decide(job: str, attempt: int) -> float | None:
        history = [Att(attempt, AttemptState.RUNNING, now - 2.0, job_id=job)]
        return restart_decision(DEFAULT_STRATEGY, 3, history[0], lambda: [], now).delay

    failure = failure_of(0, Att(7, AttemptState.RUNNING, 1.0, job_id="orders"), _never_read, now)
    assert failure.seed == "orders/7"
    assert failure_of(0, None, _never_read, now).seed == ""
    with caplog.at_level("INFO", logger="stoker.restart"):
        delays = {job: decide(job, 4) for job in ("orders", "clicks", "users")}
    assert len(set(delays.values())) == 3
    assert all(d is not None and 3.375 * 0.9 <= d <= 3.375 * 1.1 for d in delays.values())
    assert decide("orders", 4) == delays["orders"]
    assert decide("orders", 5) != delays["orders"]
    line = next(r.getMessage() for r in caplog.records if "job orders attempt 4" in r.message)
    jitter = (delays["orders"] or 0.0) / 3.375
    assert line == (
        f"job orders attempt 4 failed: the restart strategy restarts it in "
        f"{delays['orders']:.3f} s (backoff 3.375 s x jitter {jitter:.3f}; failure 4 in a row)"
    )


def test_a_strategy_that_gives_up_says_so_in_the_log(caplog: pytest.LogCaptureFixture) -> None:
    att = Att(2, AttemptState.RUNNING, 0.0, job_id="lone")
    with caplog.at_level("INFO", logger="stoker.restart"):
        assert restart_decision(NoRestart(), 0, att, _never_read, 1.0).delay is None
    assert caplog.messages == [
        "job lone attempt 2 failed: the restart strategy gives up (failure 1 in a row)"
    ]
