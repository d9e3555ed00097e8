"""The job manager's facade: the only code the REST API calls, and the only code of the
manager that talks to the store."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from stoker.errors import (
    ApplicationNotFound,
    InvalidInput,
    JobConflict,
    JobNotFound,
    JobTerminal,
)
from stoker.manager import control, rescales
from stoker.manager.applications import (
    SessionClusters,
    attempt_view,
    cluster_of,
    driver_of,
    tail_lines,
    validate_application,
)
from stoker.manager.batch import CreateBatcher
from stoker.manager.managers import list_managers
from stoker.manager.processes import child_env
from stoker.manager.rescales import RescaleTally
from stoker.manager.state import keep_max_parallelism
from stoker.manager.submit import (
    ASSIGNED_STATE_DIR,
    check_savepoint_source,
    spec_difference,
    validate_submission,
)
from stoker.store import AttemptRecord, ControlEvent, EpochRecord, JobRecord, Store
from stoker.store.records import ClusterRecord, RescaleRecord
from stoker.types import (
    AttemptNo,
    ControlKind,
    ControlStatus,
    JobId,
    JobKind,
    JobState,
    job_id,
)


@dataclass(frozen=True)
class SubmitResult:
    """A submission's outcome: the job, and whether it was created, already live, or restarted."""

    job: JobRecord
    outcome: str  # "created" | "duplicate" | "restarted"


class JobManager:
    """Submissions, queries and cancels of jobs and applications, and session clusters,
    over one store."""

    def __init__(
        self, store: Store, state_dir: Path, allowed_dirs: list[Path], leader_ttl: float = 3.0
    ) -> None:
        self.store = store
        self.leader_ttl = leader_ttl  # the managers' (stoker server --leader-ttl)
        self.allowed_dirs = [d.resolve() for d in allowed_dirs]
        self.state_dir = state_dir.resolve()
        self.jobs_dir = self.state_dir / "jobs"
        self.apps_dir = self.state_dir / "apps"
        self.clusters_dir = self.state_dir / "clusters"
        self.sessions = SessionClusters(store, self.clusters_dir)
        self._batcher = CreateBatcher(store)
        # Pipeline descriptions read from application files, by (path, mtime): a child
        # process each, for control requests that come before a driver declared its own.
        self._described: dict[tuple[str, int], dict[str, Any]] = {}
        self._described_lock = threading.Lock()

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
    ) -> SubmitResult:
        """Create the job, or return the live one; never a second live instance.

        The store's primary key decides between concurrent submissions of one id, whichever
        manager receives them. ``scaling`` (text or object, :mod:`stoker.scalespec`) is set on
        the job once it is created; a live job submitted again keeps the scaling it has now.
        """
        name, spec, start = self._plan(
            jid, entrypoint, args, conf, restart_strategy, config, from_savepoint, scaling
        )
        job, created = self.store.create_job(name, name, spec, start)
        return self._settle(name, spec, job, created, restart)

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
    ) -> SubmitResult:
        """:meth:`submit` for an event loop: the insert joins the next group commit.

        Only the common path runs on the loop (validation is a few file-system calls); an
        omitted id (a child process reads the pipeline's name), a restart and a scaling spec
        to store run in a thread.
        """
        if jid is None or config:  # a child process reads the app's pipeline
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
            )
        name, spec, start = self._plan(
            jid, entrypoint, args, conf, restart_strategy, None, from_savepoint, scaling
        )
        job, created = await asyncio.wrap_future(self._batcher.create(name, name, spec, start))
        if (not created and job.state.terminal and restart) or "scaling" in spec:
            return await asyncio.to_thread(self._settle, name, spec, job, created, restart)
        return self._settle(name, spec, job, created, restart)

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
        )
        if from_savepoint is not None:
            sub = replace(
                sub, from_savepoint=check_savepoint_source(from_savepoint, self.allowed_dirs)
            )
        start: dict[str, Any] = {}
        if jid is None or config:
            found, start, _spec = _inspect_app(sub.entrypoint, dict(config or {}))
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

    def _settle(
        self, name: JobId, spec: dict[str, Any], job: JobRecord, created: bool, restart: bool
    ) -> SubmitResult:
        """What the submission amounts to, given what the store holds for its id.

        The submitted scaling is set on a record this submission created or restarted; a
        live record keeps the scaling it has (control may have changed it since), unless
        none was ever stored (the manager stopped between creating it and storing it).
        """
        scaling = spec.get("scaling")
        if created:
            return SubmitResult(self._with_scaling(job, scaling), "created")
        if job.state.terminal:
            if not restart:
                raise JobTerminal(name, str(job.state))
            # From the job's last checkpoint: its folder stays the one it ran in.
            kept = job.spec.get(ASSIGNED_STATE_DIR) or spec[ASSIGNED_STATE_DIR]
            kept_spec = keep_max_parallelism({**spec, ASSIGNED_STATE_DIR: kept}, job.spec)
            job = self.store.restart_job(name, kept_spec)
            if job.state == JobState.RESTARTING:
                if job.scaling != scaling:
                    job = self._with_scaling(job, scaling, force=True)
                return SubmitResult(job, "restarted")
        diff = spec_difference(job.spec, spec)
        if diff is not None:
            raise JobConflict(name, diff)
        return SubmitResult(self._with_scaling(job, scaling), "duplicate")

    def _with_scaling(
        self, job: JobRecord, scaling: dict[str, Any] | None, force: bool = False
    ) -> JobRecord:
        """``job`` with ``scaling`` stored, if it has none yet (or ``force``)."""
        if (scaling is None or job.scaling is not None) and not force:
            return job
        return self.store.set_scaling(job.job_id, scaling)

    def submitted_view(self, job: JobRecord) -> dict[str, Any]:
        """A submitted job as ``POST /v1/jobs`` answers it: its record and its scaling (its
        own: a submitted job owns its executors), with no further read of the store."""
        return {**job.to_dict(), **rescales.scaling_fields(self.store, job, job)}

    def close(self) -> None:
        """Stop the group-commit thread (the store stays open: the caller owns it)."""
        self._batcher.close()

    def list_jobs(self, state: JobState | None = None) -> list[JobRecord]:
        """Jobs (those of applications included), never application records."""
        return self.store.list_jobs(state, kind=JobKind.JOB)

    def list_views(self, state: JobState | None = None) -> list[dict[str, Any]]:
        """Every job (only those in ``state``) as the API lists it: a paused one shows
        ``"state": "PAUSED"`` and ``"paused": true``; a job of an application names it in
        ``app_id`` (null for a job submitted alone)."""
        owners: dict[JobId, JobRecord] = {}
        out = []
        for j in self.list_jobs(state):
            if j.app_id is not None and j.app_id not in owners:
                owners[j.app_id] = self.store.get_job(j.app_id)
            out.append(self._job_dict(j, owners.get(j.app_id) if j.app_id else None))
        return out

    def _job_dict(self, job: JobRecord, owner: JobRecord | None = None) -> dict[str, Any]:
        """A job as the API shows it; its scaling is its owner's (its application's, if
        any): ``scaling``, ``executor_target``, ``resources``, ``max_parallelism``."""
        out = job.to_dict()
        out["state"], out["paused"] = control.display_state(self.store, job)
        out["app_id"] = job.app_id
        out.update(rescales.scaling_fields(self.store, job, owner))
        return out

    def _job(self, jid: str) -> JobRecord:
        """The job ``jid``; an application's id is not a job's (404 naming where to look)."""
        job = self.store.get_job(job_id(jid))
        if job.kind == JobKind.APPLICATION:
            raise JobNotFound(job.job_id).with_hint(
                f"it is an application: GET /v1/applications/{job.job_id}, "
                f"stoker app status {job.job_id}"
            )
        return job

    def view(self, jid: str) -> dict[str, Any]:
        """Everything about one job: state, attempt (pid, host, lease), last epoch, timings.

        A RUNNING job whose control paused it shows ``"state": "PAUSED"``, ``"paused": true``.
        """
        job = self._job(jid)
        out = self._job_dict(job)
        att = (
            self.store.get_attempt(job.job_id, job.current_attempt) if job.current_attempt else None
        )
        out["attempt"] = att.to_dict() if att else None
        last = self.store.list_epochs(job.job_id, limit=1)
        out["last_epoch"] = last[0].to_dict() if last else None
        return out

    def attempts(self, jid: str) -> list[AttemptRecord]:
        job = self._job(jid)
        return self.store.list_attempts(job.job_id)

    def epochs(self, jid: str, limit: int = 100) -> list[EpochRecord]:
        job = self._job(jid)
        return self.store.list_epochs(job.job_id, limit=limit)

    def cancel(self, jid: str) -> JobRecord:
        """Ask the job to stop after its current epoch; the leader enforces a timeout (a job
        of an application: its application's driver stops it)."""
        return self.store.request_cancel(self._job(jid).job_id)

    # scaling (rescales.py does the work) -----------------------------------------------------
    def _scalable(self, jid: str) -> JobRecord:
        """A job's or an application's record: scaling is its owner's either way."""
        return self.store.get_job(job_id(jid))

    def rescales(self, jid: str, limit: int = 100, since: float | None = None) -> dict[str, Any]:
        """:func:`rescales.rescales_view`: the owner's scaling and rescale history."""
        return rescales.rescales_view(self.store, self._scalable(jid), limit, since)

    def set_resources(self, jid: str, body: Mapping[str, Any], *, sender: str) -> dict[str, Any]:
        """New executor bounds for the owner (``{"min_executors", "max_executors"}``):
        :func:`rescales.set_bounds`."""
        record = self._scalable(jid)  # an unknown id is a 404 before the body's 422
        low, high = rescales.parse_bounds(body)
        return rescales.set_bounds(self.store, record, low, high, sender=sender)

    def repartition_state(self, jid: str, partitions: int) -> dict[str, Any]:
        """Give a stopped job ``partitions`` state partitions, offline, on this host
        (:func:`stoker.manager.state.repartition`)."""
        from stoker.manager.state import repartition

        return repartition(self.store, jid, partitions)

    def scaling_series(self) -> dict[str, dict[str, float]]:
        """Per-job gauges of ``/metrics`` (:func:`rescales.job_series`)."""
        return rescales.job_series(self.store, self.store.list_jobs(kind=None))

    def rescale_totals(self, tally: RescaleTally) -> dict[str, float]:
        """Rescales recorded, by kind (``tally`` remembers what it counted)."""
        owners = [j for j in self.store.list_jobs(kind=None) if j.app_id is None]
        return tally.totals(self.store, owners)

    # observability (metrics, events): bounded reads of many jobs ---------------------------
    def all_records(self) -> list[JobRecord]:
        """Every job and application record (one read)."""
        return self.store.list_jobs(kind=None)

    def recent_epochs_of(self, jids: Iterable[JobId], limit: int) -> dict[JobId, list[EpochRecord]]:
        """The newest ``limit`` epochs of each job, newest first (a job gone meanwhile: none)."""
        return {j: self.store.list_epochs(j, limit=limit) for j in jids}

    def recent_controls_of(
        self, jids: Iterable[JobId], limit: int
    ) -> dict[JobId, list[ControlEvent]]:
        """The newest ``limit`` control events of each job, newest first."""
        out: dict[JobId, list[ControlEvent]] = {}
        for j in jids:
            try:
                out[j] = self.store.list_controls(j, limit=limit)
            except JobNotFound:
                continue  # deleted since the jobs were read
        return out

    def recent_rescales_of(
        self, jids: Iterable[JobId], limit: int
    ) -> dict[JobId, list[RescaleRecord]]:
        """The newest ``limit`` rescales of each owner, newest first."""
        out: dict[JobId, list[RescaleRecord]] = {}
        for j in jids:
            try:
                out[j] = self.store.list_rescales(j, limit=limit)
            except JobNotFound:
                continue
        return out

    # control -------------------------------------------------------------------------------
    def submit_control(
        self,
        jid: str,
        body: Mapping[str, Any],
        *,
        sender: str,
        origin: str | None = None,
        request_id: str | None = None,
    ) -> tuple[ControlEvent, bool]:
        """Store one control event (:func:`stoker.manager.control.submit_control`); a
        savepoint's ``dir`` must lie under the manager's allowed folders. Control is a job's;
        an application takes only ``scaling`` (its executors are its jobs')."""
        if isinstance(body, Mapping) and str(body.get("kind")) == ControlKind.SCALING:
            self._scalable(jid)
        else:
            self._job(jid)  # an application's id is refused with where to look
        return control.submit_control(
            self.store,
            jid,
            body,
            sender=sender,
            origin=origin,
            request_id=request_id,
            describe=lambda: self.describe_pipeline(jid),
            savepoint_dirs=self.allowed_dirs,
        )

    def control_event(
        self, jid: str, control_id: str, kind: ControlKind | None = None
    ) -> ControlEvent:
        """One control event of the job (of ``kind``, when given); an application's events
        are its scaling events."""
        self._scalable(jid)
        return control.get_control(self.store, jid, control_id, kind)

    def control_history(
        self,
        jid: str,
        limit: int = 50,
        before: int | None = None,
        kind: ControlKind | None = None,
        status: ControlStatus | None = None,
    ) -> dict[str, Any]:
        """A page of the job's (or an application's) control events, newest first, and where
        the next page starts."""
        self._scalable(jid)
        return control.control_history(self.store, jid, limit, before, kind, status)

    def config_view(self, jid: str) -> dict[str, Any]:
        """The job's config and control state now (:func:`stoker.manager.control.config_view`)."""
        self._job(jid)
        return control.config_view(self.store, jid)

    def describe_pipeline(self, jid: str) -> dict[str, Any]:
        """The pipeline description of a job no driver has declared yet, read from its
        application file in a child process (user code never runs inside the manager)."""
        job = self._job(jid)
        entry = job.spec.get("entrypoint")
        if not isinstance(entry, str):
            return {}
        path = Path(entry)
        try:
            key = (str(path), path.stat().st_mtime_ns)
        except OSError:
            raise InvalidInput(
                "entrypoint", f"the job's application file {entry!r} cannot be read"
            ) from None
        with self._described_lock:
            found = self._described.get(key)
        if found is None:
            found = _inspect_app(path, {})[2]
            with self._described_lock:
                if len(self._described) > 256:
                    self._described.clear()
                self._described[key] = found
        return found

    def attempt_log(self, jid: str, attempt: int, tail: int | None = None) -> str:
        """The driver log of one attempt (the last ``tail`` bytes if given)."""
        job = self._job(jid)
        att = self.store.get_attempt(job.job_id, AttemptNo(attempt))
        if att is None:
            raise JobNotFound(f"{jid} attempt {attempt}")
        if not att.log_path:
            raise InvalidInput("attempt", f"attempt {attempt} was not started by a job manager")
        path = Path(att.log_path)
        if not path.exists():
            return ""
        with open(path, "rb") as fh:
            if tail is not None:
                size = path.stat().st_size
                fh.seek(max(0, size - tail))
            return fh.read().decode("utf-8", errors="replace")

    # applications --------------------------------------------------------------------------
    def submit_application(
        self,
        app_id: str | None,
        entrypoint: str,
        args: list[str] | None = None,
        conf: dict[str, str] | None = None,
        cluster: str | None = None,
        restart_strategy: dict[str, Any] | None = None,
        driver_memory: str | None = None,
        driver_cores: int | None = None,
        restart: bool = False,
        scaling: Any = None,
    ) -> SubmitResult:
        """Create the application, or return the live one, as :meth:`submit` does for a job:
        the same spec again is a duplicate, another spec while live a :class:`JobConflict`,
        an ended one runs again only with ``restart``. An id taken by a job (or a job of
        another application) is :class:`JobOwnedElsewhere`. Its driver is the leader's to
        start (on its cluster); nothing runs here."""
        sub = validate_application(
            app_id,
            entrypoint,
            list(args or []),
            dict(conf or {}),
            cluster,
            restart_strategy,
            driver_memory,
            driver_cores,
            self.allowed_dirs,
            self.store.get_cluster,
            scaling,
        )
        spec = sub.spec()
        # The application's folder (its jobs' checkpoints under jobs/<job id>), chosen once
        # by the manager that creates it, as a job's is.
        spec[ASSIGNED_STATE_DIR] = str(self.apps_dir / sub.app_id)
        app, created = self.store.create_job(
            sub.app_id, sub.app_id, spec, {}, kind=JobKind.APPLICATION
        )
        return self._settle(sub.app_id, spec, app, created, restart)

    def _app(self, app_id: str) -> JobRecord:
        """The application record ``app_id``; :class:`ApplicationNotFound` otherwise (also for
        a job's id, naming where to look)."""
        aid = job_id(app_id)
        try:
            app = self.store.get_job(aid)
        except JobNotFound:
            raise ApplicationNotFound(aid) from None
        if app.kind != JobKind.APPLICATION:
            raise ApplicationNotFound(aid).with_hint(
                f"it is a job: GET /v1/jobs/{aid}, stoker status {aid}"
            )
        return app

    def applications(self, state: JobState | None = None) -> list[dict[str, Any]]:
        """Every application (only those in ``state``), in brief: state, attempt, cluster
        spec, how many jobs it has made, the last error."""
        apps = self.store.list_jobs(state, kind=JobKind.APPLICATION)
        counts = Counter(j.app_id for j in self.store.list_jobs(kind=JobKind.JOB) if j.app_id)
        return [
            {
                "app_id": a.job_id,
                "state": str(a.state),
                "attempt": a.current_attempt,
                "cluster": a.spec.get("cluster"),
                "jobs": counts.get(a.job_id, 0),
                "error": a.last_error,
                "created_at": a.created_at,
                "updated_at": a.updated_at,
            }
            for a in apps
        ]

    def application(self, app_id: str) -> dict[str, Any]:
        """One application: state, every driver attempt, the live driver (pid, host), its
        cluster, each of its jobs with its state and last epoch, the last error."""
        app = self._app(app_id)
        attempts = self.store.list_attempts(app.job_id)
        jobs = self.store.list_jobs(kind=JobKind.JOB, app_id=app.job_id)
        return {
            "app_id": app.job_id,
            "state": str(app.state),
            "attempt": app.current_attempt,
            "attempts": [attempt_view(a) for a in attempts],
            "driver": driver_of(attempts, app.current_attempt),
            "cluster": cluster_of(app, self._find_cluster),
            "jobs": [self._app_job(j) for j in jobs],
            **rescales.scaling_fields(self.store, app, app),
            "error": app.last_error,
            "spec": app.spec,
            "failures": app.failures,
            "next_attempt_at": app.next_attempt_at,
            "cancel_requested_at": app.cancel_requested_at,
            "created_at": app.created_at,
            "updated_at": app.updated_at,
        }

    def _app_job(self, job: JobRecord) -> dict[str, Any]:
        last = self.store.list_epochs(job.job_id, limit=1)
        state, _paused = control.display_state(self.store, job)
        return {
            "job_id": job.job_id,
            "state": state,
            "last_epoch": last[0].epoch if last else None,
            "attempt": job.current_attempt,
            "error": job.last_error,
        }

    def cancel_application(self, app_id: str) -> dict[str, Any]:
        """Ask the application to stop: its driver cancels every job gracefully (each epoch
        in flight commits), then ends; the leader kills it after the cancel timeout. An
        application not running yet ends CANCELED at once."""
        app = self._app(app_id)
        self.store.request_cancel(app.job_id)
        return self.application(app.job_id)

    def application_log(
        self, app_id: str, attempt: int | None = None, tail: int | None = None
    ) -> str:
        """The driver log of one attempt (default: the current one), or its last ``tail``
        lines; empty before the first attempt started."""
        app = self._app(app_id)
        n = app.current_attempt if attempt is None else attempt
        if n == 0:
            return ""
        att = self.store.get_attempt(app.job_id, AttemptNo(n))
        if att is None:
            err = ApplicationNotFound(app.job_id)
            raise err.with_message(f"application {app.job_id!r} has no attempt {n}")
        if not att.log_path:
            return ""
        return tail_lines(Path(att.log_path), tail)

    # clusters: SessionClusters does the work -----------------------------------------------
    def _find_cluster(self, name: str) -> ClusterRecord | None:
        return self.sessions.find(name)

    def start_session_cluster(
        self, name: str | None = None, workers: int = 2, cores: int = 1, memory: str = "1g"
    ) -> dict[str, Any]:
        """:meth:`SessionClusters.start`: a session cluster, RUNNING when this returns."""
        return self.sessions.start(name, workers, cores, memory)

    def clusters(self, include_stopped: bool = False) -> list[dict[str, Any]]:
        """Every cluster stoker started (session clusters and applications' own)."""
        return self.sessions.views(include_stopped)

    def cluster(self, name: str) -> dict[str, Any]:
        """:meth:`SessionClusters.view`: the record, ``status`` and ``used_by``."""
        return self.sessions.view(name)

    def add_worker(
        self, name: str, cores: int | None = None, memory: str | None = None
    ) -> dict[str, Any]:
        """:meth:`SessionClusters.add_worker`."""
        return self.sessions.add_worker(name, cores, memory)

    def remove_worker(self, name: str, worker: str, graceful: bool = False) -> dict[str, Any]:
        """:meth:`SessionClusters.remove_worker`."""
        return self.sessions.remove_worker(name, worker, graceful)

    def stop_cluster(self, name: str) -> dict[str, Any]:
        """:meth:`SessionClusters.stop`: session clusters only."""
        return self.sessions.stop(name)

    # the job managers ----------------------------------------------------------------------
    def managers(self) -> dict[str, Any]:
        """:func:`~stoker.manager.managers.list_managers`: the leader lease and every manager
        seen lately, each as leader or standby."""
        return list_managers(self.store, self.leader_ttl)


# In a child process (the manager imports no Spark and no user code): the Pipeline the file
# runs, its starting config and its description.
_INSPECT = """\
import json, sys
from stoker.errors import InvalidInput
from stoker.runtime.appfile import check_app_path, inspect_pipeline

def inspect(app, config):
    pipeline = inspect_pipeline(app)
    return pipeline.name, pipeline.check_config(config), pipeline.spec()

try:
    name, config, spec = inspect(check_app_path(sys.argv[1]), json.loads(sys.argv[2]))
except InvalidInput as e:
    print(json.dumps({"field": e.field, "message": e.message}))
    sys.exit(2)
print(json.dumps({"name": name, "config": config, "spec": spec}))
"""


def _inspect_app(
    entrypoint: Path, config: dict[str, Any]
) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """The name of the Pipeline the file runs, its starting config (declared defaults with
    ``config`` on top, checked) and its description (``Pipeline.spec()``: declared config,
    sources, registered control events), found in a child process: user code never runs
    inside the manager. A refusal is :class:`InvalidInput` naming the field once."""
    code = _INSPECT
    proc = subprocess.run(
        [sys.executable, "-c", code, str(entrypoint), json.dumps(config)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(entrypoint.parent),
        env=child_env(),  # user code: not the manager's tokens
    )
    answer: dict[str, Any] = {}
    lines = proc.stdout.strip().splitlines()
    if lines:
        try:
            answer = json.loads(lines[-1])
        except ValueError:
            answer = {}
    if proc.returncode == 2 and "field" in answer:
        field = str(answer["field"])
        if not field.startswith("config"):
            field = "job_id" if field == "job_id" else "entrypoint"
        raise InvalidInput(field, str(answer["message"]))
    if proc.returncode != 0 or "name" not in answer:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise InvalidInput("entrypoint", f"reading the app's pipeline failed: {last}")
    return str(answer["name"]), dict(answer["config"]), dict(answer["spec"])
