"""The start watchdog's decision (runtime/startwatch.py), on a fake clock."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from stoker.errors import InvalidInput
from stoker.runtime.startwatch import (
    ADAPT_FACTOR,
    APP,
    RECENT_STARTS,
    SPARK,
    StartWatch,
    adaptive_budget,
    recent_starts,
)
from stoker.settings import Settings


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def _blocker(gate: threading.Event) -> None:
    gate.wait()  # the "main thread" hangs here


@pytest.fixture
def hung() -> object:
    gate = threading.Event()
    t = threading.Thread(target=_blocker, args=(gate,), daemon=True)
    t.start()
    yield t
    gate.set()
    t.join()


def test_spark_start_is_not_counted_and_the_failure_names_phase_and_line(hung: object) -> None:
    clock = Clock()
    w = StartWatch(10.0, Path(__file__), clock=clock, main_thread=hung.ident)  # type: ignore[attr-defined]
    clock.t += 6
    w.enter(SPARK, counted=False)
    clock.t += 1000  # a slow Spark start: not the start's hang
    assert w.overdue() is None
    w.enter("opening the sinks")
    clock.t += 3.9
    assert w.overdue() is None
    clock.t += 0.2
    why = w.overdue()
    assert why is not None
    assert why.startswith("no query after 10s: opening the sinks is still running at threading.py:")
    w.enter(APP)
    why = w.overdue()
    assert why is not None and why.startswith(
        "no query after 10s: the app's main (_blocker) is still running at test_startwatch.py:"
        f"{_blocker.__code__.co_firstlineno + 1}"
    ), why
    assert "gate.wait()" in why  # the stack
    w.stop()
    assert w.overdue() is None


def test_startup_timeout_setting() -> None:
    assert Settings().startup_timeout == 300.0
    assert Settings().startup_adaptive
    assert not Settings().with_overrides({"stoker.startup_timeout": "3s"}).startup_adaptive
    assert Settings().with_overrides({"stoker.startup_timeout": "3s"}).startup_timeout == 3.0
    assert Settings().with_overrides({"stoker.startup_timeout": "off"}).startup_timeout == 0.0
    with pytest.raises(InvalidInput, match=r"stoker\.startup_timeout"):
        Settings().with_overrides({"stoker.startup_timeout": "soon"})
    with pytest.raises(InvalidInput, match=r"stoker\.startup_timeout"):
        Settings().with_overrides({"stoker.startup_timeout": "0s"})


def test_the_default_bound_adapts_to_the_jobs_recent_starts(tmp_path: Path) -> None:
    """Not given, the bound is the 5-minute floor until a start of the job took long enough;
    then ADAPT_FACTOR times the longest of its last RECENT_STARTS starts that reached their
    query. A start that did not reach its query is not recorded; an unreadable history is the
    floor, never an error."""
    history = tmp_path / "start-times.json"
    assert adaptive_budget(300.0, history) == 300.0  # no history yet
    clock = Clock()
    for counted in (20.0, 150.0):
        w = StartWatch(300.0, None, clock=clock, history=history)
        clock.t += counted
        w.record()  # the query is about to run
        w.stop()
    assert recent_starts(history) == [20.0, 150.0]
    assert adaptive_budget(300.0, history) == ADAPT_FACTOR * 150.0
    stopped = StartWatch(300.0, None, clock=clock, history=history)
    clock.t += 999
    stopped.stop()  # the attempt ended before its query: not a start to learn from
    stopped.record()
    assert recent_starts(history) == [20.0, 150.0]
    for _ in range(RECENT_STARTS):  # the long start ages out
        w = StartWatch(300.0, None, clock=clock, history=history)
        clock.t += 10
        w.record()
    assert recent_starts(history) == [10.0] * RECENT_STARTS
    assert adaptive_budget(300.0, history) == 300.0
    history.write_text("{not json")
    assert adaptive_budget(300.0, history) == 300.0
