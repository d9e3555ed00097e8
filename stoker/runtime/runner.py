"""Running a pipeline as a job: one attempt, in this process, until it ends."""

from __future__ import annotations

import functools
import logging
import signal
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import FrameType, TracebackType
from typing import TYPE_CHECKING, Any

from stoker import checkpoint_layout, logformat
from stoker.errors import (
    InvalidInput,
    InvalidPipeline,
    InvalidTransition,
    JobFailed,
    JobNotFound,
    JobTerminal,
    StaleAttempt,
    StokerError,
)
from stoker.redact import redact_conf
from stoker.runtime import launch, restore, savepoint
from stoker.runtime.attempt import LeaseKeeper, owner_is_dead, start_attempt, this_owner
from stoker.runtime.epoch import EpochProcessor
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
from stoker.settings import Settings, parse_duration
from stoker.sinks import descriptor_of
from stoker.sinks.base import SinkOwner, TwoPhaseSink
from stoker.sources.base import SourceContext
from stoker.store import AttemptRecord, JobRecord, Store, open_store
from stoker.store.records import ControlEvent
from stoker.types import AttemptNo, AttemptState, Epoch, EpochState, JobId, JobKind, JobState
from stoker.types import job_id as _job_id

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

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
    outputs: tuple[str, ...] = ()  # each sink, described (no credentials)


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


@dataclass(frozen=True)
class RunOptions:
    """What ``stoker.run`` (and ``stoker.submit``) were given for one job."""

    job_id: str | None = None
    trigger: str | float | None = None
    state_dir: str | Path | None = None
    store: str | None = None
    master: str | None = None
    conf: Mapping[str, str] | None = None
    restart: bool = False
    lease_ttl: float | None = None
    spark: SparkSession | None = None
    from_savepoint: str | Path | None = None
    config: Mapping[str, Any] | None = None  # pipeline config given (submit's ``config=``)


def _never() -> bool:
    return False


def _not_fenced() -> str | None:
    return None


# Ends a failed attempt of a job the caller restarts itself (a job of an application): the
# restart strategy's decision, recorded with the attempt's end; the job's state after it.
FailureHook = Callable[[Store, JobId, AttemptNo, str], JobState]


@dataclass(frozen=True)
class JobScope:
    """How a job runs when its process runs other jobs too (``stoker.runtime.application``):
    a job of an application, or one started with ``stoker.submit``.

    Such a job runs off the main thread, where no signal handler can be installed: the
    process's handler sets a flag all of its jobs read (``stopped``). A job of an application
    makes its attempts under the application's attempt (``app_attempt``, their fence) and
    stops when that attempt is fenced (``fenced``); its failures go to its own restart
    strategy (``on_failure``), its epochs to the FAIR pool ``pool``.
    """

    app_id: JobId | None = None
    app_attempt: AttemptNo | None = None
    state_root: Path | None = None  # the default state folder is <state_root>/jobs/<job id>
    stopped: Callable[[], bool] = _never
    fenced: Callable[[], str | None] = _not_fenced
    on_failure: FailureHook | None = None
    pool: str | None = None
    spec: dict[str, Any] = field(default_factory=dict)  # added to the job's spec
    # The application's watch of its driver's executors (started by the first job to ask);
    # None: the job is its own owner of executors and runs a watch of its own.
    resources: Callable[[SparkSession], ResourceWatch | None] | None = None


@dataclass(frozen=True)
class JobPlan:
    """A job checked and ready to run: everything decided before Spark starts."""

    pipeline: Pipeline
    jid: JobId
    settings: Settings
    root: Path
    store_url: str | Path
    restart: bool
    given: dict[str, Any]
    owner: SinkOwner
    from_savepoint: str | Path | None
    spark: SparkSession | None
    scope: JobScope | None


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
    from_savepoint: str | Path | None = None,
) -> JobResult:
    """Run ``pipeline`` as a job until it ends; blocking.

    Defaults: ``local[*]`` Spark, state (checkpoint and SQLite store) under
    ``./.stoker/<job id>``, a 500 ms trigger. A job whose sources are all bounded ends
    FINISHED after its final epoch commits. A job that crashed resumes from its checkpoint when
    run again; a job that ended is run again only with ``restart=True``.
    ``conf`` takes ``spark.*`` and ``stoker.*`` keys like the CLI's ``-D``.

    Called on the main thread, SIGTERM and SIGINT (Ctrl-C) stop the job gracefully while it
    runs: the epoch in flight commits, no new one starts, and the job ends SUSPENDED (not an
    end: running it again resumes it, no ``restart`` needed). Only an explicit cancel makes a
    job CANCELED.

    ``from_savepoint`` (a folder a savepoint wrote) starts the job from that savepoint: its
    state folder must have no checkpoint yet, the pipeline's sources and sinks must be the
    savepoint's (the transform may change), and the savepoint's job must have ended (or be
    this job). The job goes on from the savepoint's epoch with its control state, and takes
    its outputs over: exactly once across the switch. Run again after a crash or a stop, the
    same call resumes the job.

    Inside an application (a program run by ``stoker run --driver``), ``run`` is
    ``stoker.submit(pipeline, ...).wait()``: the job runs on a thread of the application's
    driver, and a job that ended already is not run again (its result comes back at once).
    """
    if launch.collecting():
        raise launch.Collected(pipeline)  # a cleanup process wants the sinks, not a run
    opts = RunOptions(
        job_id=job_id,
        trigger=trigger,
        state_dir=state_dir,
        store=store,
        master=master,
        conf=conf,
        restart=restart,
        lease_ttl=lease_ttl,
        spark=spark,
        from_savepoint=from_savepoint,
    )
    from stoker.runtime import application  # it imports this module

    if application.current_app() is not None:
        return application.submit_options(pipeline, opts, None).wait()
    wanted = launch.wanted_pipeline()
    if wanted is not None and wanted != pipeline.name:
        raise InvalidInput(
            "pipeline",
            f"--pipeline {wanted!r} was given, but the file runs pipeline {pipeline.name!r} "
            "itself (stoker.run); drop --pipeline or pass that name",
        )
    return execute(plan_job(pipeline, opts, None))


def spark_master(settings: Settings) -> str:
    """The master Spark starts with: a ``-D spark.master`` wins over ``master``."""
    return settings.spark_conf.get("spark.master", settings.master)


def on_cluster(settings: Settings) -> bool:
    """Whether the job's tasks run outside this process's machine view (not ``local``)."""
    return not spark_master(settings).strip().startswith("local")


def _check_state_dir(settings: Settings) -> None:
    """On a cluster every worker reads and writes the job's folder (checkpoint, sink state):
    a relative path means another folder on every host, so it is refused."""
    given = settings.state_dir
    if given is not None and not given.is_absolute() and on_cluster(settings):
        raise InvalidInput(
            "state_dir",
            f"{str(given)!r} is relative, but the job runs on a cluster "
            f"({spark_master(settings)}): give an absolute path on storage that the driver "
            "and every worker reach",
        )


def plan_job(pipeline: Pipeline, opts: RunOptions, scope: JobScope | None) -> JobPlan:
    """Check a job before anything is written or started: bad input raises here."""
    settings = resolve_settings(
        trigger=opts.trigger,
        state_dir=opts.state_dir,
        store=opts.store,
        master=opts.master,
        conf=opts.conf,
        lease_ttl=opts.lease_ttl,
    )
    in_app = scope is not None and scope.app_id is not None
    jid = _job_id((None if in_app else launch.job_id()) or opts.job_id or pipeline.name)
    restart = opts.restart or (not in_app and launch.restart())
    given = dict(opts.config) if opts.config is not None else launch.config()
    _check_state_dir(settings)

    default_root = Path(".stoker") / jid
    if scope is not None and scope.state_root is not None:
        default_root = scope.state_root / "jobs" / jid
    root = (settings.state_dir or default_root).resolve()
    store_url = settings.store or root / "store.db"
    # Bad input fails here, before anything is written.
    pipeline.validate()
    pipeline.check_config(given)  # --config: declared keys, their defaults' types
    for inp in pipeline.inputs:
        inp.source.validate()
    existing = _existing_job(store_url, jid)
    ended = existing is not None and existing.state.terminal
    if ended and existing is not None and launch.attempt() is None and not restart:
        raise JobTerminal(jid, str(existing.state))  # before Spark starts: fast
    from_savepoint = opts.from_savepoint
    if from_savepoint is None and not in_app:  # the launcher's folder is for its one job
        from_savepoint = launch.from_savepoint()
    restoring = None
    if from_savepoint is not None:
        # Not a savepoint, another shape, its job still live: refused before Spark starts.
        restoring = restore.check(from_savepoint, root, jid, pipeline, store_url, existing)
        owner = restoring.owner
    else:
        owner = SinkOwner(jid, (existing.uid if existing else None) or uuid.uuid4().hex)
    for sink in pipeline.sinks:
        # Restoring: an output still names the savepoint's job until the restore hands it over.
        sink.validate(restoring.owner_for(sink) if restoring is not None else owner)
    return JobPlan(
        pipeline=pipeline,
        jid=jid,
        settings=settings,
        root=root,
        store_url=store_url,
        restart=restart,
        given=given,
        owner=owner,
        from_savepoint=from_savepoint,
        spark=opts.spark,
        scope=scope,
    )


def execute(plan: JobPlan) -> JobResult:
    """Run a planned job: start Spark (or reuse it), record the job, run one attempt."""
    pipeline, jid, settings, root = plan.pipeline, plan.jid, plan.settings, plan.root
    scope, owner = plan.scope, plan.owner
    with _StopSignals() as signals:
        # Spark before the store: a Spark setting Spark refuses leaves no store behind.
        app_name = scope.app_id if scope is not None and scope.app_id is not None else jid
        session = plan.spark or _start_spark(settings, jid, app_name)
        # A SparkContext made on the main thread puts in its own SIGINT handler (cancel every
        # Spark job, then KeyboardInterrupt): that would fail the epoch in flight.
        signals.rearm()
        st = open_store(plan.store_url)
        try:
            if launch.attempt() is None and not plan.restart:
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


def start_session_for_import(app: Path, name: str | None = None) -> None:
    """Start Spark, with the launcher's settings, for an application file that needs a
    session while it is imported (a module-level ``@udf("long")``). ``stoker.run`` then reuses
    it; a ``master`` or static Spark setting the file passes to ``stoker.run`` comes too late
    for it (``-D`` ones do not). ``name``: the Spark application's (default: the job's)."""
    settings = resolve_settings()
    log.info(
        "%s needs Spark while it is imported: starting Spark (%s)", app.name, spark_master(settings)
    )
    t0 = time.monotonic()
    get_session(settings, f"stoker:{name or launch.job_id() or app.stem}")
    log.info("Spark started in %.1f s", time.monotonic() - t0)


class _StopSignals:
    """SIGTERM and SIGINT while a job runs: stop it gracefully, leaving it SUSPENDED.

    A signal is a request to stop (a host shutting down, a container stopped, Ctrl-C), not a
    cancel. While the query runs (``deferred``), the handler only records it and the supervise
    loop stops the query between epochs: raising into the main thread there could land inside
    a py4j call and break the gateway the graceful stop needs. Before that (Spark starting,
    recovery), it raises KeyboardInterrupt, which ends the attempt SUSPENDED. Handlers are
    installed only on the main thread and put back when the run returns.
    """

    def __init__(self) -> None:
        self.received: int | None = None
        self.deferred = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def rearm(self) -> None:
        """Take the signals back from whoever replaced this handler since (PySpark does)."""
        for sig in self._previous:
            if signal.getsignal(sig) != self._handle:
                signal.signal(sig, self._handle)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for sig, handler in self._previous.items():
            # None: a handler not installed from Python; the default is the closest we have.
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        first = self.received is None
        self.received = signum
        log.warning(
            "%s: stopping after the epoch in flight; the job will be SUSPENDED (resumable)",
            signal.Signals(signum).name,
        )
        if first and not self.deferred:
            raise KeyboardInterrupt


def _existing_job(store_url: str | Path, jid: JobId) -> JobRecord | None:
    """Job ``jid`` if a store already holds it; None for a job not made yet.

    An SQLite store file that does not exist is not created here: bad input must leave nothing.
    """
    text = str(store_url)
    if not text.startswith(("postgresql://", "postgres://")):
        path = Path(text[len("sqlite:///") :] if text.startswith("sqlite:///") else text)
        if not path.exists():
            return None
    st = open_store(store_url)
    try:
        return st.get_job(jid)
    except JobNotFound:
        return None
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
    owner: SinkOwner,
    settings: Settings,
    root: Path,
    store: Store,
    restart: bool,
    stream: DataFrame,
    signals: _StopSignals | None = None,
    restored: restore.Restored | None = None,
    *,
    given: dict[str, Any] | None = None,
    scope: JobScope | None = None,
) -> JobResult:
    jid = owner.job_id
    signals = signals or _StopSignals()
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
    if launch.overrides():
        spec["conf"] = redact_conf(launch.overrides())  # the -D settings, secrets hidden
    given = dict(launch.config() if given is None else given)
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
    if launch.attempt() is not None:
        given = dict(job.spec.get("config") or {})  # a job manager's job: its submission's
    elif not given:
        given = dict(job.spec.get("submitted_config") or {})  # resumed: what it was run with
    # The job's state partitions: fixed when it was created (the checkpoint, then its spec),
    # never by a -D given to a later run; recorded in its spec and shown in its status.
    max_par = job_max_parallelism(None if _created else job.spec, settings, root / "checkpoint")
    if launch.attempt() is None and not _created:
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
    made_for_us = launch.attempt()
    if made_for_us is not None:
        # Driver mode: the job manager made attempt N for this process; adopt it or stop.
        attempt = store.claim_attempt(jid, AttemptNo(made_for_us), this_owner(), settings.lease_ttl)
    else:
        if job.state.terminal and not restart:
            raise JobTerminal(jid, str(job.state))
        if scope is not None and scope.app_attempt is not None:
            attempt = _start_in_app(store, jid, settings.lease_ttl, scope.app_attempt)
        else:
            attempt = start_attempt(store, jid, settings.lease_ttl, restart=restart)
    # Every log line of this job names it (an application's jobs: in their own threads only).
    logformat.bind(jid, attempt.attempt, process=scope is None)
    log.info("job %s: attempt %d started", jid, attempt.attempt)
    lease = (
        LeaseKeeper(store, attempt, settings.lease_ttl)
        if scope is None
        else _ScopedLease(store, attempt, settings.lease_ttl, scope.fenced)
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
        if _final_committed(store, jid):
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
            _fail(store, jid, attempt.attempt, proc, e, scope)
        # A stop signal came first: what broke after it is the shutdown's doing (on a host
        # shutdown every process gets SIGTERM, Spark's Python workers too, failing the tasks
        # in flight). Nothing undecided is kept; the job resumes like any suspended one.
        log.warning("job %s: stopping after a signal, the query failed: %s", jid, brief(e))
        result_state = JobState.SUSPENDED
    except BaseException as e:
        _fail(store, jid, attempt.attempt, proc, e, scope)
    finally:
        if metrics is not None and handle is not None:
            metrics.flush(getattr(handle, "query", None), proc.timings)
        release_watch()
        pruner.stop()
        lease.stop()
        if sinks_open:  # the ways out that raise have ended the attempt already
            _resolve_at_end(store, jid, attempt.attempt, pipeline.sinks)
    # A query stopped from outside (not by its final epoch) ends the attempt CANCELED too.
    astate = {
        JobState.FINISHED: AttemptState.FINISHED,
        JobState.SUSPENDED: AttemptState.SUSPENDED,
    }.get(result_state, AttemptState.CANCELED)
    result_state = _end(store, jid, attempt.attempt, astate, result_state, None)
    _resolve_at_end(store, jid, attempt.attempt, pipeline.sinks)
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
    launch.report(result)
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


def _fail(
    store: Store,
    jid: JobId,
    attempt: int,
    proc: EpochProcessor,
    e: BaseException,
    scope: JobScope | None = None,
) -> None:
    """End the attempt FAILED with the error that ended it, and raise that error."""
    err = proc.error if isinstance(proc.error, StokerError) else e
    if scope is not None and scope.on_failure is not None:
        # The job's own restart strategy decides, in the transaction that ends the attempt.
        scope.on_failure(store, jid, AttemptNo(attempt), brief(err))
    else:
        _end(store, jid, attempt, AttemptState.FAILED, JobState.FAILED, brief(err))
    if isinstance(err, StokerError):
        if err is e:
            raise e
        raise err from e
    raise JobFailed(f"job {jid!r} failed: {brief(err)}") from e


def _end(
    store: Store, jid: JobId, attempt: int, astate: AttemptState, jstate: JobState, err: str | None
) -> JobState:
    """End the attempt and move the job, in one store transaction; the job's state after."""
    # Under a job manager, its restart strategy decides what a failure means: the job is left
    # to it. Either way the attempt's end and the job's state are one store transaction.
    managed_failure = jstate == JobState.FAILED and launch.attempt() is not None
    try:
        store.finish_attempt(
            jid, AttemptNo(attempt), astate, None if managed_failure else jstate, err
        )
    except InvalidTransition:
        if jstate != JobState.SUSPENDED:
            raise
        # A cancel was asked for while the signal stopped the job (CANCELING cannot be
        # suspended): the explicit cancel wins.
        store.finish_attempt(jid, AttemptNo(attempt), AttemptState.CANCELED, JobState.CANCELED)
        return JobState.CANCELED
    return jstate


def _start_in_app(
    store: Store, jid: JobId, lease_ttl: float, app_attempt: AttemptNo
) -> AttemptRecord:
    """A new attempt of an application's job, made under the application's attempt.

    The store supersedes a live attempt made under an older application attempt (that
    driver can decide nothing any more); one whose process is provably gone is taken over
    whatever made it.
    """
    current = store.get_job(jid).current_attempt
    dead = False
    if current:
        prev = store.get_attempt(jid, current)
        live = prev is not None and prev.state in (AttemptState.STARTING, AttemptState.RUNNING)
        dead = live and prev is not None and owner_is_dead(prev.owner)
    return store.start_attempt(
        jid, this_owner(), lease_ttl, current, previous_dead=dead, app_attempt=app_attempt
    )


class _ScopedLease(LeaseKeeper):
    """A job attempt's lease that also ends when its application's attempt is fenced: the
    job's own renewal would notice too (the store refuses it), but only at its next period."""

    def __init__(
        self,
        store: Store,
        attempt: AttemptRecord,
        lease_ttl: float,
        app_fenced: Callable[[], str | None],
    ) -> None:
        super().__init__(store, attempt, lease_ttl)
        self._app_fenced = app_fenced

    @property
    def fenced(self) -> str | None:
        own = super().fenced
        return own if own is not None else self._app_fenced()

    def check(self) -> None:
        why = self._app_fenced()
        if why is not None:
            self._fence(why)
        super().check()


def _resolve_at_end(store: Store, jid: JobId, attempt: int, sinks: list[TwoPhaseSink]) -> None:
    """Leave nothing prepared behind an attempt that has ended: commit what the store decided,
    abort the rest (``recover``); for an ended job, record that its sinks are resolved.

    Best effort: a failure here is logged, and the job manager's janitor (or the next
    attempt's recovery) does it again. Nothing is done while the attempt is live, nor once a
    newer attempt owns the job: its parts in flight are not ours to abort.
    """
    try:
        job = store.get_job(jid)
        if job.current_attempt != attempt:
            return
        rec = store.get_attempt(jid, AttemptNo(attempt))
        if rec is None or rec.state in (AttemptState.STARTING, AttemptState.RUNNING):
            return
        recover(store, jid, sinks)
        if job.state.terminal:
            store.set_resolved(jid)
    except Exception:
        log.exception("job %s: resolving the sinks at the end of attempt %d failed", jid, attempt)


def _final_committed(store: Store, jid: JobId) -> bool:
    last = store.list_epochs(jid, limit=1)
    return bool(last) and last[0].final and last[0].state == EpochState.COMMITTED


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


def describe(result: JobResult) -> dict[str, Any]:
    return {
        "job_id": result.job_id,
        "state": str(result.state),
        "attempt": result.attempt,
        "epochs": result.epochs,
        "rows": result.rows,
        "last_epoch": result.last_epoch,
    }
