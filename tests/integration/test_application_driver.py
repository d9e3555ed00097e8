"""Applications (issue 10, the runtime's half): several jobs in one application driver.

Real processes: ``python -m stoker.runtime.appdriver`` started the way a job manager starts
it, with the application record and its attempt made the way the manager makes them (the
record ``kind=application``, attempt STARTING, a new attempt after a failure through
``attempt_failed`` then ``start_attempt``). Real Spark (``local[2]``), a real SQLite store,
real SIGKILL / SIGSTOP / SIGCONT. The program is tests/apps/app_three_jobs.py: a bounded
backfill (``stoker.run``) then two streams (``stoker.submit``), each writing ids and where its
epoch ran (driver pid, Spark application, scheduler mode, the task's pool) to a files sink.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from stoker.errors import InvalidInput, JobOwnedElsewhere
from stoker.procs import host_id
from stoker.store import AttemptRecord, EpochRecord, Owner, Store, open_store
from stoker.types import AttemptNo, AttemptState, EpochState, JobId, JobKind, JobState, job_id
from tests.support import APPS, REPO, exactly_once, kill_group, wait_for, wait_group_gone
from tests.support.procs import forks_left_out, processes

pytestmark = pytest.mark.timeout(900)

APP_FILE = APPS / "app_three_jobs.py"
STREAMS = ("stream-a", "stream-b")
JOBS = ("backfill", *STREAMS)
STARTUP = 240.0  # Spark's start takes 8-15 s idle, several times that on a loaded machine
RUN = 300.0


# the application, as a job manager would make and launch it ------------------------------------
class AppRun:
    """One application's store, folders and driver processes."""

    def __init__(self, tmp: Path, app: str, ttl: float, env: dict[str, str]) -> None:
        self.app = job_id(app)
        self.ttl = ttl
        self.tmp = tmp
        self.url = str(tmp / "store.db")
        self.out = tmp / "out"
        self.state_dir = tmp / "app"
        self.env = {
            "APP_OUT": str(self.out),
            "STOKER_FAULT": "",
            "STOKER_STORE_URL": self.url,
            **env,
        }
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: list[Path] = []
        self.store = open_store(self.url)
        self.store.create_job(
            self.app,
            app,
            {
                "kind": "application",
                "entrypoint": str(APP_FILE),
                "args": [],
                "conf": {},
                "cluster": "local",
                "restart_strategy": None,
            },
            {},
            kind=JobKind.APPLICATION,
        )
        self.new_attempt(0)

    def new_attempt(self, previous: int) -> AttemptRecord:
        """The next application attempt, STARTING, as the leader makes it."""
        return self.store.start_attempt(
            self.app,
            Owner(host_id(), 0, "unknown"),
            self.ttl,
            expected_current=AttemptNo(previous),
            previous_dead=previous > 0,
            state=AttemptState.STARTING,
        )

    def launch(
        self, attempt: int, entry: Path = APP_FILE, defines: tuple[str, ...] = ()
    ) -> subprocess.Popen[bytes]:
        """The application driver of ``attempt``, leading its own process group."""
        log = self.tmp / f"driver-{attempt}.log"
        argv = [
            sys.executable,
            "-m",
            "stoker.runtime.appdriver",
            "--app",
            self.app,
            "--attempt",
            str(attempt),
            "--store",
            "sqlite:///(in STOKER_STORE_URL)",
            "--state-dir",
            str(self.state_dir),
            "--lease-ttl",
            str(self.ttl),
            "-D",
            "spark.master=local[2]",
            *(arg for pair in defines for arg in ("-D", pair)),
            "--",
            str(entry),
        ]
        with open(log, "ab") as fh:
            proc = subprocess.Popen(
                argv,
                env={**os.environ, **self.env},
                stdout=fh,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=str(REPO),
            )
        self.procs.append(proc)
        self.logs.append(log)
        return proc

    def jid(self, name: str) -> JobId:
        return job_id(f"{self.app}.{name}")

    def epochs(self, name: str) -> list[EpochRecord]:
        try:
            return self.store.list_epochs(self.jid(name), limit=10_000)
        except Exception:
            return []

    def committed(self, name: str, attempt: int | None = None) -> int:
        return sum(
            e.state == EpochState.COMMITTED and (attempt is None or e.decided_by == attempt)
            for e in self.epochs(name)
        )

    def attempts(self, name: str) -> list[AttemptRecord]:
        try:
            return self.store.list_attempts(self.jid(name))
        except Exception:
            return []

    def state(self, name: str | None = None) -> JobState | None:
        try:
            return self.store.get_job(self.app if name is None else self.jid(name)).state
        except Exception:
            return None

    def rows(self, name: str) -> list[dict[str, Any]]:
        import pyarrow.parquet as pq

        rows: list[dict[str, Any]] = []
        for f in sorted((self.out / name).glob("epoch=*/*.parquet")):
            rows.extend(pq.read_table(f).to_pylist())
        return rows

    def tail(self, lines: int = 60) -> str:
        parts = []
        for log in self.logs:
            text = log.read_text(errors="replace").splitlines() if log.exists() else []
            parts.append(f"--- last {lines} lines of {log.name} ---\n" + "\n".join(text[-lines:]))
        return "\n".join(parts)

    def wait_for(self, cond: Callable[[], bool], what: str, timeout: float = STARTUP) -> None:
        """Poll ``cond`` (:func:`tests.support.wait_for`); fail with the drivers' logs on
        timeout or when the driver exits."""

        def check() -> bool:
            if cond():
                return True
            live = self.procs[-1]
            if live.poll() is not None:
                pytest.fail(f"driver exited ({live.returncode}) waiting for {what}\n{self.tail()}")
            return False

        try:
            wait_for(what, check, timeout, every=0.2)
        except AssertionError as timed_out:
            pytest.fail(f"{timed_out}\n{self.tail()}")

    def wait_exit(self, proc: subprocess.Popen[bytes], timeout: float = RUN) -> int:
        """The driver's exit code; its process group (the JVM, Python workers) gone too."""
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"driver still running after {timeout:.0f}s\n{self.tail()}")
        wait_group_gone(proc.pid)
        return code

    def close(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGCONT)
            kill_group(proc)
        self.store.close()


@pytest.fixture
def make_run(tmp_path: Path) -> Iterator[Callable[..., AppRun]]:
    made: list[AppRun] = []

    def make(app: str, ttl: float = 20.0, **env: str) -> AppRun:
        run = AppRun(tmp_path, app, ttl, env)
        made.append(run)
        return run

    yield make
    for run in made:
        run.close()


def group_cmdlines(pgid: int) -> list[str]:
    """The command lines of the processes of group ``pgid`` (the driver, its JVM, workers)."""
    return [" ".join(p.argv) + " " for p in processes() if p.pgid == pgid]


def freeze(run: AppRun, pgid: int) -> None:
    """SIGSTOP the driver's process group at a moment it holds no write lock of the SQLite
    store (frozen inside a write transaction, it would block every other writer for good):
    stopped, probed, and let go to try again while a writer of the group holds the lock."""
    for _ in range(100):
        os.killpg(pgid, signal.SIGSTOP)
        time.sleep(0.05)  # delivered to every process of the group
        conn = sqlite3.connect(run.url, timeout=0.5)
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.rollback()
            return
        except sqlite3.OperationalError:
            os.killpg(pgid, signal.SIGCONT)
            time.sleep(0.05)
        finally:
            conn.close()
    pytest.fail("the driver always held the store's write lock when stopped")


def ids_exactly_once(run: AppRun, name: str, total: int | None = None) -> None:
    ids = Counter(int(r["id"]) for r in run.rows(name))
    exactly_once(ids, len(ids) if total is None else total)


# the tests ------------------------------------------------------------------------------------
@pytest.mark.scenario  # the fast lane keeps this module's kills (a killed and a zombie driver)
def test_three_jobs_share_one_driver_and_a_failed_job_restarts_alone(
    make_run: Callable[..., AppRun],
) -> None:
    """Job ids ``<app>.<name>``; the backfill ends FINISHED before the streams start; all three
    run in one driver process and one Spark application, each job's tasks in its own FAIR
    pool. stream-a fails once inside the healthy driver: its own strategy restarts it while
    stream-b goes on. A cancel of the application ends every job CANCELED, then the app."""
    run = make_run("trio", APP_FAIL_ONCE="stream-a:2", APP_TASK_POOL="1")
    driver = run.launch(1, defines=("spark.driver.memory=640m",))
    run.wait_for(lambda: run.state("backfill") == JobState.FINISHED, "the backfill to finish")
    run.wait_for(
        lambda: run.committed("stream-a", attempt=2) >= 2, "stream-a's second attempt to commit"
    )
    failed = run.attempts("stream-a")[0]
    assert failed.state == AttemptState.FAILED and failed.ended_at is not None
    assert "planned failure of stream-a at epoch 2" in (failed.error or "")
    run.wait_for(
        lambda: any(
            e.decided_at is not None and e.decided_at > (failed.ended_at or 0)
            for e in run.epochs("stream-b")
        ),
        "stream-b to commit after stream-a failed",
    )

    jobs = run.store.list_jobs(kind=JobKind.JOB, app_id=run.app)
    assert sorted(j.job_id for j in jobs) == sorted(run.jid(n) for n in JOBS)
    assert all(j.spec["kind"] == "in_app" and j.spec["app_id"] == run.app for j in jobs)
    assert all(
        j.spec["state_dir"] == str(run.state_dir.resolve() / "jobs" / j.job_id) for j in jobs
    )
    assert len(run.attempts("backfill")) == 1
    assert [a.state for a in run.attempts("stream-b")] == [AttemptState.RUNNING]
    assert [a.state for a in run.attempts("stream-a")] == [
        AttemptState.FAILED,
        AttemptState.RUNNING,
    ]
    every = [a for n in JOBS for a in run.attempts(n)]
    assert {a.owner.pid for a in every} == {driver.pid}
    jvms = [c for c in group_cmdlines(driver.pid) if c.split(" ")[0].endswith("/java")]
    assert any("-Xmx640m" in c.split() for c in jvms), jvms  # from -D spark.driver.memory
    assert {a.app_attempt for a in every} == {1}

    seen: dict[str, set[tuple[Any, ...]]] = {}
    for name in JOBS:
        seen[name] = {(r["pid"], r["app"], r["mode"], r["pool"]) for r in run.rows(name)}
    spark_apps = {app for rows in seen.values() for (_, app, _, _) in rows}
    assert len(spark_apps) == 1, seen
    for name in JOBS:
        assert seen[name] == {(driver.pid, next(iter(spark_apps)), "FAIR", run.jid(name))}

    run.store.request_cancel(run.app)
    assert run.wait_exit(driver) == 0, run.tail()
    assert run.state() == JobState.CANCELED
    assert run.store.list_attempts(run.app)[-1].state == AttemptState.CANCELED
    assert run.state("backfill") == JobState.FINISHED
    assert [run.state(n) for n in STREAMS] == [JobState.CANCELED, JobState.CANCELED]
    ids_exactly_once(run, "backfill", 200)
    for name in STREAMS:
        ids_exactly_once(run, name)


def test_killed_driver_resumes_its_jobs_and_skips_the_finished_one(
    make_run: Callable[..., AppRun],
) -> None:
    """SIGKILL of the driver mid-run; the leader's next application attempt starts a new
    driver: main runs again, the backfill is not re-run, both streams resume from their
    checkpoints under the new attempt, every output exactly once."""
    total = 300
    run = make_run("phoenix", APP_STREAM_TOTAL=str(total), APP_PER_EPOCH="50", APP_RATE="30")
    first = run.launch(1)
    run.wait_for(
        lambda: all(run.committed(n) >= 2 for n in STREAMS), "both streams to commit twice"
    )
    assert all(run.state(n) == JobState.RUNNING for n in STREAMS)
    kill_group(first)

    # As the leader does once the driver is gone: the attempt failed, the next one STARTING.
    run.store.attempt_failed(run.app, AttemptNo(1), "the driver is gone", run.store.clock.now())
    run.new_attempt(1)
    second = run.launch(2)
    assert run.wait_exit(second) == 0, run.tail()

    assert run.state() == JobState.FINISHED
    assert [run.state(n) for n in JOBS] == [JobState.FINISHED] * 3
    backfill = run.attempts("backfill")
    assert len(backfill) == 1 and backfill[0].owner.pid == first.pid  # not run again
    for name in STREAMS:
        attempts = run.attempts(name)
        assert attempts[-1].app_attempt == 2 and attempts[-1].owner.pid == second.pid
        assert {a.app_attempt for a in attempts} == {1, 2}
        assert run.committed(name, attempt=int(attempts[-1].attempt)) >= 1
    ids_exactly_once(run, "backfill", 200)
    for name in STREAMS:
        ids_exactly_once(run, name, total)


def test_zombie_driver_decides_nothing_and_a_signal_suspends_the_new_one(
    make_run: Callable[..., AppRun],
) -> None:
    """The first driver is frozen (SIGSTOP of its process group) until its application lease
    lapses; the leader starts attempt 2 and its driver. Resumed (SIGCONT), the zombie decides
    no epoch of any job and exits 6. Then SIGTERM stops the new driver gracefully: every job
    and the application end SUSPENDED (resumable), and what was committed is exactly once."""
    run = make_run("zombie", ttl=5.0, APP_PER_EPOCH="50", APP_RATE="30")
    first = run.launch(1)
    run.wait_for(
        lambda: all(run.committed(n) >= 2 for n in STREAMS), "both streams to commit twice"
    )
    freeze(run, first.pid)
    lease = run.store.list_attempts(run.app)[0].lease_expires_at
    wait_for("the lease of attempt 1 to lapse", lambda: run.store.clock.now() > lease, 60, 0.2)
    run.store.attempt_failed(
        run.app, AttemptNo(1), "the lease of attempt 1 expired", run.store.clock.now()
    )
    run.new_attempt(1)
    switch = run.store.clock.now()
    second = run.launch(2)
    run.wait_for(
        lambda: all(
            any(a.app_attempt == 2 for a in run.attempts(n))
            and run.committed(n, attempt=int(run.attempts(n)[-1].attempt)) >= 1
            for n in STREAMS
        ),
        "the new driver's streams to commit",
    )
    os.killpg(first.pid, signal.SIGCONT)
    assert run.wait_exit(first, timeout=120) == 6, run.tail()
    for name in STREAMS:
        under = {int(a.attempt): a.app_attempt for a in run.attempts(name)}
        late = [
            e
            for e in run.epochs(name)
            if e.decided_at is not None and e.decided_at >= switch and under[e.decided_by or 0] != 2
        ]
        assert not late, f"{name}: epochs decided by a fenced attempt after the switch: {late}"

    second.send_signal(signal.SIGTERM)  # the driver only, as a container stop would
    assert run.wait_exit(second) == 13, run.tail()
    assert run.state() == JobState.SUSPENDED
    assert run.store.list_attempts(run.app)[-1].state == AttemptState.SUSPENDED
    assert run.state("backfill") == JobState.FINISHED
    for name in STREAMS:
        assert run.state(name) == JobState.SUSPENDED
        assert run.attempts(name)[-1].state == AttemptState.SUSPENDED
        ids_exactly_once(run, name)
    ids_exactly_once(run, "backfill", 200)


@pytest.mark.scenario  # the failure rule of applications, no fault: the whole suite
def test_a_job_failing_for_good_fails_the_application_unless_it_is_optional(
    make_run: Callable[..., AppRun],
) -> None:
    """Flink's rule (issue 21 item 2). Three streams, each restarted once by its own strategy
    inside the driver. stream-b is optional: it fails for good and the application goes on.
    Then stream-c fails for good while main waits on stream-a, which never ends by itself:
    the application fails naming stream-c, stream-a is canceled gracefully (its epochs
    exactly once), and the application's own restart strategy is not used (one attempt).
    Before: the application stayed RUNNING for ever with a FAILED job inside."""
    run = make_run(
        "fragile",
        APP_STREAMS="stream-a,stream-b,stream-c",
        APP_OPTIONAL="stream-b",
        APP_FAIL_ALWAYS="stream-b:2,stream-c:file",
        APP_RESTART='{"strategy": "fixed-delay", "attempts": 1, "delay": 0}',
        APP_BACKFILL="100",
    )
    driver = run.launch(1)
    run.wait_for(lambda: run.state("stream-b") == JobState.FAILED, "stream-b to fail for good")
    assert [a.state for a in run.attempts("stream-b")] == [AttemptState.FAILED] * 2
    failed_at = run.attempts("stream-b")[-1].ended_at or 0
    run.wait_for(
        lambda: (
            any((e.decided_at or 0) > failed_at for e in run.epochs("stream-a"))
            and any((e.decided_at or 0) > failed_at for e in run.epochs("stream-c"))
        ),
        "stream-a and stream-c to commit after the optional stream-b failed",
    )
    assert run.state() == JobState.RUNNING

    (run.out / "_fail.stream-c").touch()
    assert run.wait_exit(driver) == 8, run.tail()
    assert run.state() == JobState.FAILED
    [attempt] = run.store.list_attempts(run.app)
    assert attempt.state == AttemptState.FAILED
    assert "job fragile.stream-c failed" in (attempt.error or ""), attempt.error
    assert "stream-c fails at every epoch now" in (attempt.error or "")
    assert "stream-b" not in (attempt.error or "")
    assert run.state("stream-c") == JobState.FAILED
    assert [a.state for a in run.attempts("stream-c")] == [AttemptState.FAILED] * 2
    assert run.state("stream-a") == JobState.CANCELED
    assert run.attempts("stream-a")[-1].state == AttemptState.CANCELED
    assert run.state("backfill") == JobState.FINISHED
    ids_exactly_once(run, "backfill", 100)
    for name in ("stream-a", "stream-b", "stream-c"):
        ids_exactly_once(run, name)


def test_a_dead_jvm_is_a_new_driver_attempt_not_a_failure_of_its_jobs(
    make_run: Callable[..., AppRun],
) -> None:
    """SIGKILL of the driver's JVM alone (issue 21 item 2): no job restarts in the dead
    SparkSession nor uses up its strategy; the attempt ends FAILED (exit 17) naming the JVM,
    and the next driver attempt resumes both streams, every id exactly once. Before: each
    stream's attempt failure was counted and its restart ran in the dead SparkSession, which
    failed at once (connection refused)."""
    total = 300
    run = make_run("lazarus", APP_STREAM_TOTAL=str(total), APP_PER_EPOCH="50", APP_RATE="30")
    first = run.launch(1)
    run.wait_for(
        lambda: all(run.committed(n) >= 2 for n in STREAMS), "both streams to commit twice"
    )
    # The JVM, not a child it forked and has not exec'd yet (a Hadoop `chmod`, a Python
    # worker): such a child carries the JVM's command line for a moment.
    group = forks_left_out(p for p in processes() if p.pgid == first.pid)
    [jvm] = [p.pid for p in group if p.argv and p.argv[0].endswith("/java")]
    # What each stream had before the kill (on a loaded machine an epoch may have failed and
    # been restarted in process already: "Python worker failed to connect back"); the kill
    # must add no failure and fail no attempt.
    before = {n: (run.store.get_job(run.jid(n)).failures, len(run.attempts(n))) for n in STREAMS}
    os.kill(jvm, signal.SIGKILL)
    assert run.wait_exit(first, timeout=120) == 17, run.tail()
    [attempt] = run.store.list_attempts(run.app)
    assert attempt.state == AttemptState.FAILED
    assert "DriverLost" in (attempt.error or "") and "JVM" in (attempt.error or ""), attempt.error
    for name in STREAMS:
        failures, attempts = before[name]
        assert run.store.get_job(run.jid(name)).failures == failures, name
        assert run.attempts(name)[attempts - 1].state != AttemptState.FAILED, name

    run.new_attempt(1)  # as the leader's strategy for the application does
    second = run.launch(2)
    assert run.wait_exit(second) == 0, run.tail()
    assert run.state() == JobState.FINISHED
    for name in STREAMS:
        assert run.state(name) == JobState.FINISHED
        assert run.attempts(name)[-1].app_attempt == 2
        ids_exactly_once(run, name, total)
    ids_exactly_once(run, "backfill", 200)


@pytest.mark.scenario  # an application's restart, no fault: the whole suite
def test_a_canceled_application_restarted_resumes_its_jobs_and_ends_those_main_dropped(
    make_run: Callable[..., AppRun],
) -> None:
    """Issue 21 items 3 and 4: cancel the application mid-run, then restart it (the store's
    ``restart_job``, as ``POST /v1/applications {"restart": true}`` does), with a ``main``
    that no longer submits stream-b. stream-a resumes from its checkpoint (its epochs go on
    from where the cancel left them) and every id is written exactly once over both runs;
    the finished backfill is not run again; stream-b, which nobody will run any more, ends
    CANCELED naming why once main has returned. Before: stream-a answered CANCELED at once,
    the application ended FINISHED having run nothing, and a job dropped by a new main stayed
    as it was for ever."""
    total = 240
    run = make_run("encore", APP_STREAM_TOTAL=str(total), APP_PER_EPOCH="20", APP_RATE="20")
    first = run.launch(1)
    run.wait_for(
        lambda: all(run.committed(n) >= 2 for n in STREAMS), "both streams to commit twice"
    )
    run.store.request_cancel(run.app)
    assert run.wait_exit(first) == 0, run.tail()
    assert run.state() == JobState.CANCELED
    assert [run.state(n) for n in STREAMS] == [JobState.CANCELED] * 2
    before = run.committed("stream-a")

    run.store.restart_job(run.app, run.store.get_job(run.app).spec)
    assert [run.state(n) for n in STREAMS] == [JobState.RESTARTING] * 2
    run.new_attempt(1)
    run.env["APP_STREAMS"] = "stream-a"  # the new main does not submit stream-b
    second = run.launch(2)
    assert run.wait_exit(second) == 0, run.tail()

    assert run.state() == JobState.FINISHED
    assert len(run.attempts("backfill")) == 1  # finished: not run again
    assert run.state("stream-a") == JobState.FINISHED
    resumed = run.attempts("stream-a")[-1]
    assert resumed.app_attempt == 2
    first_new = min(
        int(e.epoch) for e in run.epochs("stream-a") if e.decided_by == int(resumed.attempt)
    )
    assert first_new >= before, (first_new, before)
    ids_exactly_once(run, "stream-a", total)
    dropped = run.store.get_job(run.jid("stream-b"))
    assert dropped.state == JobState.CANCELED
    assert "not submitted again by attempt 2" in (dropped.last_error or ""), dropped
    ids_exactly_once(run, "stream-b")
    ids_exactly_once(run, "backfill", 200)


def test_main_raising_fails_the_attempt_with_its_error(
    make_run: Callable[..., AppRun],
) -> None:
    """An error of main ends the application attempt FAILED with the error text, and leaves
    the application to the leader's restart strategy (no job was submitted: no Spark)."""
    run = make_run("grumpy", APP_MAIN_RAISES="boom from main")
    assert run.wait_exit(run.launch(1)) == 1, run.tail()
    attempt = run.store.list_attempts(run.app)[0]
    assert attempt.state == AttemptState.FAILED
    assert "RuntimeError: boom from main" in (attempt.error or "")
    assert run.state() == JobState.RUNNING  # the leader moves it on (RESTARTING or FAILED)
    assert run.store.list_jobs(kind=JobKind.JOB, app_id=run.app) == []


LATER = APPS / "app_main_raises_later.py"  # main raises once its two streams run


def _raised_with_jobs_running(run: AppRun) -> subprocess.Popen[bytes]:
    """The driver of attempt 1 of LATER, once main's error is on its live attempt: its two
    jobs still RUNNING, waiting for a job manager's decision (none comes here by itself)."""
    driver = run.launch(1, LATER)

    def noted() -> bool:
        att = run.store.list_attempts(run.app)[0]
        return att.cause == "main-raised" and att.state == AttemptState.RUNNING

    run.wait_for(noted, "main's error on the live attempt")
    assert [run.state(n) for n in ("a", "b")] == [JobState.RUNNING, JobState.RUNNING]
    assert "RuntimeError: main gives up" in (run.store.list_attempts(run.app)[0].error or "")
    return driver


def test_main_raising_with_jobs_running_waits_for_the_decision_then_cancels_them(
    make_run: Callable[..., AppRun],
) -> None:
    """Issue 39 item 7, the driver's half: main raised with two healthy jobs; the test gives
    the leader's give-up (fail_application, as stoker.manager.reconciler does): each job stops
    after its epoch in flight, CANCELED naming why, then the application ends FAILED with
    main's error and the driver exits with main's code."""
    run = make_run("late")
    driver = _raised_with_jobs_running(run)
    why = "application late's main raised: RuntimeError: main gives up"
    error = run.store.list_attempts(run.app)[0].error or ""
    run.store.fail_application(run.app, AttemptNo(1), error, why)
    assert run.wait_exit(driver) == 1, run.tail()
    app = run.store.get_job(run.app)
    assert (app.state, app.last_error, app.failures) == (JobState.FAILED, error, 1)
    for name in ("a", "b"):
        job = run.store.get_job(run.jid(name))
        assert (job.state, job.last_error) == (JobState.CANCELED, why)
        assert [a.state for a in run.attempts(name)] == [AttemptState.CANCELED]
        assert all(e.state == EpochState.COMMITTED for e in run.epochs(name))
        ids_exactly_once(run, name)


def test_a_signal_while_main_raised_waits_suspends_the_jobs(
    make_run: Callable[..., AppRun],
) -> None:
    """SIGTERM while the driver waits for the decision: every job suspends after its epoch in
    flight, the attempt ends FAILED with main's error, and the application is left to the
    leader's strategy (which decides from the ended attempt)."""
    run = make_run("late-term")
    driver = _raised_with_jobs_running(run)
    os.kill(driver.pid, signal.SIGTERM)
    assert run.wait_exit(driver) == 1, run.tail()
    att = run.store.list_attempts(run.app)[0]
    assert (att.state, att.cause) == (AttemptState.FAILED, "main-raised")
    assert run.state() == JobState.RUNNING  # the leader moves it on
    assert [run.state(n) for n in ("a", "b")] == [JobState.SUSPENDED, JobState.SUSPENDED]
    for name in ("a", "b"):
        ids_exactly_once(run, name)


def test_a_file_that_does_not_compile_fails_the_attempt(
    make_run: Callable[..., AppRun], tmp_path: Path
) -> None:
    run = make_run("broken")
    bad = tmp_path / "broken_app.py"
    bad.write_text("def main(:\n    pass\n")
    assert run.wait_exit(run.launch(1, bad)) == 2, run.tail()
    attempt = run.store.list_attempts(run.app)[0]
    assert attempt.state == AttemptState.FAILED
    assert "syntax error at" in (attempt.error or "") and "broken_app.py:1" in (attempt.error or "")


# refusals before anything starts (in this process, no Spark session) --------------------------
@pytest.fixture
def in_app(tmp_path: Path) -> Iterator[tuple[Store, Any]]:
    """This process as the driver of application ``mine`` (attempt 1)."""
    from stoker.runtime import application, launch

    url = str(tmp_path / "store.db")
    st = open_store(url)
    for app in ("mine", "other"):
        st.create_job(job_id(app), app, {"kind": "application"}, {}, kind=JobKind.APPLICATION)
        st.start_attempt(
            job_id(app),
            Owner(host_id(), os.getpid(), "x"),
            30.0,
            AttemptNo(0),
            state=AttemptState.STARTING,
        )
    previous = launch.install(
        launch.LaunchContext(
            overrides={"stoker.store": url, "spark.master": "spark://127.0.0.1:7077"}
        )
    )
    app = application.Application(job_id("mine"), AttemptNo(1), tmp_path / "mine", st)
    application.enter(app)
    try:
        yield st, app
    finally:
        application.leave()
        launch.install(previous)
        st.close()


def _pipeline(name: str, out: Path) -> Any:
    from stoker import Pipeline, sinks, sources

    p = Pipeline(name)
    p.source(sources.generator(total=10))
    p.sink(sinks.files(str(out)))
    return p


def test_a_job_id_owned_elsewhere_is_refused(in_app: tuple[Store, Any], tmp_path: Path) -> None:
    import stoker

    st, _app = in_app
    st.create_job(job_id("other.x"), "x", {"kind": "in_app"}, {}, app_id=job_id("other"))
    st.create_job(job_id("alone"), "alone", {"kind": "app"}, {})
    with pytest.raises(JobOwnedElsewhere, match="application 'other' owns it"):
        stoker.submit(_pipeline("x", tmp_path / "o1"), job_id="other.x")
    with pytest.raises(JobOwnedElsewhere, match="submitted alone"):
        stoker.submit(_pipeline("y", tmp_path / "o2"), job_id="alone")
    with pytest.raises(JobOwnedElsewhere, match="is an application"):
        stoker.run(_pipeline("z", tmp_path / "o3"), job_id="other")
    assert st.list_jobs(kind=JobKind.JOB, app_id=job_id("mine")) == []


def test_a_relative_state_dir_on_a_cluster_is_refused(
    in_app: tuple[Store, Any], tmp_path: Path
) -> None:
    import stoker

    st, _app = in_app
    with pytest.raises(InvalidInput) as err:
        stoker.submit(_pipeline("rel", tmp_path / "o"), state_dir="relative/folder")
    assert err.value.field == "state_dir" and "spark://127.0.0.1:7077" in str(err.value)
    assert st.list_jobs(kind=JobKind.JOB, app_id=job_id("mine")) == []
    assert not (tmp_path / "o").exists()


@pytest.mark.scenario  # a feature of stoker.submit, no fault: the whole suite
def test_submit_outside_an_application_runs_on_a_thread(tmp_path: Path) -> None:
    """Outside an application, submit runs each job on a thread of this process with its own
    local store; two jobs at once share the session, and wait() returns each one's result."""
    import stoker
    from stoker.runtime.session import get_session
    from stoker.settings import Settings

    get_session(Settings(master="local[2]"), "tests")
    handles = [
        stoker.submit(
            _pipeline(name, tmp_path / name / "out"),
            state_dir=tmp_path / name / "state",
            trigger="100ms",
        )
        for name in ("solo-a", "solo-b")
    ]
    results = [h.wait(timeout=RUN) for h in handles]
    assert [r.state for r in results] == [JobState.FINISHED, JobState.FINISHED]
    assert [h.state for h in handles] == [JobState.FINISHED, JobState.FINISHED]
    assert all(h.done() for h in handles)
    for name, r in zip(("solo-a", "solo-b"), results, strict=True):
        assert r.job_id == name and r.store_url.endswith("store.db")
        from tests.support import file_sink_ids

        exactly_once(file_sink_ids(tmp_path / name / "out"), 10)
