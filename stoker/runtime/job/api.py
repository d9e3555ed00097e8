"""``stoker.run``: run a pipeline as a job, in this process, until it ends."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from stoker.errors import InvalidInput
from stoker.runtime import application, launch, submission
from stoker.runtime.job.attempt_run import execute
from stoker.runtime.job.plan import RunOptions, plan_job, resolve_settings, spark_master
from stoker.runtime.job.result import JobResult
from stoker.runtime.session import get_session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from stoker.pipeline import Pipeline

log = logging.getLogger("stoker.runner")


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
    rewrite_output_after_savepoint: bool = False,
    reset_checkpoint: bool = False,
    fork: bool = False,
    ignore_unreachable_stores: bool = False,
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
    same call resumes the job. A savepoint whose job went on after it (a savepoint without
    ``--stop``) is refused when a sink holds that later output, naming the sink and the
    epochs; ``rewrite_output_after_savepoint=True`` starts it anyway, and the rows of those
    epochs are written to such sinks again (a files sink is refused even then).

    A savepoint goes on in one job: restored once under its uid, a second restore is refused
    naming the first job, and so is any start that would write the same epochs after it as
    another job of its lineage (:mod:`stoker.lineage`). ``fork=True`` starts it anyway under a
    uid of its own, once the earlier restores have ended with their outputs resolved, to
    outputs of its own (a sink that writes the savepoint's job's or an earlier restore's is
    refused). A store the check must read and cannot open (the savepoint's job's SQLite file
    on another host, a PostgreSQL store that is down) refuses the start, naming it;
    ``ignore_unreachable_stores=True`` starts without it, with a warning.

    A job whose checkpoint has lost epochs its store decided (the folder wiped, another
    host's) is refused (:class:`~stoker.errors.CheckpointBehind`): Spark would number them
    again and their input would be skipped. ``reset_checkpoint=True`` starts it over instead,
    under a new uid, its sources read again from their beginning.

    Inside an application (a program run by ``stoker run --driver``), ``run`` is
    ``stoker.submit(pipeline, ...).wait()``: the job runs on a thread of the application's
    driver, and a job that ended already is not run again (its result comes back at once).
    """
    ctx = launch.installed()  # what the launcher decided: read here, once, and passed on
    if ctx.collect:
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
        rewrite_output_after_savepoint=rewrite_output_after_savepoint,
        reset_checkpoint=reset_checkpoint,
        fork=fork,
        ignore_unreachable_stores=ignore_unreachable_stores,
    )
    if application.through_gate() is not None:  # an application standby waits there
        return submission.submit_options(pipeline, opts, None, ctx).wait()
    wanted = ctx.wanted_pipeline
    if wanted is not None and wanted != pipeline.name:
        raise InvalidInput(
            "pipeline",
            f"--pipeline {wanted!r} was given, but the file runs pipeline {pipeline.name!r} "
            "itself (stoker.run); drop --pipeline or pass that name",
        )
    if ctx.standby is not None:
        from stoker.runtime.job.standby import execute_standby

        return execute_standby(pipeline, opts, ctx, ctx.standby)
    return execute(plan_job(pipeline, opts, None, ctx))


def start_session_for_import(app: Path, ctx: launch.LaunchContext, name: str | None = None) -> None:
    """Start Spark, with the launcher's settings, for an application file that needs a
    session while it is imported (a module-level ``@udf("long")``). ``stoker.run`` then reuses
    it; a ``master`` or static Spark setting the file passes to ``stoker.run`` comes too late
    for it (``-D`` ones do not). ``name``: the Spark application's (default: the job's)."""
    settings = resolve_settings(ctx)
    log.info(
        "%s needs Spark while it is imported: starting Spark (%s)", app.name, spark_master(settings)
    )
    t0 = time.monotonic()
    get_session(settings, f"stoker:{name or ctx.job_id or app.stem}")
    log.info("Spark started in %.1f s", time.monotonic() - t0)
