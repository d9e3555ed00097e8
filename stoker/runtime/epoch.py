"""The epoch protocol: what runs inside ``foreachBatch(df, N)`` for every epoch N.

The numbered steps of :meth:`EpochProcessor.__call__` are the protocol of
../shared/ARCHITECTURE.md; each is commented with what a crash right there leaves behind.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from stoker import checkpoint_layout, logformat
from stoker.errors import StaleAttempt
from stoker.runtime.attempt import LeaseKeeper
from stoker.runtime.context import EpochContext
from stoker.runtime.control import EpochControl
from stoker.runtime.pending import PendingEpoch
from stoker.sources._control import CV
from stoker.sources.base import FINISHED, parse_offset_line
from stoker.testing import fault_point
from stoker.types import (
    ControlKind,
    ControlStatus,
    ControlVersion,
    Epoch,
    EpochState,
    JobId,
    JobState,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from stoker.pipeline import Pipeline
    from stoker.runtime.job.watchdog import ProgressWatchdog
    from stoker.store import Store

log = logging.getLogger("stoker.epoch")

POOL_PROPERTY = "spark.scheduler.pool"


def all_sources_finished(checkpoint: Path, epoch: int) -> bool:
    """Whether Spark's offset log for ``epoch`` shows every source finished.

    Only stoker sources carry the flag; any other source (or a missing line) is unbounded.
    """
    return offsets_of(checkpoint, epoch)[0]


def offsets_of(checkpoint: Path, epoch: int) -> tuple[bool, ControlVersion | None]:
    """From Spark's offset log for ``epoch``: (every source finished, the control version the
    epoch was planned under).

    The version is the lowest ``cv`` among the stoker sources still reading (each reader
    planned its range under the version it read; every event up to the lowest one is in force
    for all of them). None when no source carries one: the epoch pins the job's latest.
    """
    try:
        lines = checkpoint_layout.offset_lines(checkpoint, epoch)
    except OSError:
        return False, None
    offsets = [parse_offset_line(line) for line in lines or []]
    finished = bool(offsets) and all(o is not None and o[FINISHED] is True for o in offsets)
    versions = [
        int(o[CV]) for o in offsets if o is not None and CV in o and o[FINISHED] is not True
    ]
    return finished, (ControlVersion(min(versions)) if versions else None)


# Kinds whose event does not change how offsets are planned: an epoch whose sources planned
# under an older version may still take them (their state is the epoch's own, read after the
# offsets are fixed). A rate limit, a pause or a resume changes the offsets: never skipped over.
_EPOCH_LOCAL = frozenset(
    {
        ControlKind.CONFIG,
        ControlKind.LOG_LEVEL,
        ControlKind.EVENT,
        ControlKind.CHECKPOINT,
        ControlKind.TRIGGER,
        ControlKind.SAVEPOINT,
    }
)


def pin_forward(
    store: Store, job: JobId, planned: ControlVersion, latest: ControlVersion
) -> ControlVersion:
    """The newest version this epoch may pin when events came after its sources planned.

    Events stored while the epoch's offsets were being planned (after the readers read the
    version, before the pin) would otherwise wait a whole epoch more. The pin may move past
    each version made by an event of a kind that leaves offset planning alone, in order, and
    stops at the first that does not (or at a version no pending event explains): the pinned
    state then has the planned version's rate limits and pause. The pin is recorded, so a
    replay uses the version chosen here whatever arrived since.
    """
    pending = store.list_controls(job, limit=100, status=ControlStatus.PENDING)
    by_version = {int(e.version): e for e in pending}
    v = int(planned)
    while v < int(latest):
        ev = by_version.get(v + 1)
        if ev is None or ev.kind not in _EPOCH_LOCAL:
            break
        v += 1
    return ControlVersion(v)


class Stopping(Exception):
    """Raised in foreachBatch to end the query without running the epoch."""


def _not_a_stop(record: logging.LogRecord) -> bool:
    """py4j logs, with its traceback, every exception a Python callback raises to the JVM. A
    :class:`Stopping` is how a job ends its own query (cancel, stop, suspend), not an error:
    a cancel left one traceback per job in the driver's log."""
    exc = record.exc_info[1] if record.exc_info else None
    return not isinstance(exc, Stopping)


for _name in ("py4j.clientserver", "py4j.java_gateway"):
    logging.getLogger(_name).addFilter(_not_a_stop)  # once: a filter already there is kept


TIMINGS_KEPT = 256


@dataclass
class EpochTiming:
    epoch: int
    seconds: float
    rows: int
    replayed: bool
    # The sinks' Spark writes (the transform runs inside them): the part of the epoch that
    # more executors share; None for a replay (nothing was written).
    work_s: float | None = None


class EpochProcessor:
    """The ``foreachBatch`` function of a job's attempt."""

    def __init__(
        self,
        pipeline: Pipeline,
        store: Store,
        lease: LeaseKeeper,
        checkpoint: Path,
    ) -> None:
        self.pipeline = pipeline
        self.store = store
        self.lease = lease
        self.job = lease.job
        self.attempt = lease.attempt
        self.checkpoint = checkpoint
        self.final_epoch: int | None = None
        self.final_event = threading.Event()
        self.error: BaseException | None = None
        # The newest epochs' timings (the metrics read them); a job runs for months, so older
        # ones are only counted.
        self.timings: deque[EpochTiming] = deque(maxlen=TIMINGS_KEPT)
        self.done_epochs = 0  # committed (not replayed) by this attempt
        self.done_rows = 0
        # Graceful stop: once set, no new epoch starts; the one in flight (holding the lock)
        # completes and commits first.
        self.stopping = threading.Event()
        self.epoch_lock = threading.Lock()
        self.control = EpochControl(store, self.job, pipeline)
        # The control version and epoch of the last epoch run (the supervisor's reference).
        self.last_version: ControlVersion | None = None
        # The FAIR scheduler pool of this job's Spark jobs (a job of an application shares
        # its driver's SparkSession with the others: one pool each, so none starves another).
        self.pool: str | None = None
        # The attempt's progress watchdog (runtime/job/watchdog.py): told when an epoch begins
        # and ends. None: not watched.
        self.progress: ProgressWatchdog | None = None

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        logformat.bind(self.job, self.attempt, batch_id)  # Spark's callback thread: name it
        progress = self.progress
        if progress is not None:
            progress.epoch_begun(batch_id)
        try:
            self._locked(df, batch_id)
        finally:
            if progress is not None:
                progress.epoch_ended(batch_id, "ended" if self.error is None else "failed")

    def _locked(self, df: DataFrame, batch_id: int) -> None:
        with self.epoch_lock:
            if self.stopping.is_set():
                # Nothing of this epoch was written: it runs again when the job resumes.
                raise Stopping(f"epoch {batch_id} not started: the job is stopping")
            try:
                self._run(df, Epoch(batch_id))
            except Stopping:
                raise
            except BaseException as e:
                self.error = e
                raise
            finally:
                self.control.end()

    def _run(self, df: DataFrame, epoch: Epoch) -> None:
        t0 = time.perf_counter()
        job, attempt, store, sinks = self.job, self.attempt, self.store, self.pipeline.sinks
        if self.pool is not None:
            # A local property of this query's thread: every Spark job the epoch launches
            # (transform, sinks) is scheduled in the job's pool.
            df.sparkSession.sparkContext.setLocalProperty(POOL_PROPERTY, self.pool)
        final, planned = offsets_of(self.checkpoint, epoch)

        # 1. Fence. A stale attempt stops here and writes nothing; so does a canceled job.
        self.lease.check()
        current = store.get_job(job)
        if current.state == JobState.CANCELING:
            self.stopping.set()
            raise Stopping(f"epoch {epoch} not started: the job is being canceled")

        # 2. Pin: insert-if-absent, with the control version the sources planned the epoch's
        #    offsets under (else the latest), applying the control events up to it. A replay
        #    finds the record and gets the version and events it had the first time. Crash
        #    after: a PINNED record, no output; the replay reuses the pin.
        version = current.control_version if planned is None else planned
        if version < current.control_version:
            version = pin_forward(store, job, version, current.control_version)
        rec = store.pin_epoch(job, epoch, attempt, min(version, current.control_version))
        self.last_version = rec.control_version
        fault_point("after_pin", epoch)

        if rec.state != EpochState.PINNED:
            # Replay of an epoch already decided (the crash came after step 5): its output is
            # the decided attempt's recorded parts. DECIDED: commit them (recovery normally
            # has; commit is idempotent). COMMITTED: every sink committed, nothing to do.
            assert rec.decided_by is not None
            if rec.state == EpochState.DECIDED:
                replay = PendingEpoch.decided(store, rec, sinks)
                replay.commit(sinks)
                replay.mark_committed()
            if checkpoint_layout.has_state(self.checkpoint):
                # A stateful query: Spark commits this batch only once every state store of
                # it has committed, so the epoch's input goes through its stateful operators
                # again (the same input, the same state) and the output is thrown away.
                df.write.format("noop").mode("overwrite").save()
            self._finish(epoch, final or rec.final, t0, rec.rows_in or 0, replayed=True)
            return
        pending = PendingEpoch(store, job, epoch, attempt, rec.control_version)

        # 3. Transform, with the control state of the pinned version: config, custom events
        #    (their handlers run first), log levels; tasks see it through control.current().
        ctx = EpochContext(
            job_id=job,
            epoch=epoch,
            attempt=attempt,
            control_version=rec.control_version,
            config=EpochContext.frozen(self.control.snapshot(rec.control_version).config),
            spark=df.sparkSession,
        )
        events = self.control.begin(df.sparkSession, epoch, rec.control_version, ctx)
        if events:
            ctx = dataclasses.replace(ctx, events=events)
        out = self.pipeline.apply(df, ctx)
        fault_point("after_transform", epoch)

        # 4. Prepare every sink under (job, epoch, attempt) and record each part PREPARED with
        #    what commit needs (the PostgreSQL sink: the gids of the task attempts whose
        #    results Spark kept). Crash after: prepared parts that nobody decided; recovery
        #    aborts them and the replay prepares anew.
        cached = len(sinks) > 1
        if cached:
            out = out.persist()
        w0 = time.perf_counter()
        try:
            for sink in sinks:
                pending.prepare(sink, out)
        finally:
            if cached:
                out.unpersist()
        work = time.perf_counter() - w0
        pending.all_prepared(sinks)
        rows = pending.rows
        fault_point("after_prepare", epoch)

        # 5. Decide: one fenced store transaction. THE COMMIT POINT. Crash after: the epoch is
        #    DECIDED for this attempt; recovery commits its recorded parts, a replay skips it.
        self.lease.check()
        pending.decide(final)
        fault_point("after_decide", epoch)

        # 6. Commit every sink: exactly the parts recorded at step 4 (and roll back strays).
        #    Crash after (some or all): recovery finishes the rest; commit is idempotent.
        pending.commit(sinks)
        fault_point("after_commit", epoch)
        pending.mark_committed()
        # Crash here: Spark has not written its commit log; the replay of this epoch finds it
        # decided and skips it (step 2).
        fault_point("before_spark_commit", epoch)
        self._finish(epoch, final, t0, rows, replayed=False, work=work)

    def _finish(
        self,
        epoch: Epoch,
        final: bool,
        t0: float,
        rows: int,
        replayed: bool,
        work: float | None = None,
    ) -> None:
        took = time.perf_counter() - t0
        self.timings.append(EpochTiming(epoch, took, rows, replayed, work))
        if not replayed:
            self.done_epochs += 1
            self.done_rows += rows
        log.info(
            "epoch %d %s: %d rows, %.0f ms%s",
            epoch,
            "replayed" if replayed else "committed",
            rows,
            took * 1000,
            " (final)" if final else "",
        )
        if final:
            # Every source has finished and this epoch is committed: the job is done once
            # Spark writes its commit log for it.
            self.final_epoch = epoch
            self.final_event.set()


__all__ = ["EpochProcessor", "StaleAttempt", "Stopping", "all_sources_finished"]
