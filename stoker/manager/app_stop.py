"""An application stopped to be resumed later, as a lone job is with
``stoker savepoint JOB --stop`` and ``stoker run --restart``.

- **Stop** (``POST /v1/applications/{id}/stop``, ``stoker app stop APP [--savepoint]``, an
  operation): with savepoints, each live job of the application gets a savepoint control
  event first (written at its next epoch boundary, exactly as ``stoker savepoint`` writes
  one); once every one is written, the application is cancelled gracefully (each job's epoch
  in flight commits, its driver ends, the jobs and the application end CANCELED). A savepoint
  that is refused or not written in time leaves the application running, and the operation
  FAILED naming the job. Without savepoints it is the graceful cancel.
- **Resume** (``POST /v1/applications/{id}/resume``, ``stoker app resume APP``): the ended
  application runs again with its recorded spec (a submission with ``restart``): a new driver
  attempt whose ``main`` takes its CANCELED and FAILED jobs back from their checkpoints
  (FINISHED ones stay finished). The savepoints are there for a fork or an upgrade (``stoker
  run --from-savepoint``), as a lone job's are.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from typing import Any

from stoker.errors import InvalidInput, JobFailed, JobTerminal, StokerError
from stoker.manager.applications import app_record
from stoker.store import ControlEvent, Store
from stoker.types import ControlKind, ControlStatus, JobId, JobKind

SAVEPOINT_WAIT = 600.0  # s for every job's savepoint to be written
POLL = 0.5

Submit = Callable[[JobId, dict[str, Any], str], ControlEvent]
Look = Callable[[JobId, str], ControlEvent]


def check_stop(store: Store, app_id: str) -> tuple[JobId, list[JobId]]:
    """The live application and its live jobs; :class:`JobTerminal` for one that ended."""
    app = app_record(store, app_id)
    if app.state.terminal:
        raise JobTerminal(app.job_id, str(app.state)).with_message(
            f"application {app.job_id!r} has ended ({app.state}): nothing to stop "
            f"(stoker app resume {app.job_id} runs it again)"
        )
    jobs = [
        j.job_id
        for j in store.list_jobs(kind=JobKind.JOB, app_id=app.job_id)
        if not j.state.terminal
    ]
    return app.job_id, jobs


def stop(
    store: Store,
    app: JobId,
    jobs: list[JobId],
    submit: Submit,
    look: Look,
    *,
    savepoint: bool,
    folder: str | None = None,
    wait: float = SAVEPOINT_WAIT,
) -> dict[str, Any]:
    """Savepoints first (when asked), then the graceful cancel; the answer names each job's
    savepoint folder. See the module."""
    written: dict[str, str] = {}
    if savepoint and jobs:
        tag = secrets.token_hex(6)
        body: dict[str, Any] = {"kind": str(ControlKind.SAVEPOINT)}
        if folder is not None:
            body["dir"] = folder
        events = {jid: submit(jid, dict(body), f"app-stop-{tag}-{jid}") for jid in jobs}
        deadline = time.monotonic() + wait
        for jid, ev in events.items():
            while True:
                ev = look(jid, ev.control_id)
                if ev.status == ControlStatus.COMMITTED and (ev.result or {}).get("path"):
                    written[str(jid)] = str((ev.result or {})["path"])
                    break
                if ev.status == ControlStatus.REJECTED:
                    raise JobFailed(
                        f"the savepoint of job {jid} was refused ({ev.reason}): application "
                        f"{app} goes on running"
                    )
                if time.monotonic() > deadline:
                    raise JobFailed(
                        f"the savepoint of job {jid} was not written within {wait:.0f} s (it "
                        f"is {ev.status}): application {app} goes on running"
                    )
                time.sleep(POLL)
    try:
        store.request_cancel(app)
    except StokerError as e:
        raise e.with_hint(f"the savepoints written: {written or 'none'}") from e
    return {
        "app_id": app,
        "state": str(store.get_job(app).state),
        "savepoints": written,
        "resume": f"stoker app resume {app}",
    }


def resume_spec(store: Store, app_id: str) -> dict[str, Any]:
    """The recorded spec an ended application runs again with; InvalidInput while it runs."""
    app = app_record(store, app_id)
    if not app.state.terminal:
        raise InvalidInput(
            "app_id", f"application {app.job_id!r} is {app.state}: only an ended one resumes"
        )
    return dict(app.spec)


__all__ = ["SAVEPOINT_WAIT", "check_stop", "resume_spec", "stop"]
