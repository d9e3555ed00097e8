"""Applications and clusters as the job manager sees them: what a submission of a program is,
how it is checked, and how an application or a cluster is shown.

An application is a record of the jobs table (``kind='application'``) whose driver runs a
user's program (``stoker.runtime.appdriver``); the jobs the program submits name it as their
``app_id``. Everything here is checked before anything is written, and no user code runs in
the manager: a submission is a file path, arguments, Spark settings and a cluster spec.
"""

from __future__ import annotations

import os
import re
import secrets
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stoker.errors import (
    ClusterConflict,
    ClusterError,
    ClusterNotFound,
    InvalidInput,
    JobNotFound,
)
from stoker.manager import clusters
from stoker.manager.cluster_start import start_recorded
from stoker.manager.restart import parse_strategy
from stoker.manager.submit import (
    ASSIGNED_STATE_DIR,
    check_scaling,
    scaling_spec_entry,
    validate_submission,
)
from stoker.scalespec import ScalingSpec
from stoker.store import AttemptRecord, JobRecord, Store
from stoker.store.records import ClusterRecord
from stoker.types import AttemptState, ClusterState, JobId, JobKind, job_id

# A session cluster's name (what a cluster spec takes as a bare name): it becomes a folder
# name and a URL path segment.
CLUSTER_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$"
_CLUSTER_NAME = re.compile(CLUSTER_NAME_PATTERN)
# Any cluster's name in a URL: a session cluster's, or an application's own (``app-<id>``).
CLUSTER_PATH_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
# An application's own cluster is named after it; session clusters may not take such a name.
APP_CLUSTER_PREFIX = "app-"
# Spark refuses a driver heap under 450 MiB ("System memory ... must be at least ...").
_MIN_DRIVER_MEMORY_MB = 450
_MASTER_KEYS = ("spark.master", "stoker.master")
_LIVE_ATTEMPT = (AttemptState.STARTING, AttemptState.RUNNING)


def app_cluster_name(app: str) -> str:
    """The name of the cluster stoker starts for application ``app`` alone."""
    return f"{APP_CLUSTER_PREFIX}{app}"


def check_cluster_name(name: str, field_: str = "name") -> str:
    """A session cluster's name: plain (a folder and a URL segment), not a cluster spec
    keyword, and not ``app-...`` (the names of applications' own clusters)."""
    if not isinstance(name, str) or not _CLUSTER_NAME.fullmatch(name):
        raise InvalidInput(
            field_,
            f"{name!r} is not a valid cluster name: use 1-63 letters, digits, '_' or '-', "
            "starting with a letter or digit",
        )
    if name.startswith(APP_CLUSTER_PREFIX):
        raise InvalidInput(
            field_, f"{name!r}: names starting with {APP_CLUSTER_PREFIX!r} are applications' own"
        )
    try:
        kind = clusters.parse_cluster(name).kind
    except InvalidInput:
        kind = ""
    if kind != "session":
        raise InvalidInput(field_, f"{name!r} is a cluster spec keyword, not a name")
    return name


def cluster_spec_dict(spec: clusters.ClusterSpec) -> dict[str, Any]:
    """What a cluster record keeps of the spec it was started from."""
    return {
        "cluster": spec.text(),
        "workers": spec.workers,
        "cores": spec.cores,
        "memory": spec.memory,
    }


@dataclass(frozen=True)
class ApplicationSubmission:
    """A program to run under supervision, every field checked."""

    app_id: JobId
    entrypoint: Path
    cluster: clusters.ClusterSpec
    args: list[str] = field(default_factory=list)
    conf: dict[str, str] = field(default_factory=dict)
    restart_strategy: dict[str, Any] | None = None
    scaling: ScalingSpec | None = None  # the executors of all its jobs; None: fixed

    def spec(self) -> dict[str, Any]:
        """The application's spec as stored; two submissions are one application iff their
        specs match (the state folder the manager assigns is no part of it)."""
        out: dict[str, Any] = {
            "kind": "application",
            "entrypoint": str(self.entrypoint),
            "args": list(self.args),
            "conf": dict(sorted(self.conf.items())),
            "cluster": self.cluster.text(),
            "restart_strategy": parse_strategy(self.restart_strategy).to_dict(),
        }
        scaling = scaling_spec_entry(self.scaling)
        if scaling is not None:
            out["scaling"] = scaling
        return out


def validate_application(
    app_id: str | None,
    entrypoint: str,
    args: Sequence[str],
    conf: dict[str, str],
    cluster: str | None,
    restart_strategy: dict[str, Any] | None,
    driver_memory: str | None,
    driver_cores: int | None,
    allowed_dirs: list[Path],
    session_cluster: Callable[[str], ClusterRecord],
    scaling: Any = None,
) -> ApplicationSubmission:
    """Check every field; :class:`InvalidInput` names the first bad one. Nothing is written.

    ``app_id`` defaults to the entrypoint's file name without ``.py``. ``session_cluster``
    looks a session cluster up by name (:class:`ClusterNotFound` if there is none): a
    submission to one must find it RUNNING. ``scaling``: the application's scaling spec
    (:func:`stoker.scalespec.parse_scaling`; None: fixed).
    """
    if app_id is not None:
        app = _app_id(app_id)
    sub = validate_submission(entrypoint, list(args), dict(conf), restart_strategy, allowed_dirs)
    if app_id is None:
        stem = sub.entrypoint.stem
        try:
            app = job_id(stem)
        except InvalidInput:
            raise InvalidInput(
                "app_id",
                f"the entrypoint's name {stem!r} is not a valid application id: give app_id",
            ) from None
    spec = clusters.parse_cluster(cluster or "local")
    if spec.kind == "session":
        _check_session_cluster(spec, session_cluster)
    merged = dict(sub.conf)
    _check_master_keys(merged, spec)
    _driver_resources(merged, driver_memory, driver_cores)
    return ApplicationSubmission(
        app,
        sub.entrypoint,
        spec,
        sub.args,
        merged,
        restart_strategy,
        scaling=check_scaling(scaling),
    )


def _app_id(value: str) -> JobId:
    """An application id: a job id's rules (they share one id space), named as ``app_id``."""
    try:
        return job_id(value)
    except InvalidInput as e:
        raise InvalidInput("app_id", e.message.replace("job id", "application id")) from None


def _check_session_cluster(
    spec: clusters.ClusterSpec, lookup: Callable[[str], ClusterRecord]
) -> None:
    name = str(spec.name)
    try:
        rec = lookup(name)
    except ClusterNotFound:
        raise InvalidInput(
            "cluster",
            f"{name!r} is no cluster spec and no session cluster: use local, "
            "standalone:workers=N,cores=N,memory=M, spark://host:port, or the name of a "
            f"running session cluster (stoker cluster start --name {name})",
        ) from None
    if rec.kind != "session":
        raise InvalidInput(
            "cluster", f"cluster {name!r} is application {rec.owner_app}'s own: not shared"
        )
    if rec.state != ClusterState.RUNNING:
        raise InvalidInput("cluster", f"session cluster {name!r} is {rec.state}, not RUNNING")


def _check_master_keys(conf: dict[str, str], spec: clusters.ClusterSpec) -> None:
    """The cluster decides where the driver's Spark runs; only ``local[...]`` may be tuned
    by hand (``local[2]``) for an application on ``local``."""
    for key in _MASTER_KEYS:
        value = conf.get(key)
        if value is None:
            continue
        if spec.kind != "local" or not value.startswith("local"):
            raise InvalidInput(
                f"conf.{key}",
                "is set by the application's cluster: give cluster (local, "
                "standalone:..., spark://host:port or a session cluster's name) instead",
            )


def _driver_resources(
    conf: dict[str, str], driver_memory: str | None, driver_cores: int | None
) -> None:
    """``driver_memory`` / ``driver_cores`` become ``spark.driver.memory`` / ``.cores`` in
    ``conf`` (in place), checked against this host; the same keys given in conf are checked
    too. Both given and different: refused, naming the field."""
    for fld, key, value in (
        ("driver_memory", "spark.driver.memory", driver_memory),
        ("driver_cores", "spark.driver.cores", driver_cores),
    ):
        given = conf.get(key)
        if value is not None and given is not None and str(value).strip() != given.strip():
            raise InvalidInput(fld, f"{value!r} conflicts with conf {key}={given!r}")
    if driver_memory is not None:
        conf["spark.driver.memory"] = clusters.normalize_memory(driver_memory, "driver_memory")
    if driver_cores is not None:
        if isinstance(driver_cores, bool) or not isinstance(driver_cores, int):
            raise InvalidInput("driver_cores", f"expects a whole number >= 1, got {driver_cores!r}")
        conf["spark.driver.cores"] = str(driver_cores)
    if "spark.driver.memory" in conf:
        fld = "driver_memory" if driver_memory is not None else "conf.spark.driver.memory"
        size = clusters.memory_mb(conf["spark.driver.memory"], fld)
        if size < _MIN_DRIVER_MEMORY_MB:
            raise InvalidInput(fld, f"{conf['spark.driver.memory']}: a Spark driver needs 450m")
        total = clusters.machine_memory_mb()
        if size > total:
            raise InvalidInput(
                fld, f"{conf['spark.driver.memory']} is above this machine's memory ({total} MiB)"
            )
    if "spark.driver.cores" in conf:
        fld = "driver_cores" if driver_cores is not None else "conf.spark.driver.cores"
        text = conf["spark.driver.cores"].strip()
        if not text.isdigit() or int(text) < 1:
            raise InvalidInput(fld, f"expects a whole number >= 1, got {text!r}")
        cpus = os.cpu_count() or 1
        if int(text) > cpus:
            raise InvalidInput(fld, f"{text} is more than this host's {cpus} cores")


# Session clusters ------------------------------------------------------------------------------
class SessionClusters:
    """Session clusters (Spark standalone, on this host) over the store: started, changed and
    stopped synchronously, for the REST API. Changes of one cluster's workers are made one at
    a time by this manager: two add-worker calls at once would pick the same loopback
    address. Applications' own clusters are the leader's (``cluster_keeper.py``); here they are
    only listed and looked at."""

    def __init__(self, store: Store, folder: Path) -> None:
        self.store = store
        self.folder = folder  # each cluster's logs and work folders: folder/<name>
        self._lock = threading.Lock()

    def find(self, name: str) -> ClusterRecord | None:
        """The cluster's record, or None if no cluster has that name."""
        try:
            return self.store.get_cluster(name)
        except ClusterNotFound:
            return None

    def start(
        self, name: str | None = None, workers: int = 2, cores: int = 1, memory: str = "1g"
    ) -> dict[str, Any]:
        """Start a Spark standalone cluster that outlives applications (synchronous: it
        answers once every worker is ALIVE). Recorded STARTING first, each process as it
        starts, then RUNNING; a failure leaves it FAILED with the error (what was started is
        stopped again) and raises :class:`ClusterError`. A name in use by a cluster that is
        not STOPPED or FAILED is :class:`ClusterConflict`."""
        name = check_cluster_name(name if name is not None else f"cluster-{secrets.token_hex(3)}")
        spec = _session_spec(workers, cores, memory)
        with self._lock:
            old = self.find(name)
            if old is not None and old.state not in (ClusterState.STOPPED, ClusterState.FAILED):
                raise ClusterConflict(
                    f"cluster {name!r} exists ({old.state}): stop it first "
                    f"(stoker cluster stop {name}) or choose another name"
                )
            if old is not None:
                self._stop_recorded(old)
                self.store.delete_cluster(name)
            rec, created = self.store.create_cluster(name, "session", cluster_spec_dict(spec))
            if not created:
                raise ClusterConflict(f"cluster {name!r} was just created by another call")
        rec = start_recorded(self.store, name, spec, self.folder / name)
        return cluster_view(rec)

    def views(self, include_stopped: bool = False) -> list[dict[str, Any]]:
        """Every cluster stoker started (session clusters and applications' own)."""
        return [cluster_view(c) for c in self.store.list_clusters(include_stopped)]

    def view(self, name: str) -> dict[str, Any]:
        """One cluster; while RUNNING with what its master says now (``status``: workers,
        cores used, applications), and the live applications that use it (``used_by``)."""
        rec = self.store.get_cluster(name)
        out = cluster_view(rec)
        out["status"] = None
        if rec.state == ClusterState.RUNNING and rec.web_url:
            try:
                out["status"] = clusters.master_status(rec.web_url)
            except (ClusterError, OSError, ValueError) as e:
                out["status"] = {"error": f"the master does not answer: {e}"}
        out["used_by"] = self._apps_on(rec)
        return out

    def _apps_on(self, rec: ClusterRecord) -> list[str]:
        """The live applications that run on the cluster."""
        if rec.kind == "app":
            owner = rec.owner_app
            return [owner] if owner and self._live_app(owner) else []
        return [
            a.job_id
            for a in self.store.list_jobs(kind=JobKind.APPLICATION)
            if not a.state.terminal and a.spec.get("cluster") == rec.name
        ]

    def _live_app(self, app_id: str) -> bool:
        try:
            return not self.store.get_job(JobId(app_id)).state.terminal
        except JobNotFound:
            return False

    def _running_cluster(self, name: str) -> ClusterRecord:
        rec = self.store.get_cluster(name)
        if rec.state != ClusterState.RUNNING or not rec.master_url or not rec.web_url:
            raise ClusterConflict(
                f"cluster {name!r} is {rec.state}: workers change on a RUNNING one"
            )
        return rec

    def add_worker(
        self, name: str, cores: int | None = None, memory: str | None = None
    ) -> dict[str, Any]:
        """Start one more worker (default: the cluster's cores and memory per worker) on the
        next free loopback address; answers once the master lists it ALIVE. Running
        applications get executors on it (those without ``spark.cores.max``)."""
        with self._lock, clusters.cluster_lock(name):
            rec = self._running_cluster(name)
            c = int(rec.spec.get("cores", 1)) if cores is None else cores
            m = str(rec.spec.get("memory", "1g")) if memory is None else memory
            _session_spec(1, c, m)  # the same checks as a new cluster's workers
            before = list(rec.processes)

            def on_process(info: dict[str, Any]) -> None:
                # Recorded before the wait: a manager that dies now leaves it findable.
                self.store.update_cluster(name, processes=[*before, dict(info)])

            try:
                info = clusters.add_worker(
                    str(rec.master_url),
                    str(rec.web_url),
                    before,
                    self.folder / name,
                    c,
                    m,
                    on_process=on_process,
                )
            except Exception:
                self.store.update_cluster(name, processes=before)  # it was stopped again
                raise
            rec = self.store.update_cluster(name, processes=[*before, info])
        return {"worker": dict(info), "cluster": cluster_view(rec)}

    def remove_worker(self, name: str, worker: str, graceful: bool = False) -> dict[str, Any]:
        """Stop one worker (its ``id`` or address): ``graceful`` decommissions it through the
        master (its executors' blocks move first, running tasks finish) and waits until it
        left; otherwise its process group is killed."""
        with self._lock, clusters.cluster_lock(name):
            rec = self._running_cluster(name)
            remaining = clusters.remove_worker(str(rec.web_url), rec.processes, worker, graceful)
            rec = self.store.update_cluster(name, processes=remaining)
        return cluster_view(rec)

    def stop(self, name: str) -> dict[str, Any]:
        """Stop a session cluster: STOPPING, every recorded process stopped, STOPPED. Live
        applications on it are not stopped (their executors go; each application's restart
        strategy decides): the answer names them in ``used_by``. An application's own
        cluster is stopped by the leader when that application ends (409 here)."""
        rec = self.store.get_cluster(name)
        if rec.kind == "app":
            raise ClusterConflict(
                f"cluster {name!r} is application {rec.owner_app}'s own: it is stopped when the "
                f"application ends (stoker app cancel {rec.owner_app})"
            )
        used_by = self._apps_on(rec)
        with self._lock:
            rec = self._stop_recorded(self.store.get_cluster(name))
        out = cluster_view(rec)
        out["used_by"] = used_by
        return out

    def _stop_recorded(self, rec: ClusterRecord) -> ClusterRecord:
        """STOPPING, stop every recorded process (only those still provably the recorded
        ones), STOPPED. A stop that fails leaves the cluster FAILED with the error."""
        if rec.state == ClusterState.STOPPED:
            return rec
        if rec.state != ClusterState.STOPPING:
            rec = self.store.update_cluster(rec.name, state=ClusterState.STOPPING)
        try:
            clusters.stop_processes(rec.processes)
        except ClusterError as e:
            self.store.update_cluster(rec.name, state=ClusterState.FAILED, error=str(e))
            raise
        return self.store.update_cluster(rec.name, state=ClusterState.STOPPED)


def _session_spec(workers: int, cores: int, memory: str) -> clusters.ClusterSpec:
    """A standalone cluster's spec from separate fields, each refusal naming its field."""
    for fld, value in (("workers", workers), ("cores", cores)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidInput(fld, f"expects a whole number >= 1, got {value!r}")
    clusters.normalize_memory(memory, "memory")
    try:
        return clusters.parse_cluster(f"standalone:workers={workers},cores={cores},memory={memory}")
    except InvalidInput as e:
        fld = next((k for k in ("memory", "cores", "workers") if k in e.message), "cluster")
        raise InvalidInput(fld, e.message) from None


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
        out["workers"] = sum(1 for p in rec.processes if p.get("role") == "worker")
    return out


def cluster_view(rec: ClusterRecord) -> dict[str, Any]:
    """A cluster record as the API shows it."""
    return {
        "name": rec.name,
        "kind": rec.kind,
        "owner_app": rec.owner_app,
        "spec": dict(rec.spec),
        "state": str(rec.state),
        "master_url": rec.master_url,
        "web_url": rec.web_url,
        "workers": sum(1 for p in rec.processes if p.get("role") == "worker"),
        "processes": [dict(p) for p in rec.processes],
        "error": rec.error,
        "created_at": rec.created_at,
        "updated_at": rec.updated_at,
    }


def tail_lines(path: Path, lines: int | None) -> str:
    """The file's text, or only its last ``lines`` lines; read from the end, so a long log
    costs what is shown."""
    if not path.exists():
        return ""
    with open(path, "rb") as fh:
        if lines is None:
            return fh.read().decode("utf-8", errors="replace")
        fh.seek(0, os.SEEK_END)
        end = fh.tell()
        pos, data = end, b""
        # One more newline than asked for: the file's own last newline ends the last line.
        while pos > 0 and data.count(b"\n") <= lines:
            step = min(64 * 1024, pos)
            pos -= step
            fh.seek(pos)
            data = fh.read(step) + data
    kept = data.splitlines(keepends=True)[-lines:] if lines > 0 else []
    return b"".join(kept).decode("utf-8", errors="replace")


__all__ = [
    "APP_CLUSTER_PREFIX",
    "ASSIGNED_STATE_DIR",
    "CLUSTER_NAME_PATTERN",
    "CLUSTER_PATH_PATTERN",
    "ApplicationSubmission",
    "ClusterConflict",
    "SessionClusters",
    "app_cluster_name",
    "attempt_view",
    "check_cluster_name",
    "cluster_of",
    "cluster_spec_dict",
    "cluster_view",
    "driver_of",
    "tail_lines",
    "validate_application",
]
