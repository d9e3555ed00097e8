"""An application's submission: every field checked (its id, program, arguments, Spark
settings, cluster spec, driver resources, scaling) before anything is written, and no user
code run in the manager; :func:`validate_application` gives the
:class:`ApplicationSubmission` whose ``spec()`` the store keeps, :func:`submit_application`
creates the record or settles against the one its id has."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stoker.errors import ClusterNotFound, InvalidInput
from stoker.manager import clusters
from stoker.manager.submissions import SubmitResult, check_standby_master, settle
from stoker.manager.submit import (
    ASSIGNED_STATE_DIR,
    check_scaling,
    scaling_spec_entry,
    validate_submission,
)
from stoker.restart import parse_strategy
from stoker.scalespec import ScalingSpec
from stoker.store import Store
from stoker.store.fleet_records import ClusterRecord
from stoker.types import ClusterKind, ClusterState, JobId, JobKind, SpecKind, job_id

# Spark refuses a driver heap under 450 MiB ("System memory ... must be at least ...").
_MIN_DRIVER_MEMORY_MB = 450
_MASTER_KEYS = ("spark.master", "stoker.master")


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
    standby: bool = False  # a warm standby driver kept beside the running one

    def spec(self) -> dict[str, Any]:
        """The application's spec as stored; two submissions are one application iff their
        specs match (the state folder the manager assigns is no part of it)."""
        out: dict[str, Any] = {
            "kind": SpecKind.APPLICATION,
            "entrypoint": str(self.entrypoint),
            "args": list(self.args),
            "conf": dict(sorted(self.conf.items())),
            "cluster": self.cluster.text(),
            "restart_strategy": parse_strategy(self.restart_strategy).to_dict(),
        }
        scaling = scaling_spec_entry(self.scaling)
        if scaling is not None:
            out["scaling"] = scaling
        if self.standby:  # absent when not asked for: older specs stay equal
            out["standby"] = True
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
    allowed_conf: Sequence[str] = (),
    standby: bool = False,
) -> ApplicationSubmission:
    """Check every field; :class:`InvalidInput` names the first bad one. Nothing is written.

    ``app_id`` defaults to the entrypoint's file name without ``.py``. ``session_cluster``
    looks a session cluster up by name (:class:`ClusterNotFound` if there is none): a
    submission to one must find it RUNNING. ``scaling``: the application's scaling spec
    (:func:`stoker.scalespec.parse_scaling`; None: fixed). ``standby``: a warm standby
    driver, for an application on ``local`` only (:func:`check_app_standby`).
    """
    if app_id is not None:
        app = _app_id(app_id)
    sub = validate_submission(
        entrypoint,
        list(args),
        dict(conf),
        restart_strategy,
        allowed_dirs,
        allowed_conf=allowed_conf,
    )
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
    if standby:
        check_app_standby(spec, merged)
    return ApplicationSubmission(
        app,
        sub.entrypoint,
        spec,
        sub.args,
        merged,
        restart_strategy,
        scaling=check_scaling(scaling),
        standby=bool(standby),
    )


def check_app_standby(spec: clusters.ClusterSpec, conf: dict[str, str]) -> None:
    """An application's warm standby is a second driver with its own Spark: for
    applications on ``local`` (as for a job, ``check_standby_master``). On a cluster it
    would register a second Spark application holding executors the running one needs."""
    if spec.kind != "local":
        raise InvalidInput(
            "standby",
            f"is for applications on cluster local; this one runs on {spec.text()!r}, where "
            "a standby would be a second Spark application holding executors the running "
            "one may need",
        )
    check_standby_master(conf)


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
    if rec.kind != ClusterKind.SESSION:
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


def submit_application(
    store: Store,
    allowed_dirs: list[Path],
    apps_dir: Path,
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
    allowed_conf: Sequence[str] = (),
    standby: bool = False,
) -> SubmitResult:
    """Create the application, or return the live one, as a job's submission does
    (:func:`~stoker.manager.submissions.settle`): the same spec again is a duplicate, another
    spec while live a :class:`JobConflict`, an ended one runs again only with ``restart``. An
    id taken by a job (or a job of another application) is :class:`JobOwnedElsewhere`. Its
    driver is the leader's to start (on its cluster); nothing runs here."""
    sub = validate_application(
        app_id,
        entrypoint,
        list(args or []),
        dict(conf or {}),
        cluster,
        restart_strategy,
        driver_memory,
        driver_cores,
        allowed_dirs,
        store.get_cluster,
        scaling,
        allowed_conf,
        standby,
    )
    spec = sub.spec()
    # The application's folder (its jobs' checkpoints under jobs/<job id>), chosen once
    # by the manager that creates it, as a job's is.
    spec[ASSIGNED_STATE_DIR] = str(apps_dir / sub.app_id)
    app, created = store.create_job(sub.app_id, sub.app_id, spec, {}, kind=JobKind.APPLICATION)
    return settle(store, sub.app_id, spec, app, created, restart)
