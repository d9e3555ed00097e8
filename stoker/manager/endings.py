"""How the leader ends a live record whose attempt has ended: a job that failed for good while
its driver's processes still ran (FAILING -> FAILED once they are gone), and a job left live
over an attempt that ended otherwise (repaired to where the attempt's end says)."""

from __future__ import annotations

import logging

from stoker.manager.launcher import DriverLauncher
from stoker.store import AttemptRecord, JobRecord, Store
from stoker.types import AttemptState, JobState

log = logging.getLogger("stoker.supervisor")

# The longest a job stays FAILING while its driver's processes do not die.
FAILING_MAX = 60.0


def end_failing(store: Store, launcher: DriverLauncher, job: JobRecord, now: float) -> None:
    """A job that failed for good while its driver's processes ran: FAILED once nothing of
    them is seen (killed again until then), or after FAILING_MAX whatever is left (a
    process that survives SIGKILL is the host's to look at; the job's fencing token keeps
    it from writing anything)."""
    att = store.get_attempt(job.job_id, job.current_attempt)
    if att is not None and launcher.still_running(att.owner):
        if now - job.updated_at < FAILING_MAX:
            launcher.kill(att.owner)
            return
        log.warning("job %s: its driver's processes outlived %ss of kills", job.job_id, FAILING_MAX)
    store.set_job_state(job.job_id, JobState.FAILED, job.last_error)
    log.info("job %s: its driver is gone; the job is now FAILED", job.job_id)


def repair(store: Store, job: JobRecord, attempt: AttemptRecord) -> None:
    """A live job whose current attempt has ended otherwise than FAILED.

    A driver ends its attempt and moves its job in one transaction (``finish_attempt``);
    this state is left by an older version that did it in two, killed in between. The job
    goes where the attempt's end says; a suspended attempt under a job being canceled
    ends the job CANCELED (the cancel was asked for explicitly).
    """
    target = {
        AttemptState.FINISHED: JobState.FINISHED,
        AttemptState.CANCELED: JobState.CANCELED,
        AttemptState.SUSPENDED: JobState.SUSPENDED,
    }.get(attempt.state)
    if target is None:
        return  # SUPERSEDED is never current: the newer attempt is
    if target == JobState.SUSPENDED and job.state == JobState.CANCELING:
        target = JobState.CANCELED
    after = store.finish_attempt(job.job_id, attempt.attempt, attempt.state, target)
    log.warning(
        "job %s: attempt %d had ended %s under a %s job; job is now %s",
        job.job_id,
        attempt.attempt,
        attempt.state,
        job.state,
        after.state,
    )
