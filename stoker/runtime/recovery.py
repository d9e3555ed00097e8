"""Recovery at the start of an attempt: finish what the store decided, abort the rest."""

from __future__ import annotations

import logging

from stoker.sinks.base import Recovered, TwoPhaseSink
from stoker.store import Store
from stoker.testing import fault_point
from stoker.types import AttemptNo, Epoch, EpochState, JobId, TxnState

log = logging.getLogger("stoker.recovery")


def recover(store: Store, job: JobId, sinks: list[TwoPhaseSink]) -> dict[str, Recovered]:
    """Run each sink's recovery against the store's decisions; bring the store up to date.

    Prepared parts of decided epochs are committed (by the attempt that decided them);
    those of undecided epochs, or of attempts that did not decide, are aborted.
    """
    cache: dict[Epoch, AttemptNo | None] = {}

    def decision(epoch: Epoch) -> AttemptNo | None:
        if epoch not in cache:
            rec = store.get_epoch(job, epoch)
            cache[epoch] = (
                rec.decided_by if rec is not None and rec.state != EpochState.PINNED else None
            )
        return cache[epoch]

    report: dict[str, Recovered] = {}
    for sink in sinks:
        done = sink.recover(decision)
        fault_point("in_recovery", -1)
        for e, a in done.committed:
            store.record_txn(job, e, sink.name, a, TxnState.COMMITTED, {"by": "recovery"})
        for e, a in done.aborted:
            store.record_txn(job, e, sink.name, a, TxnState.ABORTED, {"by": "recovery"})
        report[sink.name] = done
        if done.committed or done.aborted:
            log.info(
                "recovered %s: committed %s, aborted %s", sink.name, done.committed, done.aborted
            )
    # Decided epochs whose every sink is now committed are COMMITTED in the store too.
    for rec in store.epochs_in_state(job, str(EpochState.DECIDED)):
        assert rec.decided_by is not None
        for sink in sinks:
            sink.commit(rec.epoch, rec.decided_by)  # idempotent; covers a crash mid-commit
        store.mark_epoch_committed(job, rec.epoch)
    # Store records of parts no sink still holds prepared: they were aborted by the sink scan
    # above or never reached the sink; the record follows.
    for txn in store.list_txns(job, TxnState.PREPARED):
        if decision(txn.epoch) != txn.attempt:
            store.record_txn(job, txn.epoch, txn.sink, txn.attempt, TxnState.ABORTED, {})
        else:
            store.record_txn(job, txn.epoch, txn.sink, txn.attempt, TxnState.COMMITTED, {})
    return report
