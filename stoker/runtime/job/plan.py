"""A job checked before anything is written or started: its options, its scope (a lone job or
one of an application), its settings and its plan."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stoker.durations import parse_duration
from stoker.errors import InvalidInput, JobTerminal
from stoker.runtime import restore
from stoker.runtime.attempt import committed_nothing, existing_job
from stoker.runtime.job.lost_checkpoint import Gap, gap_in, source_state_gap
from stoker.runtime.launch import LaunchContext
from stoker.runtime.resources import ResourceWatch
from stoker.settings import Settings
from stoker.sinks.base import SinkOwner
from stoker.store import JobRecord, Store
from stoker.types import AttemptNo, JobId, JobState
from stoker.types import job_id as _job_id

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from stoker.pipeline import Pipeline

log = logging.getLogger("stoker.runner")


def resolve_settings(
    ctx: LaunchContext,
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
        s = replace(s, trigger=parse_duration(trigger, "trigger"))
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
    return s.with_overrides(dict(ctx.overrides))


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
    # Output the savepoint's job wrote after the savepoint is written again (not refused).
    rewrite_output_after_savepoint: bool = False
    # A start from a savepoint under a uid of its own, to outputs of its own (stoker.lineage).
    fork: bool = False
    # A store the lineage check cannot open is skipped with a warning, not a refusal.
    ignore_unreachable_stores: bool = False
    config: Mapping[str, Any] | None = None  # pipeline config given (submit's ``config=``)
    # Start over when the checkpoint has lost epochs the store decided (lost_checkpoint.py).
    reset_checkpoint: bool = False


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
    # A start from a savepoint, checked here; the attempt applies it before the job is recorded.
    restoring: restore.Restore | None
    spark: SparkSession | None
    scope: JobScope | None
    launch: LaunchContext  # what the launcher decided
    spec: dict[str, Any]  # the pipeline's description (Pipeline.spec()), computed once
    # --reset-checkpoint of a checkpoint found behind the store: the attempt starts the job
    # over under ``owner``'s new uid once it owns the job (lost_checkpoint.reset).
    reset: Gap | None = None

    @property
    def managed(self) -> bool:
        """Driver mode: a job manager made the attempt this process runs (its restart
        strategy decides what a failure means)."""
        return self.launch.attempt is not None


def spark_master(settings: Settings) -> str:
    """The master Spark starts with: a ``-D spark.master`` wins over ``master``."""
    return settings.spark_conf.get("spark.master", settings.master)


def on_cluster(settings: Settings) -> bool:
    """Whether the job's tasks run outside this process's machine view (not ``local``)."""
    return not spark_master(settings).strip().startswith("local")


def check_state_dir(settings: Settings) -> None:
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


@dataclass(frozen=True)
class JobBasics:
    """What every start of a job derives first, from its options and its launcher: its
    settings, id, submitted config, folder and store; the pipeline checked against them."""

    settings: Settings
    jid: JobId
    given: dict[str, Any]
    root: Path
    store_url: str | Path
    config: dict[str, Any]  # the declared defaults with ``given`` on top, checked


def job_basics(
    pipeline: Pipeline, opts: RunOptions, scope: JobScope | None, ctx: LaunchContext
) -> JobBasics:
    """A job's :class:`JobBasics`; bad input (the pipeline, its config, its sources, a
    relative folder on a cluster) raises here, before anything is written."""
    settings = resolve_settings(
        ctx,
        trigger=opts.trigger,
        state_dir=opts.state_dir,
        store=opts.store,
        master=opts.master,
        conf=opts.conf,
        lease_ttl=opts.lease_ttl,
    )
    in_app = scope is not None and scope.app_id is not None
    jid = _job_id((None if in_app else ctx.job_id) or opts.job_id or pipeline.name)
    given = dict(opts.config) if opts.config is not None else dict(ctx.config)
    check_state_dir(settings)
    default_root = Path(".stoker") / jid
    if scope is not None and scope.state_root is not None:
        default_root = scope.state_root / "jobs" / jid
    root = (settings.state_dir or default_root).resolve()
    pipeline.validate()
    if ctx.attempt is not None or ctx.standby is not None or in_app:
        pipeline.check_managed()  # a job manager's driver (an application's job too)
    config = pipeline.check_config(given)  # --config: declared keys, their defaults' types
    for inp in pipeline.inputs:
        inp.source.validate()
    return JobBasics(settings, jid, given, root, settings.store or root / "store.db", config)


def _state_gap(
    store_url: str | Path, existing: JobRecord, root: Path, pipeline: Pipeline
) -> Gap | None:
    """What of a resumed job's state disagrees (lost_checkpoint.py): its checkpoint behind the
    store's decided epochs, or a source's log under ``state/sources/`` behind the checkpoint."""
    return gap_in(store_url, existing, root / "checkpoint") or source_state_gap(
        store_url, existing, root, pipeline
    )


def plan_job(
    pipeline: Pipeline, opts: RunOptions, scope: JobScope | None, ctx: LaunchContext
) -> JobPlan:
    """Check a job before anything is written or started: bad input raises here."""
    basics = job_basics(pipeline, opts, scope, ctx)
    settings, jid, given, root, store_url = (
        basics.settings,
        basics.jid,
        basics.given,
        basics.root,
        basics.store_url,
    )
    in_app = scope is not None and scope.app_id is not None
    restart = opts.restart or (not in_app and ctx.restart)
    reset_checkpoint = opts.reset_checkpoint or (not in_app and ctx.reset_checkpoint)
    # A live job is refused before Spark starts too (a managed driver's attempt, or a job of
    # an application re-adopting its jobs, may take a live one over: not those).
    existing = existing_job(store_url, jid, refuse_live=ctx.attempt is None and not in_app)
    ended = existing is not None and existing.state.terminal
    if (
        ended
        and existing is not None
        and existing.state == JobState.FAILED
        and ctx.attempt is None
        and not restart
        and committed_nothing(store_url, jid)
    ):
        # Failed before any epoch was decided: nothing to keep or to replay wrongly, so the
        # fixed file runs again as it is (its checkpoint, if any, is resumed).
        log.info("job %s: FAILED before any epoch committed: running it again", jid)
        restart = True
    if ended and existing is not None and ctx.attempt is None and not restart:
        raise JobTerminal(jid, str(existing.state))  # before Spark starts: fast
    from_savepoint = opts.from_savepoint
    rewrite = opts.rewrite_output_after_savepoint
    fork, ignore = opts.fork, opts.ignore_unreachable_stores
    if from_savepoint is None and not in_app:  # the launcher's folder is for its one job
        from_savepoint = ctx.savepoint()
        rewrite = rewrite or ctx.rewrites_output()
        fork, ignore = fork or ctx.forks(existing), ignore or ctx.ignores_unreachable(existing)
    for flag, name in ((rewrite, "rewrite_output_after_savepoint"), (fork, "fork")):
        if flag and from_savepoint is None:
            raise InvalidInput(
                name,
                "is given without from_savepoint: it only says how a job starts from a savepoint",
            )
    if from_savepoint is not None and reset_checkpoint:
        raise InvalidInput(
            "--reset-checkpoint",
            "starts the job over from its sources' beginning; --from-savepoint restores it: "
            "give one of them",
        )
    restoring = None
    gap: Gap | None = None
    if from_savepoint is not None:
        if existing is not None and not (root / "checkpoint").exists():
            # A job of this id that decided epochs after the savepoint's and has no checkpoint
            # now (restored from it before and lost its checkpoint since): its lost checkpoint
            # is what to name, not the output after the savepoint that the restore's checks
            # would find next (its own output, for a job restored before).
            cut = restore.savepoint_epoch(from_savepoint)
            gap = gap_in(store_url, existing, root / "checkpoint", cut)
            if gap is not None:
                raise replace(gap, restoring=True).refusal()
        # Not a savepoint, another shape, its job still live or unresolved, output after it:
        # refused before Spark starts.
        restoring = restore.check(
            from_savepoint, root, jid, pipeline, store_url, existing, rewrite,
            fork=fork, ignore_unreachable=ignore,
        )  # fmt: skip
        owner = restoring.owner
        if existing is not None:
            # A job of this id with epochs after the savepoint's (it went on after it, or was
            # restored from it before and lost its checkpoint since): the savepoint's
            # checkpoint, cut at its epoch, would be behind them.
            cut = None if restoring.done else restoring.epoch
            gap = gap_in(store_url, existing, root / "checkpoint", cut)
            if gap is not None:
                raise replace(gap, restoring=True).refusal()
    else:
        if existing is not None:
            # A savepoint of this job restored into another job that took its outputs over;
            # this job restored from a savepoint, its lineage: refused before Spark starts.
            restore.check_plain_start(root, jid, pipeline, store_url, existing, ignore)
        owner = SinkOwner(jid, (existing.uid if existing else None) or uuid.uuid4().hex)
        gap = None if existing is None else _state_gap(store_url, existing, root, pipeline)
        if gap is not None and not reset_checkpoint:
            raise gap.refusal()  # before Spark starts: nothing written
        if gap is not None:
            owner = SinkOwner(jid, uuid.uuid4().hex)  # a new owner: see lost_checkpoint
        elif reset_checkpoint and existing is not None:
            log.info(
                "job %s: --reset-checkpoint: its checkpoint is not behind its store, nothing "
                "to reset: the job resumes",
                jid,
            )
    for sink in pipeline.sinks:
        # Restoring: an output still names the savepoint's job until the restore hands it over.
        sink.validate(restoring.owner_for(sink) if restoring is not None else owner)
    pipeline.check_targets()  # where the sinks write is known once each validated
    return JobPlan(
        pipeline=pipeline,
        jid=jid,
        settings=settings,
        root=root,
        store_url=store_url,
        restart=restart,
        given=given,
        owner=owner,
        restoring=restoring,
        spark=opts.spark,
        scope=scope,
        launch=ctx,
        spec=pipeline.spec(),
        reset=gap,
    )
