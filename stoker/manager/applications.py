"""Applications as the job manager shows them: a driver attempt, the live driver, the cluster
an application runs on. A submission's checks are :mod:`.appsubmit`'s; the clusters' records,
:mod:`.cluster_records`; session clusters, :mod:`.sessions`.

An application is a record of the jobs table (``kind='application'``) whose driver runs a
user's program (``stoker.runtime.appdriver``); the jobs the program submits name it as their
``app_id``. No user code runs in the manager: a submission is a file path, arguments, Spark
settings and a cluster spec.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stoker.errors import InvalidInput
from stoker.manager import clusters
from stoker.manager.cluster_records import app_cluster_name
from stoker.store import AttemptRecord, JobRecord
from stoker.store.records import ClusterRecord
from stoker.types import AttemptState

_LIVE_ATTEMPT = (AttemptState.STARTING, AttemptState.RUNNING)


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
    "attempt_view",
    "cluster_of",
    "driver_of",
    "tail_lines",
]
