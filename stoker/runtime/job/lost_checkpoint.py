"""A job's Spark checkpoint checked against its store's decided epochs when an attempt starts,
and the explicit way on when the checkpoint is lost: ``stoker run --reset-checkpoint``.

Spark resumes a query from its checkpoint alone. A checkpoint folder that is gone (wiped, a
failover to a host that does not see it, a ``--store`` kept outside the state folder while
the state folder went) makes Spark start again at batch 0; the store still holds the job's
epochs, so the epoch pin (runtime/epoch.py) takes every batch it decided as a replay and
skips it, with whatever input Spark planned for it now. That input is lost without an error.
So the attempt refuses to start (:class:`~stoker.errors.CheckpointBehind`) when the checkpoint
is behind the store (:func:`stoker.checkpoint_layout.behind_store` says what "behind" is and
what is normal), before the job is recorded and before Spark runs a query.

A reset starts the job over as a new owner: a new uid (a files sink's owner marker and the
PostgreSQL sink's markers are per uid, so the old job's outputs are never taken for the new
epochs 0, 1, ... of the same names), the store's epoch records and sink transactions of the
old uid dropped, the stale checkpoint moved aside (kept, not deleted), and the sources read
from their beginning (their configured start).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from stoker import checkpoint_layout
from stoker.errors import CheckpointBehind
from stoker.sources.base import SID, parse_offset_line
from stoker.store import JobRecord, Store, open_store
from stoker.types import AttemptNo, Epoch, JobId

if TYPE_CHECKING:
    from stoker.pipeline import Pipeline

log = logging.getLogger("stoker.runner")

FIELD = "checkpoint"


@dataclass(frozen=True)
class Gap:
    """A checkpoint behind its store: the store's decided epochs, where the checkpoint ends."""

    job: JobId
    uid: str
    first: Epoch  # the oldest decided epoch the store keeps
    last: Epoch  # the newest
    checkpoint: Path
    end: str  # checkpoint_layout.describe_end
    restoring: bool = False  # found by a start from a savepoint into this job id
    # What follows if the job ran as it is (None: the checkpoint behind the store's epochs).
    harm: str | None = None

    def what(self) -> str:
        """Both sides, named."""
        first, last = self.first, self.last
        epochs = f"epoch {last}" if first == last else f"epochs {first}..{last}"
        return (
            f"the store has {epochs} of job {self.job!r} (uid {self.uid}) decided, but its "
            f"checkpoint folder {str(self.checkpoint)!r} {self.end}"
        )

    def refusal(self) -> CheckpointBehind:
        """The error: both sides, the ways out, then why (the CLI cuts a long line at its end;
        README and the architecture say the rest: put the folder back, a files sink's folder
        to empty)."""
        ways = (
            "restore the savepoint under another job id, or start without it with"
            if self.restoring
            else "--from-savepoint DIR, or"
        )
        return CheckpointBehind(
            FIELD,
            f"{self.what()}. Ways out: {ways} --reset-checkpoint (a new uid, "
            "its sources read again from their start); as it is, "
            + (
                self.harm
                or "Spark would redo those batches and the store skip them as replays, "
                "their input lost"
            ),
        )


def find_gap(
    store: Store, job: JobRecord, checkpoint: Path, restores: Epoch | None = None
) -> Gap | None:
    """The gap between ``job``'s decided epochs in ``store`` and ``checkpoint``; None when the
    checkpoint is not behind. ``restores``: a savepoint's epoch, whose checkpoint (cut there)
    a restore is about to install in place of a missing one."""
    decided = store.decided_range(job.job_id)
    if decided is None:
        return None
    if restores is not None:
        last: int | None = restores
        end = f"would end at batch {restores} once the savepoint's checkpoint is installed"
    else:
        offsets = checkpoint_layout.offset_ids(checkpoint)
        last = offsets[-1] if offsets else None
        end = checkpoint_layout.describe_end(checkpoint)
    if not checkpoint_layout.behind_store(last, decided[1]):
        return None
    return Gap(job.job_id, job.uid or "", decided[0], decided[1], checkpoint, end)


def gap_in(
    store_url: str | Path, job: JobRecord, checkpoint: Path, restores: Epoch | None = None
) -> Gap | None:
    """:func:`find_gap` with the store opened for it (``job`` was read from it: it exists)."""
    st = open_store(store_url)
    try:
        return find_gap(st, job, checkpoint, restores)
    finally:
        st.close()


class KeepsState(Protocol):
    """A source that keeps a log of what its offsets name in the job's state folder (files,
    socket): the checkpoint's offsets mean nothing without it."""

    def state_behind(self, sid: str, state_dir: Path, offset: dict[str, Any]) -> str | None: ...


def source_state_gap(
    store_url: str | Path, job: JobRecord, root: Path, pipeline: Pipeline
) -> Gap | None:
    """A kept checkpoint whose newest offsets name more than a source's log in the state
    folder holds (``state/sources/`` lost or cut while the checkpoint was kept): the files
    source's rebuilt log numbered new files below the checkpoint's offset, so they were never
    read, and the job sat idle without an error. Checked at plan time, as the checkpoint is
    against the store: every piece of a job's state that must agree with another."""
    checkpoint = root / "checkpoint"
    ids = checkpoint_layout.offset_ids(checkpoint)
    lines = checkpoint_layout.offset_lines(checkpoint, ids[-1]) if ids else None
    offsets = {o[SID]: o for o in map(parse_offset_line, lines or []) if o is not None}
    for i, inp in enumerate(pipeline.inputs):
        sid = f"s{i}"  # as opening.open_sources names them
        source = inp.source
        if sid not in offsets or not hasattr(source, "state_behind"):
            continue
        problem = cast(KeepsState, source).state_behind(sid, root, offsets[sid])
        if problem is None:
            continue
        st = open_store(store_url)
        try:
            decided = st.decided_range(job.job_id)
        finally:
            st.close()
        if decided is None:
            return None  # no epoch decided: its replay reads the log and names what is missing
        first, last = decided
        return Gap(
            job.job_id,
            job.uid or "",
            first,
            last,
            checkpoint,
            f"(batch {ids[-1]}) {problem}",
            harm="what the source takes from now on would be numbered below what the "
            "checkpoint has read, and never read",
        )
    return None


def reset(
    store: Store, gap: Gap, attempt: AttemptNo, uid: str, pipeline: Pipeline, root: Path
) -> None:
    """Start the job over under ``uid``, by the attempt that owns it now (fenced).

    The stale checkpoint goes first (moved aside, kept): a crash after it leaves the store
    as it was and the next run is refused again, never a stale checkpoint resumed under the
    new uid. Then the store forgets the old uid's epochs, in one transaction."""
    if gap.checkpoint.exists():
        aside = root / f"checkpoint.lost-{time.strftime('%Y%m%dT%H%M%S')}"
        gap.checkpoint.rename(aside)
        log.warning("job %s: the stale checkpoint folder is kept as %s", gap.job, aside)
    dropped = store.reset_epochs(gap.job, attempt, uid)
    sources = "; ".join(inp.source.describe() for inp in pipeline.inputs)
    log.warning(
        "job %s: --reset-checkpoint: %s. The job starts over as uid %s (was %s): %d epoch "
        "records of the old uid dropped, Spark starts a new checkpoint at batch 0, and every "
        "source is read again from its beginning (its configured start): %s. The sinks take "
        "the new epochs for a new job's; what the old job wrote stays as it is",
        gap.job,
        gap.what(),
        uid,
        gap.uid,
        dropped,
        sources,
    )
