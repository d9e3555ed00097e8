"""A job started with ``stoker.submit``: :class:`JobHandle`, the thread that runs its attempts
(restarted by its own strategy, from its checkpoint, in this process's SparkSession) and what
its end means for its application (stoker.runtime.application)."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

from stoker.errors import (
    DriverLost,
    JobFailed,
    JobTerminal,
    StaleAttempt,
    StokerError,
)
from stoker.runtime import launch
from stoker.runtime.job.attempt_run import execute
from stoker.runtime.job.plan import JobPlan
from stoker.runtime.job.query import brief
from stoker.runtime.job.result import JobResult
from stoker.store import JobRecord, Store, open_store
from stoker.types import JobId, JobState


class AppScope(Protocol):
    """What a job's handle needs of the application it belongs to
    (:class:`stoker.runtime.application.Application`), named here so that this module does
    not import that one (which imports this one)."""

    store: Store
    rearm: Callable[[], None] | None

    def main_waits(self) -> contextlib.AbstractContextManager[None]: ...

    def fenced(self) -> str | None: ...

    def stopped(self) -> bool: ...

    def ending(self) -> str | None: ...

    def lose_driver(self, why: str) -> None: ...

    def job_failed(self, jid: JobId, why: str) -> None: ...


log = logging.getLogger("stoker.application")

POLL_S = 0.1


# Outside an application: a KeyboardInterrupt in the main thread's wait stops every job this
# process submitted, gracefully (SUSPENDED), as a signal stops ``stoker.run``.
_local_stop = threading.Event()


def local_stopped() -> bool:
    """A lone program's wait was interrupted: its jobs stop (the scope of each asks)."""
    return _local_stop.is_set()


class JobHandle:
    """A job started by :func:`submit`: its id, its state, waiting for its end, cancel.

    ``wait()`` returns what ``stoker.run`` would have returned, and raises what it would have
    raised (:class:`~stoker.errors.JobFailed` for a failed job).
    """

    def __init__(self, job_id: JobId, store_url: str | Path, app: AppScope | None) -> None:
        self.job_id = job_id
        self._store_url = store_url
        self._app = app
        self._done = threading.Event()
        self._result: JobResult | None = None
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._after_failure: JobRecord | None = None  # set by the restart hook, on the thread
        # Submitted with optional=True: its failure does not fail the application.
        self.optional = False

    def __repr__(self) -> str:
        return f"JobHandle({self.job_id!r}, {'done' if self.done() else 'running'})"

    @property
    def state(self) -> JobState:
        """The job's state now, read from the store: a cancel from outside, a restart by the
        job's strategy and an attempt's end all show here."""
        with self._store() as st:
            return st.get_job(self.job_id).state

    @property
    def result(self) -> JobResult | None:
        """How the job ended, once it has (None while it runs or when it raised)."""
        return self._result

    @property
    def error(self) -> BaseException | None:
        """What the job's thread raised (None while it runs or when it returned)."""
        return self._error

    def done(self) -> bool:
        """Whether the job's thread in this process is over (the job ended, or stopped)."""
        return self._done.is_set()

    def cancel(self) -> None:
        """Ask the job to stop after its epoch in flight; it ends CANCELED. An ended job is
        left as it is."""
        with self._store() as st, contextlib.suppress(JobTerminal):
            st.request_cancel(self.job_id)

    def wait(self, timeout: float | None = None) -> JobResult:
        """Block until the job ends; its result, or the error it ended with.

        ``timeout`` (seconds): :class:`TimeoutError` if it still runs then (it goes on).
        In an application whose driver is stopping (a signal) or was fenced off, raises
        :class:`stoker.runtime.launch.AppEnding` so that ``main`` does not go on.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        on_main = threading.current_thread() is threading.main_thread()
        app = self._app
        waits = app.main_waits() if app is not None and on_main else contextlib.nullcontext()
        with waits:
            return self._wait(app, on_main, deadline, timeout)

    def _wait(
        self, app: AppScope | None, on_main: bool, deadline: float | None, timeout: float | None
    ) -> JobResult:
        try:
            while not self._done.wait(POLL_S):
                if app is not None:
                    if on_main and app.rearm is not None:
                        app.rearm()
                    if app.fenced() is not None or app.stopped():
                        raise launch.AppEnding(app.ending() or "the application is ending")
                if deadline is not None and time.monotonic() >= deadline:
                    raise TimeoutError(f"job {self.job_id!r} still runs after {timeout} s")
        except KeyboardInterrupt:
            if app is None and on_main:
                # Like a signal during stoker.run: every job of this process stops after its
                # epoch in flight and is left SUSPENDED (resumable), then the interrupt goes on.
                _local_stop.set()
                self._done.wait()
            raise
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    # the thread's side ----------------------------------------------------------------------
    @contextlib.contextmanager
    def _store(self) -> Iterator[Store]:
        if self._app is not None:
            yield self._app.store
            return
        st = open_store(self._store_url)
        try:
            yield st
        finally:
            st.close()

    def _start(self, plan: JobPlan, daemon: bool) -> None:
        self._thread = threading.Thread(
            target=self._drive, args=(plan,), name=f"stoker-job-{self.job_id}", daemon=daemon
        )
        self._thread.start()

    def _drive(self, plan: JobPlan) -> None:
        try:
            self._result = self._run(plan)
        except BaseException as e:
            self._error = e
            if not isinstance(e, StokerError | launch.AppEnding | KeyboardInterrupt):
                log.error("job %s failed: %s: %s", self.job_id, type(e).__name__, e)
        finally:
            self._settle()

    def _settle(self) -> None:
        """The job's thread is over: tell the application what that means for it (before a
        ``wait`` returns, so that ``main`` raising the job's error finds the application
        failing already), then let the waits return."""
        try:
            if self._app is not None and self._error is not None:
                self._report(self._app, self._error)
        finally:
            self._done.set()

    def _report(self, app: AppScope, error: BaseException) -> None:
        if isinstance(error, DriverLost):
            app.lose_driver(str(error))
            return
        if isinstance(error, launch.AppEnding | KeyboardInterrupt | StaleAttempt):
            return
        if app.ending() is not None:
            return  # canceled, stopped, fenced or failing already: this end is its consequence
        try:
            state = app.store.get_job(self.job_id).state
        except StokerError as e:
            log.warning("job %s: its state unreadable after its end: %s", self.job_id, e)
            return
        if state != JobState.FAILED:
            return
        if self.optional:
            log.warning("job %s (optional) failed for good; the application goes on", self.job_id)
            return
        app.job_failed(self.job_id, f"job {self.job_id} failed: {_brief(error)}")

    def _run(self, plan: JobPlan) -> JobResult:
        """Attempts of the job until one ends it; a failure its restart strategy forgives is
        followed by another attempt, in the same SparkSession, from the checkpoint."""
        while True:
            self._after_failure = None
            try:
                return execute(plan)
            except JobTerminal:
                with self._store() as st:
                    job = st.get_job(self.job_id)  # ended meanwhile (canceled, say)
                    return self._ended(job, st)
            except BaseException:
                after = self._after_failure
                if after is None or after.state != JobState.RESTARTING:
                    raise
            ended = self._await_restart(after)
            if ended is not None:
                return ended

    def _await_restart(self, after: JobRecord) -> JobResult | None:
        """Wait until the strategy's next attempt is due; the job's result if it ended (a
        cancel) or the driver stops meanwhile, None when the next attempt is due."""
        due = after.next_attempt_at or 0.0
        with self._store() as st:
            log.warning(
                "job %s: attempt %d failed; its restart strategy starts the next one in %.1f s",
                self.job_id,
                after.current_attempt,
                max(0.0, due - st.clock.now()),
            )
            while True:
                job = st.get_job(self.job_id)
                if job.state.terminal:
                    return self._ended(job, st)
                if self._app is not None and self._app.fenced() is not None:
                    raise StaleAttempt(self._app.fenced() or "")
                if _local_stop.is_set() or (self._app is not None and self._app.stopped()):
                    return self._ended(job, st)  # left RESTARTING: the next driver goes on
                if st.clock.now() >= due:
                    return None
                time.sleep(POLL_S)

    def _ended(self, job: JobRecord, store: Store) -> JobResult:
        """The result of a job that is not run (again) here: its record's state."""
        if job.state == JobState.FAILED:
            raise JobFailed(f"job {job.job_id!r} failed: {job.last_error or 'no error recorded'}")
        return _record_result(job, store)

    def _end_now(self, job: JobRecord, store: Store) -> None:
        """Settle the handle of a job that has ended already: nothing runs."""
        try:
            self._result = self._ended(job, store)
        except JobFailed as e:
            self._error = e
        self._settle()


def _brief(error: BaseException) -> str:
    """A job's error as the application's failure names it: one line, no JVM stack."""
    text = brief(error)
    # JobFailed says "job 'X' failed: ..." already: keep only the reason.
    if isinstance(error, JobFailed) and text.startswith("job ") and " failed: " in text:
        text = text.split(" failed: ", 1)[1]
    return text[:2000]


def _record_result(job: JobRecord, store: Store) -> JobResult:
    last = store.list_epochs(job.job_id, limit=1)
    return JobResult(
        job_id=job.job_id,
        state=job.state,
        attempt=int(job.current_attempt),
        epochs=0,
        rows=0,
        last_epoch=int(last[0].epoch) if last else None,
        state_dir=Path(str(job.spec.get("state_dir", ""))),
        store_url=store.url,
        outputs=tuple(str(s) for s in job.spec.get("sinks", [])),
    )


__all__ = ["JobHandle", "local_stopped"]
