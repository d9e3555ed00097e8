"""Applications as the job manager reads them: one, the list, its cancel; and how a driver
attempt, the live driver and the cluster an application runs on are shown. A submission is
:mod:`.appsubmit`'s; the clusters' records, :mod:`.cluster_records`; session clusters,
:mod:`.sessions`.

An application is a record of the jobs table (``kind='application'``) whose driver runs a
user's program (``stoker.runtime.appdriver``); the jobs the program submits name it as their
``app_id``. No user code runs in the manager: a submission is a file path, arguments, Spark
settings and a cluster spec.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from stoker.errors import ApplicationNotFound, InvalidInput, JobNotFound
from stoker.manager import clusters, control, rescales
from stoker.manager.cluster_records import app_cluster_name
from stoker.manager.jobs import leader_token, reconciling, standby_view
from stoker.manager.pages import read_page
from stoker.store import AttemptRecord, JobRecord, Store
from stoker.store.fleet_records import ClusterRecord
from stoker.types import AttemptState, JobKind, JobState, job_id

_LIVE_ATTEMPT = (AttemptState.STARTING, AttemptState.RUNNING)


def app_record(store: Store, app_id: str) -> JobRecord:
    """The application record ``app_id``; :class:`ApplicationNotFound` otherwise (also for
    a job's id, naming where to look)."""
    aid = job_id(app_id)
    try:
        app = store.get_job(aid)
    except JobNotFound:
        raise ApplicationNotFound(aid) from None
    if app.kind != JobKind.APPLICATION:
        raise ApplicationNotFound(aid).with_hint(
            f"it is a job: GET /v1/jobs/{aid}, stoker status {aid}"
        )
    return app


def list_page(
    store: Store, state: JobState | None, limit: int, after: str | None
) -> tuple[list[dict[str, Any]], str | None]:
    """One page of :func:`list_applications`, oldest first, after the cursor ``after``; and
    the cursor of the next page, None at the end."""
    apps, nxt = read_page(store, JobKind.APPLICATION, state, limit, after)
    out = [_brief(a, len(store.list_jobs(kind=JobKind.JOB, app_id=a.job_id))) for a in apps]
    return out, nxt


def _brief(a: JobRecord, jobs: int) -> dict[str, Any]:
    return {
        "app_id": a.job_id,
        "state": str(a.state),
        "attempt": a.current_attempt,
        "cluster": a.spec.get("cluster"),
        "jobs": jobs,
        "error": a.last_error,
        "created_at": a.created_at,
        "updated_at": a.updated_at,
    }


def list_applications(store: Store, state: JobState | None = None) -> list[dict[str, Any]]:
    """Every application (only those in ``state``), in brief: state, attempt, cluster
    spec, how many jobs it has made, the last error."""
    apps = store.list_jobs(state, kind=JobKind.APPLICATION)
    counts = Counter(j.app_id for j in store.list_jobs(kind=JobKind.JOB) if j.app_id)
    return [_brief(a, counts.get(a.job_id, 0)) for a in apps]


def application_view(
    store: Store, app_id: str, find_cluster: Callable[[str], ClusterRecord | None]
) -> dict[str, Any]:
    """One application: state, every driver attempt, the live driver (pid, host), its
    cluster (``find_cluster`` looks its record up by name), each of its jobs with its state
    and last epoch, the last error."""
    app = app_record(store, app_id)
    attempts = store.list_attempts(app.job_id)
    jobs = store.list_jobs(kind=JobKind.JOB, app_id=app.job_id)
    # Its driver not judged yet by the current leader (a failover): RECONCILING, as its jobs.
    token = None if app.state.terminal else leader_token(store)
    unjudged = reconciling(app, token)
    return {
        "app_id": app.job_id,
        "state": "RECONCILING" if unjudged else str(app.state),
        "reconciling": unjudged,
        "attempt": app.current_attempt,
        "attempts": [attempt_view(a) for a in attempts],
        "driver": driver_of(attempts, app.current_attempt),
        "cluster": cluster_of(app, find_cluster),
        "standby": standby_view(store, app),  # a warm standby driver, when asked for
        "jobs": [_app_job(store, j, app, token) for j in jobs],
        **rescales.scaling_fields(store, app, app),
        "error": app.last_error,
        "spec": app.spec,
        "failures": app.failures,
        "next_attempt_at": app.next_attempt_at,
        "cancel_requested_at": app.cancel_requested_at,
        "created_at": app.created_at,
        "updated_at": app.updated_at,
    }


def _app_job(
    store: Store, job: JobRecord, app: JobRecord | None = None, token: int | None = None
) -> dict[str, Any]:
    last = store.list_epochs(job.job_id, limit=1)
    state, _paused = control.display_state(store, job)
    if job.state in (JobState.RUNNING, JobState.CANCELING) and app is not None:
        state = "RECONCILING" if reconciling(app, token) else state
    return {
        "job_id": job.job_id,
        "state": state,
        "last_epoch": last[0].epoch if last else None,
        "attempt": job.current_attempt,
        "error": job.last_error,
    }


def cancel_application(
    store: Store, app_id: str, find_cluster: Callable[[str], ClusterRecord | None]
) -> dict[str, Any]:
    """Ask the application to stop: its driver cancels every job gracefully (each epoch
    in flight commits), then ends; the leader kills it after the cancel timeout. An
    application not running yet ends CANCELED at once. Answers the application's view."""
    app = app_record(store, app_id)
    store.request_cancel(app.job_id)
    return application_view(store, app.job_id, find_cluster)


# Views ------------------------------------------------------------------------------------------
def attempt_view(att: AttemptRecord) -> dict[str, Any]:
    """One driver attempt of an application, as the API shows it."""
    return {
        "attempt": att.attempt,
        "state": str(att.state),
        "pid": att.owner.pid,
        "host": att.owner.host,
        "started_at": att.started_at,
        "ended_at": att.ended_at,
        "error": att.error,
    }


def driver_of(attempts: list[AttemptRecord], current: int) -> dict[str, Any] | None:
    """The live driver process (pid, host) of the current attempt, if one runs."""
    for att in attempts:
        if att.attempt == current and att.state in _LIVE_ATTEMPT and att.owner.pid:
            return {"pid": att.owner.pid, "host": att.owner.host}
    return None


def cluster_of(app: JobRecord, lookup: Callable[[str], ClusterRecord | None]) -> dict[str, Any]:
    """Where the application runs: its cluster spec and, for a cluster stoker started (its
    own or a session cluster), the record's state, master URL and number of workers."""
    text = str(app.spec.get("cluster") or "local")
    out: dict[str, Any] = {
        "spec": text,
        "name": None,
        "state": None,
        "master_url": None,
        "workers": None,
    }
    try:
        spec = clusters.parse_cluster(text)
    except InvalidInput:
        return out  # recorded by an older manager, or this host has less memory: as stored
    if spec.kind == "external":
        out["master_url"] = spec.master_url
        return out
    if spec.kind == "local":
        return out
    name = app_cluster_name(app.job_id) if spec.kind == "standalone" else str(spec.name)
    out["name"] = name
    rec = lookup(name)
    if rec is not None:
        out["state"] = str(rec.state)
        out["master_url"] = rec.master_url
        out["workers"] = sum(1 for p in rec.processes if p.role == "worker")
    return out


__all__ = [
    "app_record",
    "application_view",
    "attempt_view",
    "cancel_application",
    "cluster_of",
    "driver_of",
    "list_applications",
]
