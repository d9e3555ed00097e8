"""The job's sinks as an earlier attempt recorded them, against the pipeline's now.

A pipeline may lose or gain a sink between a crash and the restart. A removed sink may still
hold parts: the part of an epoch decided before the crash (recorded, owed a commit) and
undecided leftovers. The user's code no longer names it, so it is rebuilt from the descriptor
the earlier attempt recorded (:func:`stoker.sinks.from_descriptor`, as the janitor's cleanup
does) and recovered with the others; its descriptor stays recorded until that recovery is
done, so that a crash meanwhile leaves it to the next recovery or the janitor. An added sink
has no part in an epoch decided before it was added: it takes part from the next epoch on.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stoker.errors import SinkError, StokerError
from stoker.sinks import descriptor_of, from_descriptor
from stoker.sinks.base import SinkOwner, TwoPhaseSink
from stoker.store import Store
from stoker.types import EpochState, JobId, TxnState

log = logging.getLogger("stoker.recovery")


@dataclass
class SinkSet:
    """The pipeline's sinks and the removed ones whose leftovers are still owed."""

    current: list[dict[str, Any]]  # descriptors of the pipeline's sinks
    removed: list[dict[str, Any]] = field(default_factory=list)  # recorded, gone from it
    rebuilt: list[TwoPhaseSink] = field(default_factory=list)  # the removed ones, opened


def _name(d: dict[str, Any]) -> str:
    return str(d.get("name") or "?")


def record_sinks(store: Store, jid: JobId, sinks: list[TwoPhaseSink]) -> SinkSet:
    """Record the descriptors the janitor rebuilds the job's sinks from: the pipeline's, and
    those an earlier attempt recorded that the pipeline no longer has (owed a recovery).
    Says in the log which sinks were removed and which are new."""
    current = [descriptor_of(s) for s in sinks]
    names = [s.name for s in sinks]
    recorded = store.get_job_sinks(jid)
    before = {_name(d) for d in recorded}
    removed = [d for d in recorded if _name(d) not in names]
    store.set_job_sinks(jid, current + removed)
    for d in removed:
        log.warning(
            "job %s: sink %r was removed from the pipeline since an earlier attempt: its "
            "leftover parts (a decided epoch's too) are resolved from its recorded descriptor",
            jid,
            _name(d),
        )
    if recorded:  # a job's first sinks are not "new"
        for name in names:
            if name not in before:
                log.info(
                    "job %s: sink %r is new since an earlier attempt: it takes part from the "
                    "next epoch on (epochs decided before have no part of it)",
                    jid,
                    name,
                )
    return SinkSet(current, removed)


def open_removed(
    store: Store, jid: JobId, sinkset: SinkSet, owner: SinkOwner, state_dir: Path
) -> list[TwoPhaseSink]:
    """The removed sinks, rebuilt and opened (also kept in ``sinkset.rebuilt``).

    One that cannot be (a user-defined sink records no descriptor, its server is gone) is
    left out with a warning, unless an epoch was decided with a part of it not committed
    yet: that part is owed, and :class:`SinkError` says how to get it committed."""
    for d in sinkset.removed:
        name = _name(d)
        try:
            if d.get("kind") is None:
                raise SinkError(
                    "sinks",
                    f"it records no descriptor ({d.get('class') or 'a user-defined sink'}): "
                    "stoker cannot rebuild it without the application's code",
                )
            sink = from_descriptor(d)
            sink.open(owner, state_dir)
        except (StokerError, OSError) as e:
            owed = _decided_parts(store, jid, name)
            if owed:
                raise SinkError(
                    "sinks",
                    f"sink {name!r} was removed from the pipeline, but epochs {owed} were "
                    f"decided with a part of it that is not committed yet, and it cannot be "
                    f"rebuilt: {e}. Add the sink back for one run, so that its part is "
                    "committed, then remove it",
                ) from e
            log.warning(
                "job %s: removed sink %r cannot be rebuilt (%s): parts it may still hold "
                "prepared are left there",
                jid,
                name,
                e,
            )
            continue
        sinkset.rebuilt.append(sink)
    return sinkset.rebuilt


def forget_removed(store: Store, jid: JobId, sinkset: SinkSet) -> None:
    """The removed sinks are resolved: from now on only the pipeline's are recorded."""
    if sinkset.removed:
        store.set_job_sinks(jid, sinkset.current)
        sinkset.removed = []


def _decided_parts(store: Store, jid: JobId, sink: str) -> list[int]:
    """Epochs decided with a part of ``sink`` that is still PREPARED in the store."""
    owed = []
    for txn in store.list_txns(jid, TxnState.PREPARED):
        if txn.sink != sink:
            continue
        rec = store.get_epoch(jid, txn.epoch)
        if rec is not None and rec.state == EpochState.DECIDED and rec.decided_by == txn.attempt:
            owed.append(int(txn.epoch))
    return sorted(owed)
