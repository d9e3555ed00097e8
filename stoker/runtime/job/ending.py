"""The end of an attempt: the attempt's end and the job's state in one store transaction, a
failure raised, nothing prepared left behind."""

from __future__ import annotations

import enum
import logging
import traceback
from dataclasses import dataclass

from stoker.errors import InvalidInput, InvalidTransition, JobFailed, StaleAttempt, StokerError
from stoker.runtime.epoch import EpochProcessor
from stoker.runtime.job.plan import JobScope
from stoker.runtime.job.query import brief
from stoker.runtime.recovery import recover
from stoker.runtime.recovery_hold import Hold
from stoker.sinks.base import TwoPhaseSink
from stoker.sources.base import invalid_source_in
from stoker.store import Store
from stoker.types import AttemptNo, AttemptState, EpochState, JobId, JobState

log = logging.getLogger("stoker.runner")


class EndKind(enum.Enum):
    """What the attempt does with how its query ended."""

    END = "end"  # record the end: the attempt's state and the job's, in one transaction
    FAIL = "fail"  # record the attempt FAILED (or let the job's restart strategy decide), raise
    FENCED = "fenced"  # a newer attempt owns the job: record nothing, raise as it came


@dataclass(frozen=True)
class End:
    """How an attempt ends, decided from how its query ended (:func:`classify_end`)."""

    kind: EndKind
    job: JobState  # the job's state to record (END); FAILED otherwise
    attempt: AttemptState
    # A failure seen after a stop signal: the shutdown's doing, the job is suspended.
    after_signal: bool = False


def classify_end(state: JobState | None, error: BaseException | None, signalled: bool) -> End:
    """The attempt's end, from what its phases left: ``state``, the job state the run phase
    returned (None if it did not return); ``error``, what a phase raised (None if none);
    ``signalled``, whether a stop signal (or the application's stop) came.

    - Returned: that state. A query stopped from outside (not by its final epoch) ends the
      attempt CANCELED, like a cancel; FINISHED and SUSPENDED end it so.
    - KeyboardInterrupt (a signal before the query ran: Spark starting, recovery): nothing was
      decided by this attempt that recovery would not finish; SUSPENDED, to be resumed.
    - StaleAttempt: fenced, a newer attempt owns the job; its state is not ours to touch.
    - Any other error after a stop signal: the shutdown's doing (on a host shutdown every
      process gets SIGTERM, Spark's Python workers too, failing the tasks in flight). Nothing
      undecided is kept; SUSPENDED like any stopped job.
    - Any other error (or a BaseException): FAILED.
    """
    if error is None:
        job = JobState.FAILED if state is None else state
        return End(EndKind.END, job, _ATTEMPT_END.get(job, AttemptState.CANCELED))
    if isinstance(error, KeyboardInterrupt):
        return End(EndKind.END, JobState.SUSPENDED, AttemptState.SUSPENDED)
    if isinstance(error, StaleAttempt):
        return End(EndKind.FENCED, JobState.FAILED, AttemptState.FAILED)
    if isinstance(error, Exception) and signalled:
        return End(EndKind.END, JobState.SUSPENDED, AttemptState.SUSPENDED, after_signal=True)
    return End(EndKind.FAIL, JobState.FAILED, AttemptState.FAILED)


_ATTEMPT_END = {
    JobState.FINISHED: AttemptState.FINISHED,
    JobState.SUSPENDED: AttemptState.SUSPENDED,
}


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
    """End the attempt FAILED with the error that ended it, and raise that error.

    A job with a restart strategy of its own (a job of an application) has it decide, unless
    the error is bad input (exit 2): the same input fails the same way, so the job fails for
    good at once, as a job manager fails its jobs (the default strategy never gives up)."""
    err = proc.error if isinstance(proc.error, StokerError) else e
    if not isinstance(err, StokerError):  # bad input a source found in Spark's processes
        err = invalid_source_in(str(err)) or err
    if scope is not None and scope.on_failure is not None and not isinstance(err, InvalidInput):
        # The job's own restart strategy decides, in the transaction that ends the attempt.
        scope.on_failure(store, jid, AttemptNo(attempt), recorded(err))
    else:
        why = recorded(err)
        if scope is not None and scope.on_failure is not None:
            why = f"{why}; bad input: a restart cannot fix it (fix it, then restart the job)"
        end_attempt(store, jid, attempt, AttemptState.FAILED, JobState.FAILED, why, managed=managed)
    if isinstance(err, StokerError):
        if err is e:
            raise e
        raise err from e
    raise JobFailed(f"job {jid!r} failed: {brief(err)}") from e


TRACEBACK_FRAMES = 12  # the innermost frames an attempt's error keeps


def recorded(err: BaseException) -> str:
    """An error as its attempt records it: :func:`brief`; for one that Python code raised in
    the driver (the user's transform or stream function, a sink), its type and its traceback's
    innermost frames too, so that ``stoker status`` and the web UI's exception history name
    the user's exception and the line of their code that raised it, as they do for a task's
    failure (whose text Spark gives with the worker's traceback in it)."""
    text = brief(err)
    spark = type(err).__module__.split(".")[0] in ("pyspark", "py4j")
    if isinstance(err, StokerError) or spark or err.__traceback__ is None:
        return text
    head = f"{type(err).__name__}: {text}" if text else type(err).__name__
    frames = "".join(traceback.format_tb(err.__traceback__)[-TRACEBACK_FRAMES:])
    return f"{head}\nTraceback (most recent call last):\n{frames}{head}"


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


def resolve_at_end(
    store: Store, jid: JobId, attempt: int, sinks: list[TwoPhaseSink], ttl: float
) -> bool:
    """Leave nothing prepared behind an attempt that has ended: commit what the store decided,
    abort the rest (``recover``, bounded to this attempt and earlier ones); for an ended job,
    record that its sinks are resolved. Whether it ran.

    Under the job's recovery hold (``ttl``: how long it outlives a stall): the job manager may
    start the next attempt the moment this one has ended, and that attempt waits for the hold
    before its own recovery and its query. The checks are made again once the hold is taken:
    nothing is done while the attempt is live, nor once a newer attempt owns the job (its
    parts in flight are not ours to abort). Best effort: a failure here is logged, and the job
    manager's janitor (or the next attempt's recovery) does it again.
    """
    try:
        if not _ended_and_current(store, jid, attempt):
            return False
        with Hold(store, jid, AttemptNo(attempt), ttl) as hold:
            if not _ended_and_current(store, jid, attempt):
                return False
            job = store.get_job(jid)
            recover(store, jid, sinks, up_to=AttemptNo(attempt), phase="end", fence=hold.check)
            if job.state.terminal:
                store.set_resolved(jid)
            return True
    except StaleAttempt as e:
        log.info("job %s: attempt %d leaves its sinks to a newer recovery: %s", jid, attempt, e)
    except Exception:
        log.exception("job %s: resolving the sinks at the end of attempt %d failed", jid, attempt)
    return False


def _ended_and_current(store: Store, jid: JobId, attempt: int) -> bool:
    """The attempt has ended and no newer one has started."""
    if store.get_job(jid).current_attempt != attempt:
        return False
    rec = store.get_attempt(jid, AttemptNo(attempt))
    return rec is not None and rec.state not in (AttemptState.STARTING, AttemptState.RUNNING)


def final_committed(store: Store, jid: JobId) -> bool:
    last = store.list_epochs(jid, limit=1)
    return bool(last) and last[0].final and last[0].state == EpochState.COMMITTED
