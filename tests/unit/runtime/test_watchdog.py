"""The progress watchdog's decision (stoker/runtime/job/watchdog.py) on a fake clock: when a
query that made no progress fails its attempt, and when a quiet one must not."""

from __future__ import annotations

import pytest

from stoker.runtime.job.watchdog import (
    ADAPT_FACTOR,
    FIRST_EPOCH_S,
    ProgressWatchdog,
    spark_duration_s,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def watchdog(
    timeout: float = 60.0, idle: float = 10.0, clock: Clock | None = None
) -> tuple[ProgressWatchdog, Clock]:
    c = clock or Clock()
    return ProgressWatchdog(timeout, idle_interval_s=idle, probe_after_s=5.0, clock=c), c


def test_a_query_quiet_past_its_bound_is_stalled_while_planning() -> None:
    w, clock = watchdog()
    w.epoch_begun(3)
    w.epoch_ended(3)
    clock.advance(60.5)  # the bound: 60 s + the trigger interval (0.5 s)
    assert w.overdue(trigger_s=0.5) is None
    clock.advance(0.1)
    stall = w.overdue(trigger_s=0.5)
    assert stall is not None
    assert stall.epoch is None and stall.last == "epoch 3 ended"
    assert stall.quiet_s == pytest.approx(60.6) and stall.bound_s == pytest.approx(60.5)
    text = stall.describe()
    assert "the query is planning its next epoch" in text
    assert "stoker.progress_timeout" in text and "last progress: epoch 3 ended" in text


def test_every_signal_is_progress() -> None:
    w, clock = watchdog(timeout=30.0)
    for what in ("the query started", "a query progress event", "an idle event (no new data)"):
        clock.advance(25.0)
        w.saw(what)
        clock.advance(25.0)
        assert w.overdue(0.0) is None  # 25 s since the last signal, never 50
    w.epoch_begun(7)
    clock.advance(25.0)
    assert w.overdue(0.0) is None
    w.epoch_ended(7)
    clock.advance(29.0)
    assert w.overdue(0.0) is None


def test_the_first_epoch_after_the_query_starts_gets_a_minute_whatever_the_bound() -> None:
    """The first plan and epoch start the sources' reader processes and Spark's Python
    workers: over 5 s each on a loaded host, where a 5 s bound failed healthy starts. Until
    the first epoch ends the bound is FIRST_EPOCH_S; then the bound again."""
    w, clock = watchdog(timeout=5.0, idle=1.0)
    w.query_started()
    clock.advance(FIRST_EPOCH_S - 1)
    assert w.overdue(0.2) is None
    w.epoch_begun(0)  # planned; its first tasks start Python workers
    clock.advance(FIRST_EPOCH_S - 1)
    assert w.overdue(0.2) is None
    clock.advance(1.5)
    stall = w.overdue(0.2)
    assert stall is not None and stall.bound_s == pytest.approx(FIRST_EPOCH_S)
    assert stall.epoch == 0
    w.epoch_ended(0)
    clock.advance(5.3)  # the bound again once an epoch has ended
    assert w.overdue(0.2) is not None
    w.saw("an idle event (no new data)")
    clock.advance(5.3)
    assert w.overdue(0.2) is not None
    w.query_started()  # a restarted query warms up again
    clock.advance(5.3)
    assert w.overdue(0.2) is None


def test_an_epoch_that_runs_without_a_task_completing_is_stalled_too() -> None:
    w, clock = watchdog(timeout=30.0)
    w.epoch_begun(12)
    clock.advance(31.0)
    stall = w.overdue(0.0)
    assert stall is not None and stall.epoch == 12
    assert "epoch 12 is running and no task of it completed" in stall.describe()


def test_a_long_trigger_interval_is_waited_out() -> None:
    w, clock = watchdog(timeout=60.0)
    w.epoch_ended(1)
    clock.advance(3600.0 + 59.0)  # an hourly processing-time trigger: no event in between
    assert w.overdue(trigger_s=3600.0) is None
    clock.advance(2.0)
    assert w.overdue(trigger_s=3600.0) is not None


def test_the_bound_is_never_below_two_idle_intervals() -> None:
    # An idle query says so only every noDataProgressEventInterval: a timeout below that
    # would fail every idle job.
    w, clock = watchdog(timeout=5.0, idle=30.0)
    assert w.bound(0.0) == 60.0
    clock.advance(59.0)
    assert w.overdue(0.0) is None
    clock.advance(2.0)
    assert w.overdue(0.0) is not None


def test_time_held_does_not_count_and_the_release_starts_it_again() -> None:
    w, clock = watchdog(timeout=30.0)
    w.hold(True)  # paused: the query is stopped on purpose
    clock.advance(3600.0)
    assert w.overdue(0.0) is None
    w.hold(True)  # the same hold again changes nothing
    w.hold(False)
    clock.advance(29.0)
    assert w.overdue(0.0) is None
    clock.advance(2.0)
    stall = w.overdue(0.0)
    assert stall is not None and stall.last == "resumed"


def test_zero_turns_it_off() -> None:
    w, clock = watchdog(timeout=0.0)
    assert not w.enabled
    clock.advance(1e6)
    assert w.overdue(0.0) is None
    w.epoch_begun(1)
    clock.advance(1e6)
    assert not w.probe_due()


def test_tasks_are_looked_at_only_in_an_epoch_after_a_quiet_while_and_not_too_often() -> None:
    w, clock = watchdog(timeout=60.0)
    clock.advance(30.0)
    assert not w.probe_due()  # no epoch running: planning has no tasks to look at
    w.epoch_begun(4)
    clock.advance(4.0)
    assert not w.probe_due()  # something moved less than probe_after_s ago
    clock.advance(1.5)
    assert w.probe_due()
    assert not w.probe_due()  # just looked
    clock.advance(5.0)
    assert w.probe_due()
    w.hold(True)
    clock.advance(10.0)
    assert not w.probe_due()


def test_a_small_timeout_looks_at_tasks_often_enough_to_see_one_complete() -> None:
    w, clock = watchdog(timeout=4.0, idle=1.0)
    w.epoch_begun(2)
    clock.advance(1.0)
    assert w.probe_due()  # the reference look, a quarter of the timeout in
    clock.advance(1.0)
    assert w.probe_due()  # the look that can see a task completed: well inside the bound
    assert w.overdue(0.0) is None


def test_a_completed_task_keeps_a_slow_epoch_alive() -> None:
    w, clock = watchdog(timeout=30.0)
    w.epoch_begun(9)
    for _ in range(10):  # five minutes of one epoch, a task completing every 20 s
        clock.advance(20.0)
        w.saw("a task of epoch 9 completed")
        assert w.overdue(0.0) is None
    assert w.epoch == 9
    clock.advance(31.0)
    stall = w.overdue(0.0)
    assert stall is not None and stall.epoch == 9
    assert stall.last == "a task of epoch 9 completed"


def test_an_epoch_that_ended_leaves_no_epoch_running() -> None:
    w, _ = watchdog()
    w.epoch_begun(5)
    w.epoch_ended(4)  # not the one running: it stays
    assert w.epoch == 5
    w.epoch_ended(5, "failed")
    assert w.epoch is None


def test_the_default_bound_adapts_to_the_longest_quiet_time_of_a_healthy_job() -> None:
    """Issue 21 item 5: not given, the bound is the default or three times the longest
    recent quiet time: a job whose tasks take 150 s is not stalled at 300 s of quiet; the
    same job with the bound given is."""
    for adaptive in (True, False):
        clock = Clock()
        w = ProgressWatchdog(300.0, idle_interval_s=10.0, clock=clock, adaptive=adaptive)
        w.query_started()
        clock.advance(200.0)  # Spark starting: not the job's quiet time
        w.epoch_begun(0)
        w.epoch_ended(0)
        for epoch in range(1, 4):
            w.epoch_begun(epoch)
            clock.advance(150.0)  # one long task, nothing completing meanwhile
            w.saw("a task of the epoch completed")
            w.epoch_ended(epoch)
        assert w.bound(0.0) == (ADAPT_FACTOR * 150.0 if adaptive else 300.0)
        w.epoch_begun(4)
        clock.advance(301.0)
        assert (w.overdue(0.0) is None) is adaptive
        clock.advance(ADAPT_FACTOR * 150.0 - 300.0)
        assert w.overdue(0.0) is not None  # a real stall still fails, later


def test_the_adaptive_bound_never_goes_below_the_default() -> None:
    clock = Clock()
    w = ProgressWatchdog(300.0, idle_interval_s=10.0, clock=clock, adaptive=True)
    for epoch in range(10):
        w.epoch_begun(epoch)
        clock.advance(0.5)
        w.epoch_ended(epoch)
    assert w.bound(1.0) == 301.0


def test_a_given_timeout_turns_adaptation_off() -> None:
    from stoker.settings import Settings

    assert Settings().progress_adaptive is True
    given = Settings().with_overrides({"stoker.progress_timeout": "90s"})
    assert (given.progress_timeout, given.progress_adaptive) == (90.0, False)
    off = Settings().with_overrides({"stoker.progress_timeout": "off"})
    assert (off.progress_timeout, off.progress_adaptive) == (0.0, False)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("10000ms", 10.0),
        ("10s", 10.0),
        ("1min", 60.0),
        ("2m", 120.0),
        ("1h", 3600.0),
        ("500", 0.5),
        (None, 10.0),
        ("soon", 10.0),
    ],
)
def test_spark_durations(text: str | None, seconds: float) -> None:
    assert spark_duration_s(text, 10.0) == seconds
