"""``stoker.submit``: a job submitted from a program, run on a thread of its own (a lone
program's job) or as one of an application's jobs (under an application driver, fenced by its
attempt), each with its restart strategy. The job's handle and the application it belongs to
are ``application.py``'s."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from stoker.errors import (
    DriverLost,
    InvalidInput,
    JobNotFound,
    JobOwnedElsewhere,
)
from stoker.restart import RestartStrategy, parse_strategy, restart_decision
from stoker.runtime import launch
from stoker.runtime.application import Application, JobHandle, local_stopped, through_gate
from stoker.runtime.job.plan import FailureHook, JobScope, RunOptions, plan_job
from stoker.runtime.session import jvm_gone
from stoker.store import JobRecord, Store
from stoker.types import AttemptNo, AttemptState, JobId, JobKind, JobState
from stoker.types import job_id as _job_id

if TYPE_CHECKING:
    from stoker.pipeline import Pipeline

log = logging.getLogger("stoker.application")

# The keyword settings stoker.submit takes besides its own: those of stoker.run.
SETTINGS = frozenset(
    {
        "trigger",
        "state_dir",
        "store",
        "master",
        "conf",
        "restart",
        "lease_ttl",
        "spark",
        "from_savepoint",
        "rewrite_output_after_savepoint",
        "fork",
        "ignore_unreachable_stores",
    }
)


def submit(
    pipeline: Pipeline,
    *,
    job_id: str | None = None,
    config: Mapping[str, Any] | None = None,
    restart_strategy: dict[str, Any] | None = None,
    optional: bool = False,
    **settings: Any,
) -> JobHandle:
    """Start ``pipeline`` as a job on a thread of this process; its :class:`JobHandle`.

    ``settings`` are those of ``stoker.run`` (``trigger``, ``state_dir``, ``conf``, ...).
    ``config``: pipeline config values on top of the declared defaults. ``restart_strategy``
    (the job manager's format, e.g. ``{"strategy": "fixed-delay", "attempts": 3, "delay":
    1}``): what a failure of the job leads to; in an application the default is the job
    manager's (fixed-delay), outside one a failure ends the job as in ``stoker.run``.

    In an application the job's id is ``<app id>.<pipeline name>`` unless ``job_id`` names
    it; submitting a job again gives the same handle, and a job that has ended is not run
    again (its handle reports its state at once). Bad input raises here, before the job runs.
    A job that fails for good (its strategy gave up) fails the application and its other
    jobs are canceled gracefully, unless it was submitted ``optional=True`` (outside an
    application ``optional`` changes nothing).
    """
    ctx = launch.installed()  # what the launcher decided: read here, once, and passed on
    if ctx.collect:
        raise launch.Collected(pipeline)  # the manager asks which pipeline the file runs
    unknown = sorted(set(settings) - SETTINGS)
    if unknown:
        raise InvalidInput(
            unknown[0],
            "not a setting of stoker.submit; known: job_id, config, restart_strategy, optional, "
            + ", ".join(sorted(SETTINGS)),
        )
    if not isinstance(optional, bool):
        raise InvalidInput("optional", f"must be True or False, got {optional!r}")
    opts = RunOptions(job_id=job_id, config=config, **settings)
    return submit_options(pipeline, opts, restart_strategy, ctx, optional=optional)


def submit_options(
    pipeline: Pipeline,
    opts: RunOptions,
    restart_strategy: dict[str, Any] | None,
    ctx: launch.LaunchContext,
    *,
    optional: bool = False,
) -> JobHandle:
    """:func:`submit` with ``stoker.run``'s options as one value (``run`` in an application)."""
    app = through_gate()  # an application standby waits here for its attempt
    if app is None:
        return _submit_local(pipeline, opts, restart_strategy, ctx)
    return _submit_in_app(app, pipeline, opts, restart_strategy, ctx, optional)


def _submit_local(
    pipeline: Pipeline,
    opts: RunOptions,
    restart_strategy: dict[str, Any] | None,
    ctx: launch.LaunchContext,
) -> JobHandle:
    strategy = parse_strategy(restart_strategy) if restart_strategy else None
    handle = JobHandle(JobId(""), "", None)
    scope = JobScope(
        stopped=local_stopped,
        on_failure=None if strategy is None else _failure_hook(strategy, handle),
        spec={"restart_strategy": restart_strategy} if restart_strategy else {},
    )
    plan = plan_job(pipeline, opts, scope, ctx)
    handle.job_id, handle._store_url = plan.jid, plan.store_url
    # Not a daemon: a program that submits and returns still has its jobs run to their end.
    handle._start(plan, daemon=False)
    return handle


def _submit_in_app(
    app: Application,
    pipeline: Pipeline,
    opts: RunOptions,
    restart_strategy: dict[str, Any] | None,
    ctx: launch.LaunchContext,
    optional: bool,
) -> JobHandle:
    jid = _job_id(opts.job_id or f"{app.app_id}.{pipeline.name}")
    if opts.restart:
        raise InvalidInput(
            "restart",
            "a job of an application is not run again once it has ended (a restarted main "
            "goes past it); give it another job_id to run it anew",
        )
    strategy = parse_strategy(restart_strategy)
    why = app.ending()
    if why is not None:
        raise launch.AppEnding(why)
    handle, new = app._register(jid)
    if not new:
        return handle
    handle.optional = optional
    try:
        job = _owned(app, jid)
        if job is not None:
            job = _settle_stale_cancel(app, job)
        if job is not None and job.state.terminal:
            log.info("job %s ended %s already: not run again", jid, job.state)
            handle._end_now(job, app.store)
            return handle
        scope = JobScope(
            app_id=app.app_id,
            app_attempt=app.attempt,
            state_root=app.state_dir,
            stopped=app.stopped,
            fenced=app.fenced,
            on_failure=_failure_hook(strategy, handle),
            pool=jid,
            spec={"restart_strategy": restart_strategy} if restart_strategy else {},
            resources=app.resource_watch,
        )
        plan = plan_job(pipeline, replace(opts, job_id=jid), scope, ctx)
    except BaseException:
        app._forget(handle)  # a corrected submission of the same id may follow
        raise
    # A daemon: when main fails, the driver records it and exits with its jobs still running
    # (the next attempt re-adopts them).
    handle._start(plan, daemon=True)
    return handle


def _owned(app: Application, jid: JobId) -> JobRecord | None:
    """The job's record if it exists; :class:`JobOwnedElsewhere` unless it is this
    application's job."""
    try:
        job = app.store.get_job(jid)
    except JobNotFound:
        return None
    if job.kind != JobKind.JOB:
        raise JobOwnedElsewhere(jid, "it is an application")
    if job.app_id is None:
        raise JobOwnedElsewhere(jid, "it is a job submitted alone")
    if job.app_id != app.app_id:
        raise JobOwnedElsewhere(jid, f"application {job.app_id!r} owns it")
    return job


def _settle_stale_cancel(app: Application, job: JobRecord) -> JobRecord:
    """A job left CANCELING by an older driver of the application (the cancel was asked for,
    then the driver died): nobody will finish that cancel but this driver, so end it."""
    if job.state != JobState.CANCELING or not job.current_attempt:
        return job
    rec = app.store.get_attempt(job.job_id, job.current_attempt)
    if rec is not None and rec.app_attempt == app.attempt:
        return job
    return app.store.finish_attempt(
        job.job_id, job.current_attempt, AttemptState.CANCELED, JobState.CANCELED
    )


def _failure_hook(strategy: RestartStrategy, handle: JobHandle) -> FailureHook:
    """What ends a failed attempt of the job: its strategy decides (from the store's history
    of the job's failures) and the attempt's end moves the job to RESTARTING or FAILED in
    one store transaction, as the job manager does for a job it supervises."""

    def on_failure(store: Store, jid: JobId, attempt: AttemptNo, error: str) -> JobState:
        gone = jvm_gone()
        if gone is not None:
            # Not the job's failure: a restart here would reuse the dead SparkSession and fail
            # at once. Nothing is recorded (no strategy used up); the attempt stays as it is
            # for the next driver, which supersedes it.
            raise DriverLost(f"{gone}: job {jid} attempt {attempt} ended ({error})")
        job = store.get_job(jid)
        rec = store.get_attempt(jid, attempt)
        now = store.clock.now()
        decision = restart_decision(
            strategy, job.failures, rec, lambda: store.list_attempts(jid), now
        )
        nxt = None if decision.delay is None else now + decision.delay
        after = store.attempt_failed(jid, attempt, error, nxt, reset=decision.reset)
        handle._after_failure = after
        log.warning(
            "job %s: attempt %d failed (%s); job is now %s", jid, attempt, error, after.state
        )
        return after.state

    return on_failure


__all__ = ["SETTINGS", "submit", "submit_options"]
