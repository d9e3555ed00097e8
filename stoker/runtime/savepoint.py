"""Savepoints: a self-contained copy of a job's consistent state, made at an epoch boundary.

Taken by the driver's supervise loop with the query stopped between epochs (the last epoch
committed, Spark's commit log written), so the copy is what a restart would resume from:

    <dir>/_savepoint.json   what the savepoint is: job, uid (sink ownership), last committed
                            epoch, control version, config and control state, pipeline shape
    <dir>/checkpoint/       Spark's checkpoint: offset and commit logs, state store, metadata,
                            cut at the savepoint's epoch (no offsets of an epoch not committed)
    <dir>/sources/          stoker sources' own logs (the file source's log)

It is written under a temporary name and renamed into place: a savepoint folder that exists is
complete. Starting a job (a new id, or the same) from it is :mod:`stoker.runtime.restore`.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stoker import checkpoint_layout
from stoker.errors import InvalidInput
from stoker.redact import redact_text
from stoker.sinks import descriptor_of
from stoker.types import ControlStatus, Epoch, EpochState, JobId

if TYPE_CHECKING:
    from stoker.pipeline import Pipeline
    from stoker.sinks.base import SinkOwner
    from stoker.store import Store
    from stoker.store.records import ControlEvent

log = logging.getLogger("stoker.savepoint")

FIELD = "from_savepoint"  # what a refused savepoint is named as, in every error

MANIFEST = "_savepoint.json"
FORMAT = 1


def default_dir(root: Path, control_id: str, epoch: Epoch | None) -> Path:
    """Where a savepoint goes when its event names no folder: under the job's state folder."""
    return root / "savepoints" / f"savepoint-{-1 if epoch is None else epoch}-{control_id}"


def sink_shape(pipeline: Pipeline) -> list[dict[str, Any]]:
    """Which sinks the pipeline writes, without connection details (no secret in a file)."""
    out = []
    for sink in pipeline.sinks:
        d = descriptor_of(sink)
        out.append({"name": sink.name, "kind": d.get("kind")})
    return out


def source_kind(describe: str) -> str:
    """A source's kind from its description: ``generator``, ``files``, ``spark``."""
    return describe.split("(", 1)[0].strip()


def input_shape(pipeline: Pipeline) -> list[dict[str, Any]]:
    """Each source: its id, kind, description and (a file source) its folder, resolved."""
    out = []
    for i, inp in enumerate(pipeline.inputs):
        text = inp.source.describe()
        item: dict[str, Any] = {"sid": f"s{i}", "kind": source_kind(text), "describe": text}
        if item["kind"] == "files" and isinstance(getattr(inp.source, "path", None), str):
            item["folder"] = str(Path(inp.source.path).resolve())  # type: ignore[attr-defined]
        out.append(item)
    return out


# taking ---------------------------------------------------------------------------------------
def take(
    store: Store,
    jid: JobId,
    root: Path,
    pipeline: Pipeline,
    owner: SinkOwner,
    event: ControlEvent,
    epoch: Epoch | None,
    *,
    spec: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Write the savepoint asked for by ``event``; record it APPLIED then COMMITTED with its
    path and epoch. The query must be stopped between epochs. ``spec``: the pipeline's
    (``Pipeline.spec()``), when the caller has it already."""
    t0 = time.monotonic()
    _check_store_at(store, jid, epoch)
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
            # An epoch Spark planned but the stop kept from running is no part of the state.
            checkpoint_layout.trim_logs(tmp / "checkpoint", epoch)
        else:
            (tmp / "checkpoint").mkdir(parents=True)
        sources = root / "sources"
        if sources.exists():
            shutil.copytree(
                sources, tmp / "sources", symlinks=True, ignore=shutil.ignore_patterns("*.lock")
            )
        # Hidden as any shown URL is (a password in the user part or in the query): the
        # restore reads that store through the new job's URL or one the operator gives.
        store_url = redact_text(store.url)
        manifest = {
            "format": FORMAT,
            "job_id": str(jid),
            "uid": owner.uid,
            "epoch": epoch,
            "control_version": int(snap.version),
            "config": snap.config,
            "state": {k: v for k, v in snap.state.items() if k != "pipeline"},
            "pipeline": dict(spec) if spec is not None else pipeline.spec(),
            "inputs": input_shape(pipeline),
            "sinks": sink_shape(pipeline),
            "store": store_url,  # where to look whether the job has ended (password hidden)
            "state_dir": str(root),
            "stop": bool(event.body.get("stop")),
            "control_id": event.control_id,
            "created_at": time.time(),
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True))
        fsync_tree(tmp)
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


def _check_store_at(store: Store, jid: JobId, epoch: Epoch | None) -> None:
    """The store agrees that ``epoch`` (Spark's last commit) is the last epoch with output.

    An epoch past it that the store decided (Spark's commit log not written when the query
    stopped) would be run again by a job restored from the copy: its output twice.
    """
    newest = store.list_epochs(jid, limit=1)
    if not newest:
        return
    rec = newest[0]
    beyond = epoch is None or rec.epoch > epoch
    if beyond and rec.state != EpochState.PINNED:
        raise RuntimeError(
            f"epoch {rec.epoch} is {rec.state} in the store but Spark's commit log ends at "
            f"{epoch}: the checkpoint is not at an epoch boundary; ask again"
        )


def fsync_tree(folder: Path) -> None:
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


# reading --------------------------------------------------------------------------------------
def read_manifest(folder: Path) -> dict[str, Any]:
    """The savepoint's manifest; :class:`InvalidInput` (``from_savepoint``) when ``folder`` is
    not a savepoint or cannot be read."""
    path = Path(folder) / MANIFEST
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise InvalidInput(FIELD, f"{str(folder)!r} is not a savepoint (no {MANIFEST})") from None
    except (OSError, ValueError) as e:
        raise InvalidInput(FIELD, f"{str(path)!r} cannot be read: {e}") from None
    if not isinstance(data, dict):
        raise InvalidInput(FIELD, f"{str(path)!r} is not a savepoint manifest (not an object)")
    if data.get("format") != FORMAT:
        raise InvalidInput(FIELD, f"savepoint format {data.get('format')!r} is not {FORMAT}")
    missing = [k for k in ("job_id", "uid", "epoch", "sinks", "pipeline") if k not in data]
    if missing:
        raise InvalidInput(FIELD, f"{str(path)!r} lacks {', '.join(missing)}: not a savepoint")
    epoch = data["epoch"]
    if epoch is not None and (isinstance(epoch, bool) or not isinstance(epoch, int)):
        raise InvalidInput(FIELD, f"{str(path)!r}: epoch {epoch!r} is not a number")
    if not (Path(folder) / "checkpoint").is_dir():
        raise InvalidInput(FIELD, f"{str(folder)!r} is not a complete savepoint (no checkpoint/)")
    return dict(data)


__all__ = ["FORMAT", "MANIFEST", "input_shape", "read_manifest", "sink_shape", "take"]
