"""Recovery: finish what the store decided, exactly as recorded, and abort everything else.

Runs at the start of every attempt, and for a job that has ended (the janitor): safe to call
at any time no attempt of the job can decide an epoch, and idempotent.
"""

from __future__ import annotations

import logging

from stoker.runtime.pending import PendingEpoch
from stoker.sinks.base import Recovered, TwoPhaseSink
from stoker.store import Store
from stoker.testing import fault_point
from stoker.types import AttemptNo, Epoch, EpochState, JobId, TxnState

log = logging.getLogger("stoker.recovery")


def recover(
    store: Store, job: JobId, sinks: list[TwoPhaseSink], phase: str = "start"
) -> dict[str, Recovered]:
    """Commit every decided epoch's recorded parts, then abort every other leftover part.

    1. Each DECIDED epoch becomes a :class:`PendingEpoch` built from the store's records (the
       parts each sink recorded PREPARED before the decision) and is committed from it: each
       sink commits exactly those parts (the PostgreSQL sink raises if one is lost) and the
       epoch is marked COMMITTED. A crash midway: the next recovery does it again (idempotent).
    2. Each sink rolls back every part it still holds prepared: parts of undecided epochs, of
       attempts that did not decide, and strays (retried, speculative or zombie task copies)
       of decided ones. Their store records follow.
    3. Store records still PREPARED follow the decision.
    """
    # 1. Decided epochs, committed from the record.
    for rec in store.epochs_in_state(job, str(EpochState.DECIDED)):
        pending = PendingEpoch.decided(store, rec, sinks)
        pending.commit(sinks)
        pending.mark_committed()
        log.info("recovery committed epoch %d of attempt %d", rec.epoch, rec.decided_by)

    cache: dict[Epoch, AttemptNo | None] = {}

    def decision(epoch: Epoch) -> AttemptNo | None:
        if epoch not in cache:
            rec = store.get_epoch(job, epoch)
            cache[epoch] = (
                rec.decided_by if rec is not None and rec.state != EpochState.PINNED else None
            )
        return cache[epoch]

    # 2. Everything else each sink still holds.
    report: dict[str, Recovered] = {}
    for sink in sinks:
        fault_point(f"sink_recovery_at_{phase}")
        done = sink.recover(decision)
        fault_point("in_recovery", -1)
        for e, a in done.committed:
            store.record_txn(job, e, sink.name, a, TxnState.COMMITTED, {"by": "recovery"})
        for e, a in done.aborted:
            store.record_txn(job, e, sink.name, a, TxnState.ABORTED, {"by": "recovery"})
        report[sink.name] = done
        if done.committed or done.aborted or done.strays:
            log.info(
                "recovered %s: committed %s, aborted %s, rolled back strays %s",
                sink.name,
                done.committed,
                done.aborted,
                done.strays,
            )
    # 3. Store records of parts no sink still holds prepared: they were aborted by the sink
    #    scan above or never reached the sink; the record follows. (A decided one was
    #    committed at step 1; one still PREPARED under a COMMITTED epoch comes from an older
    #    version that marked the epoch before the record.)
    for txn in store.list_txns(job, TxnState.PREPARED):
        if decision(txn.epoch) != txn.attempt:
            store.record_txn(job, txn.epoch, txn.sink, txn.attempt, TxnState.ABORTED, {})
        else:
            store.record_txn(job, txn.epoch, txn.sink, txn.attempt, TxnState.COMMITTED, {})
    return report
