"""The start watchdog's decision (runtime/startwatch.py), on a fake clock."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from stoker.errors import InvalidInput
from stoker.runtime.startwatch import APP, SPARK, StartWatch
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
        "no query after 10s: the app's main (_blocker) is still running at test_startwatch.py:24"
    ), why
    assert "gate.wait()" in why  # the stack
    w.stop()
    assert w.overdue() is None


def test_startup_timeout_setting() -> None:
    assert Settings().startup_timeout == 300.0
    assert Settings().with_overrides({"stoker.startup_timeout": "3s"}).startup_timeout == 3.0
    assert Settings().with_overrides({"stoker.startup_timeout": "off"}).startup_timeout == 0.0
    with pytest.raises(InvalidInput, match=r"stoker\.startup_timeout"):
        Settings().with_overrides({"stoker.startup_timeout": "soon"})
    with pytest.raises(InvalidInput, match=r"stoker\.startup_timeout"):
        Settings().with_overrides({"stoker.startup_timeout": "0s"})
