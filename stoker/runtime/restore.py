"""Starting a job from a savepoint (:mod:`stoker.runtime.savepoint`): the same id or a new one,
e.g. an upgraded version of the code, exactly once across the switch.

:func:`check` refuses, before Spark starts and before anything is written:

- a folder that is not a savepoint; a state folder that has a checkpoint already (unless it
  was restored from this very savepoint: then the job resumes, see below);
- a pipeline whose sources (count and kind, in order) or sinks (names and kinds) are not the
  savepoint's (a change of a stateful query that Spark refuses is Spark's error when the query
  starts);
- what the savepoint's lineage forbids (:mod:`stoker.lineage`): a savepoint at its job's
  final epoch; one restored before under its uid into another job (a ``fork`` takes a uid
  and outputs of its own); another job of the uid live, unresolved or ahead on a shared
  output; a savepoint's job that has not ended (``savepoint --stop`` ends it) or whose
  outputs are not resolved yet, unless it is this very record; a store that cannot be
  looked at (unless ``ignore_unreachable``). A start that resumes a restore is checked too;
- a sink that already holds epochs after the savepoint's (its job went on after it), unless
  the user asks for their rows to be written again (``rewrite``; never a files sink).

The checks of the lineage and the outputs are :mod:`stoker.runtime.restore_checks`.

:func:`restore` then records the restore in the stores (the savepoint is consumed: its job's
store and the new job's name the new job), copies the checkpoint and the source logs into the
state folder, and hands the old job's outputs over: the new job adopts the savepoint's uid (a
fork a new one), the owner markers of its files sinks and the owner rows of its PostgreSQL
sinks name the new job. :func:`stoker.runtime.restore_control.carry_control` gives
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
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stoker import lineage
from stoker.errors import InvalidInput, JobNotFound
from stoker.runtime import restore_checks
from stoker.runtime.restore_copy import (
    RESTORED,
    install,
    restored_from,
    rewrite_log_folder,
    write_atomic,
)
from stoker.runtime.savepoint import (
    FIELD,
    read_manifest,
    sink_shape,
    source_kind,
)
from stoker.sinks import descriptor_of
from stoker.sinks._files_owner import MARKER, Claim, read_claim
from stoker.sinks.base import SinkOwner
from stoker.store import open_store
from stoker.types import Epoch, JobId

if TYPE_CHECKING:
    from stoker.pipeline import Pipeline
    from stoker.sinks.base import TwoPhaseSink
    from stoker.store import JobRecord, Store

log = logging.getLogger("stoker.savepoint")


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
    # The lineage as checked (fork, the stores it may skip, the sinks): recorded at restore.
    start: lineage.Start | None = None

    @property
    def fork(self) -> bool:
        return self.start is not None and self.start.fork

    @property
    def ignore_unreachable(self) -> bool:
        return self.start is not None and self.start.ignore_unreachable

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
    *,
    fork: bool = False,
    ignore_unreachable: bool = False,
) -> Restore:
    """Everything that can refuse a restore, before Spark starts and before anything is
    written: :class:`InvalidInput` naming ``from_savepoint`` and the problem. ``rewrite``:
    output the savepoint's job wrote after the savepoint is written again, not refused.
    ``fork``: the job goes on under a uid of its own, to outputs of its own.
    ``ignore_unreachable``: a store the lineage check cannot open is skipped with a warning
    instead of refusing."""
    return _plan(
        Path(folder), root, jid, pipeline, str(store_url), existing, rewrite, fork,
        ignore_unreachable,
    )  # fmt: skip


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
    *,
    fork: bool = False,
    ignore_unreachable: bool = False,
    uid: str | None = None,
) -> Restored:
    """Restore the savepoint in ``folder`` into job ``jid``'s state folder ``root``.

    Checks again (as :func:`check`, against the open store), records the restore in the
    stores (the savepoint's job's and this one), then: the checkpoint (cut at the savepoint's
    epoch, without the old job's control versions in its offsets, with a query id of its own)
    and the source logs are copied into ``root``, and the outputs the old job owned are handed
    over to the new one. A state folder restored from this savepoint before is resumed as it
    is. ``uid``: the one :func:`check` chose for a fork.
    """
    try:
        existing: JobRecord | None = store.get_job(jid)
    except JobNotFound:
        existing = None
    plan = _plan(
        Path(folder), root, jid, pipeline, store.url, existing, rewrite, fork,
        ignore_unreachable, uid, store,
    )  # fmt: skip
    assert plan.start is not None
    # The savepoint is consumed here, once every check passed, before anything is copied: a
    # restore racing this one finds the row (or wrote it first, and this one is refused).
    restore_checks.check_lineage(plan.start, store, record=True)
    copied = False
    if not plan.done:
        for line in plan.rewrites:
            log.warning("job %s: %s", jid, line)
        install(plan, root, pipeline)
        copied = True
        log.info(
            "job %s: restored from savepoint %s (job %s, epoch %s)%s",
            jid,
            plan.folder,
            plan.previous.job_id,
            plan.epoch,
            f", a fork under uid {plan.owner.uid}" if plan.fork else "",
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
    fork: bool = False,
    ignore_unreachable: bool = False,
    uid: str | None = None,
    own: Store | None = None,
) -> Restore:
    folder = folder.resolve()
    manifest = read_manifest(folder)
    previous = SinkOwner(JobId(str(manifest["job_id"])), str(manifest["uid"]))
    owner = SinkOwner(jid, _uid_of(existing, previous, fork, uid))
    added, left = sink_changes(manifest, pipeline)
    shared = tuple(s.name for s in pipeline.sinks if s.name not in added)
    start = lineage.Start(
        manifest, folder, jid, str(root), store_url, owner.uid, fork=fork,
        sinks=lineage.sink_places(pipeline.sinks), shared=shared,
        ignore_unreachable=ignore_unreachable,
    )  # fmt: skip
    checkpoint = root / "checkpoint"
    if checkpoint.exists():
        done = restored_from(root)
        if done is not None and done.get("path") == str(folder):
            if existing is None and done.get("uid"):
                owner = SinkOwner(jid, str(done["uid"]))
            # Resumed: the lineage is checked at every start, this one too (a job of its uid
            # started since, the savepoint's job run again).
            start = replace(
                start, uid=owner.uid, fork=bool(done.get("fork")), resumed=True,
                restored_at=done.get("restored_at"),
                ignore_unreachable=ignore_unreachable or _ignored(done),
            )  # fmt: skip
            restore_checks.check_lineage(start, own)
            return Restore(folder, manifest, owner, previous, True, rewrite, start=start)
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
    for name in added:
        log.info("job %s: sink %r is new: it gets the epochs after the savepoint's", jid, name)
    for name in left:
        log.info(
            "job %s: sink %r of the savepoint is not written: %s keeps it",
            jid,
            name,
            previous.job_id,
        )
    # The old job (whose outputs are handed over) must be over with them, and the savepoint
    # must not have gone on in another job: refused before the outputs are looked at.
    restore_checks.check_lineage(start, own)
    rewrites = restore_checks.outputs_ahead(manifest, folder, pipeline, previous, rewrite)
    return Restore(folder, manifest, owner, previous, False, rewrite, rewrites, start=start)


def _ignored(note: dict[str, Any]) -> bool:
    """Whether the restore recorded in ``note`` was told to skip the stores it could not open:
    said once, for every later start of the job."""
    return bool(note.get("ignore_unreachable_stores"))


def _uid_of(existing: JobRecord | None, previous: SinkOwner, fork: bool, uid: str | None) -> str:
    """The uid the restored job runs under: its record's; else the savepoint's (its outputs
    go on), or a new one for a fork."""
    if existing is not None and existing.uid:
        if fork and existing.uid == previous.uid:
            raise InvalidInput(
                lineage.FORK_FIELD,
                f"job {existing.job_id!r} exists under the savepoint's uid {previous.uid}: "
                "a fork goes on under a uid of its own, so it needs a job id without a "
                "record (or leave out --fork to go on with this one)",
            )
        return existing.uid
    return (uid or uuid.uuid4().hex) if fork else previous.uid


def check_plain_start(
    root: Path,
    jid: JobId,
    pipeline: Pipeline,
    store_url: str | Path,
    existing: JobRecord,
    ignore_unreachable: bool = False,
) -> None:
    """The lineage of a job started without a savepoint given (a resume, a restart):
    refused when a savepoint of it went on in another job that writes its outputs; and a
    job restored from a savepoint before (its state folder's note) is checked as a resumed
    restore is, the savepoint's fields taken from the note when its folder is gone."""
    st = open_store(store_url)  # the job is in it: it exists
    try:
        lineage.refuse_taken_over(st, existing, str(root), [s.name for s in pipeline.sinks])
        note = restored_from(root)
        if note is None or not (root / "checkpoint").exists():
            return
        folder = Path(str(note.get("path")))
        manifest = note.get("manifest")
        if not isinstance(manifest, dict):
            try:
                manifest = read_manifest(folder)
            except InvalidInput as e:
                log.warning(
                    "job %s was restored from the savepoint %s, which cannot be read now (%s), "
                    "by a version that kept no copy of its lineage: its lineage is not checked",
                    jid,
                    folder,
                    e.message,
                )
                return
        added, _left = sink_changes(manifest, pipeline)
        start = lineage.Start(
            manifest, folder, jid, str(root), st.url, existing.uid or str(note.get("uid")),
            fork=bool(note.get("fork")), sinks=lineage.sink_places(pipeline.sinks),
            shared=tuple(s.name for s in pipeline.sinks if s.name not in added), resumed=True,
            restored_at=note.get("restored_at"),
            ignore_unreachable=ignore_unreachable or _ignored(note),
        )  # fmt: skip
        restore_checks.check_lineage(start, st, record=True)
    finally:
        st.close()


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
    untouched). A fork may change both: exactly once holds per output; the
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


def _hand_over_outputs(plan: Restore, pipeline: Pipeline) -> None:
    """The outputs the savepoint's job wrote, now the new job's (same uid, the new id): files
    sinks' owner markers name the new job, and so do PostgreSQL sinks' owner rows (the old
    job id's row is marked handed over: that job is refused at its next start). Idempotent:
    what names the new job already is left alone."""
    if plan.previous == plan.owner:
        return
    shared = plan.start.shared if plan.start is not None else ()
    for sink in pipeline.sinks:
        hand_over = getattr(sink, "hand_over", None)
        if callable(hand_over) and sink.name in shared:
            if hand_over(plan.previous, plan.owner):
                log.info(
                    "%s: handed over from job %s to job %s",
                    sink.name,
                    plan.previous.job_id,
                    plan.owner.job_id,
                )
            continue
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
        write_atomic(out / MARKER, json.dumps(mine.to_json(), sort_keys=True).encode())
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
    "check_plain_start",
    "restore",
    "rewrite_log_folder",
    "shape_difference",
    "sink_changes",
]
