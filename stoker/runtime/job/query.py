"""The driver's loop while a job's query runs: end, stop, fence, and control that needs the
query itself (a new trigger interval, an epoch now, pause of sources stoker does not own, a
savepoint).

Spark cannot change a running query's trigger and has no pause. A job whose sources are all
stoker's needs neither: its query runs at trigger 0 and the readers pace epochs and hold for a
pause (``stoker.sources._control``), so a new interval or a checkpoint-now is a control
version like any other. Otherwise the loop stops the query between epochs (the epoch in flight
completes and commits first, Spark writes its commit log) and starts it again in the same
SparkSession from the same checkpoint. Nothing is read twice: the next epoch starts where the
last committed one ended.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from stoker import checkpoint_layout
from stoker.errors import InvalidPipeline, JobFailed, QueryStalled, StaleAttempt
from stoker.runtime.epoch import EpochProcessor, all_sources_finished
from stoker.runtime.job.mode_hints import mode_hint
from stoker.runtime.job.signals import StopNow
from stoker.sources.base import invalid_source_in
from stoker.store.records import ControlEvent, ControlSnapshot
from stoker.types import ControlKind, ControlStatus, Epoch, JobId, JobState

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming import StreamingQuery

    from stoker.runtime.attempt import LeaseKeeper
    from stoker.runtime.job.watchdog import ProgressWatchdog
    from stoker.runtime.metrics import EpochMetrics
    from stoker.store import Store

log = logging.getLogger("stoker.runner")

# A checkpoint event waits for the next trigger when it comes this soon anyway; with a longer
# interval the query is restarted, which runs an epoch at once.
RESTART_FOR_CHECKPOINT_S = 1.0
POLL_S = 0.1


def start_query(
    stream: DataFrame,
    proc: EpochProcessor,
    checkpoint: Path,
    trigger_s: float,
    jid: JobId,
    max_parallelism: int | None = None,
    output_mode: str = "append",
) -> StreamingQuery:
    """Start the job's query. ``max_parallelism`` (the job's state partitions) is the number
    of shuffle partitions it starts with; the first epoch pins it in the checkpoint."""
    from stoker.runtime.session import query_partitions

    writer = (
        stream.writeStream.foreachBatch(proc)
        .option("checkpointLocation", str(checkpoint))
        .queryName(f"stoker_{jid}".replace("-", "_").replace(".", "_"))
    )
    ms = max(0, int(trigger_s * 1000))
    writer = writer.trigger(processingTime=f"{ms} milliseconds")
    writer = writer.outputMode(output_mode)
    with query_partitions(stream.sparkSession, max_parallelism):
        try:
            return writer.start()
        except Exception as e:
            refused = _pipeline_error(e)
            if refused is None:
                raise
            raise refused from e


def check_output_mode(stream: DataFrame, output_mode: str) -> None:
    """Refuse, before the job is recorded, a query Spark would not start in ``output_mode``
    (an aggregation without a watermark in append mode): Spark's own streaming checker, run on
    the analysed plan. Where that checker cannot be reached (another Spark), the same refusal
    comes when the query starts."""
    try:
        jvm = stream.sparkSession._jvm
        assert jvm is not None
        modes = jvm.org.apache.spark.sql.streaming.OutputMode
        mode = {"append": modes.Append, "update": modes.Update, "complete": modes.Complete}[
            output_mode
        ]()
        plan = stream._jdf.queryExecution().analyzed()
        checker = jvm.org.apache.spark.sql.catalyst.analysis.UnsupportedOperationChecker
        check = checker.checkForStreaming
    except Exception:
        log.debug("Spark's output mode checker is not reachable", exc_info=True)
        return
    try:
        check(plan, mode)
    except Exception as e:
        refused = _pipeline_error(e)
        if refused is not None:
            raise refused from e
        log.debug("Spark's output mode checker failed", exc_info=True)


def first_line(e: BaseException) -> str:
    """The first line of an exception's text (Spark's own messages run on for pages), else
    its class's name."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _pipeline_error(e: BaseException) -> InvalidPipeline | None:
    """Spark's refusal of the query's output mode, as the pipeline's mistake it is."""
    text = str(e)
    if "STREAMING_OUTPUT_MODE" not in text and "output mode not supported" not in text.lower():
        return None
    first = first_line(e)
    return InvalidPipeline(
        "output_mode",
        f"Spark refuses this query in its output mode ({mode_hint(first)}): " + first[:300],
    )


@dataclass
class QueryHandle:
    """The attempt's running query; stopped and started again in place for control."""

    stream: DataFrame
    proc: EpochProcessor
    checkpoint: Path
    jid: JobId
    trigger_s: float
    paced: bool = False  # the readers pace epochs: the query itself runs at trigger 0
    max_parallelism: int | None = None  # the job's state partitions (None: the session's)
    output_mode: str = "append"  # Spark's output mode (the pipeline's)
    cancel_wait_s: float | None = None  # how long a cancel waits for the epoch in flight
    query: StreamingQuery = field(init=False)
    held: bool = False  # stopped for a pause (sources stoker does not own)
    restarts: int = 0

    def start(self) -> None:
        self.proc.stopping.clear()
        trigger = 0.0 if self.paced else self.trigger_s
        self.query = start_query(
            self.stream,
            self.proc,
            self.checkpoint,
            trigger,
            self.jid,
            self.max_parallelism,
            self.output_mode,
        )
        self.held = False
        if self.proc.progress is not None:
            self.proc.progress.query_started()

    def stop_between_epochs(self) -> None:
        """The epoch in flight completes and commits (with Spark's commit log); then stop."""
        graceful_stop(self.query, self.proc, self.checkpoint)

    def restart(self, trigger_s: float | None = None, why: str = "") -> None:
        t0 = time.monotonic()
        self.stop_between_epochs()
        if trigger_s is not None:
            self.trigger_s = trigger_s
        self.start()
        self.restarts += 1
        log.info(
            "job %s: query restarted in %.0f ms (%s), trigger %.3g s",
            self.jid,
            (time.monotonic() - t0) * 1000,
            why,
            self.trigger_s,
        )


class ControlWatch:
    """A cheap poll of the job's record: cancel asked for, or a new control version."""

    def __init__(self, store: Store, jid: JobId, every: float = POLL_S) -> None:
        self.store = store
        self.jid = jid
        self.every = every
        self._last = 0.0
        self.version: int | None = None
        self.canceling = False

    def poll(self) -> ControlSnapshot | None:
        """The latest control snapshot when the version moved since the last call."""
        now = time.monotonic()
        if now - self._last < self.every:
            return None
        self._last = now
        job = self.store.get_job(self.jid)
        self.canceling = job.state == JobState.CANCELING
        if job.control_version == self.version:
            return None
        self.version = int(job.control_version)
        return self.store.control_snapshot(self.jid)

    def pending(self, kind: ControlKind) -> list[ControlEvent]:
        events = self.store.list_controls(
            self.jid, limit=100, kind=kind, status=ControlStatus.PENDING
        )
        return sorted(events, key=lambda e: e.version)


Savepointer = Callable[[ControlEvent, Epoch | None], dict[str, object]]


def supervise(
    handle: QueryHandle,
    lease: LeaseKeeper,
    watch: ControlWatch | None,
    *,
    stoker_sources_only: bool,
    savepoint: Savepointer | None = None,
    signalled: Callable[[], bool] = lambda: False,
    metrics: EpochMetrics | None = None,
    watchdog: ProgressWatchdog | None = None,
    tasks_moved: Callable[[StreamingQuery], bool] | None = None,
) -> JobState:
    """Wait for the query to end: final epoch committed, stop asked for, fenced, or failed.

    A cancel stops the query gracefully and ends CANCELED; a signal likewise, SUSPENDED; a
    savepoint with stop, FINISHED. ``metrics``: each epoch's cost and backlog are recorded
    from the query's progress as the epochs end. ``watchdog``: a query without progress for
    longer than its bound fails the attempt (:class:`QueryStalled`); ``tasks_moved`` tells it
    whether a task of the epoch running completed since the last call.
    """
    proc, checkpoint = handle.proc, handle.checkpoint
    try:
        while True:
            query = handle.query
            # Sleep on the final-epoch event: no busy polling of the JVM while epochs run.
            # The job ends once Spark has written its commit log for the final epoch, so that
            # a later restart finds nothing to replay.
            if proc.final_event.wait(timeout=POLL_S / 2) and await_commit_log(
                query, checkpoint, proc.final_epoch, timeout=None
            ):
                await_idle(query)
                query.stop()
                return JobState.FINISHED
            if metrics is not None:
                metrics.poll(query, proc.timings)
            if lease.fenced is not None:
                query.stop()
                raise StaleAttempt(lease.fenced)
            if not handle.held and not query.isActive:
                return _ended(query, proc, checkpoint)
            if watchdog is not None:
                _watch(handle, watchdog, tasks_moved)
            if signalled():
                return _stop(handle, JobState.SUSPENDED)
            if proc.stopping.is_set():
                return _stop(handle, JobState.CANCELED)
            if watch is None:
                continue
            snap = watch.poll()
            if watch.canceling:
                return _stop(handle, JobState.CANCELED)
            if snap is None:
                continue
            ended = _control(handle, watch, snap, stoker_sources_only, savepoint)
            if ended is not None:
                return ended
    except StopNow:
        abandon(handle)
        raise
    except KeyboardInterrupt:  # not through _StopSignals (run() off the main thread)
        return _stop(handle, JobState.SUSPENDED)


def _watch(
    handle: QueryHandle,
    watchdog: ProgressWatchdog,
    tasks_moved: Callable[[StreamingQuery], bool] | None,
) -> None:
    """Fail the attempt when the query has made no progress for longer than its bound.

    The query is abandoned, not stopped and waited for: whatever holds it (a Python process
    that does not answer) may hold a stop as well. The epoch in flight, if any, never reached
    its commit point (the attempt's end fences it off) and runs again in the next attempt."""
    watchdog.hold(handle.held)
    if tasks_moved is not None and watchdog.probe_due() and tasks_moved(handle.query):
        watchdog.saw(f"a task of epoch {watchdog.epoch} completed")
    stall = watchdog.overdue(handle.trigger_s)
    if stall is None:
        return
    what = stall.describe()
    log.error(
        "job %s: %s; failing the attempt, its restart strategy decides what next",
        handle.jid,
        what,
    )
    abandon(handle)
    raise QueryStalled(f"job {handle.jid!r}: {what}")


def abandon(handle: QueryHandle) -> None:
    """Stop without waiting for the epoch in flight (a second signal): no new epoch starts,
    and the query is told to stop on a thread of its own. That stop may never return (an
    epoch stuck in the driver's Python code holds Spark's query thread), and this thread must
    not wait for it: the attempt's end is recorded now, and the process's exit takes the JVM
    with it. The epoch in flight never reached its commit point (the attempt's end fences it
    off) and runs again when the job resumes."""
    handle.proc.stopping.set()
    if handle.held:
        return
    _stop_on_a_thread(handle.query, handle.jid)


def _stop_on_a_thread(query: StreamingQuery, jid: str) -> None:
    """``query.stop()`` on a daemon thread of its own: it may never return."""

    def stop() -> None:
        try:
            query.stop()
        except Exception:  # the process is going; nothing is waiting for this
            log.debug("stopping the abandoned query failed", exc_info=True)

    threading.Thread(target=stop, name=f"stoker-abandon-{jid}", daemon=True).start()


def _control(
    handle: QueryHandle,
    watch: ControlWatch,
    snap: ControlSnapshot,
    stoker_sources_only: bool,
    savepoint: Savepointer | None,
) -> JobState | None:
    """Act on a new control version where the query itself must change. The job's state
    when a savepoint stopped it, else None."""
    if savepoint is not None:
        for ev in watch.pending(ControlKind.SAVEPOINT):
            if not handle.held:
                handle.stop_between_epochs()
            last = _last_epoch(handle.checkpoint)
            try:
                savepoint(ev, last)
            except Exception as e:
                log.exception("job %s: savepoint %s failed", handle.jid, ev.control_id)
                watch.store.reject_control(handle.jid, ev.control_id, f"savepoint failed: {e}")
                if not handle.held:
                    handle.start()
                continue
            if ev.body.get("stop"):
                return JobState.FINISHED
            if not handle.held:
                handle.start()
    if not stoker_sources_only:
        # A source stoker does not own cannot hold its offsets: pause stops the query.
        if snap.paused and not handle.held:
            handle.stop_between_epochs()
            handle.held = True
            _applied_now(watch, handle, ControlKind.PAUSE)
            log.info("job %s: paused (query stopped between epochs)", handle.jid)
            return None
        if not snap.paused and handle.held:
            handle.start()
            log.info("job %s: resumed", handle.jid)
    if handle.held:
        return None
    wanted = snap.trigger_s
    if handle.paced:
        if wanted is not None:
            handle.trigger_s = wanted  # the readers took it; the query needs no restart
        return None
    if wanted is not None and abs(wanted - handle.trigger_s) > 1e-9:
        handle.restart(wanted, "trigger interval changed by control")
    elif handle.trigger_s > RESTART_FOR_CHECKPOINT_S and watch.pending(ControlKind.CHECKPOINT):
        handle.restart(None, "checkpoint asked for")
    return None


def _applied_now(watch: ControlWatch, handle: QueryHandle, kind: ControlKind) -> None:
    """A pause taken by stopping the query applies after the last committed epoch."""
    last = _last_epoch(handle.checkpoint)
    for ev in watch.pending(kind):
        watch.store.finish_control(handle.jid, ev.control_id, ControlStatus.APPLIED, last)
        watch.store.finish_control(handle.jid, ev.control_id, ControlStatus.COMMITTED, last)


def _last_epoch(checkpoint: Path) -> Epoch | None:
    last = checkpoint_layout.last_committed(checkpoint)
    return None if last is None else Epoch(last)


def _stop(handle: QueryHandle, stopped: JobState) -> JobState:
    if handle.held:
        return stopped
    # A cancel's wait for the epoch in flight is bounded (stoker.cancel_timeout); a signal's
    # is not: a second signal is its bound.
    wait = handle.cancel_wait_s if stopped == JobState.CANCELED else None
    return graceful_stop(handle.query, handle.proc, handle.checkpoint, stopped, wait, handle.jid)


def _ended(query: StreamingQuery, proc: EpochProcessor, checkpoint: Path) -> JobState:
    """The query stopped by itself or from outside."""
    # Stopped from outside mid-epoch: Spark interrupted the batch, but its Python side may
    # still be in foreachBatch. Wait for it before ending the attempt.
    with proc.epoch_lock:
        pass
    if proc.stopping.is_set() and proc.error is None:
        return JobState.CANCELED
    exc = query.exception()
    if proc.error is not None:
        raise proc.error
    if exc is not None:
        # Bad input a source found in Spark's processes (exit 2), else a failure to retry.
        raise invalid_source_in(str(exc)) or JobFailed(brief(exc)) from exc
    # Stopped from outside without an error: the final check decides.
    last = checkpoint_layout.last_committed(checkpoint)
    if proc.final_epoch is not None or (
        last is not None and all_sources_finished(checkpoint, last)
    ):
        return JobState.FINISHED
    return JobState.CANCELED


def graceful_stop(
    query: StreamingQuery,
    proc: EpochProcessor,
    checkpoint: Path,
    stopped: JobState = JobState.CANCELED,
    wait_s: float | None = None,
    jid: str = "",
) -> JobState:
    """Let the epoch in flight complete and commit, then stop the query. No new epoch starts.

    FINISHED if that epoch was the final one, else ``stopped``. ``wait_s``: an epoch in
    flight that has not ended by then is abandoned (never committed by this attempt, whose
    end fences it off; it runs again when the job resumes) and the query is told to stop on
    a thread of its own, as the watchdog and a second signal do.
    """
    proc.stopping.set()
    # Waits for the epoch in flight, if any.
    if not proc.epoch_lock.acquire(timeout=-1 if wait_s is None else wait_s):
        log.error(
            "job %s: the epoch in flight did not end within %.0f s of the stop "
            "(stoker.cancel_timeout); the query is abandoned, that epoch uncommitted",
            jid,
            wait_s or 0.0,
        )
        _stop_on_a_thread(query, jid)
        return stopped
    try:
        last = proc.timings[-1].epoch if proc.timings else None
    finally:
        proc.epoch_lock.release()
    if await_commit_log(query, checkpoint, last, timeout=10.0):
        await_idle(query)
    query.stop()
    if proc.final_epoch is not None and checkpoint_layout.is_committed(
        checkpoint, proc.final_epoch
    ):
        return JobState.FINISHED
    return stopped


def await_commit_log(
    query: StreamingQuery, checkpoint: Path, epoch: int | None, timeout: float | None
) -> bool:
    """Wait until Spark has written ``commits/<epoch>``; False if the query ended first."""
    if epoch is None:
        return False
    deadline = None if timeout is None else time.monotonic() + timeout
    while query.isActive:
        if checkpoint_layout.is_committed(checkpoint, epoch):
            return True
        if deadline is not None and time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return checkpoint_layout.is_committed(checkpoint, epoch)


def await_idle(query: StreamingQuery, timeout: float = 5.0) -> None:
    """Wait until the query's trigger has finished (its commit log write included: Spark
    renames the log's checksum file after the log itself), so that the stop that follows
    interrupts an idle query, not a file system call."""
    deadline = time.monotonic() + timeout
    try:
        while query.isActive and query.status.get("isTriggerActive"):
            if time.monotonic() > deadline:
                return
            time.sleep(0.005)
    except Exception:  # the query ended meanwhile: nothing to wait for
        log.debug("reading the query's status failed", exc_info=True)


def brief(err: BaseException) -> str:
    """An error as recorded and shown: PySpark's message without the JVM stack trace it
    carries (kilobytes of Java frames; ``--debug`` shows the whole exception)."""
    text = str(err)
    cut = text.find("JVM stacktrace:")
    return (text[:cut] if cut >= 0 else text).strip()
