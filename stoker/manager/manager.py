"""The job manager's facade: the one object the REST API, the web UI and the metrics call.

It holds what a manager process keeps (the store, its folders, the group-commit thread, the
cache of pipeline descriptions, the session clusters) and delegates each request to the module
of its concept: :mod:`.submissions`, and the modules named at each section below."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from stoker.manager import app_stop, appsubmit, control, jobs, logs, rescales, upgrades
from stoker.manager import applications as apps
from stoker.manager.appinspect import PipelineDescriptions
from stoker.manager.clusters.budget import HostBudget
from stoker.manager.managers import list_managers
from stoker.manager.operations import Operations
from stoker.manager.rescales import RescaleTally
from stoker.manager.sessions import SessionClusters
from stoker.manager.submissions import JobSubmissions, SubmitResult
from stoker.store import AttemptRecord, ControlEvent, EpochRecord, JobRecord, Store
from stoker.store.fleet_records import ClusterRecord, OperationRecord, RescaleRecord
from stoker.types import ControlKind, ControlStatus, JobId, JobState, job_id


class JobManager:
    """Submissions, queries and cancels of jobs and applications, and session clusters,
    over one store."""

    def __init__(
        self,
        store: Store,
        state_dir: Path,
        allowed_dirs: list[Path],
        leader_ttl: float = 3.0,
        budget: HostBudget | None = None,
        allowed_conf: Sequence[str] = (),
    ) -> None:
        self.store = store
        self.leader_ttl = leader_ttl  # the managers' (stoker server --leader-ttl)
        self.allowed_dirs = [d.resolve() for d in allowed_dirs]
        self.state_dir = state_dir.resolve()
        self.jobs_dir = self.state_dir / "jobs"
        self.apps_dir = self.state_dir / "apps"
        self.clusters_dir = self.state_dir / "clusters"
        self.sessions = SessionClusters(store, self.clusters_dir, budget)
        self.allowed_conf = tuple(allowed_conf)  # stoker server --allow-conf
        self._submissions = JobSubmissions(
            store, self.allowed_dirs, self.jobs_dir, self.allowed_conf
        )
        self._descriptions = PipelineDescriptions()
        self.operations = Operations(store)

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
        """Create the job, or return the live one; never a second live instance
        (:meth:`JobSubmissions.submit`)."""
        return self._submissions.submit(
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
        """:meth:`submit` for an event loop: the insert joins the next group commit
        (:meth:`JobSubmissions.submit_async`)."""
        return await self._submissions.submit_async(
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

    def submitted_view(self, job: JobRecord) -> dict[str, Any]:
        """A submitted job as ``POST /v1/jobs`` answers it: its record and its scaling (its
        own: a submitted job owns its executors), with no further read of the store."""
        return self._submissions.submitted_view(job)

    def close(self) -> None:
        """Stop the group-commit thread and end this manager's unfinished operations (the
        store stays open: the caller owns it)."""
        self._submissions.close()
        self.operations.close()

    # jobs: queries, views and cancel (jobs.py) --------------------------------------------
    def list_jobs(self, state: JobState | None = None) -> list[JobRecord]:
        """Jobs (those of applications included), never application records."""
        return jobs.list_jobs(self.store, state)

    def list_views(self, state: JobState | None = None) -> list[dict[str, Any]]:
        """Every job (only those in ``state``) as the API lists it (:func:`jobs.list_views`)."""
        return jobs.list_views(self.store, state)

    def list_page(
        self, state: JobState | None, limit: int, after: str | None
    ) -> tuple[list[dict[str, Any]], str | None]:
        """One page of the jobs as the API lists them, and the next page's cursor
        (:func:`jobs.list_page`)."""
        return jobs.list_page(self.store, state, limit, after)

    def _job(self, jid: str) -> JobRecord:
        """The job ``jid``; an application's id is not a job's (404 naming where to look)."""
        return jobs.job_record(self.store, jid)

    def view(self, jid: str) -> dict[str, Any]:
        """Everything about one job: state, attempt (pid, host, lease), last epoch, timings
        (:func:`jobs.job_view`)."""
        return jobs.job_view(self.store, jid)

    def attempts(self, jid: str) -> list[AttemptRecord]:
        """Every attempt of the job."""
        return jobs.attempts(self.store, jid)

    def epochs(self, jid: str, limit: int = 100, before: int | None = None) -> list[EpochRecord]:
        """The job's newest ``limit`` epochs (below ``before``: the next page)."""
        return jobs.epochs(self.store, jid, limit, before)

    def cancel(self, jid: str) -> JobRecord:
        """Ask the job to stop after its current epoch; the leader enforces a timeout (a job
        of an application: its application's driver stops it)."""
        return jobs.cancel(self.store, jid)

    # upgrades (upgrades.py does the work) ---------------------------------------------------
    def upgrade(self, jid: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return upgrades.ask(self.store, self._job(jid), dict(body), self.allowed_dirs)

    def upgrades_of(self, jid: str, limit: int = 100) -> list[dict[str, Any]]:
        return upgrades.history(self.store, self._job(jid), limit)

    def upgrade_of(self, jid: str, upgrade_id: str) -> dict[str, Any]:
        return upgrades.one(self.store, self._job(jid), upgrade_id)

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

    def repartition_operation(
        self, jid: str, partitions: Any, *, idem_key: str | None = None
    ) -> tuple[OperationRecord, bool]:
        """:meth:`repartition_state` as an operation: refused at once when the job is unknown,
        live, never ran or ``partitions`` is not a number >= 1; else in the background."""
        from stoker.manager.state import check_repartition, repartition

        def prepare() -> Any:
            check_repartition(self.store, jid, partitions)
            return lambda: repartition(self.store, jid, partitions)

        request = {"partitions": partitions}
        return self.operations.start("repartition", jid, request, prepare, idem_key)

    def scaling_series(self, records: Sequence[JobRecord] | None = None) -> dict[str, Any]:
        """Per-job gauges of ``/metrics`` (:func:`rescales.job_series`) of ``records`` (None:
        every record)."""
        every = records if records is not None else self.store.list_jobs(kind=None)
        return rescales.job_series(self.store, every)

    def rescale_totals(
        self, tally: RescaleTally, records: Sequence[JobRecord] | None = None
    ) -> dict[str, float]:
        """Rescales recorded, by kind (``tally`` remembers what it counted), of the owners
        among ``records`` (None: every record)."""
        owners = records if records is not None else self.store.list_jobs(kind=None)
        return tally.totals(self.store, [j for j in owners if j.app_id is None])

    # observability (metrics, events): bounded reads of many jobs ---------------------------
    def all_records(self) -> list[JobRecord]:
        """Every job and application record (one read)."""
        return self.store.list_jobs(kind=None)

    def recent_epochs_of(self, jids: Iterable[JobId], limit: int) -> dict[JobId, list[EpochRecord]]:
        """The newest ``limit`` epochs of each job, newest first (a job gone meanwhile: none)."""
        return jobs.recent_epochs_of(self.store, jids, limit)

    def recent_controls_of(
        self, jids: Iterable[JobId], limit: int
    ) -> dict[JobId, list[ControlEvent]]:
        """The newest ``limit`` control events of each job, newest first."""
        return jobs.recent_controls_of(self.store, jids, limit)

    def recent_rescales_of(
        self, jids: Iterable[JobId], limit: int
    ) -> dict[JobId, list[RescaleRecord]]:
        """The newest ``limit`` rescales of each owner, newest first."""
        return jobs.recent_rescales_of(self.store, jids, limit)

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
        return self._descriptions.describe(self._job(jid).spec.get("entrypoint"))

    # applications: appsubmit.py submits, applications.py shows and cancels ---------------
    def submit_application(
        self, app_id: str | None, entrypoint: str, **fields: Any
    ) -> SubmitResult:
        """Create the application, or return the live one, as :meth:`submit` does for a job
        (:func:`appsubmit.submit_application`, whose keywords ``fields`` are: args, conf,
        cluster, restart_strategy, driver_memory, driver_cores, restart, scaling, standby);
        its driver is the leader's to start."""
        return appsubmit.submit_application(
            self.store,
            self.allowed_dirs,
            self.apps_dir,
            app_id,
            entrypoint,
            allowed_conf=self.allowed_conf,
            **fields,
        )

    def applications(self, state: JobState | None = None) -> list[dict[str, Any]]:
        """Every application (only those in ``state``), in brief: state, attempt, cluster
        spec, how many jobs it has made, the last error."""
        return apps.list_applications(self.store, state)

    def applications_page(
        self, state: JobState | None, limit: int, after: str | None
    ) -> tuple[list[dict[str, Any]], str | None]:
        """One page of the applications in brief, and the next page's cursor."""
        return apps.list_page(self.store, state, limit, after)

    def application(self, app_id: str) -> dict[str, Any]:
        """One application: state, every driver attempt, the live driver (pid, host), its
        cluster, each of its jobs with its state and last epoch, the last error."""
        return apps.application_view(self.store, app_id, self._find_cluster)

    def stop_application_operation(
        self,
        app_id: str,
        savepoint: bool,
        folder: str | None = None,
        *,
        sender: str = "operator",
        idem_key: str | None = None,
    ) -> tuple[OperationRecord, bool]:
        """Stop the application to resume it later, with a savepoint of each live job first
        when asked (:mod:`stoker.manager.app_stop`), as an operation: refused at once when it
        has ended."""

        def submit(jid: JobId, body: dict[str, Any], request_id: str) -> ControlEvent:
            return self.submit_control(jid, body, sender=sender, request_id=request_id)[0]

        def look(jid: JobId, control_id: str) -> ControlEvent:
            return self.control_event(jid, control_id, ControlKind.SAVEPOINT)

        def prepare() -> Any:
            app, jobs = app_stop.check_stop(self.store, app_id)
            return lambda: app_stop.stop(
                self.store, app, jobs, submit, look, savepoint=savepoint, folder=folder
            )

        request = {"savepoint": savepoint, "dir": folder}
        return self.operations.start("stop-application", app_id, request, prepare, idem_key)

    def resume_application(self, app_id: str) -> SubmitResult:
        """Run an ended application again with its recorded spec: its CANCELED and FAILED
        jobs resume from their checkpoints (:func:`app_stop.resume_spec`)."""
        spec = app_stop.resume_spec(self.store, app_id)
        return self.submit_application(
            app_id,
            str(spec["entrypoint"]),
            args=list(spec.get("args") or []),
            conf=dict(spec.get("conf") or {}),
            cluster=spec.get("cluster"),
            restart_strategy=spec.get("restart_strategy"),
            restart=True,
            scaling=spec.get("scaling"),
            standby=bool(spec.get("standby")),  # the spec as recorded: the same application
        )

    def cancel_application(self, app_id: str) -> dict[str, Any]:
        """Ask the application to stop: its driver cancels every job gracefully (each epoch
        in flight commits), then ends; the leader kills it after the cancel timeout. An
        application not running yet ends CANCELED at once."""
        return apps.cancel_application(self.store, app_id, self._find_cluster)

    # logs (logs.py) -----------------------------------------------------------------------
    def attempt_log(self, jid: str, attempt: int, tail: int | None = None) -> str:
        """The driver log of one attempt of a job (the last ``tail`` bytes if given)."""
        return logs.attempt_log(self.store, jid, attempt, tail)

    def application_log(
        self, app_id: str, attempt: int | None = None, tail: int | None = None
    ) -> str:
        """The driver log of one attempt (default: the current one), or its last ``tail``
        lines; empty before the first attempt started."""
        return logs.application_log(self.store, app_id, attempt, tail)

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

    def start_cluster_operation(
        self,
        name: str | None = None,
        workers: int = 2,
        cores: int = 1,
        memory: str = "1g",
        *,
        idem_key: str | None = None,
    ) -> tuple[OperationRecord, bool]:
        """:meth:`start_session_cluster` as an operation: checked and recorded STARTING at
        once (the name, the sizes, the host's budget), its JVMs started in the background."""
        request = {"name": name, "workers": workers, "cores": cores, "memory": memory}

        def prepare() -> Any:
            return self.sessions.begin_start(name, workers, cores, memory)[1]

        return self.operations.start("start-cluster", name or "", request, prepare, idem_key)

    def add_worker_operation(
        self,
        name: str,
        cores: int | None = None,
        memory: str | None = None,
        *,
        idem_key: str | None = None,
    ) -> tuple[OperationRecord, bool]:
        """:meth:`add_worker` as an operation (checked at once: the cluster RUNNING, the
        sizes and the host's budget)."""

        def prepare() -> Any:
            self.sessions.check_add_worker(name, cores, memory)
            return lambda: self.sessions.add_worker(name, cores, memory)

        request = {"cores": cores, "memory": memory}
        return self.operations.start("add-worker", name, request, prepare, idem_key)

    def remove_worker_operation(
        self, name: str, worker: str, graceful: bool = False, *, idem_key: str | None = None
    ) -> tuple[OperationRecord, bool]:
        """:meth:`remove_worker` as an operation (checked at once: the cluster RUNNING, the
        worker in it)."""

        def prepare() -> Any:
            self.sessions.check_remove_worker(name, worker)
            return lambda: self.sessions.remove_worker(name, worker, graceful)

        request = {"worker": worker, "graceful": graceful}
        return self.operations.start("remove-worker", name, request, prepare, idem_key)

    def operation(self, op_id: str) -> OperationRecord:
        """One operation (:class:`~stoker.errors.OperationNotFound`); one whose manager is
        gone ends FAILED as it is read (:meth:`Operations.get`)."""
        return self.operations.get(op_id)

    def stop_cluster(self, name: str, force: bool = False) -> dict[str, Any]:
        """:meth:`SessionClusters.stop`: session clusters only."""
        return self.sessions.stop(name, force)

    # the job managers ----------------------------------------------------------------------
    def managers(self) -> dict[str, Any]:
        """:func:`~stoker.manager.managers.list_managers`: the leader lease and every manager
        seen lately, each as leader or standby."""
        return list_managers(self.store, self.leader_ttl)
