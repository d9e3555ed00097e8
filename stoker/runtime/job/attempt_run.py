"""One attempt of a planned job, in this process, until it ends: :class:`AttemptRun`, one
method per phase, called in order by :meth:`AttemptRun.attempt`.

    prepare   Spark, the store, the sources' stream, the savepoint restore applied: all before
              the job is recorded (bad input, a schema mismatch, leaves no record)
    register  the job's record and its spec
    claim     the attempt and its lease
    start_over  a checkpoint found behind the store, with --reset-checkpoint: the job starts
              over under a new uid (runtime/job/lost_checkpoint.py)
    open      the defaults declared, the savepoint's control carried over, the sinks opened
    recover   what an earlier attempt left (runtime/recovery.py)
    run       the query and its supervision (runtime/job/query.py)
    end       how the query ended (classify_end), the attempt's end recorded, the sinks
              resolved, the result reported
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from stoker import checkpoint_layout, logformat
from stoker.errors import JobTerminal
from stoker.redact import redact_conf
from stoker.runtime import restore, startwatch
from stoker.runtime.attempt import LeaseKeeper, start_attempt, this_owner
from stoker.runtime.epoch import EpochProcessor
from stoker.runtime.job import opening
from stoker.runtime.job.ending import (
    EndKind,
    classify_end,
    end_attempt,
    fail,
    final_committed,
    resolve_at_end,
)
from stoker.runtime.job.lease import ScopedLease, start_in_app
from stoker.runtime.job.lost_checkpoint import reset
from stoker.runtime.job.newstore import new_sqlite_store
from stoker.runtime.job.plan import JobPlan
from stoker.runtime.job.query import ControlWatch, QueryHandle, brief, supervise
from stoker.runtime.job.result import JobResult
from stoker.runtime.job.signals import StopSignals
from stoker.runtime.metrics import EpochMetrics
from stoker.runtime.recovery import recover
from stoker.runtime.recovery_hold import Hold
from stoker.runtime.repartition import repartitioning
from stoker.runtime.restore_control import carry_control
from stoker.runtime.retention import Pruner, policy_of
from stoker.runtime.runmark import RunMark
from stoker.runtime.session import job_max_parallelism
from stoker.runtime.sinkset import SinkSet, forget_removed, open_removed, record_sinks
from stoker.sinks.base import SinkOwner, TwoPhaseSink
from stoker.sources.base import SourceContext
from stoker.store import AttemptRecord, Store, open_store
from stoker.testing import fault_point
from stoker.types import AttemptNo, JobKind, JobState, SpecKind, given_config

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from stoker.runtime.resources import ResourceWatch

log = logging.getLogger("stoker.runner")


def execute(plan: JobPlan) -> JobResult:
    """Run a planned job: start Spark (or reuse it), record the job, run one attempt."""
    with StopSignals() as signals:
        return AttemptRun(plan, signals).attempt()


class AttemptRun:
    """One attempt of ``plan``'s job. Each phase sets what the next ones read."""

    def __init__(
        self, plan: JobPlan, signals: StopSignals, warm_stream: DataFrame | None = None
    ) -> None:
        self.plan = plan
        # A standby's (runtime/job/standby.py): the sources' stream opened and the transform
        # checked while it waited; prepare takes it as it is.
        self._warm_stream = warm_stream
        self.signals = signals
        self.pipeline = plan.pipeline
        self.jid = plan.jid
        self.root = plan.root
        self.checkpoint = plan.root / "checkpoint"
        self.settings = plan.settings
        self.scope = plan.scope
        self.owner: SinkOwner = plan.owner
        # Set by the phases, in order.
        self.store: Store
        self.stream: DataFrame
        self.restored: restore.Restored | None = None
        self.spec: dict[str, Any] = {}
        self.given: dict[str, Any] = dict(plan.given)
        self.max_par: int = 0
        self._job_terminal: JobState | None = None  # the job had ended when it was registered
        self.record: AttemptRecord
        self.lease: LeaseKeeper
        self.proc: EpochProcessor
        self.pruner: Pruner
        self.sinks_open = False
        self.sinkset = SinkSet([])  # the recover phase reads what the store recorded
        self.release_watch: Callable[[], None] = opening.nothing
        self.handle: QueryHandle | None = None
        self.metrics: EpochMetrics | None = None

    def signalled(self) -> bool:
        """A stop signal came (or, for a job of a process running others, a stop)."""
        scope = self.scope
        return self.signals.received is not None or (scope is not None and scope.stopped())

    # the phases, in order ------------------------------------------------------------------
    def attempt(self) -> JobResult:
        """Every phase in order; the job's result."""
        # A second `stoker run` of this state folder is refused before Spark starts.
        lone = not self.plan.managed and self.scope is None
        mark = RunMark(self.root, self.jid) if lone else None
        try:
            if mark is not None:
                mark.take()
            return self._phases(mark)
        finally:
            if mark is not None:
                mark.release()

    def _phases(self, mark: RunMark | None) -> JobResult:
        self.prepare()
        try:
            self.register()
            self.claim()
            if mark is not None:
                mark.started()
            state: JobState | None = None
            error: BaseException | None = None
            try:
                self.start_over()
                self.open()
                self.recover()
                state = self.run()
            except BaseException as e:
                error = e
            return self.end(state, error)
        finally:
            self.store.close()

    def prepare(self) -> None:
        """Spark (before the store: a Spark setting Spark refuses leaves no store behind), the
        store, the sources' stream and the savepoint restore: before the job is recorded."""
        plan, jid, settings = self.plan, self.jid, self.settings
        scope = self.scope
        app_name = scope.app_id if scope is not None and scope.app_id is not None else jid
        # A job manager's driver's start is bounded (runtime/startwatch.py), Spark's own not.
        startwatch.enter(startwatch.SPARK, counted=False)
        fault_point("before_spark")
        session = plan.spark or opening.start_spark(settings, jid, app_name)
        if not plan.managed:
            opening.quiet_task_failures(session)  # stoker's own line says what failed
        startwatch.enter("preparing the job")
        # A SparkContext made on the main thread puts in its own SIGINT handler (cancel every
        # Spark job, then KeyboardInterrupt): that would fail the epoch in flight.
        self.signals.rearm()
        made = new_sqlite_store(plan.store_url)  # what to take back if this run is refused
        self.store = st = open_store(plan.store_url)
        try:
            if not plan.managed and not plan.restart:
                opening.refuse_if_ended(st, jid)  # ended meanwhile
            if self._warm_stream is not None:
                self.stream = self._warm_stream  # opened and checked by a standby
            else:
                # Spark analyses the union of the sources here: a schema mismatch is bad
                # input and must fail before the job is recorded.
                paced = settings.trigger if opening.paced(settings, self.pipeline) else None
                self.stream = opening.open_sources(
                    session, self.pipeline, self.root, SourceContext(jid, st.url, paced)
                )
                # And the transform on those columns: a mistake there is bad input too.
                config = self.pipeline.check_config(self.given)
                opening.check_transform(self.stream, self.pipeline, jid, config)
            if plan.restoring is not None:
                # Before the query starts (and before the sinks open): the checkpoint, the
                # source logs and the outputs become this job's. Checked again against the
                # open store.
                checked = plan.restoring
                self.restored = restore.restore(
                    checked.folder,
                    self.root,
                    st,
                    jid,
                    self.pipeline,
                    checked.rewrite,
                    fork=checked.fork,
                    ignore_unreachable=checked.ignore_unreachable,
                    uid=checked.owner.uid,
                )
                self.owner = self.restored.owner
        except BaseException:
            # Refused before the job was recorded (bad input: a transform Spark cannot
            # analyse, sources that do not fit): a store this run made holds nothing, and
            # is taken back with the folders made for it; bad input changes nothing.
            empty = made is not None and not st.list_jobs(kind=None)
            st.close()
            if empty and made is not None:
                made.remove()
            raise

    def register(self) -> None:
        """The job's record: made with its spec, or (a resume) its spec brought up to date."""
        plan, jid, store, scope = self.plan, self.jid, self.store, self.scope
        managed = plan.managed
        app_id = scope.app_id if scope is not None else None
        spec: dict[str, Any] = {
            **plan.spec,
            "state_dir": str(self.root),
            "trigger_s": self.settings.trigger,
        }
        if app_id is not None:
            spec = {"kind": SpecKind.IN_APP, "app_id": app_id, **spec}
        if scope is not None:
            spec.update(scope.spec)
        if plan.launch.overrides:
            # the -D settings, secrets hidden
            spec["conf"] = redact_conf(dict(plan.launch.overrides))
        given = self.given
        if given:
            spec["submitted_config"] = given
        if self.restored is not None:
            checked = self.restored.plan
            spec["from_savepoint"] = {
                "path": str(checked.folder),
                "job_id": checked.previous.job_id,
                "epoch": checked.epoch,
            }
        # Version 0 of the job's config: the declared defaults with the submitted values on top.
        merged = self.pipeline.check_config(given)
        job, created = store.create_job(
            jid,
            self.pipeline.name,
            spec,
            merged,
            uid=self.owner.uid,
            kind=JobKind.JOB,
            app_id=app_id,
        )
        if managed:
            given = given_config(job.spec)  # a job manager's job: its submission's
        elif not given:
            given = given_config(job.spec)  # resumed: what it was run with
        # The job's state partitions: fixed when it was created (the checkpoint, then its
        # spec), never by a -D given to a later run; recorded in its spec and in its status.
        max_par = job_max_parallelism(None if created else job.spec, self.settings, self.checkpoint)
        if not managed and not created:
            # A local resume or --restart: the job's spec is what this attempt runs with (its
            # trigger, -D settings, config), not what the first attempt ran with.
            spec = {**spec, "submitted_config": given} if given else spec
            if "from_savepoint" in job.spec and "from_savepoint" not in spec:
                spec["from_savepoint"] = job.spec["from_savepoint"]  # where the job came from
            store.set_job_spec(jid, {**spec, "max_parallelism": max_par})
        else:
            # A job manager's job keeps its submission's spec; the driver adds what only it
            # knows: the state partitions, and the trigger it runs with (the program's
            # stoker.run(..., trigger=...), -D stoker.trigger, or the default), which
            # `stoker status` and `stoker config` show as the job's own.
            known = {"max_parallelism": max_par, "trigger_s": self.settings.trigger}
            current = store.get_job(jid).spec
            if any(current.get(k) != v for k, v in known.items()):
                store.set_job_spec(jid, {**current, **known})
        if job.uid and job.uid != self.owner.uid and self.plan.reset is None:
            # Made meanwhile by someone else (a job manager): the sinks work for that record.
            self.owner = SinkOwner(jid, job.uid)
        self.spec, self.given, self.max_par = spec, given, max_par
        self._job_terminal = job.state if job.state.terminal else None

    def claim(self) -> None:
        """The attempt: adopted (a job manager made it for this driver) or started; its lease
        renewed from now on."""
        plan, jid, store, scope = self.plan, self.jid, self.store, self.scope
        ttl = self.settings.lease_ttl
        made_for_us = plan.launch.attempt
        if made_for_us is not None:
            # Driver mode: the job manager made attempt N for this process; adopt it or stop.
            rec = store.claim_attempt(jid, AttemptNo(made_for_us), this_owner(), ttl)
            if plan.launch.release_start is not None:
                # Held since the driver started (runtime/driver.py); the lease keeper below
                # renews it from now on.
                plan.launch.release_start()
        else:
            if self._job_terminal is not None and not plan.restart:
                raise JobTerminal(jid, str(self._job_terminal))
            if scope is not None and scope.app_attempt is not None:
                rec = start_in_app(store, jid, ttl, scope.app_attempt)
            else:
                rec = start_attempt(store, jid, ttl, restart=plan.restart)
        self.record = rec
        # Every log line of this job names it (an application's jobs: in their own threads).
        logformat.bind(jid, rec.attempt, process=scope is None)
        log.info("job %s: attempt %d started", jid, rec.attempt)
        self.lease = (
            LeaseKeeper(store, rec, ttl)
            if scope is None
            else ScopedLease(store, rec, ttl, scope.fenced)
        )
        self.lease.start()
        self.proc = EpochProcessor(self.pipeline, store, self.lease, self.checkpoint)
        self.proc.pool = scope.pool if scope is not None else None
        self.pruner = Pruner(store, jid, policy_of(self.settings), self.settings.retention_interval)

    def start_over(self) -> None:
        """``--reset-checkpoint`` of a checkpoint behind the store: the job starts over under
        its new uid, now that this attempt owns it (lost_checkpoint.reset)."""
        gap = self.plan.reset
        if gap is not None:
            self.lease.check()
            reset(self.store, gap, self.record.attempt, self.owner.uid, self.pipeline, self.root)

    def open(self) -> None:
        """The job's defaults declared, the savepoint's control carried over, the sinks open."""
        store, jid, pipeline = self.store, self.jid, self.pipeline
        startwatch.enter("opening the sinks")
        # The defaults may have changed in the file; the submitted values stay on top of them.
        store.declare_defaults(jid, pipeline.check_config(self.given), pipeline=self.plan.spec)
        if self.restored is not None:
            # The savepoint's control state (overrides, limits, levels, trigger): events that
            # apply at this job's first epoch; retry-safe when the job resumes.
            carry_control(store, jid, self.restored, pipeline, self.plan.spec)
        for sink in pipeline.sinks:
            sink.open(self.owner, self.root)
        self.sinks_open = True

    def recover(self) -> None:
        """Finish what the attempts before left: commit what the store decided, abort the
        rest, for the sinks removed since as well (rebuilt from their recorded descriptors);
        old epoch records pruned in the background from now on.

        Under the job's recovery hold, held until the recovery is done: a recovery still at
        work (the previous attempt's end, the janitor's cleanup) is waited for, or taken over
        once its hold lapses, so that it never aborts this attempt's parts in flight."""
        store, jid, attempt = self.store, self.jid, self.record.attempt
        startwatch.enter("recovering what the attempts before left")
        # The descriptors the janitor rebuilds the sinks from (removed ones until resolved).
        self.sinkset = record_sinks(store, jid, self.pipeline.sinks)
        if attempt > 1:
            log.info("job %s: recovering what attempt %d left", jid, attempt - 1)
        ttl = self.settings.lease_ttl
        with Hold(store, jid, attempt, ttl, waiting=self.lease.check) as hold:
            removed = open_removed(store, jid, self.sinkset, self.owner, self.root)
            recover(store, jid, [*self.pipeline.sinks, *removed], up_to=attempt, fence=hold.check)
        forget_removed(store, jid, self.sinkset)
        self.pruner.start()  # old epoch records go in the background, never inside an epoch

    def run(self) -> JobState:
        """The query, supervised until it ends; or not started at all (the job finished, a stop
        came, the state is being repartitioned). The job's state it ended in."""
        store, jid, settings = self.store, self.jid, self.settings
        startwatch.done(reached_query=True)  # the progress watchdog bounds the query
        # Before the query: an executor target set already applies from the first epoch, and
        # the sources split that epoch by the cores reported.
        watch: ResourceWatch | None
        watch, self.release_watch = opening.watch_resources(store, jid, self.stream, self.scope)
        self.metrics = EpochMetrics(
            store,
            jid,
            watch.latest if watch is not None else opening.no_resources,
            source_names=[i.source.describe() for i in self.pipeline.inputs],
        )
        if final_committed(store, jid):
            return JobState.FINISHED
        if self.signalled():
            # Stopped while Spark started or recovery ran (off the main thread no signal can
            # raise): the query is not started at all; the job resumes from here.
            return JobState.SUSPENDED
        holder = repartitioning(self.root)
        if holder is not None:
            # `stoker state repartition` rewrites the checkpoint now: the query must not run
            # on it. The job waits, suspended, and resumes under the new partitions.
            log.warning("job %s: its state is being repartitioned (%s); not started", jid, holder)
            return JobState.SUSPENDED
        checkpoint_layout.clear_half_written_logs(self.checkpoint)
        self.signals.deferred = True  # from here a signal is seen by supervise, between epochs
        checkpoint = self.checkpoint
        self.signals.in_flight = lambda: max(
            checkpoint_layout.uncommitted(checkpoint), default=None
        )
        # A trigger interval set by control outlives the attempt that applied it.
        trigger = store.control_snapshot(jid).trigger_s
        self.handle = QueryHandle(
            self.stream,
            self.proc,
            self.checkpoint,
            jid,
            settings.trigger if trigger is None else trigger,
            paced=opening.paced(settings, self.pipeline),
            max_parallelism=self.max_par,
            output_mode=self.pipeline.output_mode,
            cancel_wait_s=settings.cancel_timeout,
        )
        watchdog = opening.progress_watchdog(settings, self.stream)
        self.proc.progress = watchdog if watchdog.enabled else None
        self.handle.start()
        log.info("job %s: query started, first epoch on its way", jid)
        tasks_moved, unlisten = None, opening.nothing
        if watchdog.enabled:
            tasks_moved, unlisten = opening.listen_progress(
                self.stream, self.handle.query, watchdog
            )
        try:
            return supervise(
                self.handle,
                self.lease,
                ControlWatch(store, jid),
                stoker_sources_only=opening.stoker_sources_only(self.pipeline),
                savepoint=opening.savepointer(
                    store, jid, self.root, self.pipeline, self.owner, self.plan.spec
                ),
                signalled=self.signalled,
                metrics=self.metrics,
                watchdog=watchdog if watchdog.enabled else None,
                tasks_moved=tasks_moved,
            )
        finally:
            unlisten()
            self.signals.settle()  # the attempt's end is recorded next: no signal breaks it off

    def _epoch_in_flight(self) -> int | None:
        """The epoch Spark has planned and not committed (what a second signal gives up)."""
        return max(checkpoint_layout.uncommitted(self.checkpoint), default=None)

    def end(self, state: JobState | None, error: BaseException | None) -> JobResult:
        """Record how the attempt ended (:func:`classify_end`), let go of what it held, leave
        nothing prepared behind; the job's result, reported to the launcher."""
        startwatch.done()
        store, jid, attempt = self.store, self.jid, self.record.attempt
        managed = self.plan.managed
        ending = classify_end(state, error, self.signalled())
        try:
            if ending.kind is EndKind.FENCED:
                self.lease.stop()
                assert error is not None
                raise error  # a newer attempt owns the job: its state is not ours to touch
            if ending.kind is EndKind.FAIL:
                assert error is not None
                fail(store, jid, attempt, self.proc, error, self.scope, managed=managed)
            if ending.after_signal:
                assert error is not None
                log.warning(
                    "job %s: stopping after a signal, the query failed: %s", jid, brief(error)
                )
        finally:
            self._let_go()
        result_state = end_attempt(
            store, jid, attempt, ending.attempt, ending.job, None, managed=managed
        )
        if resolve_at_end(store, jid, attempt, self._owed_sinks(), self.settings.lease_ttl):
            forget_removed(store, jid, self.sinkset)
        self.pruner.final_round()
        result = JobResult(
            job_id=jid,
            state=result_state,
            attempt=attempt,
            epochs=self.proc.done_epochs,
            rows=self.proc.done_rows,
            last_epoch=self.proc.timings[-1].epoch if self.proc.timings else None,
            state_dir=self.root,
            store_url=store.url,
            outputs=tuple(s.describe() for s in self.pipeline.sinks),
            stopped_at_once=self.signals.forced,
        )
        self.plan.launch.report(result)
        return result

    def _let_go(self) -> None:
        """The last metrics, the executors' watch, the pruner, the lease; the sinks resolved
        if the attempt has ended already (a failure has recorded its end)."""
        if self.metrics is not None and self.handle is not None:
            self.metrics.flush(getattr(self.handle, "query", None), self.proc.timings)
        self.release_watch()
        self.pruner.stop()
        self.lease.stop()
        if self.sinks_open:  # the ways out that raise have ended the attempt already
            ttl = self.settings.lease_ttl
            if resolve_at_end(self.store, self.jid, self.record.attempt, self._owed_sinks(), ttl):
                forget_removed(self.store, self.jid, self.sinkset)

    def _owed_sinks(self) -> list[TwoPhaseSink]:
        """The sinks an end-of-attempt recovery resolves: the pipeline's, and removed ones
        whose recovery at the start did not get through."""
        owed = self.sinkset.rebuilt if self.sinkset.removed else []
        return [*self.pipeline.sinks, *owed]
