"""One application attempt inside its driver process (``runtime/appdriver.py``): the
program run on the main thread, the attempt's lease and the watch of the application's
record, and how the attempt ends (the module docstring of ``appdriver`` says when it ends
how). Split from the process's entry point so that a standby (which runs the program before
it holds an attempt) and a driver started for an attempt share it."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from types import FrameType

from stoker.errors import (
    EXIT_CODES,
    DriverLost,
    InvalidInput,
    InvalidTransition,
    JobFailed,
    JobSuspended,
    StaleAttempt,
    StokerError,
    exit_code,
)
from stoker.errortext import one_line
from stoker.redact import redact_text
from stoker.restart import FailureCause
from stoker.runtime import application, launch
from stoker.runtime.attempt import LeaseKeeper
from stoker.runtime.session import jvm_gone
from stoker.store import AttemptRecord, Store
from stoker.testing import fault_point
from stoker.types import AttemptNo, AttemptState, JobState

log = logging.getLogger("stoker.appdriver")

WATCH_S = 0.2  # how often the application's record is read (cancel, a newer attempt)
# How long a driver whose main raised keeps its jobs running for the leader's decision (one
# tick, mostly; a leader's failover or a long first tick after an upgrade take longer).
VERDICT_WAIT = 120.0
FENCED_GRACE_S = 10.0  # how long fenced jobs get to stop their queries before the exit
EXIT_FENCED = exit_code(StaleAttempt(""))
EXIT_FAILED = exit_code(JobFailed(""))
EXIT_SUSPENDED = exit_code(JobSuspended())
EXIT_DRIVER_LOST = exit_code(DriverLost(""))
EXIT_BAD_INPUT = EXIT_CODES[InvalidInput]


class AppSignals:
    """SIGTERM and SIGINT in an application driver: every job stops gracefully.

    The handler records the signal and tells the application (its jobs' supervise loops
    read that between epochs). It raises KeyboardInterrupt into the main thread, to end the
    program's ``main``, unless the main thread waits for a job (the wait sees the stop and
    ends ``main`` itself) or the driver is already concluding.
    """

    def __init__(self) -> None:
        self.received: int | None = None
        self.app: application.Application | None = None
        self.taken: AttemptNo | None = None  # a standby's attempt, once it was handed one
        self.concluding = False

    def install(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._handle)

    def rearm(self) -> None:
        """Take the signals back from whoever replaced the handler since (PySpark does)."""
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGTERM, signal.SIGINT):
            if signal.getsignal(sig) != self._handle:
                signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        first = self.received is None
        self.received = signum
        log.warning(
            "%s: every job stops after its epoch in flight; the application will be "
            "SUSPENDED (resumable)",
            signal.Signals(signum).name,
        )
        app = self.app
        if app is not None:
            app.stop()
        if first and not self.concluding and (app is None or not app.main_waiting):
            raise KeyboardInterrupt


class AttemptDriver:
    """One application attempt in this process: the program, its jobs, the attempt's end."""

    def __init__(
        self,
        store: Store,
        app: application.Application,
        lease: LeaseKeeper,
        signals: AppSignals,
        ctx: launch.LaunchContext,
    ) -> None:
        self.store = store
        self.ctx = ctx
        self.app = app
        self.lease = lease
        self.signals = signals
        self._once = threading.Lock()
        self._code: int | None = None
        self._watching = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="stoker-app-watch", daemon=True)

    @classmethod
    def entered(
        cls,
        store: Store,
        rec: AttemptRecord,
        state_dir: Path,
        ttl: float,
        signals: AppSignals,
        ctx: launch.LaunchContext,
    ) -> AttemptDriver:
        """The application attempt ``rec``, claimed by this process, made the process's
        application (its jobs fenced by it, signals stopping it) and its driver."""
        app = application.Application(rec.job_id, rec.attempt, state_dir, store)
        app.rearm = signals.rearm
        lease = LeaseKeeper(store, rec, ttl, on_fenced=app.fence)
        signals.app = app
        application.enter(app)
        return cls(store, app, lease, signals, ctx)

    def exit_with(self, code: int) -> int:
        """The process's exit code; jobs that still run (the program failed, or they were
        fenced) are left at once (:func:`exit_now`)."""
        if self.app.running():
            exit_now(code)
        return code

    def begin(self) -> None:
        """The attempt is this process's: its lease renewed, the application's record
        watched (before the program runs, or, in a standby, once it was handed the attempt)."""
        self.lease.start()
        self._watching.set()
        self._watcher.start()

    def run(self, entrypoint: str, args: list[str]) -> int:
        """Run the program on this (the main) thread; the attempt's end as an exit code."""
        self.begin()
        error = run_app_program(entrypoint, args, lambda: self, self.app.app_id, self.ctx)
        return self.conclude(error)

    def program_ended(self) -> None:
        """main returned: the earlier main's jobs it did not take back are ended."""
        self.signals.rearm()
        if self.app.ending() is None:
            # main has started all it will: an earlier main's jobs it did not take back
            # would otherwise stay RUNNING for ever under a dead driver.
            self.app.end_orphans()

    # how the attempt ends -------------------------------------------------------------------
    def conclude(self, error: BaseException | None) -> int:
        """End the application attempt (once, whichever thread comes first); its exit code."""
        with self._once:
            if self._code is None:
                self.signals.concluding = True
                self._code = self._conclude(error)
            return self._code

    def _conclude(self, error: BaseException | None) -> int:
        app = self.app
        if app.driver_lost is not None and app.fenced() is None:
            # Nothing in this process can run a query any more: the job manager's strategy
            # for the application starts a new driver, which takes the jobs over.
            self._end(AttemptState.FAILED, None, f"DriverLost: {app.driver_lost}")
            return EXIT_DRIVER_LOST
        if (
            app.fenced() is None
            and error is not None
            and not self._stopping()
            and app.failing is None
        ):
            return self._main_raised(error)
        self._drain()
        app.stop_resource_watch()  # its jobs are over: nothing more to report or to apply
        if app.fenced() is not None:
            log.error("application %s: fenced off, exiting: %s", app.app_id, app.fenced())
            return EXIT_FENCED
        if self._canceled():
            self._end(AttemptState.CANCELED, JobState.CANCELED, None)
            return 0
        if app.stopped():
            return self._end_suspended()
        failed = [app.failing] if app.failing is not None else _failures(app)
        if failed:
            self._end(AttemptState.FAILED, JobState.FAILED, "; ".join(failed)[:4000])
            return EXIT_FAILED
        self._end(AttemptState.FINISHED, JobState.FINISHED, None)
        return 0

    def _main_raised(self, error: BaseException) -> int:
        """The program raised: the job manager's restart strategy for the application decides,
        once, while this process keeps the application's jobs running (nothing is counted
        against them). The error and its cause are recorded on the attempt, which stays live;
        then, as the leader has decided:

        1. a new attempt comes (the application RESTARTING, this attempt ended): the leader
           kills this process; the next attempt's ``main`` re-adopts the jobs;
        2. the strategy gave up (the application CANCELING, its jobs too, with the reason, in
           the leader's one transaction): each job stops after its epoch in flight, then the
           attempt and the application end FAILED with main's error. Killed in between, the
           leader ends the application FAILED and the jobs CANCELED (their sinks resolved by
           its janitor): the decision was recorded before anything acted on it.

        No job running here (main raised before any, or they ended), the store unwritable, a
        signal or no leader's decision within ``VERDICT_WAIT``: the attempt ends FAILED and the
        process exits, the leader's strategy deciding from that (a give-up ends the jobs still
        recorded live CANCELED, naming main)."""
        app = self.app
        text = _main_error(error)
        code = exit_code(error) if isinstance(error, StokerError) else 1
        log.error("application %s: the program failed: %s", app.app_id, one_line(text))
        if not isinstance(error, StokerError):
            traceback.print_exception(error)
        cause = FailureCause.MAIN_BAD_INPUT if code == EXIT_BAD_INPUT else FailureCause.MAIN_RAISED
        try:
            noted = self.store.note_main_raised(app.app_id, app.attempt, text, cause)
        except StokerError as e:
            log.warning("application %s: recording main's error failed: %s", app.app_id, e)
            noted = False
        if noted:
            fault_point("app_main_raised")
        if noted and app.running():
            log.info(
                "application %s: its jobs go on while the job manager's restart strategy "
                "decides whether main runs again",
                app.app_id,
            )
            if self._await_verdict():
                return self._cancel_after_main(text, code)
            if app.fenced() is not None:  # a new attempt comes: nothing here is ours to end
                return code
            if app.stopped() and app.driver_lost is None:
                self._drain()  # a signal: every job suspends after its epoch in flight
        self._end(AttemptState.FAILED, None, text)
        return code

    def _await_verdict(self) -> bool:
        """Wait for the leader's decision on main's error: True when its strategy gave up
        (the application CANCELING, seen by the watcher); False for a new attempt (this one
        fenced), a signal, the JVM lost, or none within ``VERDICT_WAIT``."""
        app = self.app
        deadline = time.monotonic() + VERDICT_WAIT
        while app.fenced() is None and not app.stopped() and app.driver_lost is None:
            if app.canceling:
                return True
            if time.monotonic() > deadline:
                log.warning(
                    "application %s: no decision of a job manager within %.0f s: the attempt "
                    "ends FAILED and the leader decides from that",
                    app.app_id,
                    VERDICT_WAIT,
                )
                return False
            time.sleep(WATCH_S)
        return False

    def _cancel_after_main(self, text: str, code: int) -> int:
        """The strategy gave up: every job stops after its epoch in flight (the leader asked
        each to, naming main), then the attempt and the application end FAILED with main's
        error."""
        app = self.app
        log.error(
            "application %s: the restart strategy gives up on main's error: its jobs are "
            "canceled gracefully, then it ends FAILED",
            app.app_id,
        )
        fault_point("app_canceling_jobs")
        self._drain()
        app.stop_resource_watch()
        if app.fenced() is not None:
            log.error("application %s: fenced off, exiting: %s", app.app_id, app.fenced())
            return EXIT_FENCED
        self._end(AttemptState.FAILED, JobState.FAILED, text)
        return code

    def _stopping(self) -> bool:
        """A cancel or a signal is under way: an error of the program is its consequence."""
        return self.app.stopped() or self._canceled()

    def _canceled(self) -> bool:
        if self.app.canceling:
            return True
        try:
            return self.store.get_job(self.app.app_id).state == JobState.CANCELING
        except StokerError:
            return False

    def _drain(self) -> None:
        """Wait for every job's thread; fenced, give them a short while to stop their queries
        (each is fenced too) and go."""
        deadline: float | None = None
        while self.app.running():
            if self.app.fenced() is not None:
                deadline = deadline or time.monotonic() + FENCED_GRACE_S
                if time.monotonic() > deadline:
                    return
            if self.app.canceling or self.app.failing is not None:
                self.app.cancel_jobs()  # a job whose record appeared only now
            time.sleep(WATCH_S)

    def _end(self, astate: AttemptState, jstate: JobState | None, error: str | None) -> None:
        self._watching.clear()
        self.lease.stop()  # an ended attempt's renewal would read as a fence
        app, n = self.app.app_id, self.app.attempt
        self.store.finish_attempt(app, n, astate, jstate, error)
        log.info("application %s: attempt %d ended %s", app, n, astate)

    def _end_suspended(self) -> int:
        try:
            self._end(AttemptState.SUSPENDED, JobState.SUSPENDED, None)
        except InvalidTransition:
            # A cancel was asked for while the signal stopped it: the explicit cancel wins.
            self.store.finish_attempt(
                self.app.app_id, self.app.attempt, AttemptState.CANCELED, JobState.CANCELED
            )
            return 0
        return EXIT_SUSPENDED

    # the watcher ----------------------------------------------------------------------------
    def _watch(self) -> None:
        """Read the application's record: a newer attempt fences this one, CANCELING cancels
        every job. When the application ends from here (canceled, stopped, fenced) while the
        program still runs, this thread ends the attempt and the process."""
        app = self.app
        while self._watching.is_set():
            time.sleep(WATCH_S)
            try:
                rec = self.store.get_job(app.app_id)
                if rec.current_attempt != app.attempt:
                    app.fence(f"application attempt {rec.current_attempt} exists")
                elif rec.state == JobState.CANCELING and not app.canceling:
                    log.info("application %s: cancel asked for: canceling its jobs", app.app_id)
                    app.cancel()
            except StokerError as e:
                log.warning("application %s: reading its record failed: %s", app.app_id, e)
            gone = jvm_gone()
            if gone is not None:
                app.lose_driver(gone)
            if app.canceling:
                app.cancel_jobs()
            ended = (
                app.fenced() is not None
                or app.driver_lost is not None
                or (
                    (app.canceling or app.stopped() or app.failing is not None)
                    and not app.running()
                )
            )
            if ended and self._watching.is_set() and self._code is None:
                exit_now(self._conclude_here())
                return

    def _conclude_here(self) -> int:
        try:
            return self.conclude(None)
        except StokerError as e:
            print(redact_text(f"stoker appdriver: {type(e).__name__}: {e}"), file=sys.stderr)
            return exit_code(e)


def run_app_program(
    entrypoint: str,
    args: list[str],
    driver: Callable[[], AttemptDriver | None],
    name: str,
    ctx: launch.LaunchContext,
) -> BaseException | None:
    """Run the program on this (the main) thread; its error, if the attempt is to end with
    it. ``driver``: the attempt's driver (None in a standby not handed an attempt yet: then
    every way out of the program is raised, as nothing of the application was touched)."""
    from stoker.runtime.appfile import check_app_path, run_program

    def submitted() -> int:
        d = driver()
        return 0 if d is None else d.app.submitted

    try:
        entry = check_app_path(entrypoint, "entrypoint")
        run_program(entry, args, submitted, name, ctx)
        d = driver()
        if d is None:
            raise launch.StandbyNotWanted(
                "the program returned without submitting a job: nothing to keep warm"
            )
        d.program_ended()
    except BaseException as e:
        d = driver()
        if d is None:
            raise
        if isinstance(e, launch.AppEnding):
            log.info("application %s: main stopped: %s", d.app.app_id, e)
        elif isinstance(e, KeyboardInterrupt):
            d.app.stop()  # a signal (its handler stopped the application already)
        elif isinstance(e, SystemExit):
            return e if e.code not in (None, 0) else None
        else:
            return e
    return None


def _failures(app: application.Application) -> list[str]:
    """The "job X failed: ..." lines of every job of the driver that ended FAILED or in an error."""
    out = []
    for h in app.handles():
        if h.optional:
            continue  # its failure was said when it happened; the application goes on
        if isinstance(h.error, JobFailed):
            out.append(_describe(h.error, named=False))  # "job 'X' failed: ..." already
        elif h.error is not None and not isinstance(h.error, launch.AppEnding):
            out.append(f"job {h.job_id} failed: {_describe(h.error)}")
        elif h.result is not None and h.result.state == JobState.FAILED:
            out.append(f"job {h.job_id} failed")
    return out


def _main_error(err: BaseException) -> str:
    """The program's error as the attempt and the application record it: its type and
    message first, then where it was raised (the traceback's innermost frames), as a job's
    error is (``runtime/job/ending.recorded``); a stoker error by its type and message."""
    if isinstance(err, StokerError) or err.__traceback__ is None:
        return _describe(err)
    from stoker.runtime.job.ending import recorded

    return redact_text(recorded(err))[:4000]


def _describe(err: BaseException, named: bool = True) -> str:
    """An error as the attempt records it: its type (``named``) and message, secrets hidden,
    no JVM stack trace."""
    from stoker.runtime.job.query import brief

    text = f"{type(err).__name__}: {brief(err)}" if named else brief(err)
    return redact_text(text)[:4000]


def exit_now(code: int) -> None:
    """Leave now, with job threads possibly inside Spark calls: the JVM goes when its stdin
    (a pipe from this process) closes."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
