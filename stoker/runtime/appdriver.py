"""The driver process of one application attempt, as a job manager starts it.

``python -m stoker.runtime.appdriver --app A --attempt N --store LABEL --state-dir D
--lease-ttl T [-D k=v ...] -- entrypoint [args ...]``

As for ``stoker.runtime.driver``, the store URL arrives in ``STOKER_STORE_URL`` and secret
``-D`` values in ``STOKER_DRIVER_SECRETS`` (both removed from the environment before the
program runs); the command line carries redacted labels only.

The job manager made application attempt N (STARTING). This process claims it, keeps its
lease, and runs the program (``stoker.runtime.appfile.run_program``) with this process as its
application (``stoker.runtime.application``): every job the program submits runs here, on a
thread of its own, in one SparkSession (``spark.scheduler.mode=FAIR``, a pool per job), with
its state folder in ``D/jobs/<job id>`` and its attempts made under attempt N, which fences
them. How the attempt ends:

- the program returned and every job ended: FINISHED (the application FINISHED), or FAILED
  when a job ended FAILED ("job X failed: ...", as Flink ends an application whose job
  failed). When the program returns, the application's jobs an earlier attempt's ``main``
  made and this one did not submit are ended CANCELED, naming why;
- a job that is not optional failed for good (its own strategy, inside this driver, gave
  up): its other jobs are canceled gracefully, then the attempt and the application end
  FAILED naming the job, whether ``main`` waited on that job, on another or on none; the
  application's restart strategy is not used (the job's was);
- the program raised (an application file that does not import, an error of ``main``): the
  attempt ends FAILED with the error and the job manager's restart strategy for the
  application decides. The jobs are not stopped first: the process exits under them, and the
  next attempt re-adopts them (``main`` runs again; ended jobs are not run again);
- the driver's JVM died: the same, exit 17, without using up any job's strategy (a job's
  restart in this process would reuse the dead SparkSession);
- the application was canceled (its record CANCELING): every job is canceled gracefully,
  then the attempt and the application end CANCELED;
- SIGTERM or SIGINT: every job stops after its epoch in flight and is SUSPENDED, then the
  attempt and the application are SUSPENDED (the job manager resumes it; no restart used up);
- fenced (a newer application attempt exists, or the lease lapsed): every job stops (they
  are fenced too: none can decide an epoch) and the process exits 6, touching nothing.

Exit codes as the job driver's: 0 finished or canceled, 2 bad input, 6 fenced off, 8 a job
failed, 13 suspended, 17 the JVM died; a failure of the program exits with its stoker error's
code, else 1.
"""

from __future__ import annotations

import argparse
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

from stoker import logformat
from stoker.errors import (
    DriverLost,
    InvalidTransition,
    JobFailed,
    JobSuspended,
    StaleAttempt,
    StokerError,
    exit_code,
)
from stoker.redact import redact_logs, redact_text
from stoker.runtime import application, launch
from stoker.runtime.attempt import LeaseKeeper, this_owner
from stoker.runtime.driver import _secrets_from_env, _suspend_unclaimed
from stoker.runtime.session import jvm_gone, want_source_zygote
from stoker.settings import Settings, parse_pairs
from stoker.store import Store, open_store
from stoker.types import AttemptNo, AttemptState, JobId, JobState, job_id

log = logging.getLogger("stoker.appdriver")

WATCH_S = 0.2  # how often the application's record is read (cancel, a newer attempt)
FENCED_GRACE_S = 10.0  # how long fenced jobs get to stop their queries before the exit
EXIT_FENCED = exit_code(StaleAttempt(""))
EXIT_FAILED = exit_code(JobFailed(""))
EXIT_SUSPENDED = exit_code(JobSuspended())
EXIT_DRIVER_LOST = exit_code(DriverLost(""))


class _Signals:
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


class _Driver:
    """One application attempt in this process: the program, its jobs, the attempt's end."""

    def __init__(
        self,
        store: Store,
        app: application.Application,
        lease: LeaseKeeper,
        signals: _Signals,
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

    def begin(self) -> None:
        """The attempt is this process's: its lease renewed, the application's record
        watched (before the program runs, or, in a standby, once it was handed the attempt)."""
        self.lease.start()
        self._watching.set()
        self._watcher.start()

    def run(self, entrypoint: str, args: list[str]) -> int:
        """Run the program on this (the main) thread; the attempt's end as an exit code."""
        self.begin()
        error = _run_program(entrypoint, args, lambda: self, self.app.app_id, self.ctx)
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
            # The leader's restart strategy for the application decides; the jobs keep
            # running until this process exits (the next attempt re-adopts them).
            text = _describe(error)
            log.error("application %s: the program failed: %s", app.app_id, text)
            if not isinstance(error, StokerError):
                traceback.print_exception(error)
            self._end(AttemptState.FAILED, None, text)
            return exit_code(error) if isinstance(error, StokerError) else 1
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
                _exit(self._conclude_here())
                return

    def _conclude_here(self) -> int:
        try:
            return self.conclude(None)
        except StokerError as e:
            print(redact_text(f"stoker appdriver: {type(e).__name__}: {e}"), file=sys.stderr)
            return exit_code(e)


def _run_program(
    entrypoint: str,
    args: list[str],
    driver: Callable[[], _Driver | None],
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


def _describe(err: BaseException, named: bool = True) -> str:
    """An error as the attempt records it: its type (``named``) and message, secrets hidden,
    no JVM stack trace."""
    from stoker.runtime.job.query import brief

    text = f"{type(err).__name__}: {brief(err)}" if named else brief(err)
    return redact_text(text)[:4000]


def _exit(code: int) -> None:
    """Leave now, with job threads possibly inside Spark calls: the JVM goes when its stdin
    (a pipe from this process) closes."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="stoker-appdriver")
    parser.add_argument("--app", required=True)
    who = parser.add_mutually_exclusive_group(required=True)
    who.add_argument("--attempt", type=int)
    who.add_argument("--standby", action="store_true")  # warm, until handed an attempt
    parser.add_argument("--store", required=True)
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--lease-ttl", type=float, default=None)
    parser.add_argument("-D", dest="defines", action="append", default=[])
    parser.add_argument("entrypoint")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    return parser.parse_args(argv)


def _launch_settings(defines: list[str], store_url: str, ttl: float) -> dict[str, str]:
    """The ``-D`` settings every job of the application runs with: the manager's (master,
    driver memory and cores, the user's conf), FAIR scheduling unless set otherwise, the
    application's store and lease."""
    overrides = {"spark.scheduler.mode": "FAIR", **parse_pairs(defines)}
    overrides.update(_secrets_from_env())
    if overrides.pop("stoker.state_dir", None) is not None:
        log.warning("-D stoker.state_dir is ignored: each job's folder is <state dir>/jobs/<id>")
    overrides["stoker.store"] = store_url
    overrides.setdefault("stoker.lease_ttl", f"{ttl}s")
    return overrides


def main(argv: list[str] | None = None) -> int:
    ns = _parse(argv)
    logformat.configure()  # STOKER_LOG_FORMAT: the manager's --log-format
    redact_logs()
    signals = _Signals()
    signals.install()
    want_source_zygote()  # warm source runners for its queries (runtime/zygote.py)
    store_url = os.environ.pop("STOKER_STORE_URL", "") or ns.store
    try:
        return _main(ns, store_url, signals)
    except StokerError as e:
        print(redact_text(f"stoker appdriver: {type(e).__name__}: {e}"), file=sys.stderr)
        return exit_code(e)
    except launch.StandbyNotWanted as e:
        print(f"stoker appdriver: standby: {e}; exiting", file=sys.stderr, flush=True)
        return 0
    except KeyboardInterrupt:
        attempt = ns.attempt if not ns.standby else signals.taken
        if attempt is None:  # a standby that was handed nothing: nothing to record
            print("stoker appdriver: standby stopped by a signal", file=sys.stderr)
            return 0
        print("stoker appdriver: stopped by a signal before the program ran", file=sys.stderr)
        _suspend_unclaimed(store_url, ns.app, attempt)
        return EXIT_SUSPENDED


def _main(ns: argparse.Namespace, store_url: str, signals: _Signals) -> int:
    app_id: JobId = job_id(ns.app)
    ttl = float(ns.lease_ttl) if ns.lease_ttl is not None else Settings().lease_ttl
    # The program's stoker.submit and stoker.run calls read it (any thread of the process).
    ctx = launch.LaunchContext(overrides=_launch_settings(ns.defines, store_url, ttl))
    launch.install(ctx)
    if ns.standby:
        return _standby_main(ns, app_id, store_url, ttl, signals, ctx)
    store = open_store(store_url)
    try:
        try:
            rec = store.claim_attempt(app_id, AttemptNo(ns.attempt), this_owner(), ttl)
        except StaleAttempt as e:
            print(redact_text(f"stoker appdriver: {e}"), file=sys.stderr)
            return EXIT_FENCED
        log.info("application %s: attempt %d claimed (pid %d)", app_id, rec.attempt, os.getpid())
        app = application.Application(app_id, rec.attempt, Path(ns.state_dir).resolve(), store)
        app.rearm = signals.rearm
        lease = LeaseKeeper(store, rec, ttl, on_fenced=app.fence)
        signals.app = app
        application.enter(app)
        args = ns.args[1:] if ns.args[:1] == ["--"] else ns.args
        driver = _Driver(store, app, lease, signals, ctx)
        code = driver.run(ns.entrypoint, args)
        if app.running():
            _exit(code)  # jobs still run (the program failed, or they were fenced)
        return code
    finally:
        application.leave()
        store.close()


class _Standby:
    """This process as an application's warm standby (issue 24): its row in the store's
    ``standbys`` table (``runtime/job/standby.py``'s :class:`StandbyWait`), and the attempt's
    driver once the leader hands it one.

    The program runs from the start, as ``__main__``, and stops at its first job submission
    (``application.through_gate``): its imports and its own set-up are done warm. There the
    standby starts the application's SparkSession with the application's settings, runs a
    throwaway query in it (the first query of a JVM pays for the streaming engine, the Python
    worker daemon, the foreachBatch callback), says READY and waits. Handed attempt N, it
    claims N, enters the application and lets the submission go on: main continues under the
    same job ids as any application attempt's ``main`` and re-adopts the jobs (each job's
    query starts from its checkpoint). Nothing of the running attempt is read or written
    before the handover: no lease, no job record, no checkpoint."""

    def __init__(
        self,
        app_id: JobId,
        store_url: str,
        ttl: float,
        state_dir: Path,
        signals: _Signals,
        ctx: launch.LaunchContext,
    ) -> None:
        from stoker.runtime.job.standby import StandbyWait

        self.app_id = app_id
        self.store_url = store_url
        self.ttl = ttl
        self.state_dir = state_dir
        self.signals = signals
        self.ctx = ctx
        self.wait = StandbyWait(store_url, app_id, ttl)
        self.driver: _Driver | None = None
        self.store: Store | None = None

    def gate(self) -> None:
        """Warm up, wait for the attempt, claim it and start the attempt's driver."""
        from stoker.runtime.job.plan import resolve_settings
        from stoker.runtime.job.standby import warm_up
        from stoker.runtime.session import get_session

        t0 = time.monotonic()
        session = get_session(resolve_settings(self.ctx), f"stoker:{self.app_id}")
        self.signals.rearm()  # PySpark's gateway took SIGINT
        warm_up(session)
        log.info("standby for application %s: warm in %.1f s", self.app_id, time.monotonic() - t0)
        attempt = self.wait.wait(lambda: self.signals.received is not None)
        self.signals.taken = attempt
        t_taken = time.monotonic()
        log.info("standby for application %s: handed attempt %d", self.app_id, attempt)
        self.store = store = open_store(self.store_url)
        rec = store.claim_attempt(self.app_id, attempt, this_owner(), self.ttl)
        app = application.Application(self.app_id, rec.attempt, self.state_dir, store)
        app.rearm = self.signals.rearm
        lease = LeaseKeeper(store, rec, self.ttl, on_fenced=app.fence)
        self.signals.app = app
        application.enter(app)
        self.driver = _Driver(store, app, lease, self.signals, self.ctx)
        self.driver.begin()
        log.info(
            "application %s: attempt %d claimed by its standby (pid %d) in %.2f s",
            self.app_id,
            rec.attempt,
            os.getpid(),
            time.monotonic() - t_taken,
        )


def _standby_main(
    ns: argparse.Namespace,
    app_id: JobId,
    store_url: str,
    ttl: float,
    signals: _Signals,
    ctx: launch.LaunchContext,
) -> int:
    """An application's warm standby: the program runs up to its first job, waits there for
    an attempt, then goes on as that attempt's driver (:class:`_Standby`)."""
    sb = _Standby(app_id, store_url, ttl, Path(ns.state_dir).resolve(), signals, ctx)
    application.set_gate(sb.gate)
    try:
        args = ns.args[1:] if ns.args[:1] == ["--"] else ns.args
        error = _run_program(ns.entrypoint, args, lambda: sb.driver, app_id, ctx)
        assert sb.driver is not None  # else _run_program raised
        code = sb.driver.conclude(error)
        if sb.driver.app.running():
            _exit(code)  # jobs still run (the program failed, or they were fenced)
        return code
    finally:
        sb.wait.leave()
        application.set_gate(None)
        application.leave()
        if sb.store is not None:
            sb.store.close()


if __name__ == "__main__":
    sys.exit(main())
