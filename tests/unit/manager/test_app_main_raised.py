"""An application whose ``main`` raised while its jobs run (issue 39 item 7): the leader's
restart strategy for the application decides once, from the error its driver recorded on the
live attempt; a rerun counts nothing against the jobs, a give-up cancels them with the reason
and ends the application FAILED, whether its driver lives to stop them or dies in between.

Real SQLite and PostgreSQL stores, a manual clock; the driver is played by the store calls it
makes (its process on another host: never killed here). The real driver and Spark are in
tests/e2e/test_app_main_raises.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stoker.clock import ManualClock
from stoker.manager import Supervisor, SupervisorConfig
from stoker.manager.launcher import LocalProcessLauncher
from stoker.restart import FailureCause
from stoker.store import Owner, Store, open_store
from stoker.types import AttemptNo, AttemptState, JobId, JobKind, JobState, job_id

ERROR = (
    "RuntimeError: boom\nTraceback (most recent call last):\n"
    '  File "/a/app.py", line 9, in main\nRuntimeError: boom'
)
REASON = "application app's main raised: RuntimeError: boom (at /a/app.py, line 9, in main)"
NONE = {"strategy": "none"}
AGAIN = {"strategy": "fixed-delay", "attempts": 3, "delay": 2}


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    return str(request.getfixturevalue("pg_dsn"))


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def sup(store_url: str, clock: ManualClock, tmp_path: Path) -> Iterator[Supervisor]:
    s = Supervisor(
        open_store(store_url, clock), SupervisorConfig(tmp_path, store_url), LocalProcessLauncher()
    )
    yield s
    s.store.close()


def _app(store: Store, strategy: dict[str, Any]) -> JobId:
    """Application ``app``, its driver (elsewhere) running attempt 1, with jobs ``app.a``
    (running under it) and ``app.b`` (recorded, not started)."""
    app = job_id("app")
    spec = {
        "kind": "application",
        "entrypoint": "/nonexistent/app.py",
        "args": [],
        "conf": {},
        "cluster": "local",
        "restart_strategy": strategy,
    }
    store.create_job(app, "app", spec, {}, kind=JobKind.APPLICATION)
    store.start_attempt(app, Owner("elsewhere", 4242, "x"), 10.0, AttemptNo(0))
    for name in ("a", "b"):
        jid = job_id(f"app.{name}")
        store.create_job(jid, name, {"kind": "in_app", "app_id": app}, {}, app_id=app)
    store.start_attempt(
        job_id("app.a"),
        Owner("elsewhere", 4242, "x"),
        10.0,
        AttemptNo(0),
        app_attempt=AttemptNo(1),
    )
    return app


def _raised(store: Store, app: JobId, cause: FailureCause = FailureCause.MAIN_RAISED) -> None:
    """The driver records main's error on its live attempt (and keeps its jobs running)."""
    assert store.note_main_raised(app, AttemptNo(1), ERROR, cause)


def _state(store: Store, jid: str) -> tuple[JobState, int, str | None]:
    job = store.get_job(job_id(jid))
    return job.state, job.failures, job.last_error


def test_a_rerun_of_main_counts_nothing_against_the_jobs(sup: Supervisor) -> None:
    store = sup.store
    app = _app(store, AGAIN)
    _raised(store, app)
    att = store.get_attempt(app, AttemptNo(1))
    assert att is not None and (att.state, att.error) == (AttemptState.RUNNING, ERROR)
    sup.step()
    assert _state(store, "app") == (JobState.RESTARTING, 1, ERROR)
    att = store.get_attempt(app, AttemptNo(1))
    assert att is not None and (att.state, att.cause) == (AttemptState.FAILED, "main-raised")
    # The jobs keep going (the next attempt's main re-adopts them): nothing counted.
    assert _state(store, "app.a") == (JobState.RUNNING, 0, None)
    assert _state(store, "app.b") == (JobState.CREATED, 0, None)


def test_a_give_up_cancels_the_jobs_and_the_driver_ends_the_application_failed(
    sup: Supervisor, clock: ManualClock
) -> None:
    store = sup.store
    app = _app(store, NONE)
    _raised(store, app)
    sup.step()
    # The decision, recorded once: the application CANCELING with main's error, its jobs
    # asked to stop naming why; the driver's attempt stays live (it stops the jobs).
    assert _state(store, "app") == (JobState.CANCELING, 1, ERROR)
    assert _state(store, "app.a") == (JobState.CANCELING, 0, REASON)
    assert _state(store, "app.b") == (JobState.CANCELED, 0, REASON)
    att = store.get_attempt(app, AttemptNo(1))
    assert att is not None and att.state == AttemptState.RUNNING
    clock.advance(1)
    store.renew_lease(app, AttemptNo(1), 10.0)
    sup.step()
    assert _state(store, "app") == (JobState.CANCELING, 1, ERROR)  # nothing decided again
    # The driver: job a stops after its epoch in flight, then the application ends FAILED.
    store.finish_attempt(job_id("app.a"), AttemptNo(1), AttemptState.CANCELED, JobState.CANCELED)
    assert _state(store, "app.a") == (JobState.CANCELED, 0, REASON)
    store.finish_attempt(app, AttemptNo(1), AttemptState.FAILED, JobState.FAILED, ERROR)
    assert _state(store, "app") == (JobState.FAILED, 1, ERROR)
    att = store.get_attempt(app, AttemptNo(1))
    assert att is not None and (att.state, att.cause) == (AttemptState.FAILED, "main-raised")


@pytest.mark.parametrize("killed", ["before the decision", "while the jobs stop"])
def test_a_driver_killed_after_main_raised_still_ends_everything_once(
    sup: Supervisor, clock: ManualClock, killed: str
) -> None:
    store = sup.store
    app = _app(store, NONE)
    sup.step()  # the leader sees the driver's lease (stoker.leases)
    _raised(store, app)
    if killed == "while the jobs stop":
        sup.step()
        assert _state(store, "app")[0] == JobState.CANCELING
    clock.advance(11)  # the driver is gone: its lease lapses
    for _ in range(3):
        sup.step()
    # Decided once, from main's error: FAILED with it, one failure; the jobs CANCELED once,
    # naming why (their sinks are the janitor's to resolve).
    assert _state(store, "app") == (JobState.FAILED, 1, ERROR)
    assert _state(store, "app.a") == (JobState.CANCELED, 0, REASON)
    assert _state(store, "app.b") == (JobState.CANCELED, 0, REASON)
    [a1] = store.list_attempts(job_id("app.a"))
    assert a1.state == AttemptState.CANCELED
    att = store.get_attempt(app, AttemptNo(1))
    assert att is not None and (att.state, att.error) == (AttemptState.FAILED, ERROR)
    assert len(store.list_attempts(app)) == 1


def test_a_driver_that_exited_after_main_raised_fails_the_application_at_once(
    sup: Supervisor,
) -> None:
    """No job ran in the driver (main raised before submitting them again): it ended its
    attempt itself; a give-up ends the application FAILED and the jobs left CANCELED."""
    store = sup.store
    app = _app(store, NONE)
    _raised(store, app)
    store.finish_attempt(app, AttemptNo(1), AttemptState.FAILED, None, ERROR)
    sup.step()
    sup.step()
    assert _state(store, "app") == (JobState.FAILED, 1, ERROR)
    assert _state(store, "app.a") == (JobState.CANCELED, 0, REASON)
    assert _state(store, "app.b") == (JobState.CANCELED, 0, REASON)


def test_bad_input_from_main_is_not_run_again(sup: Supervisor) -> None:
    store = sup.store
    app = _app(store, AGAIN)
    _raised(store, app, FailureCause.MAIN_BAD_INPUT)
    sup.step()
    state, failures, error = _state(store, "app")
    assert (state, failures) == (JobState.CANCELING, 1)
    assert error is not None and error.startswith(ERROR) and "bad input" in error
    assert _state(store, "app.a")[0] == JobState.CANCELING


def test_the_application_is_failing_while_its_drivers_processes_are_seen(
    tmp_path: Path,
) -> None:
    """The driver ended its attempt after main raised and is still exiting when the strategy
    gives up: the application is FAILING (not ended: its jobs wait, nothing resolves their
    sinks under a writer) while its processes are killed, FAILED once they are gone; then its
    jobs end CANCELED naming main."""
    from tests.unit.manager.test_supervisor import FakeLauncher

    store = open_store(tmp_path / "store.db", ManualClock())
    launcher = FakeLauncher()
    sup = Supervisor(store, SupervisorConfig(tmp_path, store.url), launcher)
    app = _app(store, NONE)
    _raised(store, app)
    store.finish_attempt(app, AttemptNo(1), AttemptState.FAILED, None, ERROR)
    att = store.get_attempt(app, AttemptNo(1))
    assert att is not None
    launcher.lingering.add(att.owner)
    sup.step()
    assert _state(store, "app") == (JobState.FAILING, 1, ERROR)
    assert _state(store, "app.a") == (JobState.CANCELING, 0, REASON)
    sup.step()
    assert _state(store, "app")[0] == JobState.FAILING
    assert _state(store, "app.a")[0] == JobState.CANCELING  # not while the driver may write
    assert launcher.killed == [att.owner] * 2
    launcher.lingering.clear()
    sup.step()
    sup.step()
    assert _state(store, "app") == (JobState.FAILED, 1, ERROR)
    assert _state(store, "app.a") == (JobState.CANCELED, 0, REASON)
    store.close()
