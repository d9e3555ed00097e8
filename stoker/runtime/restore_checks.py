"""What a restore from a savepoint (:mod:`stoker.runtime.restore`) checks about the savepoint's
lineage and its outputs before anything is written.

- **The lineage** (:mod:`stoker.lineage`): the savepoint had not ended its job; every store
  to look at opens (or the user said to go on without it); it was not restored under its uid
  into another job before (a fork takes a uid and outputs of its own, once the earlier
  restores ended, resolved); no other job of the uid is live, unresolved or ahead of it on a
  shared output; the savepoint's job, whose outputs are handed over, has ended and is
  resolved (a decided epoch is committed by whoever resolves the job: output after the
  savepoint, written while the new job writes the same epochs; the restore refuses and says
  how the old job gets resolved, rather than resolve it itself: a check writes nothing). The
  restore then records itself in the stores (:func:`check_lineage` with ``record``).
- **The old job's store can be read.** The savepoint records its store's URL with the
  password hidden. When that is the store the new job runs on, the new job's URL (which has
  the password) reads it; otherwise the operator gives the old store's URL in
  ``STOKER_SAVEPOINT_STORE_URL`` (read from the environment, never written or shown). A store
  that cannot be opened is a refusal naming it, unless ``--ignore-unreachable-stores``.
- **No output is ahead of the savepoint.** Every sink is asked which epochs of the
  savepoint's uid it holds (:func:`stoker.sinks.committed_epochs_of`); one past the
  savepoint's epoch means the old job went on after the savepoint was taken, and the new job
  would write those epochs' rows again. Refused, unless the user asks for exactly that
  (``--rewrite-output-after-savepoint``); a files sink is refused even then, as it never
  writes an epoch folder over an existing one, and so is a Delta sink (its txn marker holds
  those epochs: their commits would be skipped) or an Iceberg sink (the same, with the marker
  in its snapshots' summaries).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stoker import lineage
from stoker.errors import InvalidInput
from stoker.lineage import SAVEPOINT_STORE_ENV
from stoker.runtime.savepoint import FIELD
from stoker.sinks import committed_epochs_of, descriptor_of
from stoker.sinks.base import SinkOwner
from stoker.types import Epoch

if TYPE_CHECKING:
    from stoker.pipeline import Pipeline
    from stoker.sinks.base import TwoPhaseSink
    from stoker.store import Store

log = logging.getLogger("stoker.savepoint")

REWRITE_FLAG = "--rewrite-output-after-savepoint"
REWRITE_FIELD = "rewrite_output_after_savepoint"

# Sinks whose table marks each epoch committed for the job's uid, and skip a marked epoch.
_MARKED = {
    "delta": "a Delta sink never commits an epoch its table's txn marker already holds",
    "iceberg": (
        "an Iceberg sink never commits an epoch its table's snapshot marker (stoker.epoch in "
        "the summary) already holds"
    ),
}


# the lineage -------------------------------------------------------------------------------------
def check_lineage(start: lineage.Start, own: Store | None = None, record: bool = False) -> None:
    """The lineage refusals of ``start`` (:func:`stoker.lineage.check`), reading the new job's
    store through ``own`` when it is open; with ``record``, the restore recorded in the
    savepoint's job's store and the new job's once every check passed."""
    stores = lineage.Stores(start.store_url, start.ignore_unreachable, own=own)
    try:
        checked = lineage.check(start, stores)
        if record:
            lineage.record(start, checked, time.time())
    finally:
        stores.close()


# outputs after the savepoint -------------------------------------------------------------------
def outputs_ahead(
    manifest: dict[str, Any],
    folder: Path,
    pipeline: Pipeline,
    previous: SinkOwner,
    rewrite: bool,
) -> tuple[str, ...]:
    """Refuse when a sink holds output of the savepoint's uid after its epoch, unless
    ``rewrite`` (then: what will be written again, one line per sink, for the log)."""
    epoch = manifest.get("epoch")
    first = 0 if epoch is None else int(epoch) + 1
    ahead: list[tuple[TwoPhaseSink, Epoch]] = []
    for sink in pipeline.sinks:
        held = committed_epochs_of(sink, previous)
        if held is None:
            log.warning(
                "sink %r cannot tell which epochs it holds: if job %s went on after the "
                "savepoint's epoch %s, the new job writes those epochs' rows to it again",
                sink.name,
                previous.job_id,
                epoch,
            )
            continue
        later = [e for e in held if e >= first]
        if later:
            ahead.append((sink, later[-1]))
    if not ahead:
        return ()
    # Epochs commit in order: holding epoch N means holding every epoch up to it.
    held_text = "; ".join(f"sink {s.name!r} holds epochs {first}..{last}" for s, last in ahead)
    went_on = (
        f"{held_text}, after the savepoint's epoch {epoch} (job {previous.job_id!r} went on "
        f"after {str(folder)!r} was taken)"
    )
    files = [s.name for s, _ in ahead if descriptor_of(s).get("kind") == "files"]
    if files:
        raise InvalidInput(
            FIELD,
            f"{went_on}: a files sink never writes an epoch folder over an existing one; start "
            "from a later savepoint, write to another folder, or delete the epoch folders "
            f"after the savepoint's from {', '.join(map(repr, files))} first",
        )
    marked = [(s.name, str(descriptor_of(s).get("kind"))) for s, _ in ahead]
    tables = [(name, kind) for name, kind in marked if kind in _MARKED]
    if tables:
        # The restored job goes on under the savepoint's uid, so under the same marker (a
        # Delta txn app id, an Iceberg snapshot's stoker.uid): its commits of those epochs
        # would be skipped as done, not written again.
        raise InvalidInput(
            FIELD,
            f"{went_on}: {_MARKED[tables[0][1]]}, so those epochs would not be written again; "
            "start from a later savepoint or write "
            f"{', '.join(repr(name) for name, _ in tables)} to another table",
        )
    if not rewrite:
        raise InvalidInput(
            FIELD,
            f"{went_on}: the new job would write the rows of those epochs again. Start from a "
            "later savepoint or write to other outputs; to write them again on purpose, give "
            f"{REWRITE_FLAG} ({REWRITE_FIELD} in a submission)",
        )
    return tuple(
        f"{REWRITE_FLAG}: sink {s.name!r} holds epochs {first}..{last} of job "
        f"{previous.job_id!r}; their rows will be written to it again"
        for s, last in ahead
    )


__all__ = [
    "REWRITE_FIELD",
    "REWRITE_FLAG",
    "SAVEPOINT_STORE_ENV",
    "check_lineage",
    "outputs_ahead",
]
