"""Job submissions: a submitted job checked, planned (its id, spec, starting config and
folder) and created, or settled against the record its id already has (a duplicate, a
conflict, a restart). Applications' submissions settle the same way (:func:`settle`)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from stoker.errors import InvalidInput, JobConflict, JobNotFound, JobTerminal
from stoker.manager import rescales
from stoker.manager.appinspect import inspect_app
from stoker.manager.batch import CreateBatcher
from stoker.manager.state import keep_max_parallelism
from stoker.manager.submit import (
    ASSIGNED_STATE_DIR,
    check_savepoint_lineage,
    check_savepoint_source,
    savepoint_uid,
    spec_difference,
    validate_submission,
)
from stoker.store import JobRecord, Store
from stoker.types import JobId, JobState, job_id


@dataclass(frozen=True)
class SubmitResult:
    """A submission's outcome: the job, and whether it was created, already live, or restarted."""

    job: JobRecord
    outcome: str  # "created" | "duplicate" | "restarted"


class JobSubmissions:
    """Submissions of jobs to one store; creations that arrive together share one transaction
    (:class:`~stoker.manager.batch.CreateBatcher`)."""

    def __init__(
        self,
        store: Store,
        allowed_dirs: list[Path],
        jobs_dir: Path,
        allowed_conf: Sequence[str] = (),
    ) -> None:
        self.store = store
        self.allowed_dirs = allowed_dirs
        self.allowed_conf = tuple(allowed_conf)  # conf prefixes allowed to run code
        self.jobs_dir = jobs_dir  # each job's folder: jobs_dir/<job id>
        self._batcher = CreateBatcher(store)

    def submit(
        self,
        jid: str | None,
        entrypoint: str,
        args: list[str] | None = None,
        conf: dict[str, str] | None = None,
        restart: bool = False,
        restart_strategy: dict[str, Any] | None = None,
        config: dict[str, Any] | None = None,
        from_savepoint: str | None = None,
        scaling: Any = None,
        rewrite_output_after_savepoint: bool = False,
        standby: bool = False,
        fork: bool = False,
        ignore_unreachable_stores: bool = False,
    ) -> SubmitResult:
        """Create the job, or return the live one; never a second live instance.

        The store's primary key decides between concurrent submissions of one id, whichever
        manager receives them. ``scaling`` (text or object, :mod:`stoker.scalespec`) is set on
        the job once it is created; a live job submitted again keeps the scaling it has now.
        """
        name, spec, start = self._plan(
            jid,
            entrypoint,
            args,
            conf,
            restart_strategy,
            config,
            from_savepoint,
            scaling,
            rewrite_output_after_savepoint,
            standby,
            fork,
            ignore_unreachable_stores,
        )
        if spec.get("from_savepoint") and not self._exists(name):
            # A job about to be made from a savepoint: what its lineage refuses without the
            # pipeline is refused here (422), not by its driver after it was made.
            check_savepoint_lineage(self.store, spec, name)
        job, created = self.store.create_job(name, name, spec, start, uid=savepoint_uid(spec))
        return settle(self.store, name, spec, job, created, restart)

    async def submit_async(
        self,
        jid: str | None,
        entrypoint: str,
        args: list[str] | None = None,
        conf: dict[str, str] | None = None,
        restart: bool = False,
        restart_strategy: dict[str, Any] | None = None,
        config: dict[str, Any] | None = None,
        from_savepoint: str | None = None,
        scaling: Any = None,
        rewrite_output_after_savepoint: bool = False,
        standby: bool = False,
        fork: bool = False,
        ignore_unreachable_stores: bool = False,
    ) -> SubmitResult:
        """:meth:`submit` for an event loop: the insert joins the next group commit.

        Only the common path runs on the loop (validation is a few file-system calls); an
        omitted id (a child process reads the pipeline's name), a restart and a scaling spec
        to store run in a thread.
        """
        # A child process reads the app's pipeline; a restore is made under the savepoint's
        # uid (rare: not worth a place in the group commit).
        if jid is None or config or from_savepoint is not None:
            return await asyncio.to_thread(
                self.submit,
                jid,
                entrypoint,
                args,
                conf,
                restart,
                restart_strategy,
                config,
                from_savepoint,
                scaling,
                rewrite_output_after_savepoint,
                standby,
                fork,
                ignore_unreachable_stores,
            )
        name, spec, start = self._plan(
            jid,
            entrypoint,
            args,
            conf,
            restart_strategy,
            None,
            from_savepoint,
            scaling,
            rewrite_output_after_savepoint,
            standby,
        )
        job, created = await asyncio.wrap_future(self._batcher.create(name, name, spec, start))
        if (not created and job.state.terminal and restart) or "scaling" in spec:
            return await asyncio.to_thread(settle, self.store, name, spec, job, created, restart)
        return settle(self.store, name, spec, job, created, restart)

    def _plan(
        self,
        jid: str | None,
        entrypoint: str,
        args: list[str] | None,
        conf: dict[str, str] | None,
        restart_strategy: dict[str, Any] | None,
        config: dict[str, Any] | None,
        from_savepoint: str | None = None,
        scaling: Any = None,
        rewrite_output_after_savepoint: bool = False,
        standby: bool = False,
        fork: bool = False,
        ignore_unreachable_stores: bool = False,
    ) -> tuple[JobId, dict[str, Any], dict[str, Any]]:
        """The job's id, spec and starting config, every field checked; nothing is written.

        The starting config (version 0) is the pipeline's declared defaults with the submitted
        ``config`` on top; the manager learns the defaults only when it reads the app (an id
        omitted, or a config given), otherwise the driver declares them.
        """
        sub = validate_submission(
            entrypoint,
            list(args or []),
            dict(conf or {}),
            restart_strategy,
            self.allowed_dirs,
            scaling=scaling,
            allowed_conf=self.allowed_conf,
        )
        if from_savepoint is not None:
            sub = replace(
                sub, from_savepoint=check_savepoint_source(from_savepoint, self.allowed_dirs)
            )
        if rewrite_output_after_savepoint or fork or ignore_unreachable_stores:
            sub = replace(
                sub,
                rewrite_output_after_savepoint=rewrite_output_after_savepoint,
                fork=fork,
                ignore_unreachable_stores=ignore_unreachable_stores,
            )
            sub.check_rewrite()
        if standby:
            check_standby_master(sub.conf, standalone=True)
            sub = replace(sub, standby=True)
        start: dict[str, Any] = {}
        if jid is None or config:
            found, start, _spec = inspect_app(sub.entrypoint, dict(config or {}))
            name = job_id(jid) if jid is not None else job_id(found)
            sub = replace(sub, config=dict(config or {}))
        else:
            name = job_id(jid)
        spec = sub.spec()
        # The job's folder (Spark checkpoint, sink state) is chosen once, by the manager that
        # creates the job, and kept in the store: every attempt runs in it, whichever manager
        # leads when the attempt starts. A folder per launching manager would start a job that
        # failed over from an empty checkpoint.
        spec[ASSIGNED_STATE_DIR] = str(self.jobs_dir / name)
        return name, spec, start

    def _exists(self, jid: JobId) -> bool:
        try:
            self.store.get_job(jid)
        except JobNotFound:
            return False
        return True

    def submitted_view(self, job: JobRecord) -> dict[str, Any]:
        """A submitted job as ``POST /v1/jobs`` answers it: its record and its scaling (its
        own: a submitted job owns its executors), with no further read of the store."""
        return {**job.to_dict(), **rescales.scaling_fields(self.store, job, job)}

    def close(self) -> None:
        """Stop the group-commit thread (the store stays open: the caller owns it)."""
        self._batcher.close()


def settle(
    store: Store, name: JobId, spec: dict[str, Any], job: JobRecord, created: bool, restart: bool
) -> SubmitResult:
    """What the submission amounts to, given what the store holds for its id.

    Submitting an id again with the same spec is idempotent whatever the job's state: the
    job is returned as it is (``duplicate``), an ended one too, so a client may retry a
    submission whose answer it lost. Running an ended job again is asked for explicitly
    (``restart``); an ended job submitted with another spec and no restart is refused,
    naming the difference.

    The submitted scaling is set on a record this submission created or restarted; a
    live record keeps the scaling it has (control may have changed it since), unless
    none was ever stored (the manager stopped between creating it and storing it).
    """
    scaling = spec.get("scaling")
    if created:
        return SubmitResult(_with_scaling(store, job, scaling), "created")
    if job.state.terminal:
        if not restart:
            diff = spec_difference(job.spec, spec, was="ended")
            if diff is None:
                return SubmitResult(job, "duplicate")
            raise JobTerminal(name, str(job.state), diff)
        # From the job's last checkpoint: its folder stays the one it ran in.
        kept = job.spec.get(ASSIGNED_STATE_DIR) or spec[ASSIGNED_STATE_DIR]
        kept_spec = keep_max_parallelism({**spec, ASSIGNED_STATE_DIR: kept}, job.spec)
        job = store.restart_job(name, kept_spec)
        if job.state == JobState.RESTARTING:
            if job.scaling != scaling:
                job = _with_scaling(store, job, scaling, force=True)
            return SubmitResult(job, "restarted")
    diff = spec_difference(job.spec, spec)
    if diff is not None:
        raise JobConflict(name, diff)
    return SubmitResult(_with_scaling(store, job, scaling), "duplicate")


def _with_scaling(
    store: Store, job: JobRecord, scaling: dict[str, Any] | None, force: bool = False
) -> JobRecord:
    """``job`` with ``scaling`` stored, if it has none yet (or ``force``)."""
    if (scaling is None or job.scaling is not None) and not force:
        return job
    return store.set_scaling(job.job_id, scaling)


def check_standby_master(conf: dict[str, str], standalone: bool = False) -> None:
    """A warm standby is a second driver with its own Spark. On a ``local`` master (the
    default) it is a process of this host. On a standalone master (``spark://``; a lone job's
    standby or an upgrade's new code, ``standalone``) it registers a second Spark application,
    which takes executors of its own: the job must cap them with ``spark.cores.max`` (without a
    cap the standby would take every free core the running job may need). Any other master is
    refused (an application's standby: local masters only, not built for clusters)."""
    master = (conf.get("spark.master") or conf.get("stoker.master") or "local[*]").strip()
    if master.startswith("local"):
        return
    if not (standalone and master.startswith("spark://")):
        where = "a local or standalone (spark://) master" if standalone else "a local master"
        raise InvalidInput(
            "standby",
            f"is for jobs on {where}; this job runs on {master!r}, where a standby would be a "
            "second Spark application holding executors the job may need",
        )
    cap = (conf.get("spark.cores.max") or "").strip()
    if not (cap.isdigit() and int(cap) > 0):
        raise InvalidInput(
            "standby",
            f"on a standalone master ({master}) needs spark.cores.max (a whole number of cores "
            "above 0): the standby is a second Spark application with executors of its own, "
            f"and without a cap it would take every free core the job may need (given: "
            f"{cap or 'none'})",
        )
