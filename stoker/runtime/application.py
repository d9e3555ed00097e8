"""Several jobs in one process: ``stoker.submit``, :class:`JobHandle`, and the application an
application driver (``stoker.runtime.appdriver``) runs.

A job started with :func:`submit` runs on a thread of its own in this process, each with its
own streaming query, epoch processor, store connection, lease and control watch; they share
the process's one SparkSession. Inside an application:

- the job's id is ``<app id>.<pipeline name>`` unless the program names it, and the job's
  record names the application (``app_id``); an id owned by another application, or by a
  job submitted alone, is :class:`~stoker.errors.JobOwnedElsewhere`;
- every attempt of the job is made under the application's attempt (``app_attempt``), which
  fences it: once a newer application attempt exists, it can neither renew its lease nor
  decide an epoch. Starting it supersedes a live attempt made under an older application
  attempt: a restarted ``main`` re-adopts its running jobs;
- a job that has ended (FINISHED, CANCELED, FAILED) is not run again: its handle reports
  that state at once, so a restarted ``main`` goes past what it finished;
- a job that fails follows its own restart strategy on its own thread (the same strategies
  as the job manager's, :mod:`stoker.restart`); the other jobs go on;
- a job that fails for good (its strategy gave up) fails the application, as in Flink: every
  other job is canceled gracefully (its epoch in flight commits) and the attempt ends FAILED,
  unless the program submitted that job with ``optional=True``;
- a driver JVM that died (:class:`~stoker.errors.DriverLost`) is no job's failure: no job's
  strategy is used up, the attempt ends FAILED and a new driver takes the jobs over;
- its epochs run in the FAIR scheduler pool named after the job;
- ``stoker.run(p)`` is ``submit(p).wait()``.

Outside an application, :func:`submit` runs the job on a thread with the settings
``stoker.run`` would use (its own local store by default); ``stoker.run`` is unchanged.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from stoker.errors import (
    JobNotFound,
    JobTerminal,
    StokerError,
)
from stoker.runtime.jobhandle import JobHandle, local_stopped
from stoker.runtime.resources import ResourceWatch, managed_cluster
from stoker.store import JobRecord, Store
from stoker.types import AttemptNo, AttemptState, JobId, JobKind, JobState

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


log = logging.getLogger("stoker.application")


class Application:
    """The application this driver process runs: its attempt (the fence of its jobs'
    attempts), its folder, its store, and the jobs its program submitted."""

    def __init__(self, app_id: JobId, attempt: AttemptNo, state_dir: Path, store: Store) -> None:
        self.app_id = app_id
        self.attempt = attempt
        self.state_dir = state_dir
        self.store = store
        # Called on the main thread while it waits for a job: takes the driver's signal
        # handlers back from whoever replaced them (PySpark does, for a context made there).
        self.rearm: Callable[[], None] | None = None
        self._lock = threading.Lock()
        self._handles: dict[JobId, JobHandle] = {}
        self._submitted = 0
        self._stopping = threading.Event()
        self._fenced: str | None = None
        self._canceling = False
        self._failing: str | None = None  # why: a job that is not optional failed for good
        self._driver_lost: str | None = None
        self._main_waits = 0
        self._watch: ResourceWatch | None = None

    # what the driver decided --------------------------------------------------------------
    def stop(self) -> None:
        """A signal: every job stops gracefully (SUSPENDED); no job starts any more."""
        self._stopping.set()

    def stopped(self) -> bool:
        return self._stopping.is_set()

    def fence(self, why: str) -> None:
        """The application attempt is no longer current: every job stops, nothing is decided."""
        if self._fenced is None:
            self._fenced = why
            log.error("application %s fenced: %s", self.app_id, why)

    def fenced(self) -> str | None:
        return self._fenced

    def cancel(self) -> None:
        """The application was canceled: no job starts any more (each is canceled)."""
        self._canceling = True

    @property
    def canceling(self) -> bool:
        return self._canceling

    def job_failed(self, jid: JobId, why: str) -> None:
        """A job that is not optional failed for good: the application fails. Its other jobs
        are asked to cancel gracefully (each commits its epoch in flight); no job starts any
        more; the driver ends the attempt FAILED with ``why`` once they have ended."""
        with self._lock:
            if self._failing is not None:
                return
            self._failing = why
        log.error(
            "application %s fails: job %s failed for good; its other jobs are canceled",
            self.app_id,
            jid,
        )
        self.cancel_jobs()

    @property
    def failing(self) -> str | None:
        """Why the application fails (the first job that failed for good); None if none did."""
        return self._failing

    def lose_driver(self, why: str) -> None:
        """The driver's JVM is gone: the attempt ends FAILED and a new driver takes over."""
        if self._driver_lost is None:
            self._driver_lost = why
            log.error("application %s: %s; a new driver attempt is needed", self.app_id, why)

    @property
    def driver_lost(self) -> str | None:
        return self._driver_lost

    def ending(self) -> str | None:
        """Why no job may start any more; None while the application goes on."""
        if self._driver_lost is not None:
            return self._driver_lost
        if self._fenced is not None:
            return f"the application's attempt {self.attempt} was fenced off: {self._fenced}"
        if self._failing is not None:
            return f"the application is failing: {self._failing}"
        if self.stopped():
            return "the application's driver was stopped by a signal"
        if self._canceling:
            return "the application is being canceled"
        return None

    @contextlib.contextmanager
    def main_waits(self) -> Iterator[None]:
        """The main thread waits on a job of this application (in :meth:`JobHandle.wait`)
        for the block."""
        self._main_waits += 1
        try:
            yield
        finally:
            self._main_waits -= 1

    @property
    def main_waiting(self) -> bool:
        """Whether the main thread is inside :meth:`JobHandle.wait` (it sees a stop there)."""
        return self._main_waits > 0

    # the executors ------------------------------------------------------------------------
    def resource_watch(self, spark: SparkSession) -> ResourceWatch:
        """The driver's one watch of its executors, reporting to the application's record
        (the owner: its jobs share the executors) and to its jobs'; started by the first job
        to ask, once the SparkSession is up, and stopped by the driver before it ends
        (:meth:`stop_resource_watch`)."""
        with self._lock:
            if self._watch is None:
                try:
                    cluster = self.store.get_job(self.app_id).spec.get("cluster")
                except StokerError as e:
                    log.warning("application %s: its cluster unreadable: %s", self.app_id, e)
                    cluster = None
                watch = ResourceWatch(
                    self.store, self.app_id, spark, managed=managed_cluster(cluster)
                )
                watch.start()
                self._watch = watch
            return self._watch

    def stop_resource_watch(self) -> None:
        with self._lock:
            watch, self._watch = self._watch, None
        if watch is not None:
            watch.stop()

    # the jobs -----------------------------------------------------------------------------
    @property
    def submitted(self) -> int:
        """How many jobs the program submitted (including ones that had ended already)."""
        return self._submitted

    def handles(self) -> list[JobHandle]:
        with self._lock:
            return list(self._handles.values())

    def running(self) -> list[JobHandle]:
        """The handles whose job thread has not ended yet."""
        return [h for h in self.handles() if not h.done()]

    def cancel_jobs(self) -> None:
        """Ask every live job of the application to stop gracefully (CANCELING); jobs that are
        not running (between attempts, suspended, never started) end CANCELED at once.

        Called again while jobs still run: a job whose record its thread creates only now is
        caught by the next round. Jobs of the application this driver does not run (an older
        attempt's, not submitted again) are canceled too; the job manager ends them.
        """
        ids = {h.job_id for h in self.handles()} | {j.job_id for j in self._recorded_jobs()}
        for jid in sorted(ids):
            try:
                job = self.store.get_job(jid)
                if not job.state.terminal and job.state != JobState.CANCELING:
                    self.store.request_cancel(jid)
                    log.info("application %s: job %s asked to cancel", self.app_id, jid)
            except (JobNotFound, JobTerminal):
                continue  # not recorded yet, or ended meanwhile
            except StokerError as e:
                log.warning("application %s: cannot cancel job %s: %s", self.app_id, jid, e)

    def end_orphans(self) -> list[JobId]:
        """End the application's jobs that this attempt's ``main``, now returned, did not
        submit: made by an earlier attempt's ``main`` (whose driver is gone or fenced off:
        its job attempts can decide nothing) and not taken back, nobody would ever run or
        end them. Each ends CANCELED with the reason (the job manager's janitor resolves
        its sinks); the ids ended."""
        ours = {h.job_id for h in self.handles()}
        why = f"not submitted again by attempt {self.attempt} of application {self.app_id}"
        ended = []
        for job in self._recorded_jobs():
            if job.job_id in ours or job.state.terminal:
                continue
            try:
                if not self._end_orphan(job, why):
                    continue
            except JobTerminal:
                continue  # ended meanwhile
            except StokerError as e:
                log.warning("application %s: cannot end job %s: %s", self.app_id, job.job_id, e)
                continue
            log.warning("application %s: job %s ended CANCELED: %s", self.app_id, job.job_id, why)
            ended.append(job.job_id)
        return ended

    def _end_orphan(self, job: JobRecord, why: str) -> bool:
        """End one job no ``main`` of this attempt took back; False (left alone) when this
        driver made its attempt after all."""
        rec = None
        if job.current_attempt:
            rec = self.store.get_attempt(job.job_id, job.current_attempt)
        if rec is not None and rec.app_attempt == self.attempt:
            return False
        if rec is not None and not rec.state.ended:
            self.store.finish_attempt(
                job.job_id, rec.attempt, AttemptState.CANCELED, JobState.CANCELED, why
            )
            return True
        # RESTARTING, SUSPENDED, CREATED: nothing runs, it ends at once (checked in the
        # transaction: a job claimed meanwhile is an InvalidTransition, left alone).
        self.store.set_job_state(job.job_id, JobState.CANCELED, error=why)
        return True

    def _recorded_jobs(self) -> list[JobRecord]:
        """The application's jobs as the store records them (none when it cannot be read:
        said in the log, the caller's next round reads again)."""
        try:
            return self.store.list_jobs(kind=JobKind.JOB, app_id=self.app_id)
        except StokerError as e:
            log.warning("application %s: cannot list its jobs: %s", self.app_id, e)
            return []

    def _register(self, jid: JobId) -> tuple[JobHandle, bool]:
        """The handle of ``jid`` in this driver: the one made before, or a new one (True)."""
        with self._lock:
            self._submitted += 1
            known = self._handles.get(jid)
            if known is not None:
                return known, False
            handle = JobHandle(jid, self.store.url, self)
            self._handles[jid] = handle
            return handle, True

    def _forget(self, handle: JobHandle) -> None:
        with self._lock:
            if self._handles.get(handle.job_id) is handle:
                del self._handles[handle.job_id]


_app: Application | None = None
# An application's warm standby (``appdriver --standby``): called by the program's first
# stoker.submit or stoker.run, it waits for the attempt the leader hands the standby and
# enters the application (see :func:`through_gate`).
_gate: Callable[[], None] | None = None
_gate_lock = threading.Lock()


def current_app() -> Application | None:
    """The application this process's driver runs; None outside one."""
    return _app


def set_gate(gate: Callable[[], None] | None) -> None:
    """Make the program's first job submission wait in ``gate`` (an application standby)."""
    global _gate
    _gate = gate


def through_gate() -> Application | None:
    """The application this process runs, as :func:`current_app`; in an application's warm
    standby, the first caller (the program's first ``stoker.submit`` or ``stoker.run``) first
    waits in the gate until the standby is handed an attempt and the application entered.
    Everything the program did before its first job (its imports, its own set-up) was done
    warm; the gate's error (the standby not wanted, a signal) ends the program there."""
    global _gate
    if _gate is None:
        return _app
    with _gate_lock:  # one caller waits in the gate; a second thread's submission after it
        gate, _gate = _gate, None
        if gate is not None:
            try:
                gate()
            except BaseException:
                _gate = gate  # not passed: a later submission (none, mostly) waits again
                raise
    return _app


def enter(app: Application) -> None:
    """Make ``app`` the application of this process (the application driver does)."""
    global _app
    _app = app


def leave() -> None:
    global _app
    _app = None


__all__ = [
    "Application",
    "JobHandle",
    "current_app",
    "enter",
    "leave",
    "local_stopped",
]
