"""A client of the job manager's REST API (``stoker server``): public, and what the CLI uses.

Example::

    from stoker.client import Client

    with Client("http://127.0.0.1:8081", token="...") as c:
        jid = c.submit("/srv/apps/clicks.py", conf={"stoker.trigger": "10s"}).job_id
        print(c.job(jid)["state"])

Every method is one REST call. Answers are the JSON the server sends (dicts with the keys the
README's API table lists); refusals become the matching :class:`~stoker.errors.StokerError`:
:class:`~stoker.errors.InvalidInput` (422, naming the field), :class:`~stoker.errors.JobNotFound`
(404), :class:`~stoker.errors.ApplicationNotFound` (404),
:class:`~stoker.errors.JobConflict` / :class:`~stoker.errors.JobTerminal` /
:class:`~stoker.errors.JobOwnedElsewhere` (409),
:class:`~stoker.errors.ClusterNotFound` (404), :class:`~stoker.errors.ClusterError` (409, 500),
:class:`~stoker.errors.ControlNotFound` (404), :class:`~stoker.errors.ControlConflict` (409),
:class:`~stoker.errors.TooManyRequests` (429, with ``retry_after``),
:class:`~stoker.errors.Unauthorized` (401, 403), :class:`~stoker.errors.ManagerUnavailable`
(the server cannot be reached). The token, when given, is sent with every call (reads too).

Control (see the README, "Changing a running job")::

    ev = c.control("clicks", {"kind": "config", "set": {"min_amount": 20.0}})
    c.wait_control("clicks", ev["control_id"], until="committed")
    c.pause("clicks"); c.resume("clicks")
    print(c.wait_control("clicks", c.checkpoint("clicks")["control_id"])["applied_epoch"])

Scaling (see the README, "Scaling")::

    c.submit("/srv/apps/clicks.py", scaling="auto:min=1,max=4")
    c.set_resources("clicks", min_executors=2, max_executors=6)   # new bounds, same mode
    c.scaling("clicks", "reactive")                               # another mode, at once
    for r in c.rescales("clicks")["rescales"]:
        print(r["kind"], r["from_executors"], r["to_executors"], r["reason"])

Applications (a program of several jobs, its driver supervised by the manager) and clusters::

    c.start_cluster("shared", workers=2, memory="1g")
    app = c.submit_application("/srv/apps/etl.py", cluster="shared").app_id
    print([(j["job_id"], j["state"]) for j in c.application(app)["jobs"]])
    c.cancel_application(app)
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import httpx

from stoker.client.answers import raise_refusal
from stoker.client.operations import SLOW, OperationCalls
from stoker.errors import ControlConflict, InvalidInput, ManagerUnavailable

# How far a control event can get, in order: wait_control's ``until``.
_REACHED = {"applied": ("APPLIED", "COMMITTED"), "committed": ("COMMITTED",)}


__all__ = ["Client", "Submitted", "SubmittedApplication"]


@dataclass(frozen=True)
class Submitted:
    """The answer to a submission: ``created``, ``duplicate`` or ``restarted``, and the job."""

    outcome: str
    job: dict[str, Any]

    @property
    def job_id(self) -> str:
        return str(self.job["job_id"])


@dataclass(frozen=True)
class SubmittedApplication:
    """The answer to an application's submission: ``created``, ``duplicate`` or
    ``restarted``, and the application's view."""

    outcome: str
    app: dict[str, Any]

    @property
    def app_id(self) -> str:
        return str(self.app["app_id"])


# The flags a submission carries only when set (specs stored before each existed stay equal).
_FLAGS = ("rewrite_output_after_savepoint", "fork", "ignore_unreachable_stores", "standby")


class Client(OperationCalls):
    """Calls one job manager at ``url``; ``token`` (if any) goes with every call.

    Usable as a context manager; otherwise call :meth:`close` when done.
    """

    def __init__(self, url: str, token: str | None = None, timeout: float = 30.0) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.url = url.rstrip("/")
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def close(self) -> None:
        """Close the HTTP connections."""
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _call(self, method: str, path: str, **kw: Any) -> httpx.Response:
        try:
            resp = self._http.request(method, path, **kw)
        except httpx.HTTPError as e:
            raise ManagerUnavailable(f"cannot reach the job manager at {self.url}: {e}") from e
        if resp.status_code < 400:
            return resp
        raise_refusal(resp, path)

    # jobs ----------------------------------------------------------------------------------
    def submit(
        self,
        entrypoint: str,
        *,
        job_id: str | None = None,
        args: Sequence[str] = (),
        conf: Mapping[str, str] | None = None,
        restart: bool = False,
        restart_strategy: Mapping[str, Any] | None = None,
        config: Mapping[str, Any] | None = None,
        from_savepoint: str | None = None,
        scaling: str | Mapping[str, Any] | None = None,
        rewrite_output_after_savepoint: bool = False,
        standby: bool = False,
        fork: bool = False,
        ignore_unreachable_stores: bool = False,
    ) -> Submitted:
        """``POST /v1/jobs``: run the application file ``entrypoint`` (a path on the manager's
        host) as a job. ``job_id`` defaults to the name of the Pipeline the file defines.
        ``scaling``: ``"fixed"`` (default), ``"reactive"``, ``"auto:min=1,max=4,..."`` or the
        same as an object. ``standby``: keep a warm standby driver for the job. ``fork``,
        ``ignore_unreachable_stores``: how a job starts ``from_savepoint`` (``stoker.run``).

        Submitting a job's id again with the same spec answers ``duplicate``, live or ended
        (safe to retry); an ended job is run again from its checkpoint only with
        ``restart=True`` (``restarted``).
        """
        body: dict[str, Any] = {
            "entrypoint": entrypoint,
            "args": list(args),
            "conf": dict(conf or {}),
            "restart": restart,
        }
        if job_id is not None:
            body["job_id"] = job_id
        if restart_strategy is not None:
            body["restart_strategy"] = dict(restart_strategy)
        if config:
            body["config"] = dict(config)
        if from_savepoint:
            body["from_savepoint"] = from_savepoint
        flags = (rewrite_output_after_savepoint, fork, ignore_unreachable_stores, standby)
        body.update({k: True for k, on in zip(_FLAGS, flags, strict=True) if on})
        if scaling is not None:
            body["scaling"] = scaling if isinstance(scaling, str) else dict(scaling)
        resp = self._call("POST", "/v1/jobs", json=body)
        job = dict(resp.json())
        outcome = (
            "created"
            if resp.status_code == 201
            else "restarted"
            if job.get("restarted")
            else "duplicate"
        )
        return Submitted(outcome, job)

    def jobs(self, state: str | None = None) -> list[dict[str, Any]]:
        """``GET /v1/jobs``: every job (only those in ``state`` when given), page after page."""
        return self._every("/v1/jobs", state)

    def _every(self, path: str, state: str | None) -> list[dict[str, Any]]:
        """Every record of a paged list: its pages, following ``X-Next-Cursor``."""
        out: list[dict[str, Any]] = []
        params: dict[str, str] = {"state": state} if state else {}
        while True:
            resp = self._call("GET", path, params=params)
            out.extend(resp.json())
            cursor = resp.headers.get("X-Next-Cursor")
            if not cursor:
                return out
            params = {**params, "after": cursor}

    def job(self, job_id: str) -> dict[str, Any]:
        """``GET /v1/jobs/{id}``: a job with its current ``attempt`` and ``last_epoch``."""
        return dict(self._call("GET", f"/v1/jobs/{job_id}").json())

    def attempts(self, job_id: str) -> list[dict[str, Any]]:
        """``GET /v1/jobs/{id}/attempts``: every attempt of a job, first to last."""
        return list(self._call("GET", f"/v1/jobs/{job_id}/attempts").json())

    def log(self, job_id: str, attempt: int, tail: int | None = None) -> str:
        """``GET /v1/jobs/{id}/attempts/{n}/log``: a driver's log (its last ``tail`` lines;
        default: its last 1 MiB, from a line start)."""
        params = {"tail": tail} if tail else {}
        return self._call("GET", f"/v1/jobs/{job_id}/attempts/{attempt}/log", params=params).text

    def epochs(
        self, job_id: str, limit: int = 100, before: int | None = None
    ) -> list[dict[str, Any]]:
        """``GET /v1/jobs/{id}/epochs``: a job's most recent epochs, newest first (below
        ``before``: the next page, whose cursor is the oldest epoch of a full page)."""
        params: dict[str, Any] = {"limit": limit}
        if before is not None:
            params["before"] = before
        return list(self._call("GET", f"/v1/jobs/{job_id}/epochs", params=params).json())

    def cancel(self, job_id: str) -> dict[str, Any]:
        """``POST /v1/jobs/{id}/cancel``: stop gracefully (the epoch in flight commits)."""
        return dict(self._call("POST", f"/v1/jobs/{job_id}/cancel").json())

    # upgrades ------------------------------------------------------------------------------
    def upgrade(
        self,
        job_id: str,
        entrypoint: str,
        config: dict[str, Any] | None = None,
        watch_epochs: int | None = None,
        watch_seconds: float | None = None,
    ) -> dict[str, Any]:
        """``POST /v1/jobs/{id}/upgrade``: the upgrade to the new code, PENDING."""
        body: dict[str, Any] = {"entrypoint": entrypoint, "config": dict(config or {})}
        if watch_epochs is not None:
            body["watch_epochs"] = watch_epochs
        if watch_seconds is not None:
            body["watch_seconds"] = watch_seconds
        return dict(self._call("POST", f"/v1/jobs/{job_id}/upgrade", json=body).json())

    def upgrades(self, job_id: str, limit: int = 100) -> list[dict[str, Any]]:
        """``GET /v1/jobs/{id}/upgrades``: the job's upgrades, newest first."""
        return list(
            self._call("GET", f"/v1/jobs/{job_id}/upgrades", params={"limit": limit}).json()
        )

    def get_upgrade(self, job_id: str, upgrade_id: str) -> dict[str, Any]:
        """``GET /v1/jobs/{id}/upgrades/{upgrade_id}``."""
        return dict(self._call("GET", f"/v1/jobs/{job_id}/upgrades/{upgrade_id}").json())

    # scaling -------------------------------------------------------------------------------
    def rescales(self, job_id: str, limit: int = 100, since: float | None = None) -> dict[str, Any]:
        """``GET /v1/jobs/{id}/rescales``: the scaling of the job's owner (the job, or its
        application: ``owner``), its ``executor_target`` and ``resources``, and its
        ``rescales`` newest first. ``job_id`` may also be an application's id."""
        params: dict[str, Any] = {"limit": limit}
        if since is not None:
            params["since"] = since
        return dict(self._call("GET", f"/v1/jobs/{job_id}/rescales", params=params).json())

    def set_resources(
        self,
        job_id: str,
        min_executors: int | None = None,
        max_executors: int | None = None,
    ) -> dict[str, Any]:
        """``PUT /v1/jobs/{id}/resources``: new executor bounds of the owner (None keeps a
        bound; the mode stays); the new ``scaling`` and the ``rescale`` recording it."""
        body = {
            k: v
            for k, v in (("min_executors", min_executors), ("max_executors", max_executors))
            if v is not None
        }
        return dict(self._call("PUT", f"/v1/jobs/{job_id}/resources", json=body).json())

    def repartition_state(
        self, job_id: str, partitions: int, wait: float | None = SLOW
    ) -> dict[str, Any]:
        """``POST /v1/jobs/{id}/state/repartition``: give the stopped job ``partitions`` state
        partitions (offline, on the manager's host), as an operation
        (:meth:`run_operation`); ``{"job_id", "from", "to", ...}``."""
        body = {"partitions": partitions}
        path = f"/v1/jobs/{job_id}/state/repartition"
        return self.run_operation("POST", path, json=body, wait=wait)

    def scaling(
        self, job_id: str, scaling: str | Mapping[str, Any], request_id: str | None = None
    ) -> dict[str, Any]:
        """A control event of kind ``scaling``: the owner's mode and bounds change at once
        (the event answers COMMITTED, its ``result`` with the new spec)."""
        spec = scaling if isinstance(scaling, str) else dict(scaling)
        return self.control(job_id, {"kind": "scaling", "scaling": spec}, request_id)

    # control -------------------------------------------------------------------------------
    def control(
        self, job_id: str, body: Mapping[str, Any], request_id: str | None = None
    ) -> dict[str, Any]:
        """``POST /v1/jobs/{id}/control``: send one control event, e.g. ``{"kind": "config",
        "set": {"min_amount": 20.0}}``. Answers the stored event (``status`` PENDING) once it is
        durable; with ``request_id``, a retry of the same event answers the stored one."""
        payload = dict(body)
        if request_id is not None:
            payload["request_id"] = request_id
        return dict(self._call("POST", f"/v1/jobs/{job_id}/control", json=payload).json())

    def control_status(self, job_id: str, control_id: str) -> dict[str, Any]:
        """``GET /v1/jobs/{id}/control/{control_id}``: one event and how far it got."""
        return dict(self._call("GET", f"/v1/jobs/{job_id}/control/{control_id}").json())

    def control_history(
        self,
        job_id: str,
        limit: int = 50,
        before: int | None = None,
        kind: str | None = None,
        status: str | None = None,
    ) -> dict[str, Any]:
        """``GET /v1/jobs/{id}/control``: ``{"events": [...newest first], "next": ...}``; pass
        ``next`` as ``before`` for the next page."""
        params: dict[str, Any] = {"limit": limit}
        for key, value in (("before", before), ("kind", kind), ("status", status)):
            if value is not None:
                params[key] = value
        return dict(self._call("GET", f"/v1/jobs/{job_id}/control", params=params).json())

    def config(self, job_id: str) -> dict[str, Any]:
        """``GET /v1/jobs/{id}/config``: the effective config and control state, its version."""
        return dict(self._call("GET", f"/v1/jobs/{job_id}/config").json())

    def pause(self, job_id: str, request_id: str | None = None) -> dict[str, Any]:
        """No epoch commits until :meth:`resume`; the job stays live."""
        return self.control(job_id, {"kind": "pause"}, request_id)

    def resume(self, job_id: str, request_id: str | None = None) -> dict[str, Any]:
        """Go on from where the pause stopped."""
        return self.control(job_id, {"kind": "resume"}, request_id)

    def checkpoint(self, job_id: str, request_id: str | None = None) -> dict[str, Any]:
        """Run an epoch now; :meth:`wait_control` until committed gives its ``applied_epoch``."""
        return self.control(job_id, {"kind": "checkpoint"}, request_id)

    def savepoint(
        self,
        job_id: str,
        stop: bool = False,
        dir: str | None = None,
        request_id: str | None = None,
    ) -> dict[str, Any]:
        """``POST /v1/jobs/{id}/savepoints``: write the job's consistent state to ``dir`` (an
        absolute folder on the manager's host; default: in the job's state folder) at the next
        epoch boundary, then stop the job if ``stop``. The folder is in ``result["path"]``
        once the event is COMMITTED."""
        body: dict[str, Any] = {"stop": stop, "dir": dir}
        if request_id is not None:
            body["request_id"] = request_id
        return dict(self._call("POST", f"/v1/jobs/{job_id}/savepoints", json=body).json())

    def savepoints(self, job_id: str, limit: int = 50) -> dict[str, Any]:
        """``GET /v1/jobs/{id}/savepoints``: the job's savepoints, newest first."""
        path = f"/v1/jobs/{job_id}/savepoints"
        return dict(self._call("GET", path, params={"limit": limit}).json())

    def wait_control(
        self,
        job_id: str,
        control_id: str,
        until: str = "applied",
        timeout: float = 60.0,
        interval: float = 0.1,
    ) -> dict[str, Any]:
        """Poll the event until it is APPLIED (``until="applied"``; COMMITTED counts too) or
        COMMITTED; the event's view. A REJECTED event raises
        :class:`~stoker.errors.ControlConflict` with its reason; ``timeout`` seconds without
        getting there raise :class:`TimeoutError` naming the status it has."""
        if until not in _REACHED:
            raise InvalidInput("until", f"expects applied or committed, got {until!r}")
        deadline = time.monotonic() + timeout
        while True:
            ev = self.control_status(job_id, control_id)
            if ev["status"] in _REACHED[until]:
                return ev
            if ev["status"] == "REJECTED":
                raise ControlConflict(
                    job_id,
                    f"control event {control_id} ({ev['kind']}) was rejected: {ev['reason']}",
                )
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"control event {control_id} of job {job_id!r} is still {ev['status']} "
                    f"after {timeout:g} s (waiting until {until})"
                )
            time.sleep(interval)

    # applications --------------------------------------------------------------------------
    def submit_application(
        self,
        entrypoint: str,
        *,
        app_id: str | None = None,
        args: Sequence[str] = (),
        conf: Mapping[str, str] | None = None,
        cluster: str | None = None,
        restart_strategy: Mapping[str, Any] | None = None,
        driver_memory: str | None = None,
        driver_cores: int | None = None,
        restart: bool = False,
        scaling: str | Mapping[str, Any] | None = None,
        standby: bool = False,
    ) -> SubmittedApplication:
        """``POST /v1/applications``: hand the program ``entrypoint`` (a path on the manager's
        host) to the job manager, which runs its driver on ``cluster`` (``local``,
        ``standalone:workers=2,cores=1,memory=1g``, ``spark://host:port`` or a session
        cluster's name) under supervision. ``app_id`` defaults to the file's name.
        ``scaling`` (as for :meth:`submit`) is the application's: its jobs share it.
        ``standby``: keep a warm standby driver for the application (``local`` only)."""
        body: dict[str, Any] = {
            "entrypoint": entrypoint,
            "args": list(args),
            "conf": dict(conf or {}),
            "restart": restart,
        }
        if standby:  # absent when not asked for: servers from before it take the body
            body["standby"] = True
        optional = {
            "app_id": app_id,
            "cluster": cluster,
            "restart_strategy": dict(restart_strategy) if restart_strategy else None,
            "driver_memory": driver_memory,
            "driver_cores": driver_cores,
            "scaling": scaling if scaling is None or isinstance(scaling, str) else dict(scaling),
        }
        body.update({k: v for k, v in optional.items() if v is not None})
        resp = self._call("POST", "/v1/applications", json=body)
        app = dict(resp.json())
        outcome = (
            "created"
            if resp.status_code == 201
            else "restarted"
            if app.get("restarted")
            else "duplicate"
        )
        return SubmittedApplication(outcome, app)

    def applications(self, state: str | None = None) -> list[dict[str, Any]]:
        """``GET /v1/applications``: every application in brief (only those in ``state``)."""
        return self._every("/v1/applications", state)

    def application(self, app_id: str) -> dict[str, Any]:
        """``GET /v1/applications/{id}``: state, attempts, driver, cluster, jobs, error."""
        return dict(self._call("GET", f"/v1/applications/{app_id}").json())

    def cancel_application(self, app_id: str) -> dict[str, Any]:
        """``POST /v1/applications/{id}/cancel``: every job stops gracefully, then the driver."""
        return dict(self._call("POST", f"/v1/applications/{app_id}/cancel").json())

    def stop_application(
        self, app_id: str, savepoint: bool = False, dir: str | None = None
    ) -> dict[str, Any]:
        """``POST /v1/applications/{id}/stop``, as an operation (:meth:`run_operation`): with
        ``savepoint`` each live job writes one first; ``{"app_id", "state", "savepoints"}``
        once the cancel is asked (the application then ends CANCELED)."""
        body: dict[str, Any] = {"savepoint": savepoint, "dir": dir}
        return self.run_operation("POST", f"/v1/applications/{app_id}/stop", json=body)

    def resume_application(self, app_id: str) -> dict[str, Any]:
        """``POST /v1/applications/{id}/resume``: the ended application runs again; its
        CANCELED and FAILED jobs resume from their checkpoints."""
        return dict(self._call("POST", f"/v1/applications/{app_id}/resume").json())

    def application_log(
        self, app_id: str, attempt: int | None = None, tail: int | None = None
    ) -> str:
        """``GET /v1/applications/{id}/log``: a driver attempt's log (default: the current
        attempt), or its last ``tail`` lines."""
        params = {k: v for k, v in (("attempt", attempt), ("tail", tail)) if v is not None}
        return self._call("GET", f"/v1/applications/{app_id}/log", params=params).text

    # the manager ---------------------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        """``GET /healthz``: liveness and leadership (needs no token)."""
        return dict(self._call("GET", "/healthz").json())

    def managers(self) -> dict[str, Any]:
        """``GET /v1/managers``: ``{"leader": {...} | None, "managers": [...]}``, every job
        manager of the store with its ``role`` (``leader`` or ``standby``), oldest first."""
        return dict(self._call("GET", "/v1/managers").json())

    def metrics(self) -> str:
        """``GET /metrics``: Prometheus text."""
        return self._call("GET", "/metrics").text
