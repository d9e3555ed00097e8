"""Running a pipeline as a job: one attempt, in this process, until it ends."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stoker.errors import (
    InvalidPipeline,
    JobFailed,
    JobNotFound,
    JobTerminal,
    StaleAttempt,
    StokerError,
)
from stoker.runtime import launch
from stoker.runtime.attempt import LeaseKeeper, start_attempt, this_owner
from stoker.runtime.epoch import EpochProcessor, all_sources_finished
from stoker.runtime.recovery import recover
from stoker.runtime.session import get_session
from stoker.settings import Settings, parse_duration
from stoker.store import Store, open_store
from stoker.types import AttemptNo, AttemptState, EpochState, JobId, JobState
from stoker.types import job_id as _job_id

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from stoker.pipeline import Pipeline

log = logging.getLogger("stoker.runner")


@dataclass(frozen=True)
class JobResult:
    """How a run ended."""

    job_id: JobId
    state: JobState
    attempt: int
    epochs: int  # epochs committed by this attempt
    rows: int  # rows written by this attempt
    last_epoch: int | None
    state_dir: Path
    store_url: str


def resolve_settings(
    *,
    trigger: str | float | None = None,
    state_dir: str | Path | None = None,
    store: str | None = None,
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
    lease_ttl: float | None = None,
) -> Settings:
    """Settings from ``run()``'s arguments, then the launcher's ``-D`` pairs on top."""
    s = Settings()
    if trigger is not None:
        s = replace(s, trigger=parse_duration(trigger))
    if state_dir is not None:
        s = replace(s, state_dir=Path(state_dir))
    if store is not None:
        s = replace(s, store=store)
    if master is not None:
        s = replace(s, master=master)
    if lease_ttl is not None:
        s = replace(s, lease_ttl=float(lease_ttl))
    if conf:
        s = s.with_overrides(dict(conf))
    return s.with_overrides(launch.overrides())


def run(
    pipeline: Pipeline,
    *,
    job_id: str | None = None,
    trigger: str | float | None = None,
    state_dir: str | Path | None = None,
    store: str | None = None,
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
    restart: bool = False,
    lease_ttl: float | None = None,
    spark: SparkSession | None = None,
) -> JobResult:
    """Run ``pipeline`` as a job until it ends; blocking.

    Defaults: ``local[*]`` Spark, state (checkpoint and SQLite store) under
    ``./.stoker/<job id>``, a 500 ms trigger. A job whose sources are all bounded ends
    FINISHED after its final epoch commits. A job that crashed resumes from its checkpoint when
    run again; a job that ended is run again only with ``restart=True``.
    ``conf`` takes ``spark.*`` and ``stoker.*`` keys like the CLI's ``-D``.
    """
    settings = resolve_settings(
        trigger=trigger,
        state_dir=state_dir,
        store=store,
        master=master,
        conf=conf,
        lease_ttl=lease_ttl,
    )
    jid = _job_id(launch.job_id() or job_id or pipeline.name)
    restart = restart or launch.restart()

    # Bad input fails here, before anything is written.
    pipeline.validate()
    for inp in pipeline.inputs:
        inp.source.validate()
    for sink in pipeline.sinks:
        sink.validate()

    root = (settings.state_dir or Path(".stoker") / jid).resolve()
    st = open_store(settings.store or root / "store.db")
    try:
        if launch.attempt() is None and not restart:
            _refuse_if_ended(st, jid)
        # Spark analyses the union of the sources here: a schema mismatch is bad input and
        # must fail before the job is recorded.
        session = spark or get_session(settings, f"stoker:{jid}")
        stream = _open_sources(session, pipeline, root)
        return _run_job(pipeline, jid, settings, root, st, restart, stream)
    finally:
        st.close()


def _refuse_if_ended(store: Store, jid: JobId) -> None:
    try:
        job = store.get_job(jid)
    except JobNotFound:
        return
    if job.state.terminal:
        raise JobTerminal(jid, str(job.state))


def _run_job(
    pipeline: Pipeline,
    jid: JobId,
    settings: Settings,
    root: Path,
    store: Store,
    restart: bool,
    stream: DataFrame,
) -> JobResult:
    spec = {**pipeline.spec(), "state_dir": str(root), "trigger_s": settings.trigger}
    job, _created = store.create_job(jid, pipeline.name, spec, pipeline.config)
    made_for_us = launch.attempt()
    if made_for_us is not None:
        # Driver mode: the job manager made attempt N for this process; adopt it or stop.
        attempt = store.claim_attempt(jid, AttemptNo(made_for_us), this_owner(), settings.lease_ttl)
    else:
        if job.state.terminal and not restart:
            raise JobTerminal(jid, str(job.state))
        attempt = start_attempt(store, jid, settings.lease_ttl, restart=restart)
    log.info("job %s: attempt %d started", jid, attempt.attempt)
    lease = LeaseKeeper(store, attempt, settings.lease_ttl)
    lease.start()
    checkpoint = root / "checkpoint"
    proc = EpochProcessor(pipeline, store, lease, checkpoint)
    result_state = JobState.FAILED
    try:
        store.declare_defaults(jid, pipeline.config)
        for sink in pipeline.sinks:
            sink.open(jid, root)
        recover(store, jid, pipeline.sinks)
        if _final_committed(store, jid):
            result_state = JobState.FINISHED
        else:
            query = _start_query(stream, proc, checkpoint, settings, jid)
            result_state = _supervise(query, proc, lease, checkpoint, _stop_check(store, jid))
    except KeyboardInterrupt:
        result_state = JobState.CANCELED
        _end(store, jid, attempt.attempt, AttemptState.CANCELED, JobState.CANCELED, None)
        raise
    except StaleAttempt:
        lease.stop()
        raise  # a newer attempt owns the job: its state is not ours to touch
    except BaseException as e:
        err = proc.error if isinstance(proc.error, StokerError) else e
        _end(store, jid, attempt.attempt, AttemptState.FAILED, JobState.FAILED, str(err))
        if isinstance(err, StokerError):
            if err is e:
                raise  # not `raise e from e`: an exception must not be its own cause
            raise err from e
        raise JobFailed(f"job {jid!r} failed: {err}") from e
    finally:
        lease.stop()
    # A query stopped from outside (not by its final epoch) ends the attempt CANCELED too.
    astate = AttemptState.FINISHED if result_state == JobState.FINISHED else AttemptState.CANCELED
    _end(store, jid, attempt.attempt, astate, result_state, None)
    done = [t for t in proc.timings if not t.replayed]
    result = JobResult(
        job_id=jid,
        state=result_state,
        attempt=attempt.attempt,
        epochs=len(done),
        rows=sum(t.rows for t in done),
        last_epoch=proc.timings[-1].epoch if proc.timings else None,
        state_dir=root,
        store_url=store.url,
    )
    launch.report(result)
    return result


def _end(
    store: Store, jid: JobId, attempt: int, astate: AttemptState, jstate: JobState, err: str | None
) -> None:
    from stoker.types import AttemptNo

    store.end_attempt(jid, AttemptNo(attempt), astate, err)
    if jstate == JobState.FAILED and launch.attempt() is not None:
        return  # under a job manager, its restart strategy decides what a failure means
    current = store.get_job(jid)
    if current.current_attempt != attempt:
        return
    if jstate == JobState.CANCELED and current.state == JobState.RUNNING:
        store.set_job_state(jid, JobState.CANCELING)
    store.set_job_state(jid, jstate, err)


def _final_committed(store: Store, jid: JobId) -> bool:
    last = store.list_epochs(jid, limit=1)
    return bool(last) and last[0].final and last[0].state == EpochState.COMMITTED


def _open_sources(spark: SparkSession, pipeline: Pipeline, root: Path) -> DataFrame:
    """The union of the pipeline's sources (each shaped by its map) as one streaming frame."""
    frames: list[DataFrame] = []
    for i, inp in enumerate(pipeline.inputs):
        df = inp.source.open(spark, f"s{i}", root)
        if inp.map is not None:
            df = inp.map(df)
        frames.append(df)
    try:
        return functools.reduce(lambda a, b: a.unionByName(b), frames)
    except Exception as e:  # AnalysisException: sources of different schemas
        raise InvalidPipeline("sources", f"sources must share one schema to be unioned: {e}") from e


def _start_query(
    stream: DataFrame,
    proc: EpochProcessor,
    checkpoint: Path,
    settings: Settings,
    jid: JobId,
) -> StreamingQuery:
    writer = (
        stream.writeStream.foreachBatch(proc)
        .option("checkpointLocation", str(checkpoint))
        .queryName(f"stoker_{jid}".replace("-", "_").replace(".", "_"))
    )
    ms = max(0, int(settings.trigger * 1000))
    writer = writer.trigger(processingTime=f"{ms} milliseconds")
    return writer.start()


def _stop_check(store: Store, jid: JobId, every: float = 0.5) -> Callable[[], bool]:
    """A cheap poll of the store: has someone asked this job to stop (cancel)?"""
    last = [0.0]

    def requested() -> bool:
        now = time.monotonic()
        if now - last[0] < every:
            return False
        last[0] = now
        return store.get_job(jid).state == JobState.CANCELING

    return requested


def _supervise(
    query: StreamingQuery,
    proc: EpochProcessor,
    lease: LeaseKeeper,
    checkpoint: Path,
    stop_requested: Callable[[], bool] = lambda: False,
) -> JobState:
    """Wait for the query to end: final epoch committed, stop asked for, fenced, or failed."""
    try:
        while True:
            # Sleep on the final-epoch event: no busy polling of the JVM while epochs run.
            # The job ends once Spark has written its commit log for the final epoch, so that
            # a later restart finds nothing to replay.
            if proc.final_event.wait(timeout=0.1) and _await_commit_log(
                query, checkpoint, proc.final_epoch, timeout=None
            ):
                query.stop()
                return JobState.FINISHED
            if lease.fenced is not None:
                query.stop()
                raise StaleAttempt(lease.fenced)
            if not query.isActive:
                # Stopped from outside mid-epoch: Spark interrupted the batch, but its Python
                # side may still be in foreachBatch. Wait for it before ending the attempt.
                with proc.epoch_lock:
                    pass
                if proc.stopping.is_set() and proc.error is None:
                    return JobState.CANCELED
                exc = query.exception()
                if proc.error is not None:
                    raise proc.error
                if exc is not None:
                    raise JobFailed(str(exc))
                # Stopped from outside without an error: the final check decides.
                last = _last(checkpoint)
                if proc.final_epoch is not None or all_sources_finished(checkpoint, last):
                    return JobState.FINISHED
                return JobState.CANCELED
            if proc.stopping.is_set() or stop_requested():
                return _graceful_stop(query, proc, checkpoint)
    except KeyboardInterrupt:
        return _graceful_stop(query, proc, checkpoint)


def _graceful_stop(query: StreamingQuery, proc: EpochProcessor, checkpoint: Path) -> JobState:
    """Let the epoch in flight complete and commit, then stop the query. No new epoch starts."""
    proc.stopping.set()
    with proc.epoch_lock:  # waits for the epoch in flight, if any
        last = proc.timings[-1].epoch if proc.timings else None
    _await_commit_log(query, checkpoint, last, timeout=10.0)
    query.stop()
    if proc.final_epoch is not None and (checkpoint / "commits" / str(proc.final_epoch)).exists():
        return JobState.FINISHED
    return JobState.CANCELED


def _await_commit_log(
    query: StreamingQuery, checkpoint: Path, epoch: int | None, timeout: float | None
) -> bool:
    """Wait until Spark has written ``commits/<epoch>``; False if the query ended first."""
    if epoch is None:
        return False
    deadline = None if timeout is None else time.monotonic() + timeout
    while query.isActive:
        if (checkpoint / "commits" / str(epoch)).exists():
            return True
        if deadline is not None and time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return (checkpoint / "commits" / str(epoch)).exists()


def _last(checkpoint: Path) -> int:
    try:
        return max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    except (OSError, ValueError):
        return -1


def describe(result: JobResult) -> dict[str, Any]:
    return {
        "job_id": result.job_id,
        "state": str(result.state),
        "attempt": result.attempt,
        "epochs": result.epochs,
        "rows": result.rows,
        "last_epoch": result.last_epoch,
    }
