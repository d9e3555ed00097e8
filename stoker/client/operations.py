"""The long calls of the job manager's API (operations: a session cluster's start, a worker
added or removed, a state repartition) and the calls on session clusters, as
:class:`~stoker.client.Client` makes them."""

from __future__ import annotations

import time
import uuid
from typing import Any

import httpx

from stoker.client.answers import raise_operation_error
from stoker.errors import ManagerUnavailable

# Calls that start or stop JVMs answer when they are done: tens of seconds, minutes on a
# loaded host.
SLOW = 600.0
# Long calls answer 202 with an operation, polled this often until it ends (or the wait's
# bound); the call itself is sent again, with its Idempotency-Key, when the manager could
# not be reached (a retry then gets the operation the first send started, never a second).
_POLL = 0.5
_SENDS = 3


class OperationCalls:
    """The long calls and the session clusters' calls of :class:`~stoker.client.Client`."""

    url: str

    def _call(self, method: str, path: str, **kw: Any) -> httpx.Response:
        raise NotImplementedError  # Client's

    # long calls: operations ------------------------------------------------------------------
    def operation(self, op_id: str) -> dict[str, Any]:
        """``GET /v1/operations/{id}``: a long call's operation, RUNNING, SUCCEEDED (its
        ``result``) or FAILED (its ``error`` and the ``status`` the call would have had)."""
        return dict(self._call("GET", f"/v1/operations/{op_id}").json())

    def run_operation(
        self, method: str, path: str, *, wait: float | None = SLOW, **kw: Any
    ) -> dict[str, Any]:
        """Send a long call (with a new Idempotency-Key, sent again with the same key when the
        manager cannot be reached) and, unless ``wait`` is None, poll its operation until it
        ends: the call's ``result``, or the error the call stands for. ``wait=None``: the
        operation as the call answered it."""
        headers = {"Idempotency-Key": f"stoker-{uuid.uuid4().hex}"}
        for send in range(_SENDS):
            try:
                op = dict(self._call(method, path, headers=headers, **kw).json())
                break
            except ManagerUnavailable:
                if send == _SENDS - 1:
                    raise
                time.sleep(1.0)
        if wait is None:
            return op
        deadline = time.monotonic() + wait
        while op["state"] == "RUNNING":
            if time.monotonic() > deadline:
                raise ManagerUnavailable(
                    f"operation {op['operation_id']} still runs after {wait:.0f} s: see "
                    f"{self.url}{op['url']}"
                )
            time.sleep(_POLL)
            op = self.operation(str(op["operation_id"]))
        if op["state"] == "FAILED":
            raise_operation_error(op, path)
        return dict(op["result"] or {})

    # clusters ------------------------------------------------------------------------------
    def start_cluster(
        self,
        name: str | None = None,
        workers: int = 2,
        cores: int = 1,
        memory: str = "1g",
        wait: float | None = SLOW,
    ) -> dict[str, Any]:
        """``POST /v1/clusters``: start a session cluster, as an operation
        (:meth:`run_operation`); the cluster once it is RUNNING."""
        body: dict[str, Any] = {"workers": workers, "cores": cores, "memory": memory}
        if name is not None:
            body["name"] = name
        return self.run_operation("POST", "/v1/clusters", json=body, wait=wait)

    def clusters(self, include_stopped: bool = False) -> list[dict[str, Any]]:
        """``GET /v1/clusters``: every cluster stoker started (STOPPED ones if asked)."""
        params = {"include_stopped": "true"} if include_stopped else {}
        return list(self._call("GET", "/v1/clusters", params=params).json())

    def cluster(self, name: str) -> dict[str, Any]:
        """``GET /v1/clusters/{name}``: the record, the master's ``status``, ``used_by``."""
        return dict(self._call("GET", f"/v1/clusters/{name}").json())

    def add_worker(
        self, name: str, cores: int | None = None, memory: str | None = None
    ) -> dict[str, Any]:
        """``POST /v1/clusters/{name}/workers``, as an operation (:meth:`run_operation`):
        ``{"worker": {...}, "cluster": {...}}``."""
        body = {k: v for k, v in (("cores", cores), ("memory", memory)) if v is not None}
        return self.run_operation("POST", f"/v1/clusters/{name}/workers", json=body)

    def remove_worker(self, name: str, worker: str, graceful: bool = False) -> dict[str, Any]:
        """``DELETE /v1/clusters/{name}/workers/{worker}``, as an operation
        (:meth:`run_operation`): the cluster afterwards."""
        params = {"graceful": "true" if graceful else "false"}
        path = f"/v1/clusters/{name}/workers/{worker}"
        return self.run_operation("DELETE", path, params=params)

    def stop_cluster(self, name: str, force: bool = False) -> dict[str, Any]:
        """``POST /v1/clusters/{name}/stop``: the cluster STOPPED. One that live applications
        use is refused (:class:`~stoker.errors.ClusterConflict`) unless ``force``; ``used_by``
        then names them."""
        params = {"force": "true"} if force else None
        resp = self._call("POST", f"/v1/clusters/{name}/stop", params=params, timeout=SLOW)
        return dict(resp.json())
