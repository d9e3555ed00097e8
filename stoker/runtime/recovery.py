"""Recovery: finish what the store decided, exactly as recorded, and abort everything else.

Runs at the start of every attempt, at its end, and for a job that has ended (the janitor),
each time under the job's recovery hold (:mod:`stoker.runtime.recovery_hold`) and bounded to
the attempts it resolves: a later attempt's parts are never touched, even by a recovery that
stalled while that attempt began. Idempotent.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable

from stoker.runtime.pending import PendingEpoch
from stoker.sinks.base import Decision, Recovered, TwoPhaseSink
from stoker.store import Store
from stoker.testing import fault_point
from stoker.types import AttemptNo, Epoch, EpochState, JobId, TxnState

log = logging.getLogger("stoker.recovery")


def _go_on() -> None:
    return None


def recover(
    store: Store,
    job: JobId,
    sinks: list[TwoPhaseSink],
    *,
    up_to: AttemptNo,
    phase: str = "start",
    fence: Callable[[], None] = _go_on,
    complete: bool = True,
) -> dict[str, Recovered]:
    """Commit every decided epoch's recorded parts, then abort every other leftover part, of
    attempts up to ``up_to``.

    1. Each DECIDED epoch (decided by an attempt up to ``up_to``) becomes a
       :class:`PendingEpoch` built from the store's records (the parts each sink recorded
       PREPARED before the decision) and is committed from it: each sink commits exactly
       those parts (the PostgreSQL sink raises if one is lost) and the epoch is marked
       COMMITTED. A sink with no record of the epoch was added after it was decided: it has
       no part of it. A crash midway: the next recovery does it again (idempotent).
    2. Each sink rolls back every part of an attempt up to ``up_to`` it still holds prepared:
       parts of undecided epochs, of attempts that did not decide, and strays (retried,
       speculative or zombie task copies) of decided ones. Their store records follow.
    3. Store records of those attempts still PREPARED follow the decision.

    ``sinks`` are the pipeline's and the ones removed from it whose leftovers are still
    owed. ``fence`` raises to stop between steps (the hold was taken over). ``complete``
    False: some sinks of the job are left out (the cleanup could not rebuild them), so a
    decided epoch stays DECIDED for the next recovery and only these sinks' records follow.
    ``phase`` (start, end, cleanup) names the recovery in the log and the fault points.
    """
    # 1. Decided epochs, committed from the record.
    fence()
    for rec in store.epochs_in_state(job, str(EpochState.DECIDED)):
        if rec.decided_by is None or rec.decided_by > up_to:
            continue  # a later attempt's decision: that attempt commits it
        pending = PendingEpoch.decided(store, rec, sinks)
        for name in sorted(pending.absent):
            log.info(
                "epoch %d was decided before sink %r was added: no part of it", rec.epoch, name
            )
        pending.commit(sinks)
        if complete:
            pending.mark_committed()
        log.info(
            "recovery (%s) committed epoch %d of attempt %d%s",
            phase,
            rec.epoch,
            rec.decided_by,
            "" if complete else " (left DECIDED: sinks were left out)",
        )
        fence()

    cache: dict[Epoch, AttemptNo | None] = {}

    def decision(epoch: Epoch) -> AttemptNo | None:
        if epoch not in cache:
            rec = store.get_epoch(job, epoch)
            cache[epoch] = (
                rec.decided_by if rec is not None and rec.state != EpochState.PINNED else None
            )
        return cache[epoch]

    # 2. Everything else each sink still holds.
    fence()
    report: dict[str, Recovered] = {}
    for sink in sinks:
        fault_point(f"sink_recovery_at_{phase}")
        done = _recover_sink(sink, decision, up_to)
        fault_point("in_recovery", -1)
        for e, a in done.committed:
            store.record_txn(job, e, sink.name, a, TxnState.COMMITTED, {"by": "recovery"})
        for e, a in done.aborted:
            store.record_txn(job, e, sink.name, a, TxnState.ABORTED, {"by": "recovery"})
        report[sink.name] = done
        if done.committed or done.aborted or done.strays:
            log.info("sink %s after a stop: %s", sink.name, _recovered_words(done))
    # 3. Store records of parts no sink still holds prepared: they were aborted by the sink
    #    scan above or never reached the sink; the record follows. (A decided one was
    #    committed at step 1; one still PREPARED under a COMMITTED epoch comes from an older
    #    version that marked the epoch before the record.) A later attempt's records are
    #    its own, in flight.
    fence()
    names = {s.name for s in sinks}
    for txn in store.list_txns(job, TxnState.PREPARED):
        if txn.attempt > up_to or (not complete and txn.sink not in names):
            continue
        if decision(txn.epoch) != txn.attempt:
            store.record_txn(job, txn.epoch, txn.sink, txn.attempt, TxnState.ABORTED, {})
        else:
            store.record_txn(job, txn.epoch, txn.sink, txn.attempt, TxnState.COMMITTED, {})
    return report


def _recover_sink(sink: TwoPhaseSink, decision: Decision, up_to: AttemptNo) -> Recovered:
    """``sink.recover`` bounded to ``up_to``; what it reports of later attempts is dropped.

    A sink written for an earlier protocol (no ``up_to`` parameter) cannot be bounded: it is
    called as before, with a warning."""
    try:
        params = dict(inspect.signature(sink.recover).parameters)
    except (TypeError, ValueError):
        params = {}
    takes_bound = "up_to" in params or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()
    )
    if takes_bound:
        done = sink.recover(decision, up_to=up_to)
    else:
        log.warning(
            "sink %r: its recover() takes no up_to bound (written for an earlier version): "
            "it may touch parts of attempts after %d",
            sink.name,
            up_to,
        )
        done = sink.recover(decision)
    return Recovered(
        committed=[(e, a) for e, a in done.committed if a <= up_to],
        aborted=[(e, a) for e, a in done.aborted if a <= up_to],
        strays=done.strays,
    )


def _recovered_words(done: Recovered) -> str:
    """What a sink's recovery did, for the run's log: the epochs whose parts it committed
    (decided before the stop) and rolled back (never decided), by epoch and attempt."""

    def epochs(pairs: list[tuple[Epoch, AttemptNo]]) -> str:
        named = ", ".join(f"{e} (attempt {a})" for e, a in sorted(pairs))
        return f"epoch{'s' if len(pairs) > 1 else ''} {named}"

    said = []
    if done.committed:
        said.append(f"committed the decided parts of {epochs(done.committed)}")
    if done.aborted:
        said.append(f"rolled back the undecided parts of {epochs(done.aborted)}")
    if done.strays:
        said.append(f"rolled back {len(done.strays)} stray parts (retried or zombie tasks)")
    return "; ".join(said)
