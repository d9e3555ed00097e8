"""Starting a job from a savepoint (:mod:`stoker.runtime.savepoint`): the same id or a new one,
e.g. an upgraded version of the code, exactly once across the switch.

:func:`check` refuses, before Spark starts and before anything is written:

- a folder that is not a savepoint; a state folder that has a checkpoint already (unless it
  was restored from this very savepoint: then the job resumes, see below);
- a pipeline whose sources (count and kind, in order) or sinks (names and kinds) are not the
  savepoint's (a change of a stateful query that Spark refuses is Spark's error when the query
  starts);
- a savepoint whose job has not ended (``savepoint --stop`` ends it) or whose outputs are
  not resolved yet, unless it is this job; a job on a store that cannot be looked at;
- a sink that already holds epochs after the savepoint's (its job went on after it), unless
  the user asks for their rows to be written again (``rewrite``; never a files sink).

The checks of the old job and the outputs are :mod:`stoker.runtime.restore_checks`.

:func:`restore` then copies the checkpoint and the source logs into the state folder, and hands
the old job's outputs over: the new job adopts the savepoint's uid, and the owner markers of
its files sinks name the new job. :func:`stoker.runtime.restore_control.carry_control` gives
the new job the savepoint's
control state (config overrides, rate limits, log levels, trigger; not a pause) as control
events of its own, applied at its first epoch. The first epoch is the savepoint's + 1: Spark's
batch ids go on from the copied checkpoint.

Nothing in the copy names the old state folder: Spark's checkpoint holds no path (stoker's
sources are Python data sources whose offsets are their own JSON; Spark's own sources keep
input paths, not state paths, under ``checkpoint/sources``), and the source logs are found by
the options the new job gives its sources. What is fixed up: the offsets lose the old job's
control versions (``cv``), the query gets an id of its own, and a file source's log is
rewritten when the pipeline now reads its files from another folder.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stoker import checkpoint_layout
from stoker.errors import InvalidInput, JobNotFound
from stoker.runtime import restore_checks
from stoker.runtime.savepoint import (
    FIELD,
    fsync_tree,
    input_shape,
    read_manifest,
    sink_shape,
    source_kind,
)
from stoker.sinks import descriptor_of
from stoker.sinks._files_owner import MARKER, Claim, fsync_dir, read_claim
from stoker.sinks.base import SinkOwner
from stoker.sources._control import CV
from stoker.sources.base import parse_offset_line
from stoker.types import Epoch, JobId

if TYPE_CHECKING:
    from stoker.pipeline import Pipeline
    from stoker.sinks.base import TwoPhaseSink
    from stoker.store import JobRecord, Store

log = logging.getLogger("stoker.savepoint")

# In a state folder restored from a savepoint: which one (written before the checkpoint is
# put in place, so a checkpoint next to it is that savepoint's, and a rerun resumes it).
RESTORED = "_restored_from.json"


@dataclass(frozen=True)
class Restore:
    """A checked plan to start job ``owner.job_id`` from the savepoint in ``folder``."""

    folder: Path
    manifest: dict[str, Any]
    owner: SinkOwner  # whom the new job's sinks write for
    previous: SinkOwner  # the savepoint's job: whose the outputs are until restored
    done: bool  # restored into this state folder before: the job resumes, nothing is copied
    rewrite: bool = False  # the user asked for output after the savepoint to be written again
    rewrites: tuple[str, ...] = ()  # what will be written again (for the log)

    @property
    def epoch(self) -> Epoch | None:
        e = self.manifest.get("epoch")
        return None if e is None else Epoch(int(e))

    def owner_for(self, sink: TwoPhaseSink) -> SinkOwner:
        """Whom ``sink`` is validated for before the restore: the savepoint's job where the
        output still names it (a files sink's marker), else the new job."""
        folder = _files_folder(sink)
        if folder is not None:
            claim = read_claim(folder)
            if claim is not None and claim.owned_by(self.previous):
                return self.previous
        return self.owner


def check(
    folder: str | Path,
    root: Path,
    jid: JobId,
    pipeline: Pipeline,
    store_url: str | Path,
    existing: JobRecord | None,
    rewrite: bool = False,
) -> Restore:
    """Everything that can refuse a restore, before Spark starts and before anything is
    written: :class:`InvalidInput` naming ``from_savepoint`` and the problem. ``rewrite``:
    output the savepoint's job wrote after the savepoint is written again, not refused."""
    return _plan(Path(folder), root, jid, pipeline, str(store_url), existing, rewrite)


def savepoint_epoch(folder: str | Path) -> Epoch | None:
    """The epoch the savepoint in ``folder`` was taken at (None: before the first);
    :class:`InvalidInput` when ``folder`` is not a savepoint."""
    epoch = read_manifest(Path(folder).resolve()).get("epoch")
    return None if epoch is None else Epoch(int(epoch))


@dataclass(frozen=True)
class Restored:
    """What :func:`restore` did: the plan it followed (owner, manifest) and what it copied."""

    plan: Restore
    copied: bool

    @property
    def owner(self) -> SinkOwner:
        return self.plan.owner


def restore(
    folder: str | Path,
    root: Path,
    store: Store,
    jid: JobId,
    pipeline: Pipeline,
    rewrite: bool = False,
) -> Restored:
    """Restore the savepoint in ``folder`` into job ``jid``'s state folder ``root``.

    Checks again (as :func:`check`, against the open store), then: the checkpoint (cut at the
    savepoint's epoch, without the old job's control versions in its offsets, with a query
    id of its own) and the source logs are copied into ``root``, and the outputs the old job
    owned are handed over to the new one. A state folder restored from this savepoint before
    is resumed as it is.
    """
    try:
        existing: JobRecord | None = store.get_job(jid)
    except JobNotFound:
        existing = None
    plan = _plan(Path(folder), root, jid, pipeline, store.url, existing, rewrite)
    copied = False
    if not plan.done:
        for line in plan.rewrites:
            log.warning("job %s: %s", jid, line)
        _install(plan, root, pipeline)
        copied = True
        log.info(
            "job %s: restored from savepoint %s (job %s, epoch %s)",
            jid,
            plan.folder,
            plan.previous.job_id,
            plan.epoch,
        )
    _hand_over_outputs(plan, pipeline)
    return Restored(plan, copied)


def _plan(
    folder: Path,
    root: Path,
    jid: JobId,
    pipeline: Pipeline,
    store_url: str,
    existing: JobRecord | None,
    rewrite: bool = False,
) -> Restore:
    folder = folder.resolve()
    manifest = read_manifest(folder)
    previous = SinkOwner(JobId(str(manifest["job_id"])), str(manifest["uid"]))
    uid = existing.uid if existing is not None and existing.uid else previous.uid
    owner = SinkOwner(jid, uid)
    checkpoint = root / "checkpoint"
    if checkpoint.exists():
        done = _restored_from(root)
        if done is not None and done.get("path") == str(folder):
            if existing is None and done.get("uid"):
                owner = SinkOwner(jid, str(done["uid"]))
            return Restore(folder, manifest, owner, previous, done=True, rewrite=rewrite)
        raise InvalidInput(
            FIELD,
            f"job {jid!r} has a checkpoint already ({str(checkpoint)!r}): a savepoint is "
            f"restored only into a job without one; to start from {str(folder)!r} give "
            "another job id (or state folder), or resume the job without --from-savepoint",
        )
    problems = shape_difference(manifest, pipeline)
    if problems:
        raise InvalidInput(
            FIELD,
            f"the pipeline does not fit the savepoint {str(folder)!r}: " + "; ".join(problems),
        )
    added, left = sink_changes(manifest, pipeline)
    for name in added:
        log.info("job %s: sink %r is new: it gets the epochs after the savepoint's", jid, name)
    for name in left:
        log.info(
            "job %s: sink %r of the savepoint is not written: %s keeps it",
            jid,
            name,
            previous.job_id,
        )
    shared = [s.name for s in pipeline.sinks if s.name not in added]
    if previous.job_id != jid and shared:
        # Outputs the old job wrote are handed over: it must be over with them first. A fork
        # to outputs of its own needs nothing of the old job, whatever its state.
        restore_checks.refuse_unsettled(previous, manifest, store_url, shared)
    rewrites = restore_checks.outputs_ahead(manifest, folder, pipeline, previous, rewrite)
    return Restore(folder, manifest, owner, previous, False, rewrite, rewrites)


def shape_difference(manifest: dict[str, Any], pipeline: Pipeline) -> list[str]:
    """How ``pipeline``'s sources and sinks differ from the savepoint's: one line each."""
    out: list[str] = []
    old_sources = [str(s) for s in (manifest.get("pipeline") or {}).get("sources") or []]
    new_sources = [i.source.describe() for i in pipeline.inputs]
    if len(old_sources) != len(new_sources):
        out.append(
            f"the savepoint has {len(old_sources)} source(s) ({', '.join(old_sources) or '-'}), "
            f"the pipeline {len(new_sources)} ({', '.join(new_sources) or '-'})"
        )
    for i, (old, new) in enumerate(zip(old_sources, new_sources, strict=False)):
        if source_kind(old) != source_kind(new):
            out.append(f"source {i + 1} was {old}, now {new}")
    old_sinks = {str(s.get("name")): s.get("kind") for s in manifest.get("sinks") or []}
    new_sinks = {s["name"]: s.get("kind") for s in sink_shape(pipeline)}
    for name, kind in new_sinks.items():
        if name in old_sinks and old_sinks[name] != kind:
            out.append(f"sink {name!r} was {old_sinks[name]}, now {kind}")
    return out


def sink_changes(manifest: dict[str, Any], pipeline: Pipeline) -> tuple[list[str], list[str]]:
    """The pipeline's sinks the savepoint's job did not have (they get every epoch after the
    savepoint's), and the savepoint's sinks the pipeline does not write (left to the old job,
    untouched). A fork may change both (issue 23 item 5): exactly once holds per output; the
    sources and the state are what must fit."""
    old_sinks = [str(s.get("name")) for s in manifest.get("sinks") or []]
    new_sinks = [s["name"] for s in sink_shape(pipeline)]
    return (
        [n for n in new_sinks if n not in old_sinks],
        [n for n in old_sinks if n not in new_sinks],
    )


def _files_folder(sink: TwoPhaseSink) -> Path | None:
    d = descriptor_of(sink)
    if d.get("kind") != "files" or not isinstance(d.get("path"), str):
        return None
    return Path(str(d["path"])).resolve()


def _restored_from(root: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((root / RESTORED).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _install(plan: Restore, root: Path, pipeline: Pipeline) -> None:
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
        }
        _write_atomic(root / RESTORED, json.dumps(note, indent=2, sort_keys=True).encode())
        os.rename(tmp_cp, root / "checkpoint")  # the restore's commit point
        fsync_dir(root)
    finally:
        shutil.rmtree(tmp_cp, ignore_errors=True)
        shutil.rmtree(tmp_src, ignore_errors=True)


def _write_atomic(path: Path, data: bytes) -> None:
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
    _write_atomic(path, text)
    return n


def _hand_over_outputs(plan: Restore, pipeline: Pipeline) -> None:
    """Files sinks whose owner marker names the savepoint's job now name the new job (same
    uid, the new id). Idempotent: a marker that names the new job already is left alone."""
    if plan.previous == plan.owner:
        return
    for sink in pipeline.sinks:
        out = _files_folder(sink)
        if out is None:
            continue
        claim = read_claim(out)
        if claim is None or not claim.owned_by(plan.previous):
            continue  # none yet (the sink claims it at open) or the new job's already
        mine = Claim(
            job_id=plan.owner.job_id,
            uid=plan.owner.uid,
            claimed_at=time.time(),
            host=claim.host,
            pid=os.getpid(),
        )
        _write_atomic(out / MARKER, json.dumps(mine.to_json(), sort_keys=True).encode())
        log.info(
            "%s: output folder handed over from job %s to job %s",
            sink.name,
            plan.previous.job_id,
            plan.owner.job_id,
        )


__all__ = [
    "RESTORED",
    "Restore",
    "Restored",
    "check",
    "restore",
    "rewrite_log_folder",
    "shape_difference",
    "sink_changes",
]
