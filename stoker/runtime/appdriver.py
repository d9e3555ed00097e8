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
  job manager's restart strategy for the application decides, once, as Flink's application
  mode has it. The error (its type and message first, then where it was raised) and its cause
  are recorded on the attempt, which stays live, and the jobs keep running meanwhile
  (``appattempt.AttemptDriver._main_raised``). When the strategy runs ``main`` again, the
  leader ends this attempt and kills the process; the next attempt re-adopts the jobs (ended
  jobs are not run again) and nothing is counted against them. When it gives up, the leader
  cancels every job of the application naming why ("application A's main raised: ...") and
  makes the application CANCELING in one store transaction; each job here stops after its
  epoch in flight, then the attempt and the application end FAILED with main's error. No job
  running here, or no decision within ``appattempt.VERDICT_WAIT``: the attempt ends FAILED at
  once and the process exits, the leader deciding from that;
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

import logging
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from stoker import logformat
from stoker.driverargs import DriverArgs, DriverRole
from stoker.errors import (
    StaleAttempt,
    StokerError,
    exit_code,
)
from stoker.procs import forget_interrupt
from stoker.redact import redact_logs, redact_text
from stoker.runtime import application, launch
from stoker.runtime.appattempt import (
    EXIT_FENCED,
    EXIT_SUSPENDED,
    AppSignals,
    AttemptDriver,
    run_app_program,
)
from stoker.runtime.attempt import this_owner
from stoker.runtime.driver import _suspend_unclaimed
from stoker.runtime.session import want_source_zygote
from stoker.settings import Settings
from stoker.store import Store, open_store
from stoker.types import AttemptNo, JobId, job_id

log = logging.getLogger("stoker.appdriver")


def _launch_settings(conf: Mapping[str, str], store_url: str, ttl: float) -> dict[str, str]:
    """The ``-D`` settings every job of the application runs with: the manager's (master,
    driver memory and cores, the user's conf), FAIR scheduling unless set otherwise, the
    application's store and lease."""
    overrides = {"spark.scheduler.mode": "FAIR", **conf}
    if overrides.pop("stoker.state_dir", None) is not None:
        log.warning("-D stoker.state_dir is ignored: each job's folder is <state dir>/jobs/<id>")
    overrides["stoker.store"] = store_url
    overrides.setdefault("stoker.lease_ttl", f"{ttl}s")
    return overrides


def main(argv: list[str] | None = None) -> int:
    try:  # the command line and environment the job manager wrote (stoker.driverargs)
        ns = DriverArgs.from_argv(DriverRole.APP, argv)
    except StokerError as e:
        print(redact_text(f"stoker appdriver: {type(e).__name__}: {e}"), file=sys.stderr)
        return exit_code(e)
    logformat.configure()  # STOKER_LOG_FORMAT: the manager's --log-format
    redact_logs()
    signals = AppSignals()
    signals.install()
    want_source_zygote()  # warm source runners for its queries (runtime/zygote.py)
    store_url = ns.store
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
        _suspend_unclaimed(store_url, ns.name, attempt)
        return EXIT_SUSPENDED


def _main(ns: DriverArgs, store_url: str, signals: AppSignals) -> int:
    app_id: JobId = job_id(ns.name)
    ttl = float(ns.lease_ttl) if ns.lease_ttl is not None else Settings().lease_ttl
    # The program's stoker.submit and stoker.run calls read it (any thread of the process).
    ctx = launch.LaunchContext(overrides=_launch_settings(ns.conf, store_url, ttl))
    launch.install(ctx)
    args = list(ns.args)
    if ns.standby:
        return _standby_main(ns, args, app_id, store_url, ttl, signals, ctx)
    store = open_store(store_url)
    try:
        try:
            assert ns.attempt is not None  # else a standby, above
            rec = store.claim_attempt(app_id, AttemptNo(ns.attempt), this_owner(), ttl)
        except StaleAttempt as e:
            print(redact_text(f"stoker appdriver: {e}"), file=sys.stderr)
            return EXIT_FENCED
        log.info("application %s: attempt %d claimed (pid %d)", app_id, rec.attempt, os.getpid())
        state_dir = Path(ns.state_dir).resolve()
        driver = AttemptDriver.entered(store, rec, state_dir, ttl, signals, ctx)
        return driver.exit_with(driver.run(str(ns.entrypoint), args))
    finally:
        application.leave()
        store.close()


class _Standby:
    """This process as an application's warm standby: its row in the store's
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
        signals: AppSignals,
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
        self.driver: AttemptDriver | None = None
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
        self.driver = AttemptDriver.entered(
            store, rec, self.state_dir, self.ttl, self.signals, self.ctx
        )
        self.driver.begin()
        log.info(
            "application %s: attempt %d claimed by its standby (pid %d) in %.2f s",
            self.app_id,
            rec.attempt,
            os.getpid(),
            time.monotonic() - t_taken,
        )


def _standby_main(
    ns: DriverArgs,
    args: list[str],
    app_id: JobId,
    store_url: str,
    ttl: float,
    signals: AppSignals,
    ctx: launch.LaunchContext,
) -> int:
    """An application's warm standby: the program runs up to its first job, waits there for
    an attempt, then goes on as that attempt's driver (:class:`_Standby`)."""
    sb = _Standby(app_id, store_url, ttl, Path(ns.state_dir).resolve(), signals, ctx)
    application.set_gate(sb.gate)
    try:
        error = run_app_program(str(ns.entrypoint), args, lambda: sb.driver, app_id, ctx)
        assert sb.driver is not None  # else run_app_program raised
        return sb.driver.exit_with(sb.driver.conclude(error))
    finally:
        sb.wait.leave()
        application.set_gate(None)
        application.leave()
        if sb.store is not None:
            sb.store.close()


if __name__ == "__main__":
    _code = main()
    forget_interrupt()  # a signal handled above: exit with _code, not by SIGINT
    sys.exit(_code)
