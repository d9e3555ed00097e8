"""One attempt of a planned job, in this process, until it ends."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stoker import checkpoint_layout, logformat
from stoker.errors import InvalidPipeline, JobNotFound, JobTerminal, StaleAttempt
from stoker.redact import redact_conf
from stoker.runtime import restore, savepoint
from stoker.runtime.attempt import LeaseKeeper, start_attempt, this_owner
from stoker.runtime.epoch import EpochProcessor
from stoker.runtime.job.ending import end_attempt, fail, final_committed, resolve_at_end
from stoker.runtime.job.lease import ScopedLease, start_in_app
from stoker.runtime.job.plan import JobPlan, JobScope, spark_master
from stoker.runtime.job.result import JobResult
from stoker.runtime.job.signals import StopSignals
from stoker.runtime.launch import LaunchContext
from stoker.runtime.metrics import EpochMetrics
from stoker.runtime.recovery import recover
from stoker.runtime.repartition import repartitioning
from stoker.runtime.resources import ResourceWatch
from stoker.runtime.retention import Pruner, policy_of
from stoker.runtime.session import get_session, job_max_parallelism
from stoker.runtime.supervise import (
    ControlWatch,
    QueryHandle,
    Savepointer,
    brief,
    check_output_mode,
    supervise,
)
from stoker.settings import Settings
from stoker.sinks import descriptor_of
from stoker.sinks.base import SinkOwner
from stoker.sources.base import SourceContext
from stoker.store import Store, open_store
from stoker.store.records import ControlEvent
from stoker.types import AttemptNo, AttemptState, Epoch, JobId, JobKind, JobState

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from stoker.pipeline import Pipeline

log = logging.getLogger("stoker.runner")


def execute(plan: JobPlan) -> JobResult:
    """Run a planned job: start Spark (or reuse it), record the job, run one attempt."""
    pipeline, jid, settings, root = plan.pipeline, plan.jid, plan.settings, plan.root
    scope, owner = plan.scope, plan.owner
    with StopSignals() as signals:
        # Spark before the store: a Spark setting Spark refuses leaves no store behind.
        app_name = scope.app_id if scope is not None and scope.app_id is not None else jid
        session = plan.spark or _start_spark(settings, jid, app_name)
        # A SparkContext made on the main thread puts in its own SIGINT handler (cancel every
        # Spark job, then KeyboardInterrupt): that would fail the epoch in flight.
        signals.rearm()
        st = open_store(plan.store_url)
        try:
            if not plan.managed and not plan.restart:
                _refuse_if_ended(st, jid)  # ended meanwhile
            # Spark analyses the union of the sources here: a schema mismatch is bad input and
            # must fail before the job is recorded.
            paced = settings.trigger if _paced(settings, pipeline) else None
            stream = _open_sources(session, pipeline, root, SourceContext(jid, st.url, paced))
            restored = None
            if plan.from_savepoint is not None:
                # Before the query starts (and before the sinks open): the checkpoint, the
                # source logs and the outputs become this job's.
                restored = restore.restore(plan.from_savepoint, root, st, jid, pipeline)
                owner = restored.owner
            return _run_job(
                pipeline,
                owner,
                settings,
                root,
                st,
                plan.restart,
                stream,
                signals,
                restored,
                given=plan.given,
                scope=scope,
                ctx=plan.launch,
            )
        finally:
            st.close()


def _start_spark(settings: Settings, jid: JobId, app_name: str) -> SparkSession:
    from pyspark import SparkContext

    if SparkContext._active_spark_context is None:
        log.info("job %s: starting Spark (%s)", jid, spark_master(settings))
    t0 = time.monotonic()
    session = get_session(settings, f"stoker:{app_name}")
    if time.monotonic() - t0 > 1.0:
        log.info("job %s: Spark started in %.1f s", jid, time.monotonic() - t0)
    return session


def _refuse_if_ended(store: Store, jid: JobId) -> None:
    try:
        job = store.get_job(jid)
    except JobNotFound:
        return
    if job.state.terminal:
        raise JobTerminal(jid, str(job.state))


def _run_job(
    pipeline: Pipeline,
    owner: SinkOwner,
    settings: Settings,
    root: Path,
    store: Store,
    restart: bool,
    stream: DataFrame,
    signals: StopSignals | None = None,
    restored: restore.Restored | None = None,
    *,
    given: dict[str, Any] | None = None,
    scope: JobScope | None = None,
    ctx: LaunchContext,
) -> JobResult:
    managed = ctx.attempt is not None
    jid = owner.job_id
    signals = signals or StopSignals()
    stop_signal = signals

    def signalled() -> bool:
        return stop_signal.received is not None or (scope is not None and scope.stopped())

    app_id = scope.app_id if scope is not None else None
    spec: dict[str, Any] = {
        **pipeline.spec(),
        "state_dir": str(root),
        "trigger_s": settings.trigger,
    }
    if app_id is not None:
        spec = {"kind": "in_app", "app_id": app_id, **spec}
    if scope is not None:
        spec.update(scope.spec)
    if ctx.overrides:
        spec["conf"] = redact_conf(dict(ctx.overrides))  # the -D settings, secrets hidden
    given = dict(ctx.config if given is None else given)
    if given:
        spec["submitted_config"] = given
    if restored is not None:
        plan = restored.plan
        spec["from_savepoint"] = {
            "path": str(plan.folder),
            "job_id": plan.previous.job_id,
            "epoch": plan.epoch,
        }
    # Version 0 of the job's config: the declared defaults with the submitted values on top.
    merged = pipeline.check_config(given)
    job, _created = store.create_job(
        jid, pipeline.name, spec, merged, uid=owner.uid, kind=JobKind.JOB, app_id=app_id
    )
    if managed:
        given = dict(job.spec.get("config") or {})  # a job manager's job: its submission's
    elif not given:
        given = dict(job.spec.get("submitted_config") or {})  # resumed: what it was run with
    # The job's state partitions: fixed when it was created (the checkpoint, then its spec),
    # never by a -D given to a later run; recorded in its spec and shown in its status.
    max_par = job_max_parallelism(None if _created else job.spec, settings, root / "checkpoint")
    if not managed and not _created:
        # A local resume or --restart: the job's spec is what this attempt runs with (its
        # trigger, -D settings, config), not what the first attempt ran with.
        spec = {**spec, "submitted_config": given} if given else spec
        if "from_savepoint" in job.spec and "from_savepoint" not in spec:
            spec["from_savepoint"] = job.spec["from_savepoint"]  # where the job came from
        store.set_job_spec(jid, {**spec, "max_parallelism": max_par})
    elif job.spec.get("max_parallelism") != max_par:
        store.set_job_spec(jid, {**store.get_job(jid).spec, "max_parallelism": max_par})
    if job.uid and job.uid != owner.uid:
        # Made meanwhile by someone else (a job manager): the sinks work for that record.
        owner = SinkOwner(jid, job.uid)
    made_for_us = ctx.attempt
    if made_for_us is not None:
        # Driver mode: the job manager made attempt N for this process; adopt it or stop.
        attempt = store.claim_attempt(jid, AttemptNo(made_for_us), this_owner(), settings.lease_ttl)
    else:
        if job.state.terminal and not restart:
            raise JobTerminal(jid, str(job.state))
        if scope is not None and scope.app_attempt is not None:
            attempt = start_in_app(store, jid, settings.lease_ttl, scope.app_attempt)
        else:
            attempt = start_attempt(store, jid, settings.lease_ttl, restart=restart)
    # Every log line of this job names it (an application's jobs: in their own threads only).
    logformat.bind(jid, attempt.attempt, process=scope is None)
    log.info("job %s: attempt %d started", jid, attempt.attempt)
    lease = (
        LeaseKeeper(store, attempt, settings.lease_ttl)
        if scope is None
        else ScopedLease(store, attempt, settings.lease_ttl, scope.fenced)
    )
    lease.start()
    checkpoint = root / "checkpoint"
    proc = EpochProcessor(pipeline, store, lease, checkpoint)
    proc.pool = scope.pool if scope is not None else None
    pruner = Pruner(store, jid, policy_of(settings), settings.retention_interval)
    result_state = JobState.FAILED
    sinks_open = False
    watch: ResourceWatch | None = None
    release_watch: Callable[[], None] = _nothing
    handle: QueryHandle | None = None
    metrics: EpochMetrics | None = None
    try:
        # The defaults may have changed in the file; the submitted values stay on top of them.
        store.declare_defaults(jid, pipeline.check_config(given), pipeline=pipeline.spec())
        if restored is not None:
            # The savepoint's control state (overrides, limits, levels, trigger): events that
            # apply at this job's first epoch; retry-safe when the job resumes.
            restore.carry_control(store, jid, restored, pipeline)
        for sink in pipeline.sinks:
            sink.open(owner, root)
        store.set_job_sinks(jid, [descriptor_of(s) for s in pipeline.sinks])  # for the janitor
        sinks_open = True
        if attempt.attempt > 1:
            log.info("job %s: recovering what attempt %d left", jid, attempt.attempt - 1)
        recover(store, jid, pipeline.sinks)
        pruner.start()  # old epoch records go in the background, never inside an epoch
        # Before the query: an executor target set already applies from the first epoch, and
        # the sources split that epoch by the cores reported.
        watch, release_watch = _watch_resources(store, jid, stream, scope)
        metrics = EpochMetrics(store, jid, watch.latest if watch is not None else _no_resources)
        if final_committed(store, jid):
            result_state = JobState.FINISHED
        elif signalled():
            # Stopped while Spark started or recovery ran (off the main thread no signal can
            # raise): the query is not started at all; the job resumes from here.
            result_state = JobState.SUSPENDED
        elif (holder := repartitioning(root)) is not None:
            # `stoker state repartition` rewrites the checkpoint now: the query must not run
            # on it. The job waits, suspended, and resumes under the new partitions.
            log.warning("job %s: its state is being repartitioned (%s); not started", jid, holder)
            result_state = JobState.SUSPENDED
        else:
            checkpoint_layout.clear_half_written_logs(checkpoint)
            signals.deferred = True  # from here a signal is seen by supervise, between epochs
            # A trigger interval set by control outlives the attempt that applied it.
            trigger = store.control_snapshot(jid).trigger_s
            handle = QueryHandle(
                stream,
                proc,
                checkpoint,
                jid,
                settings.trigger if trigger is None else trigger,
                paced=_paced(settings, pipeline),
                max_parallelism=max_par,
                output_mode=pipeline.output_mode,
            )
            handle.start()
            log.info("job %s: query started, first epoch on its way", jid)
            result_state = supervise(
                handle,
                lease,
                ControlWatch(store, jid),
                stoker_sources_only=_stoker_sources_only(pipeline),
                savepoint=_savepointer(store, jid, root, pipeline, owner),
                signalled=signalled,
                metrics=metrics,
            )
    except KeyboardInterrupt:
        # A signal before the query ran (Spark starting, recovery): nothing was decided by
        # this attempt that recovery would not finish; the job waits to be resumed.
        result_state = JobState.SUSPENDED
    except StaleAttempt:
        lease.stop()
        raise  # a newer attempt owns the job: its state is not ours to touch
    except Exception as e:
        if not signalled():
            fail(store, jid, attempt.attempt, proc, e, scope, managed=managed)
        # A stop signal came first: what broke after it is the shutdown's doing (on a host
        # shutdown every process gets SIGTERM, Spark's Python workers too, failing the tasks
        # in flight). Nothing undecided is kept; the job resumes like any suspended one.
        log.warning("job %s: stopping after a signal, the query failed: %s", jid, brief(e))
        result_state = JobState.SUSPENDED
    except BaseException as e:
        fail(store, jid, attempt.attempt, proc, e, scope, managed=managed)
    finally:
        if metrics is not None and handle is not None:
            metrics.flush(getattr(handle, "query", None), proc.timings)
        release_watch()
        pruner.stop()
        lease.stop()
        if sinks_open:  # the ways out that raise have ended the attempt already
            resolve_at_end(store, jid, attempt.attempt, pipeline.sinks)
    # A query stopped from outside (not by its final epoch) ends the attempt CANCELED too.
    astate = {
        JobState.FINISHED: AttemptState.FINISHED,
        JobState.SUSPENDED: AttemptState.SUSPENDED,
    }.get(result_state, AttemptState.CANCELED)
    result_state = end_attempt(
        store, jid, attempt.attempt, astate, result_state, None, managed=managed
    )
    resolve_at_end(store, jid, attempt.attempt, pipeline.sinks)
    pruner.final_round()
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
        outputs=tuple(s.describe() for s in pipeline.sinks),
    )
    ctx.report(result)
    return result


def _nothing() -> None:
    return None


def _no_resources() -> dict[str, Any] | None:
    return None


def _watch_resources(
    store: Store, jid: JobId, stream: DataFrame, scope: JobScope | None
) -> tuple[ResourceWatch | None, Callable[[], None]]:
    """The watch of this driver's executors the job reports through, and how to let it go: a
    lone job starts its own (the job owns the executors); a job of an application joins the
    application's. A failure here is logged: the job runs without it."""
    try:
        spark = stream.sparkSession
        if scope is not None and scope.resources is not None:
            shared = scope.resources(spark)
            if shared is None:
                return None, _nothing
            shared.add_job(jid)
            return shared, functools.partial(shared.remove_job, jid)
        own = ResourceWatch(store, jid, spark)
        own.start()
        return own, own.stop
    except Exception as e:
        log.warning("job %s: its executors are not watched (scaling cannot act): %s", jid, e)
        return None, _nothing


def _paced(settings: Settings, pipeline: Pipeline) -> bool:
    """Whether the readers pace the epochs (the query at trigger 0): every source is stoker's
    and ``stoker.paced_trigger`` is left on."""
    return settings.paced_trigger and _stoker_sources_only(pipeline)


def _stoker_sources_only(pipeline: Pipeline) -> bool:
    """Whether every source is one of stoker's own (they pause and rate-limit themselves)."""
    from stoker.sources.spark import SparkSource

    return not any(isinstance(i.source, SparkSource) for i in pipeline.inputs)


def _savepointer(
    store: Store, jid: JobId, root: Path, pipeline: Pipeline, owner: SinkOwner
) -> Savepointer:
    def take(event: ControlEvent, epoch: Epoch | None) -> dict[str, object]:
        return savepoint.take(store, jid, root, pipeline, owner, event, epoch)

    return take


def _open_sources(
    spark: SparkSession, pipeline: Pipeline, root: Path, context: SourceContext
) -> DataFrame:
    """The union of the pipeline's sources (each shaped by its map) as one streaming frame."""
    frames: list[DataFrame] = []
    for i, inp in enumerate(pipeline.inputs):
        df = inp.source.open(spark, f"s{i}", root, context)
        if inp.map is not None:
            df = inp.map(df)
        frames.append(df)
    try:
        stream = functools.reduce(lambda a, b: a.unionByName(b), frames)
    except Exception as e:  # AnalysisException: sources of different schemas
        raise InvalidPipeline("sources", f"sources must share one schema to be unioned: {e}") from e
    check_output_mode(stream, pipeline.output_mode)
    return stream
