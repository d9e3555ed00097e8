"""What the UI's fragments show, read through the job manager as the REST routes read it.

Plain dicts and lists for the templates; no HTML here (the templates escape everything).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from typing import Any, TypeVar

from stoker.errors import ClusterError, JobNotFound
from stoker.manager import JobManager, Supervisor
from stoker.manager import clusters as cluster_ops
from stoker.manager.managers import FRESH_TTLS
from stoker.redact import redact_answer, redact_text, redact_url
from stoker.server.ui.dashboard import state_totals
from stoker.store import EpochRecord
from stoker.types import ClusterKind, ClusterState, JobState

CHART_EPOCHS = 120  # epochs the job page charts and lists (the newest)
TIMELINE_EVENTS = 30
RESCALES_SHOWN = 30
MASTER_TIMEOUT_S = 1.0  # a cluster's master that answers slower is "not reachable" on the page
COMPLETED_APPS_SHOWN = 5  # the newest of the applications a cluster's master lists as ended
STOKER_APP_PREFIX = "stoker:"
T = TypeVar("T")


class Recent:
    """A value computed at most once per ``ttl`` seconds, per key.

    Ten browsers following the jobs table every 2 s then cost the store one read of the
    table per second, not ten: the table is the same for every reader (no action in it).
    """

    def __init__(self, ttl: float = 1.0) -> None:
        self.ttl = ttl
        self._lock = threading.Lock()
        self._kept: dict[Any, tuple[float, Any]] = {}

    def get(self, key: Any, compute: Callable[[], T]) -> T:
        with self._lock:  # one reader computes; the others wait and take its answer
            now = time.monotonic()
            kept = self._kept.get(key)
            if kept is not None and now - kept[0] < self.ttl:
                return kept[1]
            value = compute()
            self._kept[key] = (time.monotonic(), value)
            return value


def _rate(rows: int | None, seconds: float | None) -> float | None:
    if rows is None or not seconds or seconds <= 0:
        return None
    return rows / seconds


def _epoch_gap(newer: EpochRecord, older: EpochRecord | None) -> float | None:
    """Seconds from the older epoch's pin to the newer's: the time its rows arrived in."""
    if older is None:
        return None
    return newer.pinned_at - older.pinned_at


def _executors(view: dict[str, Any]) -> Any:
    """The jobs table's executors cell: their number, or for a driver in local mode (its
    tasks run in the driver, with no executor) "local" and its cores, not a 0 that reads as a
    job with nothing to run on."""
    res = view.get("resources") or {}
    if res.get("local"):
        cores = res.get("cores")
        return f"local, {cores} cores" if isinstance(cores, int) else "local"
    return res.get("executors")


def job_rows(manager: JobManager, state: str | None) -> list[dict[str, Any]]:
    """The jobs table: one row per job (``state`` filters, PAUSED included)."""
    stored_state = JobState.RUNNING if state == "PAUSED" else (JobState(state) if state else None)
    rows = []
    for v in manager.list_views(stored_state):
        if state and v["state"] != state:
            continue  # PAUSED is RUNNING in the store; RUNNING excludes the paused ones
        try:
            eps = manager.epochs(v["job_id"], 2)
        except JobNotFound:
            continue  # deleted meanwhile
        last = eps[0] if eps else None
        prev = eps[1] if len(eps) > 1 else None
        rows.append(
            {
                "job_id": v["job_id"],
                "app_id": v.get("app_id"),
                "state": v["state"],
                "attempt": v["current_attempt"],
                "last_epoch": last.epoch if last else None,
                "rows_per_s": _rate(last.rows_read, _epoch_gap(last, prev)) if last else None,
                "duration_ms": last.duration_ms if last else None,
                "scaling": (v.get("scaling") or {}).get("mode"),
                "executors": _executors(v),
            }
        )
    rows.sort(key=lambda r: r["job_id"])
    return rows


def job_summary(manager: JobManager, jid: str) -> dict[str, Any]:
    """State and attempts (newest first: the last error leads)."""
    view = redact_answer(manager.view(jid))
    attempts = [redact_answer(a.to_dict()) for a in manager.attempts(jid)]
    attempts.reverse()
    errors = [a for a in attempts if a.get("error")]
    resources = view.get("resources") or {}
    return {
        "job": view,
        "attempts": attempts,
        "last_error": errors[0] if errors else None,
        "spark_ui": resources.get("spark_ui"),
    }


def epoch_series(epochs: list[EpochRecord]) -> dict[str, list[Any]]:
    """Columns for the charts, oldest first: time, rows, input and processing rates, Spark's
    whole batch and stoker's steps in it, backlog, executors (JSON null where unknown)."""
    ordered = sorted(epochs, key=lambda e: e.epoch)
    out: dict[str, list[Any]] = {
        k: []
        for k in ("t", "rows", "input_rate", "process_rate", "spark_ms", "write_ms", "commit_ms")
    }
    out["backlog"], out["executors"] = [], []
    prev: EpochRecord | None = None
    for e in ordered:
        out["t"].append(round(e.pinned_at, 3))
        out["rows"].append(e.rows_in)
        # Rates of the rows read (Spark's numInputRows), not written: an aggregation writes
        # a few rows for the many it reads.
        out["input_rate"].append(_round(_rate(e.rows_read, _epoch_gap(e, prev))))
        secs = None if e.duration_ms is None else e.duration_ms / 1000
        out["process_rate"].append(_round(_rate(e.rows_read, secs)))
        out["spark_ms"].append(_round(e.duration_ms))
        # stoker's steps inside Spark's batch, as /metrics splits them: pin to decide (the
        # transform and the sinks' prepare), decide to committed (the sinks' commit).
        out["write_ms"].append(_round(_ms(e.pinned_at, e.decided_at)))
        out["commit_ms"].append(_round(_ms(e.decided_at, e.committed_at)))
        out["backlog"].append(e.backlog)
        out["executors"].append(e.executors)
        prev = e
    return out


def _ms(start: float | None, end: float | None) -> float | None:
    return None if start is None or end is None else (end - start) * 1000


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


def job_epochs(manager: JobManager, jid: str) -> dict[str, Any]:
    """The newest epochs: the table and the charts' columns."""
    epochs = manager.epochs(jid, CHART_EPOCHS)
    rows = []
    for e in epochs:
        row = e.to_dict()
        progress = row.pop("progress") or {}
        row["state_totals"] = state_totals(progress)
        row["offered"] = progress.get("inputRowsPerSecond")
        row["processed"] = progress.get("processedRowsPerSecond")
        rows.append(row)
    return {
        "epochs": rows,
        "series": epoch_series(epochs),
    }


def job_timeline(manager: JobManager, jid: str) -> dict[str, Any]:
    """The newest control events, newest first."""
    page = redact_answer(manager.control_history(jid, TIMELINE_EVENTS))
    return {"events": page.get("events", [])}


@dataclass(frozen=True)
class ConfigField:
    """One declared config key as the config form shows it."""

    key: str
    value: str  # the current value, as JSON text
    kind: str  # its default's JSON type: the form reads numbers and booleans back as such


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "json"


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def job_controls(manager: JobManager, jid: str) -> dict[str, Any]:
    """The config keys the job declared, with their values now, and its control state."""
    cfg = redact_answer(manager.config_view(jid))
    fields = [ConfigField(k, _as_text(v), _json_kind(v)) for k, v in sorted(cfg["config"].items())]
    return {"config": cfg, "fields": fields}


def job_rescales(manager: JobManager, jid: str) -> dict[str, Any]:
    """Scaling now and the rescale history (newest first)."""
    return dict(redact_answer(manager.rescales(jid, RESCALES_SHOWN)))


def attempt_log(manager: JobManager, jid: str, attempt: int) -> str:
    """The last 64 KiB of one attempt's driver log."""
    return redact_text(manager.attempt_log(jid, attempt, 64 * 1024))


def clusters(manager: JobManager) -> list[dict[str, Any]]:
    """Every cluster stoker started, with its workers; a RUNNING one also with what runs on
    it: what its master says (``master``: each worker's use, the applications and their
    cores; read with a short timeout, so a master that hangs costs the page a second and
    shows as ``master_error``) and the running jobs of stoker's applications on it with the
    executors their drivers report (``jobs``)."""
    records = manager.clusters(include_stopped=True)
    running = [c for c in records if c["state"] == ClusterState.RUNNING]
    apps = manager.applications() if running else []
    jobs_on = _jobs_by_cluster(manager, running, apps)
    app_ids = {a["app_id"] for a in apps}
    out = []
    for raw in records:
        c = redact_answer(raw)
        c["worker_procs"] = [p for p in c.get("processes", []) if p.get("role") == "worker"]
        c["master"] = None
        c["master_error"] = None
        c["jobs"] = jobs_on.get(c["name"], [])
        if raw["state"] == ClusterState.RUNNING and raw.get("web_url"):
            try:
                status = cluster_ops.master_status(str(raw["web_url"]), MASTER_TIMEOUT_S)
            except ClusterError:
                c["master_error"] = "master not reachable"
            else:
                master = _master_view(c["worker_procs"], status, app_ids)
                c["master"] = redact_answer(master)
                c["worker_procs"] = redact_answer(c["worker_procs"])  # with the master's entries
        out.append(c)
    return out


def _master_view(
    workers: list[dict[str, Any]], status: dict[str, Any], app_ids: set[str]
) -> dict[str, Any]:
    """The master's ``/json/`` as the page shows it; each of ``workers`` gains ``listed``:
    its entry there (state, cores and memory used), or None. ``app_ids``: stoker's
    applications, linked from the master's applications of theirs."""
    listed = [w for w in status.get("workers") or [] if isinstance(w, dict)]
    for w in workers:
        w["listed"] = _listed_worker(listed, w)
    active = [a for a in status.get("activeapps") or [] if isinstance(a, dict)]
    completed = [a for a in status.get("completedapps") or [] if isinstance(a, dict)]
    completed.sort(key=lambda a: a.get("starttime") or 0, reverse=True)
    return {
        "status": status.get("status"),
        "cores": status.get("cores"),
        "coresused": status.get("coresused"),
        "apps": [_master_app(a, app_ids) for a in active + completed[:COMPLETED_APPS_SHOWN]],
        "completed": len(completed),
    }


def _listed_worker(listed: list[dict[str, Any]], proc: dict[str, Any]) -> dict[str, Any] | None:
    """The master's entry of this worker process: its address and RPC port; else the ALIVE
    one at its address (a worker removed before on the same address stays listed, DEAD)."""
    here = [w for w in listed if w.get("host") == proc.get("address")]
    port = proc.get("port")
    for w in here:
        if port and w.get("port") == port:
            return w
    for w in here:
        if w.get("state") == "ALIVE":
            return w
    return here[-1] if here else None


def _master_app(a: dict[str, Any], app_ids: set[str]) -> dict[str, Any]:
    name = str(a.get("name") or "")
    # An application's driver names its Spark application "stoker:<app id>".
    ours = name[len(STOKER_APP_PREFIX) :] if name.startswith(STOKER_APP_PREFIX) else None
    return {
        "id": a.get("id"),
        "name": name,
        "state": a.get("state"),
        "cores": a.get("cores"),
        "memoryperexecutor": a.get("memoryperexecutor"),
        "stoker_app": ours if ours in app_ids else None,
    }


def _jobs_by_cluster(
    manager: JobManager, running: list[dict[str, Any]], apps: list[dict[str, Any]]
) -> dict[str, list[dict[str, Any]]]:
    """Cluster name -> the RUNNING jobs of the live applications (of ``apps``) on it, with
    the resources their drivers last reported (an application's jobs share its executors)."""
    on: dict[str, str] = {}  # application id -> its cluster
    sessions = set()
    for c in running:
        if c["kind"] == ClusterKind.APP and c.get("owner_app"):
            on[c["owner_app"]] = c["name"]
        elif c["kind"] == ClusterKind.SESSION:
            sessions.add(c["name"])
    for a in apps:
        if a.get("cluster") in sessions and not JobState(a["state"]).terminal:
            on[a["app_id"]] = a["cluster"]
    if not on:
        return {}
    out: dict[str, list[dict[str, Any]]] = {}
    for v in manager.list_views(JobState.RUNNING):
        name = on.get(v.get("app_id") or "")
        if name is None:
            continue
        res = v.get("resources") or {}
        out.setdefault(name, []).append(
            {
                "job_id": v["job_id"],
                "app_id": v["app_id"],
                "state": v["state"],
                "executors": res.get("executors"),
                "cores": res.get("cores"),
                "warming": res.get("warming"),
            }
        )
    for rows in out.values():
        rows.sort(key=lambda r: r["job_id"])
    return out


def manager_panel(manager: JobManager, supervisor: Supervisor | None) -> dict[str, Any]:
    """Who leads, this manager's role, the store, the version; and every manager of the store
    (``managers``: as ``GET /v1/managers`` lists them, leader or standby, this one marked)."""
    store_url = supervisor.cfg.store_url if supervisor is not None else None
    view = manager.managers()  # as GET /v1/managers answers: a lapsed lease names no leader
    listed, lead = view["managers"], view["leader"]
    now = time.time()
    me = supervisor.cfg.holder if supervisor is not None else None
    for row in listed:
        row["this"] = row["holder"] == me
        row["seen_ago"] = max(0.0, round(now - row["seen_at"], 1))
    return {
        "managers": redact_answer(listed),
        "fresh_for": round(FRESH_TTLS * manager.leader_ttl, 1),
        "leader": None
        if lead is None
        else {
            **{k: lead[k] for k in ("holder", "address", "token")},
            "expires_in": round(lead["expires_at"] - now, 1),
        },
        "is_leader": bool(supervisor and supervisor.is_leader),
        "role": "API only (never leads)"
        if supervisor is None
        else ("leader" if supervisor.is_leader else "standby"),
        "store_kind": type(manager.store).__name__,
        "store_url": redact_url(store_url) if store_url else None,
        "version": _version(),
    }


def _version() -> str:
    """The installed stoker's version (the package's metadata, as pip installed it)."""
    try:
        return metadata.version("stoker")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"
