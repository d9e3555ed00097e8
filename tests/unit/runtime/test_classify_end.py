"""How an attempt ends, from how its query ended: classify_end is pure (no store, no Spark)."""

from __future__ import annotations

import pytest

from stoker.errors import JobFailed, StaleAttempt
from stoker.runtime.job.ending import End, EndKind, classify_end
from stoker.types import AttemptState, JobState


@pytest.mark.parametrize(
    ("returned", "attempt"),
    [
        (JobState.FINISHED, AttemptState.FINISHED),  # the final epoch committed
        (JobState.SUSPENDED, AttemptState.SUSPENDED),  # a graceful stop: resumable
        (JobState.CANCELED, AttemptState.CANCELED),  # an explicit cancel
        (JobState.FAILED, AttemptState.CANCELED),  # stopped from outside, not by itself
    ],
)
def test_a_query_that_ended_records_the_state_it_returned(
    returned: JobState, attempt: AttemptState
) -> None:
    for signalled in (False, True):  # a signal changes nothing once the run returned
        assert classify_end(returned, None, signalled) == End(EndKind.END, returned, attempt)


def test_a_signal_before_the_query_ran_suspends() -> None:
    end = classify_end(None, KeyboardInterrupt(), signalled=True)
    assert end == End(EndKind.END, JobState.SUSPENDED, AttemptState.SUSPENDED)
    assert not end.after_signal  # nothing failed: no warning


def test_a_fenced_attempt_records_nothing() -> None:
    for signalled in (False, True):
        end = classify_end(None, StaleAttempt("attempt 2 owns the job"), signalled)
        assert end.kind is EndKind.FENCED


@pytest.mark.parametrize(
    "error", [RuntimeError("boom"), JobFailed("query failed"), ValueError("bad")]
)
def test_an_error_fails_the_attempt(error: Exception) -> None:
    assert classify_end(None, error, signalled=False) == End(
        EndKind.FAIL, JobState.FAILED, AttemptState.FAILED
    )


def test_an_error_after_a_stop_signal_is_the_shutdown_s_doing() -> None:
    end = classify_end(None, RuntimeError("python worker exited"), signalled=True)
    assert end == End(EndKind.END, JobState.SUSPENDED, AttemptState.SUSPENDED, after_signal=True)


def test_a_base_exception_fails_even_after_a_signal() -> None:
    for signalled in (False, True):
        end = classify_end(None, SystemExit(3), signalled)
        assert end.kind is EndKind.FAIL and end.job is JobState.FAILED


def test_no_state_and_no_error_is_a_failure_end() -> None:
    # The run phase always returns a state or raises; were it not, the job is not left running.
    assert classify_end(None, None, signalled=False).job is JobState.FAILED
