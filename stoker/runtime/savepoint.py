"""Savepoints: a self-contained copy of a job's consistent state, made at an epoch boundary.

Taken by the driver's supervise loop with the query stopped between epochs (the last epoch
committed, Spark's commit log written), so the copy is what a restart would resume from:

    <dir>/_savepoint.json   what the savepoint is: job, uid (sink ownership), last committed
                            epoch, control version, config and control state, pipeline shape
    <dir>/checkpoint/       Spark's checkpoint: offset and commit logs, state store, metadata
    <dir>/sources/          stoker sources' own logs (the file source's log)

It is written under a temporary name and renamed into place: a savepoint folder that exists is
complete. Restoring it into a new (or the same) job is :func:`restore`.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stoker.sinks import descriptor_of
from stoker.types import ControlStatus, Epoch, JobId

if TYPE_CHECKING:
    from stoker.pipeline import Pipeline
    from stoker.sinks.base import SinkOwner
    from stoker.store import Store
    from stoker.store.records import ControlEvent

log = logging.getLogger("stoker.savepoint")

MANIFEST = "_savepoint.json"
FORMAT = 1


def default_dir(root: Path, control_id: str, epoch: Epoch | None) -> Path:
    return root / "savepoints" / f"savepoint-{-1 if epoch is None else epoch}-{control_id}"


def sink_shape(pipeline: Pipeline) -> list[dict[str, Any]]:
    """Which sinks the pipeline writes, without connection details (no secret in a file)."""
    out = []
    for sink in pipeline.sinks:
        d = descriptor_of(sink)
        out.append({"name": sink.name, "kind": d.get("kind")})
    return out


def take(
    store: Store,
    jid: JobId,
    root: Path,
    pipeline: Pipeline,
    owner: SinkOwner,
    event: ControlEvent,
    epoch: Epoch | None,
) -> dict[str, Any]:
    """Write the savepoint asked for by ``event``; record it APPLIED then COMMITTED with its
    path and epoch. The query must be stopped between epochs."""
    t0 = time.monotonic()
    given = event.body.get("dir")
    target = Path(given) if given else default_dir(root, event.control_id, epoch)
    target = target.resolve()
    if target.exists() and any(target.iterdir()):
        raise FileExistsError(f"{target} exists and is not empty")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.tmp-{uuid.uuid4().hex[:8]}"
    snap = store.control_snapshot(jid)
    try:
        checkpoint = root / "checkpoint"
        if checkpoint.exists():
            shutil.copytree(checkpoint, tmp / "checkpoint", symlinks=True)
        else:
            (tmp / "checkpoint").mkdir(parents=True)
        sources = root / "sources"
        if sources.exists():
            shutil.copytree(sources, tmp / "sources", symlinks=True)
        manifest = {
            "format": FORMAT,
            "job_id": str(jid),
            "uid": owner.uid,
            "epoch": epoch,
            "control_version": int(snap.version),
            "config": snap.config,
            "state": {k: v for k, v in snap.state.items() if k != "pipeline"},
            "pipeline": pipeline.spec(),
            "sinks": sink_shape(pipeline),
            "stop": bool(event.body.get("stop")),
            "control_id": event.control_id,
            "created_at": time.time(),
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True))
        _fsync_tree(tmp)
        if target.exists():
            target.rmdir()  # empty (checked above)
        os.rename(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    result: dict[str, Any] = {"path": str(target), "epoch": epoch, "stop": manifest["stop"]}
    store.finish_control(jid, event.control_id, ControlStatus.APPLIED, epoch, result)
    store.finish_control(jid, event.control_id, ControlStatus.COMMITTED, epoch, result)
    log.info(
        "job %s: savepoint at epoch %s written to %s in %.0f ms",
        jid,
        epoch,
        target,
        (time.monotonic() - t0) * 1000,
    )
    return result


def _fsync_tree(folder: Path) -> None:
    for dirpath, _dirs, files in os.walk(folder):
        for name in files:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fd = os.open(dirpath, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def read_manifest(folder: Path) -> dict[str, Any]:
    from stoker.errors import InvalidInput

    path = Path(folder) / MANIFEST
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise InvalidInput(
            "from_savepoint", f"{str(folder)!r} is not a savepoint (no {MANIFEST})"
        ) from None
    except (OSError, ValueError) as e:
        raise InvalidInput("from_savepoint", f"{str(path)!r} cannot be read: {e}") from None
    if data.get("format") != FORMAT:
        raise InvalidInput(
            "from_savepoint", f"savepoint format {data.get('format')!r} is not {FORMAT}"
        )
    return dict(data)
