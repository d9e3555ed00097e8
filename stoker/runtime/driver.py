"""A driver process of one attempt, as a job manager starts it.

``python -m stoker.runtime.driver --job J --attempt N --store URL --state-dir D
[-D k=v ...] -- app.py [args ...]``

A job manager keeps secrets off this command line (every user of the host can read it): the
store URL arrives in ``STOKER_STORE_URL`` and secret-looking ``-D`` values in
``STOKER_DRIVER_SECRETS`` (a JSON object); both win over the redacted ``--store`` / ``-D``
labels. Both are removed from the environment before the application runs. The manager writes
this command line and environment, and this process reads them, with one object
(:class:`stoker.driverargs.DriverArgs`).

The manager made attempt N in the store (STARTING); this process holds it first (it becomes
its owner and renews its lease while the app imports and Spark starts, however long that takes,
so that a slow healthy start is never taken for a dead one), claims it (-> RUNNING) once Spark
is up, runs the application's main under that attempt, and exits: 0 when the job finished or
was canceled, 6 when the attempt was fenced off by a newer one, 8 when the job failed, 2 for bad
input, 13 when a signal suspended it, 18 when its start (the app's import, its code before
``stoker.run``, opening, recovery) outlasted ``stoker.startup_timeout``
(runtime/startwatch.py). SIGTERM and SIGINT stop it gracefully (the epoch in flight
completes and commits) and leave the job SUSPENDED, which the job manager resumes with a new
attempt, without counting it against the restart strategy: a signal is not a cancel.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from stoker import logformat
from stoker.driverargs import DriverArgs, DriverRole
from stoker.errors import InvalidTransition, JobSuspended, StokerError, exit_code
from stoker.procs import forget_interrupt
from stoker.redact import redact_logs, redact_text
from stoker.runtime import launch, startwatch
from stoker.runtime.session import want_source_zygote
from stoker.settings import Settings
from stoker.types import AttemptNo, AttemptState, JobState, job_id


def _sigterm(signum: int, frame: FrameType | None) -> None:
    # Before (and after) stoker.run, whose own handlers take over while the job runs.
    raise KeyboardInterrupt


def _suspend_unclaimed(store_url: str | None, job: str, attempt: int) -> None:
    """A signal came before the job ran (the app importing, Spark starting): end the attempt
    the manager made for this process SUSPENDED, as the runner does later on, so that the
    manager resumes the job at once instead of counting a driver that exited as a failure."""
    if not store_url:
        return
    from stoker.store import open_store

    jid, n = job_id(job), AttemptNo(attempt)
    try:
        st = open_store(store_url)
        try:
            rec = st.get_attempt(jid, n)
            if rec is None or rec.state not in (AttemptState.STARTING, AttemptState.RUNNING):
                return  # ended already (by the runner) or never made
            try:
                st.finish_attempt(jid, n, AttemptState.SUSPENDED, JobState.SUSPENDED)
            except InvalidTransition:  # a cancel was asked for meanwhile: it wins
                st.finish_attempt(jid, n, AttemptState.CANCELED, JobState.CANCELED)
        finally:
            st.close()
    except StokerError as e:
        print(redact_text(f"stoker driver: cannot record the suspension: {e}"), file=sys.stderr)


def _watch_start(overrides: dict[str, str], job: str, attempt: int, app: Path) -> None:
    """Bound this driver's start (``stoker.startup_timeout``, runtime/startwatch.py): a start
    hung past it ends the attempt FAILED, naming the phase, and exits, freeing its slot."""
    settings = Settings().with_overrides(overrides)
    history = Path(overrides["stoker.state_dir"]) / startwatch.START_TIMES
    budget = settings.startup_timeout
    if settings.startup_adaptive:
        budget = startwatch.adaptive_budget(budget, history)
    watch = startwatch.StartWatch(budget, app, history=history)
    watch.start(startwatch.fail_start(overrides["stoker.store"], job, attempt))


def main(argv: list[str] | None = None) -> int:
    try:  # the command line and environment the job manager wrote (stoker.driverargs)
        a = DriverArgs.from_argv(DriverRole.JOB, argv)
    except StokerError as e:
        print(redact_text(f"stoker driver: {type(e).__name__}: {e}"), file=sys.stderr, flush=True)
        return exit_code(e)

    logformat.configure()  # STOKER_LOG_FORMAT: the manager's --log-format
    logformat.bind(a.name, a.attempt or 0, process=True)  # one job per driver process
    redact_logs()
    signal.signal(signal.SIGTERM, _sigterm)
    want_source_zygote()  # warm source runners for its queries (runtime/zygote.py)
    overrides: dict[str, str] = {}
    standby: Any = None
    try:
        overrides = dict(a.conf)
        overrides["stoker.store"] = a.store
        overrides["stoker.state_dir"] = str(a.state_dir)
        if a.lease_ttl is not None:
            overrides["stoker.lease_ttl"] = f"{a.lease_ttl}s"
        ttl = a.lease_ttl if a.lease_ttl is not None else Settings().lease_ttl
        release: Callable[[], None]
        if a.attempt is None:
            # A warm standby: its own row's lease from now on; an attempt only when handed one.
            from stoker.runtime.job.standby import StandbyWait

            standby = StandbyWait(a.store, a.name, ttl, a.upgrade)
            release = standby.leave
        else:
            from stoker.runtime.attempt import hold_start

            # First of all (nothing of pyspark imported yet): the attempt is this process's.
            release = hold_start(a.store, a.name, a.attempt, ttl)
        try:
            from stoker.runtime.appfile import check_app_path, run_app

            entry = check_app_path(str(a.entrypoint), "entrypoint")
            if a.attempt is not None:
                _watch_start(overrides, a.name, a.attempt, entry)
            ended: list[Any] = []
            ctx = launch.LaunchContext(
                overrides=dict(overrides),
                job_id=a.name,
                attempt=a.attempt,
                on_result=(ended.append,),
                release_start=None if a.attempt is None else release,
                standby=standby,
            )
            try:
                results = run_app(entry, ctx, list(a.args))
            except BaseException as e:
                attempt = a.attempt if standby is None else standby.taken
                if not isinstance(e, KeyboardInterrupt) and attempt is not None:
                    _note_late_error(ended, a.name, attempt, e, a.store)
                raise
        finally:
            startwatch.done()
            release()
    except launch.StandbyNotWanted as e:
        print(f"stoker driver: standby: {e}; exiting", file=sys.stderr, flush=True)
        return 0
    except StokerError as e:
        msg = redact_text(f"stoker driver: {type(e).__name__}: {e}")
        print(msg, file=sys.stderr, flush=True)
        return exit_code(e)
    except KeyboardInterrupt:
        attempt = a.attempt if standby is None else standby.taken
        if attempt is None:  # a standby that was handed nothing: nothing to record
            print("stoker driver: standby stopped by a signal", file=sys.stderr)
            return 0
        print("stoker driver: stopped by a signal before the job ran", file=sys.stderr)
        _suspend_unclaimed(a.store, a.name, attempt)
        return exit_code(JobSuspended())
    for r in results:
        print(f"stoker driver: job {r.job_id} ended {r.state}", file=sys.stderr, flush=True)
    if any(r.state == JobState.SUSPENDED for r in results):
        return exit_code(JobSuspended())
    return 0


def _note_late_error(
    ended: list[Any], job: str, attempt: int, err: BaseException, store_url: str
) -> None:
    """The app failed after its job ended FINISHED (its own code after ``stoker.run``): the
    job stays FINISHED (its output is committed), the error goes on the attempt, for
    ``status`` and the attempts list to show."""
    if not any(r.job_id == job and r.state == JobState.FINISHED for r in ended):
        return
    from stoker.store import open_store

    text = redact_text(f"after the job finished, the app failed: {type(err).__name__}: {err}")
    try:
        st = open_store(store_url)
        try:
            st.note_attempt_error(job_id(job), AttemptNo(attempt), text[:4000])
        finally:
            st.close()
    except Exception as e:  # the driver's exit code and log still tell
        print(f"stoker driver: could not record the error: {e}", file=sys.stderr)


if __name__ == "__main__":
    _code = main()
    forget_interrupt()  # a signal handled above: exit with _code, not by SIGINT
    sys.exit(_code)
