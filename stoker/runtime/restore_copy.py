"""Copying a savepoint into a job's state folder (:func:`install`), for
:mod:`stoker.runtime.restore`: the checkpoint cut at the savepoint's epoch, without the old
job's control versions, with a query id of its own; the source logs, a file source's moved to
the folder the pipeline now reads; the note that says which savepoint the folder holds."""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from stoker import checkpoint_layout
from stoker.runtime.savepoint import fsync_tree, input_shape
from stoker.sinks._files_owner import fsync_dir
from stoker.sources._control import CV
from stoker.sources.base import parse_offset_line

if TYPE_CHECKING:
    from stoker.pipeline import Pipeline
    from stoker.sinks.base import SinkOwner
    from stoker.types import Epoch


class Plan(Protocol):
    """What the copy needs of a checked restore (:class:`stoker.runtime.restore.Restore`),
    named here so that this module does not import that one (which imports this one)."""

    @property
    def folder(self) -> Path: ...

    @property
    def manifest(self) -> dict[str, Any]: ...

    @property
    def owner(self) -> SinkOwner: ...

    @property
    def previous(self) -> SinkOwner: ...

    @property
    def epoch(self) -> Epoch | None: ...

    @property
    def fork(self) -> bool: ...

    @property
    def ignore_unreachable(self) -> bool: ...


log = logging.getLogger("stoker.savepoint")

# In a state folder restored from a savepoint: which one (written before the checkpoint is
# put in place, so a checkpoint next to it is that savepoint's, and a rerun resumes it).
RESTORED = "_restored_from.json"
# The manifest's fields a resumed start's lineage check reads (kept in RESTORED).
LINEAGE_KEYS = ("job_id", "uid", "epoch", "store", "sinks", "control_id", "created_at", "state_dir")


def restored_from(root: Path) -> dict[str, Any] | None:
    """The note of the savepoint ``root`` was restored from; None when it has none."""
    try:
        data = json.loads((root / RESTORED).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def install(plan: Plan, root: Path, pipeline: Pipeline) -> None:
    """Copy the savepoint into ``root``; the checkpoint's rename is the last step (a crash
    before it leaves no checkpoint, and the next run restores again)."""
    root.mkdir(parents=True, exist_ok=True)
    tag = uuid.uuid4().hex[:8]
    tmp_cp = root / f".checkpoint.restore-{tag}"
    tmp_src = root / f".sources.restore-{tag}"
    try:
        shutil.copytree(plan.folder / "checkpoint", tmp_cp, symlinks=True)
        checkpoint_layout.trim_logs(tmp_cp, plan.epoch)
        _forget_versions(tmp_cp)
        # The new job's query gets an id of its own (Spark refuses two active queries of one
        # id in a session; listeners and the UI tell the jobs apart).
        checkpoint_layout.set_query_id(tmp_cp, str(uuid.uuid4()))
        sources = root / "sources"
        if sources.exists():
            shutil.rmtree(sources)  # a restore that crashed before its checkpoint was in place
        if (plan.folder / "sources").is_dir():
            shutil.copytree(
                plan.folder / "sources",
                tmp_src,
                symlinks=True,
                ignore=shutil.ignore_patterns("*.lock"),
            )
            _move_file_logs(plan.manifest, pipeline, tmp_src)
            fsync_tree(tmp_src)
            os.rename(tmp_src, sources)
        fsync_tree(tmp_cp)
        note = {
            "path": str(plan.folder),
            "job_id": plan.previous.job_id,
            "uid": plan.owner.uid,
            "epoch": plan.epoch,
            "control_id": plan.manifest.get("control_id"),
            "restored_at": time.time(),
            "fork": plan.fork,
            # Said once, at the restore: the job's later starts (a plain resume takes no
            # --ignore-unreachable-stores) skip the same stores.
            "ignore_unreachable_stores": plan.ignore_unreachable,
            # What the lineage check of a later start needs, should the folder go.
            "manifest": {k: plan.manifest.get(k) for k in LINEAGE_KEYS},
        }
        write_atomic(root / RESTORED, json.dumps(note, indent=2, sort_keys=True).encode())
        os.rename(tmp_cp, root / "checkpoint")  # the restore's commit point
        fsync_dir(root)
    finally:
        shutil.rmtree(tmp_cp, ignore_errors=True)
        shutil.rmtree(tmp_src, ignore_errors=True)


def write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def _forget_versions(checkpoint: Path) -> None:
    """Take the old job's control versions (``cv``) out of the copied offsets.

    They number another job's versions: a source reader of the new job would look them up in
    its own (a pause planned from such a start). An offset without one is what a source
    without a store writes; the new job's first epoch plans its offsets under its own.
    Committed epochs are never run again, so nothing else reads these values.
    """
    for f in checkpoint_layout.batch_files(checkpoint / checkpoint_layout.OFFSETS):
        lines = f.read_text().splitlines()
        changed = False
        for i in range(2, len(lines)):
            off = parse_offset_line(lines[i])
            if off is not None and CV in off:
                del off[CV]
                lines[i] = json.dumps(off)
                changed = True
        if changed:
            checkpoint_layout.drop_log_file(f)
            f.write_text("\n".join(lines))


def _move_file_logs(manifest: dict[str, Any], pipeline: Pipeline, sources: Path) -> None:
    """A file source that now reads another folder: its log's entries (files discovered and
    not yet read, and those kept against duplicates) are rewritten to the same names there."""
    old = {i.get("sid"): i.get("folder") for i in manifest.get("inputs") or []}
    for item in input_shape(pipeline):
        was, now = old.get(item["sid"]), item.get("folder")
        if not was or not now or was == now:
            continue
        path = sources / f"{item['sid']}.files.jsonl"
        if path.exists():
            n = rewrite_log_folder(path, str(was), str(now))
            log.info(
                "source %s: input folder %s -> %s: %d entries of its log rewritten",
                item["sid"],
                was,
                now,
                n,
            )


def rewrite_log_folder(path: Path, was: str, now: str) -> int:
    """Entries of the file log at ``path`` under folder ``was`` move to ``now``; how many.

    A torn last line (no newline: never acknowledged) is kept as it is.
    """
    data = path.read_bytes()
    body, sep, tail = data.rpartition(b"\n")
    lines = body.split(b"\n") if sep else []
    tail = tail if sep else data
    prefix = was.rstrip("/") + "/"
    n = 0
    out = []
    for line in lines:
        try:
            rec = json.loads(line) if line.strip() else None
        except ValueError:
            rec = None
        p = rec.get("path") if isinstance(rec, dict) else None
        if isinstance(rec, dict) and isinstance(p, str) and p.startswith(prefix):
            rec["path"] = now.rstrip("/") + "/" + p[len(prefix) :]
            line = json.dumps(rec).encode()
            n += 1
        out.append(line)
    text = b"".join(line + b"\n" for line in out) + tail
    write_atomic(path, text)
    return n
