"""The lineage checks of a start from a savepoint (:func:`check`, then :func:`record`), and of
a job's own start (:func:`refuse_taken_over`); see :mod:`stoker.lineage`."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stoker.errors import InvalidInput, JobNotFound
from stoker.lineage.stores import (
    FIELD,
    FORK,
    Stores,
    canonical,
    overlap,
    refuse_finished,
    savepoint_key,
    savepoint_store,
)
from stoker.redact import redact_text
from stoker.store import JobRecord, SavepointRestore, Store
from stoker.types import Epoch, EpochState, JobId, JobState, TxnState

log = logging.getLogger("stoker.savepoint")


# another job's state -----------------------------------------------------------------------------
def pending(st: Store, job: JobRecord) -> list[str]:
    """What is owed of an ended job's resolution, one phrase each."""
    out = []
    decided = [e.epoch for e in st.epochs_in_state(job.job_id, str(EpochState.DECIDED))]
    if decided:
        out.append(f"epoch(s) {', '.join(map(str, decided))} DECIDED and not committed")
    prepared = sorted(
        {(t.epoch, t.sink, t.attempt) for t in st.list_txns(job.job_id, TxnState.PREPARED)}
    )
    if prepared:
        parts = ", ".join(f"{s} epoch {e} attempt {a}" for e, s, a in prepared)
        out.append(f"sink transactions still PREPARED: {parts}")
    if not out and job.resolved_at is None:
        out.append("no resolution of its sinks is recorded since it ended")
    return out


def _record_of(st: Store | None, jid: JobId, uid: str) -> JobRecord | None:
    """Job ``jid`` of ``uid`` in ``st``; None when it is not there (never made, or another
    record of that id since)."""
    if st is None:
        return None
    try:
        job = st.get_job(jid)
    except JobNotFound:
        return None
    return job if not job.uid or job.uid == uid else None


def _newest_written(st: Store, jid: JobId) -> tuple[Epoch, float | None] | None:
    """The newest epoch job ``jid`` decided (committed or to be), and when it committed."""
    for e in st.list_epochs(jid, limit=3):
        if e.state != EpochState.PINNED:
            return e.epoch, e.committed_at or e.decided_at
    return None


def _cleanup_hint(jid: str, st: Store, state_dir: str | None) -> str:
    return (
        "a job manager resolves an ended job's sinks shortly after its end; without one, run "
        f"python -m stoker.runtime.cleanup --job {jid} --store {redact_text(st.url)} "
        f"--state-dir {state_dir or '<its state folder>'}"
    )


# a start from a savepoint ------------------------------------------------------------------------
@dataclass(frozen=True)
class Start:
    """One start of job ``job_id`` (in ``state_dir``, on the store ``store_url``, under
    ``uid``) from the savepoint in ``folder``, as the lineage checks see it. ``shared``: the
    savepoint's sinks (by name) this job writes too, handed over to it; ``sinks``: every sink
    it writes (:func:`sink_places`); ``resumed``: restored into this state folder before (at
    ``restored_at``)."""

    manifest: dict[str, Any]
    folder: Path
    job_id: JobId
    state_dir: str
    store_url: str
    uid: str
    fork: bool = False
    sinks: tuple[dict[str, Any], ...] = ()
    shared: tuple[str, ...] = ()
    resumed: bool = False
    restored_at: float | None = None
    ignore_unreachable: bool = False

    @property
    def epoch(self) -> Epoch | None:
        e = self.manifest.get("epoch")
        return None if e is None else Epoch(int(e))

    @property
    def from_job(self) -> JobId:
        return JobId(str(self.manifest.get("job_id")))

    def record(self, now: float) -> SavepointRestore:
        """This start's row in the stores."""
        return SavepointRestore(
            savepoint=savepoint_key(self.manifest),
            uid=self.uid,
            job_id=self.job_id,
            store=redact_text(canonical(self.store_url)),
            state_dir=self.state_dir,
            from_job_id=self.from_job,
            from_uid=str(self.manifest.get("uid")),
            epoch=self.epoch,
            path=str(self.folder),
            fork=self.fork,
            sinks=self.sinks,
            restored_at=now,
        )


@dataclass
class Checked:
    """What :func:`check` saw: the restores recorded before (this job's own among them, if
    resumed) and the stores the new one goes into (the savepoint's job's first)."""

    restores: list[SavepointRestore] = field(default_factory=list)
    registries: list[Store] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def check(start: Start, stores: Stores) -> Checked:
    """Every lineage refusal of ``start`` (see the module's docstring); the stores stay open
    in ``stores`` for :func:`record`."""
    refuse_finished(start.manifest, start.folder)
    origin = savepoint_store(stores, start.manifest)
    own = stores.own()
    registries = [s for s in (origin, own) if s is not None]
    registries = [s for i, s in enumerate(registries) if s not in registries[:i]]
    key = savepoint_key(start.manifest)
    seen: dict[tuple[str, str, str, str], SavepointRestore] = {}
    for st in registries:
        for r in [*st.restores_of_savepoint(key), *st.restores_of_uid(start.uid)]:
            seen.setdefault((r.savepoint, r.uid, r.job_id, r.state_dir), r)
    others = [r for r in seen.values() if not r.is_job(start.job_id, start.state_dir)]
    for r in others:
        if r.savepoint == key and r.uid == start.uid:
            _refuse_twice(start, r)
    if start.fork and not start.resumed:
        _check_fork(start, stores, [r for r in others if r.savepoint == key])
    for r in others:
        if r.uid == start.uid:
            _check_same_uid(start, stores, r)
    if start.shared and not start.fork:
        _check_savepoint_job(start, stores, origin, own)
    return Checked(list(seen.values()), registries, list(stores.skipped))


def _refuse_twice(start: Start, r: SavepointRestore) -> None:
    after = "0" if start.epoch is None else str(start.epoch + 1)
    raise InvalidInput(
        FIELD,
        f"the savepoint {str(start.folder)!r} was restored before into {r.describe()}: a "
        f"savepoint goes on in one job, and two would each write its epochs from {after} on. "
        f"To go on with it, run job {r.job_id!r} again (it resumes from where it is). To "
        f"start another job from the savepoint, end job {r.job_id!r} first (stoker cancel "
        f"{r.job_id}) and let its outputs be resolved, then start this one with {FORK}: a "
        "fork goes on under a uid of its own, to outputs (tables, folders) of its own",
    )


def _check_fork(start: Start, stores: Stores, earlier: Sequence[SavepointRestore]) -> None:
    """A fork: the earlier restores of its savepoint have ended, resolved, and it writes none
    of their outputs nor the savepoint's job's."""
    taken: dict[str, list[str]] = {}
    old = [{"name": str(s.get("name"))} for s in start.manifest.get("sinks") or []]
    for name in overlap(start.sinks, old):
        taken.setdefault(name, []).append(f"the savepoint's job {start.from_job!r}")
    for r in earlier:
        for name in overlap(start.sinks, r.sinks):
            taken.setdefault(name, []).append(f"job {r.job_id!r}")
    if taken:
        said = "; ".join(
            f"sink {n!r} writes what {' and '.join(w)} writes" for n, w in taken.items()
        )
        raise InvalidInput(
            FIELD,
            f"a fork writes outputs of its own (it goes on under a new uid, and its epochs "
            f"after the savepoint would land beside the rows already written for them): {said}."
            " Point those sinks at other tables or folders, or go on with the job that writes "
            "them instead of forking",
        )
    for r in earlier:
        st = stores.at(r.store, f"job {r.job_id!r}")
        job = _record_of(st, r.job_id, r.uid)
        if job is None or st is None:
            continue
        if not job.state.terminal:
            raise InvalidInput(
                FIELD,
                f"a fork of the savepoint {str(start.folder)!r} waits for the job it was "
                f"restored into first to end: {r.describe()} is still {job.state}. End it "
                f"(stoker cancel {r.job_id}), then start the fork",
            )
        owed = pending(st, job)
        if owed:
            raise InvalidInput(
                FIELD,
                f"a fork of the savepoint {str(start.folder)!r} waits for the job it was "
                f"restored into first to be resolved: {r.describe()} has ended ({job.state}) "
                f"with {'; '.join(owed)}. Start the fork once it is resolved: "
                + _cleanup_hint(r.job_id, st, r.state_dir),
            )


def _check_same_uid(start: Start, stores: Stores, r: SavepointRestore) -> None:
    """Another job of this job's uid (restored from another savepoint of the same job): not
    live, resolved, and with nothing written past this savepoint into this job's outputs."""
    st = stores.at(r.store, f"job {r.job_id!r}")
    job = _record_of(st, r.job_id, r.uid)
    if job is None or st is None:
        return
    owed = pending(st, job) if job.state.terminal else []
    why: str | None = None
    if not job.state.terminal:
        why = f"it has not ended ({job.state})"
    elif owed:
        why = f"its outputs are not resolved ({'; '.join(owed)})"
    else:
        newest = _newest_written(st, r.job_id)
        both = overlap(start.sinks, r.sinks)
        if newest is None or not both or (start.epoch is not None and newest[0] <= start.epoch):
            return
        why = f"it wrote epochs up to {newest[0]} to {', '.join(map(repr, both))}"
    raise InvalidInput(
        FIELD,
        f"job {start.job_id!r} goes on under uid {start.uid}, as does {r.describe()}, and "
        f"{why}: the two would write the same epochs after the savepoint's "
        f"{start.epoch}. End and resolve job {r.job_id!r} first, or start this job with "
        f"{FORK} to outputs of its own",
    )


def _check_savepoint_job(
    start: Start, stores: Stores, origin: Store | None, own: Store | None
) -> None:
    """The savepoint's job, whose outputs this job takes over: ended and resolved; on a
    resumed start, nothing committed since this job's restore."""
    jid, uid = start.from_job, str(start.manifest.get("uid"))
    for st in [s for s in (own, origin) if s is not None]:
        if st is own and jid == start.job_id:
            continue  # this very record: its own state is its start's to check
        job = _record_of(st, jid, uid)
        if job is None:
            continue
        where = redact_text(st.url)
        if not job.state.terminal:
            stop = (
                f"stoker savepoint {jid} --stop, or stoker cancel {jid}"
                if job.state != JobState.SUSPENDED
                else f"stoker cancel {jid}: it is suspended, no driver runs it"
            )
            raise InvalidInput(
                FIELD,
                f"the savepoint's job {jid!r} is still {job.state} (not ended; store {where}) "
                f"and the new job would take over its outputs ({', '.join(start.shared)}): "
                f"either stop it first ({stop}), then start the new job from a savepoint, or "
                "give the new job outputs of its own (another folder or table): a fork to new "
                "outputs needs nothing of the old job",
            )
        owed = pending(st, job)
        if owed:
            raise InvalidInput(
                FIELD,
                f"the savepoint's job {jid!r} has ended ({job.state}) but its outputs are not "
                f"resolved yet ({'; '.join(owed)}): resolving it may commit output after the "
                "savepoint. Start the new job once it is resolved: "
                + _cleanup_hint(jid, st, start.manifest.get("state_dir")),
            )
        newest = _newest_written(st, jid) if start.resumed else None
        since = start.restored_at
        if (
            newest is not None
            and since is not None
            and (newest[1] or 0) > since
            and (start.epoch is None or newest[0] > start.epoch)
        ):
            raise InvalidInput(
                FIELD,
                f"the savepoint's job {jid!r} (store {where}) wrote epochs up to "
                f"{newest[0]} after its savepoint was restored into job "
                f"{start.job_id!r}: both wrote the epochs after {start.epoch} to "
                f"{', '.join(start.shared)}. Decide which one goes on; the other's output "
                "after the savepoint must be removed by hand",
            )


def record(start: Start, checked: Checked, now: float) -> None:
    """Record ``start`` in every store of ``checked`` (the savepoint's job's first). A row of
    another job under the same (savepoint, uid) means a restore raced this one and won:
    refused, nothing else written."""
    mine = start.record(now)
    for st in checked.registries:
        got, _new = st.record_restore(mine)
        if not got.is_job(start.job_id, start.state_dir):
            _refuse_twice(start, got)


# a job's own start -------------------------------------------------------------------------------
def refuse_taken_over(st: Store, job: JobRecord, state_dir: str, sink_names: Sequence[str]) -> None:
    """Refuse a start of ``job`` when a savepoint of it was restored into another job that
    writes one of its outputs (by name; a fork writes none): that job goes on with them."""
    for r in st.restores_from_job(job.job_id, job.uid):
        if r.fork or r.is_job(job.job_id, state_dir):
            continue
        both = overlap([{"name": n} for n in sink_names], r.sinks)
        if not both:
            continue
        raise InvalidInput(
            "restart" if job.state.terminal else "job_id",
            f"job {job.job_id!r}'s savepoint {r.path!r} (epoch {r.epoch}) was restored into "
            f"{r.describe()}, which took over its outputs ({', '.join(map(repr, both))}) and "
            f"writes the epochs after {r.epoch}: this job would write them again. Run job "
            f"{r.job_id!r} instead; to run this pipeline anew, give it another job id and "
            "outputs of its own",
        )


__all__ = [
    "Checked",
    "Start",
    "check",
    "pending",
    "record",
    "refuse_taken_over",
]
