"""The end of an attempt: the attempt's end and the job's state in one store transaction, a
failure raised, nothing prepared left behind."""

from __future__ import annotations

import logging

from stoker.errors import InvalidTransition, JobFailed, StokerError
from stoker.runtime.epoch import EpochProcessor
from stoker.runtime.job.plan import JobScope
from stoker.runtime.recovery import recover
from stoker.runtime.supervise import brief
from stoker.sinks.base import TwoPhaseSink
from stoker.store import Store
from stoker.types import AttemptNo, AttemptState, EpochState, JobId, JobState

log = logging.getLogger("stoker.runner")


def fail(
    store: Store,
    jid: JobId,
    attempt: int,
    proc: EpochProcessor,
    e: BaseException,
    scope: JobScope | None = None,
    *,
    managed: bool = False,
) -> None:
    """End the attempt FAILED with the error that ended it, and raise that error."""
    err = proc.error if isinstance(proc.error, StokerError) else e
    if scope is not None and scope.on_failure is not None:
        # The job's own restart strategy decides, in the transaction that ends the attempt.
        scope.on_failure(store, jid, AttemptNo(attempt), brief(err))
    else:
        end_attempt(
            store, jid, attempt, AttemptState.FAILED, JobState.FAILED, brief(err), managed=managed
        )
    if isinstance(err, StokerError):
        if err is e:
            raise e
        raise err from e
    raise JobFailed(f"job {jid!r} failed: {brief(err)}") from e


def end_attempt(
    store: Store,
    jid: JobId,
    attempt: int,
    astate: AttemptState,
    jstate: JobState,
    err: str | None,
    *,
    managed: bool = False,
) -> JobState:
    """End the attempt and move the job, in one store transaction; the job's state after.
    ``managed``: a job manager made the attempt (driver mode)."""
    # Under a job manager, its restart strategy decides what a failure means: the job is left
    # to it. Either way the attempt's end and the job's state are one store transaction.
    managed_failure = jstate == JobState.FAILED and managed
    try:
        store.finish_attempt(
            jid, AttemptNo(attempt), astate, None if managed_failure else jstate, err
        )
    except InvalidTransition:
        if jstate != JobState.SUSPENDED:
            raise
        # A cancel was asked for while the signal stopped the job (CANCELING cannot be
        # suspended): the explicit cancel wins.
        store.finish_attempt(jid, AttemptNo(attempt), AttemptState.CANCELED, JobState.CANCELED)
        return JobState.CANCELED
    return jstate


def resolve_at_end(store: Store, jid: JobId, attempt: int, sinks: list[TwoPhaseSink]) -> None:
    """Leave nothing prepared behind an attempt that has ended: commit what the store decided,
    abort the rest (``recover``); for an ended job, record that its sinks are resolved.

    Best effort: a failure here is logged, and the job manager's janitor (or the next
    attempt's recovery) does it again. Nothing is done while the attempt is live, nor once a
    newer attempt owns the job: its parts in flight are not ours to abort.
    """
    try:
        job = store.get_job(jid)
        if job.current_attempt != attempt:
            return
        rec = store.get_attempt(jid, AttemptNo(attempt))
        if rec is None or rec.state in (AttemptState.STARTING, AttemptState.RUNNING):
            return
        recover(store, jid, sinks)
        if job.state.terminal:
            store.set_resolved(jid)
    except Exception:
        log.exception("job %s: resolving the sinks at the end of attempt %d failed", jid, attempt)


def final_committed(store: Store, jid: JobId) -> bool:
    last = store.list_epochs(jid, limit=1)
    return bool(last) and last[0].final and last[0].state == EpochState.COMMITTED
