"""Jobs as the API reads them: one job, a list, its attempts and epochs, and its cancel; and
the bounded reads of many jobs that metrics and the event stream make. A job is never an
application's record: an application's id is refused, naming where to look."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from stoker.errors import JobNotFound
from stoker.manager import control, rescales
from stoker.manager.pages import read_page
from stoker.store import AttemptRecord, ControlEvent, EpochRecord, JobRecord, Store
from stoker.store.fleet_records import RescaleRecord
from stoker.types import JobId, JobKind, JobState, SpecKind, job_id


def job_record(store: Store, jid: str) -> JobRecord:
    """The job ``jid``; an application's id is not a job's (404 naming where to look)."""
    job = store.get_job(job_id(jid))
    if job.kind == JobKind.APPLICATION:
        raise JobNotFound(job.job_id).with_hint(
            f"it is an application: GET /v1/applications/{job.job_id}, "
            f"stoker app status {job.job_id}"
        )
    return job


def list_jobs(store: Store, state: JobState | None = None) -> list[JobRecord]:
    """Jobs (those of applications included), never application records."""
    return store.list_jobs(state, kind=JobKind.JOB)


def list_views(store: Store, state: JobState | None = None) -> list[dict[str, Any]]:
    """Every job (only those in ``state``) as the API lists it: a paused one shows
    ``"state": "PAUSED"`` and ``"paused": true``; a job of an application names it in
    ``app_id`` (null for a job submitted alone)."""
    return _views(store, list_jobs(store, state))


def _views(store: Store, records: Iterable[JobRecord]) -> list[dict[str, Any]]:
    """Jobs as the API lists them, each application they belong to read once, the leader
    once for all."""
    owners: dict[JobId, JobRecord] = {}
    token = leader_token(store)
    out = []
    for j in records:
        if j.app_id is not None and j.app_id not in owners:
            owners[j.app_id] = store.get_job(j.app_id)
        out.append(job_dict(store, j, owners.get(j.app_id) if j.app_id else None, token))
    return out


# The first schema whose leaders judge drivers (migration 0025, Store.mark_judged): under an
# older stoker's leader (a rolling upgrade) nothing would ever be judged, so nothing is shown
# RECONCILING then.
JUDGING_SCHEMA = 25


def leader_token(store: Store) -> int | None:
    """The fencing token of the leader lease as recorded; None when no manager leads (none
    ever did, or the last one resigned) or its stoker does not judge drivers."""
    lease = store.get_leader()
    if lease is None or lease.resigned:
        return None
    heartbeat = next((m for m in store.list_managers(3600.0) if m.holder == lease.holder), None)
    schema = None if heartbeat is None else heartbeat.schema_version
    return lease.token if schema is not None and schema >= JUDGING_SCHEMA else None


# The states of a record whose driver runs, and the records a job manager runs the drivers of.
_DRIVEN = (JobState.RUNNING, JobState.CANCELING)
_MANAGED = (SpecKind.MANAGED, SpecKind.APPLICATION)


def reconciling(record: JobRecord, token: int | None) -> bool:
    """Whether a record whose driver runs has not been judged yet by the leader of ``token``:
    after a manager restart or a failover, the new leader knows a driver once it started it,
    sees its process on its host, or has seen its lease renewed (JobReconciler); until then
    the job is shown RECONCILING, as Flink shows a job after its JobManager's failover. A job
    of an application is judged with its application (its driver)."""
    if token is None or record.state not in _DRIVEN or record.spec.get("kind") not in _MANAGED:
        return False
    return (record.judged_by or 0) < token


def list_page(
    store: Store, state: JobState | None, limit: int, after: str | None
) -> tuple[list[dict[str, Any]], str | None]:
    """One page of the jobs as :func:`list_views` shows them, oldest first, after the cursor
    ``after`` (:mod:`stoker.manager.pages`); and the cursor of the next page, None at the end."""
    rows, nxt = read_page(store, JobKind.JOB, state, limit, after)
    return _views(store, rows), nxt


def job_dict(
    store: Store, job: JobRecord, owner: JobRecord | None = None, token: int | None = -1
) -> dict[str, Any]:
    """A job as the API shows it; its scaling is its owner's (its application's, if
    any): ``scaling``, ``executor_target``, ``resources``, ``max_parallelism``. ``token``: the
    leader's (:func:`leader_token`; -1: read here). A job whose driver the current leader has
    not judged yet shows ``"state": "RECONCILING"`` and ``"reconciling": true``."""
    out = job.to_dict()
    out["state"], out["paused"] = control.display_state(store, job)
    if job.app_id is not None and owner is None and job.state in _DRIVEN:
        owner = store.get_job(job.app_id)
    if token == -1:
        token = leader_token(store) if job.state in _DRIVEN else None
    driven_by = owner if job.app_id is not None and owner is not None else job
    out["reconciling"] = job.state in _DRIVEN and reconciling(driven_by, token)
    if out["reconciling"]:
        out["state"] = "RECONCILING"
    out["app_id"] = job.app_id
    out.update(rescales.scaling_fields(store, job, owner))
    return out


def job_view(store: Store, jid: str) -> dict[str, Any]:
    """Everything about one job: state, attempt (pid, host, lease), last epoch, timings.

    A RUNNING job whose control paused it shows ``"state": "PAUSED"``, ``"paused": true``.
    """
    job = job_record(store, jid)
    out = job_dict(store, job)
    att = store.get_attempt(job.job_id, job.current_attempt) if job.current_attempt else None
    out["attempt"] = att.to_dict() if att else None
    last = store.list_epochs(job.job_id, limit=1)
    out["last_epoch"] = last[0].to_dict() if last else None
    # The trigger in force: a control event's over the one the job was started with (issue
    # 23 item 7: status showed the start's while `stoker config` showed the event's).
    trigger = None if job.state.terminal else store.control_snapshot(job.job_id).trigger_s
    if trigger is None:
        trigger = job.spec.get("trigger_s")
    out["trigger_s"] = trigger
    out["standby"] = standby_view(store, job)
    live = None if job.state.terminal else store.live_upgrade(job.job_id)
    out["upgrade"] = None if live is None else live.to_dict()  # one under way
    return out


def standby_view(store: Store, job: JobRecord) -> dict[str, Any] | None:
    """The job's warm standby driver as status shows it (state, pid, since when ready), or
    None when it has none (not asked for, or between one and the next)."""
    if not job.spec.get("standby"):
        return None
    sb = store.get_standby(job.job_id)
    return {"state": "NONE"} if sb is None else sb.to_dict()


def attempts(store: Store, jid: str) -> list[AttemptRecord]:
    """Every attempt of the job."""
    job = job_record(store, jid)
    return store.list_attempts(job.job_id)


def epochs(
    store: Store, jid: str, limit: int = 100, before: int | None = None
) -> list[EpochRecord]:
    """The job's newest ``limit`` epochs (below ``before``: the next page)."""
    job = job_record(store, jid)
    return store.list_epochs(job.job_id, limit=limit, before=before)


def cancel(store: Store, jid: str) -> JobRecord:
    """Ask the job to stop after its current epoch; the leader enforces a timeout (a job
    of an application: its application's driver stops it)."""
    return store.request_cancel(job_record(store, jid).job_id)


# Observability (metrics, events): bounded reads of many jobs -----------------------------------
def recent_epochs_of(
    store: Store, jids: Iterable[JobId], limit: int
) -> dict[JobId, list[EpochRecord]]:
    """The newest ``limit`` epochs of each job, newest first (a job gone meanwhile: none)."""
    return {j: store.list_epochs(j, limit=limit) for j in jids}


def recent_controls_of(
    store: Store, jids: Iterable[JobId], limit: int
) -> dict[JobId, list[ControlEvent]]:
    """The newest ``limit`` control events of each job, newest first."""
    out: dict[JobId, list[ControlEvent]] = {}
    for j in jids:
        try:
            out[j] = store.list_controls(j, limit=limit)
        except JobNotFound:
            continue  # deleted since the jobs were read
    return out


def recent_rescales_of(
    store: Store, jids: Iterable[JobId], limit: int
) -> dict[JobId, list[RescaleRecord]]:
    """The newest ``limit`` rescales of each owner, newest first."""
    out: dict[JobId, list[RescaleRecord]] = {}
    for j in jids:
        try:
            out[j] = store.list_rescales(j, limit=limit)
        except JobNotFound:
            continue
    return out
