"""What a job's end means for its application (issue 21 item 2), without Spark: a real SQLite
store, the application's jobs as records, and handles ended the way their threads end them.

The driver-level behaviour (real Spark, real kills) is in
tests/integration/test_application_driver.py; this is the rule itself, case by case."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from stoker.errors import DriverLost, JobFailed, StaleAttempt
from stoker.procs import host_id
from stoker.runtime import launch
from stoker.runtime.application import Application, JobHandle
from stoker.store import Owner, Store, open_store
from stoker.types import AttemptNo, AttemptState, JobId, JobKind, JobState

APP = JobId("shop")
OWNER = Owner(host_id(), 1, "t")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    st = open_store(str(tmp_path / "store.db"))
    st.create_job(APP, "shop", {"kind": "application"}, {}, kind=JobKind.APPLICATION)
    st.start_attempt(APP, OWNER, 30.0, expected_current=AttemptNo(0))
    yield st
    st.close()


def _running(store: Store, name: str, app_attempt: int = 1) -> JobId:
    """A job of the application with a RUNNING attempt, as a job thread leaves it."""
    jid = JobId(f"{APP}.{name}")
    store.create_job(jid, name, {"kind": "in_app"}, {}, kind=JobKind.JOB, app_id=APP)
    store.start_attempt(
        jid,
        OWNER,
        30.0,
        expected_current=AttemptNo(0),
        app_attempt=AttemptNo(app_attempt),
    )
    return jid


def _failed(store: Store, name: str) -> JobId:
    """A job whose strategy gave up: its attempt and the job FAILED."""
    jid = _running(store, name)
    store.finish_attempt(jid, AttemptNo(1), AttemptState.FAILED, JobState.FAILED, "boom")
    return jid


def _end(app: Application, jid: JobId, error: BaseException, optional: bool = False) -> None:
    handle = JobHandle(jid, app.store.url, app)
    handle.optional = optional
    handle._error = error
    handle._settle()
    assert handle.done()


def test_a_job_failed_for_good_fails_the_application_and_cancels_the_others(
    store: Store, tmp_path: Path
) -> None:
    app = Application(APP, AttemptNo(1), tmp_path, store)
    healthy, other = _running(store, "a"), _running(store, "b")
    bad = _failed(store, "c")
    _end(app, bad, JobFailed(f"job {bad!r} failed: RuntimeError: boom"))
    assert app.failing == f"job {bad} failed: RuntimeError: boom"
    assert "failing" in (app.ending() or "")
    assert store.get_job(healthy).state == JobState.CANCELING  # graceful: its epoch commits
    assert store.get_job(other).state == JobState.CANCELING
    # A second failure is a consequence: the first one names the application's end.
    _end(app, _failed(store, "d"), JobFailed("job 'shop.d' failed: later"))
    assert app.failing == f"job {bad} failed: RuntimeError: boom"


def test_an_optional_job_failing_leaves_the_application_running(
    store: Store, tmp_path: Path
) -> None:
    app = Application(APP, AttemptNo(1), tmp_path, store)
    healthy = _running(store, "a")
    _end(app, _failed(store, "b"), JobFailed("job 'shop.b' failed: x"), optional=True)
    assert app.failing is None and app.ending() is None
    assert store.get_job(healthy).state == JobState.RUNNING


@pytest.mark.parametrize(
    "error",
    [
        launch.AppEnding("the application is being canceled"),
        StaleAttempt("attempt 2 exists"),
        KeyboardInterrupt(),
    ],
)
def test_ends_that_are_not_the_jobs_failure_fail_nothing(
    store: Store, tmp_path: Path, error: BaseException
) -> None:
    app = Application(APP, AttemptNo(1), tmp_path, store)
    _end(app, _failed(store, "b"), error)
    assert app.failing is None


def test_an_error_of_a_job_its_strategy_restarts_fails_nothing(
    store: Store, tmp_path: Path
) -> None:
    """The thread ended with an error but the job is not FAILED (RESTARTING for the next
    driver, say): not a failure for good."""
    app = Application(APP, AttemptNo(1), tmp_path, store)
    _end(app, _running(store, "b"), JobFailed("job 'shop.b' failed: x"))
    assert app.failing is None


def test_bad_input_fails_a_job_of_an_application_for_good_without_its_strategy(
    store: Store,
) -> None:
    """As a job manager does with exit 2: the same input fails the same way, and the default
    strategy, which never gives up, would start the job again every minute for ever. Any other
    error goes to the job's strategy."""
    from stoker.errors import InvalidSink
    from stoker.runtime.job.ending import fail
    from stoker.runtime.job.plan import JobScope

    asked: list[str] = []

    def strategy(st: Store, jid: JobId, attempt: AttemptNo, error: str) -> JobState:
        asked.append(error)
        st.attempt_failed(jid, attempt, error, st.clock.now() + 1.0)
        return JobState.RESTARTING

    scope = JobScope(app_id=APP, app_attempt=AttemptNo(1), on_failure=strategy)
    proc = SimpleNamespace(error=None)
    bad = _running(store, "bad")
    mistake = InvalidSink("files.path", "is another job's output")
    with pytest.raises(InvalidSink):
        fail(store, bad, 1, proc, mistake, scope)
    assert asked == []
    job, att = store.get_job(bad), store.get_attempt(bad, AttemptNo(1))
    assert job.state == JobState.FAILED and att is not None
    assert att.state == AttemptState.FAILED
    assert att.error is not None and att.error.endswith(
        "bad input: a restart cannot fix it (fix it, then restart the job)"
    )

    flaky = _running(store, "flaky")
    with pytest.raises(JobFailed):
        fail(store, flaky, 1, proc, RuntimeError("the server went away"), scope)
    assert asked == ["the server went away"]
    assert store.get_job(flaky).state == JobState.RESTARTING


def test_a_job_ended_by_a_cancel_of_the_application_fails_nothing(
    store: Store, tmp_path: Path
) -> None:
    app = Application(APP, AttemptNo(1), tmp_path, store)
    app.cancel()
    _end(app, _failed(store, "b"), JobFailed("job 'shop.b' failed: while canceling"))
    assert app.failing is None


def test_a_dead_jvm_is_the_drivers_loss_not_a_job_failure(store: Store, tmp_path: Path) -> None:
    app = Application(APP, AttemptNo(1), tmp_path, store)
    healthy = _running(store, "a")
    _end(app, _running(store, "b"), DriverLost("the driver's JVM exited (killed by SIGKILL)"))
    assert app.driver_lost == "the driver's JVM exited (killed by SIGKILL)"
    assert app.failing is None
    assert app.ending() == app.driver_lost  # no job starts in this process any more
    assert store.get_job(healthy).state == JobState.RUNNING  # left for the next driver


def test_jvm_gone_reads_the_exit_of_the_gateways_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """``jvm_gone`` polls the process PySpark started the JVM as: a real process here."""
    from pyspark import SparkContext

    from stoker.runtime.session import jvm_gone

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        monkeypatch.setattr(SparkContext, "_gateway", SimpleNamespace(proc=proc))
        assert jvm_gone() is None
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert jvm_gone() == "the driver's JVM exited (killed by SIGKILL)"
        monkeypatch.setattr(SparkContext, "_gateway", None)
        assert jvm_gone() is None  # no JVM started here
    finally:
        proc.kill()
        proc.wait()


def test_jobs_an_earlier_main_made_and_this_one_did_not_submit_are_ended(
    store: Store, tmp_path: Path
) -> None:
    """Issue 21 item 4: once attempt 2's main has returned, the jobs attempt 1's main made
    and attempt 2's did not take back (one RUNNING under the dead driver, one RESTARTING)
    end CANCELED naming why; its own jobs and ended ones are left alone."""
    orphan = _running(store, "orphan", app_attempt=1)
    waiting = _running(store, "waiting", app_attempt=1)
    store.attempt_failed(waiting, AttemptNo(1), "boom", store.clock.now())
    assert store.get_job(waiting).state == JobState.RESTARTING
    done = _failed(store, "done")
    # The driver of attempt 1 died; the leader made attempt 2.
    store.attempt_failed(APP, AttemptNo(1), "the driver is gone", store.clock.now())
    store.start_attempt(APP, OWNER, 30.0, expected_current=AttemptNo(1), previous_dead=True)
    taken = _running(store, "taken", app_attempt=2)
    # Made under attempt 2 too (its handle not registered here): not an orphan, not reported.
    mine = _running(store, "mine", app_attempt=2)
    app = Application(APP, AttemptNo(2), tmp_path, store)
    app._register(taken)

    assert sorted(app.end_orphans()) == sorted([orphan, waiting])
    assert store.get_job(mine).state == JobState.RUNNING

    job = store.get_job(orphan)
    assert job.state == JobState.CANCELED
    assert "not submitted again by attempt 2" in (job.last_error or "")
    assert store.get_attempt(orphan, AttemptNo(1)).state == AttemptState.CANCELED
    job = store.get_job(waiting)
    assert job.state == JobState.CANCELED
    assert "not submitted again by attempt 2" in (job.last_error or "")
    assert store.get_job(taken).state == JobState.RUNNING
    assert store.get_job(done).state == JobState.FAILED
    assert app.end_orphans() == []  # once is enough
