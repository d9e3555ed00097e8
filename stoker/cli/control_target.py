"""Where a control command of the CLI goes: a job manager's REST API (``--server``), or the
local job's store (``--state-dir`` / ``--store``: the store is the bus), checked the same way
through :mod:`stoker.manager.control` and sent by ``local:<user>``; and how one event prints
(a line, or its JSON view). The commands are :mod:`stoker.cli.control`'s.
"""

from __future__ import annotations

import getpass
import json
import socket
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import click

from stoker.cli._common import client, open_job_store, use_server
from stoker.errors import ControlConflict, StokerError
from stoker.redact import redact_answer
from stoker.types import job_id as _job_id

_REACHED = {"applied": ("APPLIED", "COMMITTED"), "committed": ("COMMITTED",)}


class _Target:
    """Where the events go: a job manager (REST) or the local job's store."""

    def __init__(
        self, job: str, server: str | None, token: str | None, store: str | None, sd: str | None
    ) -> None:
        self.job = str(_job_id(job))
        self._client: Any = None
        self._store: Any = None
        if server := use_server(server):
            self._client = client(server, token)
        else:
            _jid, self._store = open_job_store(job, store, sd)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
        if self._store is not None:
            self._store.close()

    def send(self, body: Mapping[str, Any], request_id: str | None) -> dict[str, Any]:
        if self._client is not None:
            if body.get("kind") == "savepoint":
                return dict(self._client.savepoint(self.job, body["stop"], body["dir"], request_id))
            return dict(self._client.control(self.job, body, request_id))
        from stoker.manager.control import control_view, submit_control

        ev, _created = submit_control(
            self._store,
            self.job,
            body,
            sender=f"local:{_user()}",
            origin=socket.gethostname(),
            request_id=request_id,
        )
        return dict(redact_answer(control_view(ev)))

    def status(self, control_id: str) -> dict[str, Any]:
        if self._client is not None:
            return dict(self._client.control_status(self.job, control_id))
        from stoker.manager.control import control_view, get_control

        return dict(redact_answer(control_view(get_control(self._store, self.job, control_id))))

    def history(self, limit: int, before: int | None, kind: str | None) -> dict[str, Any]:
        if self._client is not None:
            return dict(self._client.control_history(self.job, limit, before, kind))
        from stoker.manager.control import control_history
        from stoker.types import ControlKind

        page = control_history(
            self._store, self.job, limit, before, None if kind is None else ControlKind(kind)
        )
        return dict(redact_answer(page))

    def config(self) -> dict[str, Any]:
        if self._client is not None:
            return dict(self._client.config(self.job))
        from stoker.manager.control import config_view

        return dict(redact_answer(config_view(self._store, self.job)))

    def job_view(self) -> dict[str, Any]:
        """The job as ``stoker status`` reads it (its spec: the trigger it was started with)."""
        if self._client is not None:
            return dict(self._client.job(self.job))
        from stoker.manager.jobs import job_view

        return dict(redact_answer(job_view(self._store, self.job)))

    def wait(self, control_id: str, until: str, timeout: float) -> dict[str, Any]:
        """Until the event gets to ``until``; REJECTED and timeouts are errors."""
        if self._client is not None:
            try:
                return dict(self._client.wait_control(self.job, control_id, until, timeout))
            except TimeoutError as e:
                raise StokerError(str(e)) from e
        deadline = time.monotonic() + timeout
        while True:
            ev = self.status(control_id)
            if ev["status"] in _REACHED[until]:
                return ev
            if ev["status"] == "REJECTED":
                raise ControlConflict(
                    self.job,
                    f"control event {control_id} ({ev['kind']}) was rejected: {ev['reason']}",
                )
            if time.monotonic() >= deadline:
                raise StokerError(
                    f"control event {control_id} of job {self.job!r} is still {ev['status']} "
                    f"after {timeout:g} s (waiting until {until}; is the job's driver running?)"
                )
            time.sleep(0.1)


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


@contextmanager
def control_target(
    job: str, server: str | None, token: str | None, store: str | None, state_dir: str | None
) -> Iterator[_Target]:
    t = _Target(job, server, token, store, state_dir)
    try:
        yield t
    finally:
        t.close()


def line(v: Mapping[str, Any]) -> str:
    """One event in one line: job, kind, id, version, status, epoch, reason or result."""
    out = f"{v['job_id']}: {v['kind']} {v['control_id']} version {v['version']} {v['status']}"
    if v.get("applied_epoch") is not None:
        out += f" at epoch {v['applied_epoch']}"
    if v.get("status") == "REJECTED" and v.get("reason"):
        out += f": {v['reason']}"
    result = v.get("result") or {}
    path = result.get("path")
    if path:
        out += f", savepoint {path}"
    if v.get("kind") == "scaling" and result.get("scaling"):
        from stoker.scalespec import parse_scaling

        out += f", scaling {parse_scaling(result['scaling']).to_text()}"
        if result.get("owner") and result["owner"] != v["job_id"]:
            out += f" (application {result['owner']})"
    return out


def print_event(v: Mapping[str, Any], as_json: bool) -> None:
    click.echo(json.dumps(v, indent=2, sort_keys=True) if as_json else line(v))
