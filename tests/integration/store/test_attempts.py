"""The store contract for attempts and leases: compare and swap, takeover, renew, end.

Run against SQLite and PostgreSQL alike (fixtures in conftest.py). Time is a
:class:`~stoker.clock.ManualClock`; leases lapse because the test moves the clock.
"""

from __future__ import annotations

import pytest

from stoker.clock import ManualClock
from stoker.errors import DuplicateJob, JobNotFound, JobTerminal
from stoker.restart import FailureCause, cause_of, counted
from stoker.store import AttemptRecord, Owner, Store
from stoker.types import AttemptNo, AttemptState, JobState, job_id
from tests.integration.store.support import (
    CONFIG,
    JOB,
    OWNER,
    OWNER_B,
    SPEC,
    T0,
    TTL,
    OpenStore,
    race,
    running_job,
)


def test_first_attempt_is_number_one(store: Store) -> None:
    store.create_job(JOB, "orders", SPEC, CONFIG)

    att = store.start_attempt(JOB, OWNER, TTL, expected_current=AttemptNo(0))

    assert att == AttemptRecord(
        job_id=JOB,
        attempt=AttemptNo(1),
        state=AttemptState.RUNNING,
        owner=OWNER,
        lease_expires_at=T0 + TTL,
        started_at=T0,
        ended_at=None,
        error=None,
        lease_ttl=TTL,
    )
    job = store.get_job(JOB)
    assert (job.state, job.current_attempt) == (JobState.RUNNING, 1)
    assert store.get_attempt(JOB, AttemptNo(1)) == att
    assert store.get_attempt(JOB, AttemptNo(2)) is None
    assert store.list_attempts(JOB) == [att]


def test_start_attempt_of_unknown_job_raises_job_not_found(store: Store) -> None:
    with pytest.raises(JobNotFound):
        store.start_attempt(job_id("nope"), OWNER, TTL, expected_current=AttemptNo(0))


@pytest.mark.parametrize("wall", [TTL - 0.5, TTL + 600.0])
def test_a_start_that_did_not_see_the_lease_lapse_is_a_duplicate(
    store: Store, clock: ManualClock, wall: float
) -> None:
    """Whatever the wall clock says (here its lease "ended" 10 minutes ago: a clock step): the
    store takes no attempt over unless the caller saw its lease unrenewed for a whole TTL."""
    first = running_job(store)
    clock.step(wall)

    with pytest.raises(DuplicateJob) as info:
        store.start_attempt(JOB, OWNER_B, TTL, expected_current=AttemptNo(1))

    assert info.value.job_id == JOB
    assert "attempt 1 runs as pid 101 on host-a, its lease renewed" in str(info.value)
    assert store.list_attempts(JOB) == [first]
    assert store.get_job(JOB).current_attempt == 1


def test_a_lease_renewed_since_it_was_seen_is_not_taken_over(
    store: Store, clock: ManualClock
) -> None:
    first = running_job(store)
    clock.advance(TTL + 1)
    assert store.renew_lease(JOB, AttemptNo(1), TTL)  # the holder woke up: renewed

    with pytest.raises(DuplicateJob, match="its lease renewed meanwhile"):
        store.start_attempt(
            JOB, OWNER_B, TTL, expected_current=AttemptNo(1), lapsed=first.lease_seen
        )
    assert store.get_job(JOB).current_attempt == 1


def test_after_the_lease_lapses_a_new_attempt_supersedes_the_old(
    store: Store, clock: ManualClock
) -> None:
    first = running_job(store)
    clock.advance(TTL)  # seen unrenewed for a TTL by the caller (stoker.leases)

    second = store.start_attempt(
        JOB, OWNER_B, TTL, expected_current=AttemptNo(1), lapsed=first.lease_seen
    )

    now = T0 + TTL
    assert second == AttemptRecord(
        job_id=JOB,
        attempt=AttemptNo(2),
        state=AttemptState.RUNNING,
        owner=OWNER_B,
        lease_expires_at=now + TTL,
        started_at=now,
        ended_at=None,
        error=None,
        lease_ttl=TTL,
    )
    assert store.list_attempts(JOB) == [
        AttemptRecord(
            job_id=JOB,
            attempt=AttemptNo(1),
            state=AttemptState.SUPERSEDED,
            owner=OWNER,
            lease_expires_at=now,
            started_at=T0,
            ended_at=now,
            error="superseded by a newer attempt",
            lease_ttl=TTL,
        ),
        second,
    ]
    job = store.get_job(JOB)
    assert (job.state, job.current_attempt, job.updated_at) == (JobState.RUNNING, 2, now)


def test_previous_dead_allows_takeover_of_a_live_lease(store: Store, clock: ManualClock) -> None:
    running_job(store)
    clock.advance(1)

    second = store.start_attempt(
        JOB, OWNER_B, TTL, expected_current=AttemptNo(1), previous_dead=True
    )

    assert second.attempt == 2
    first = store.get_attempt(JOB, AttemptNo(1))
    assert first is not None
    assert (first.state, first.ended_at) == (AttemptState.SUPERSEDED, T0 + 1)
    assert store.get_job(JOB).current_attempt == 2


def test_an_ended_attempt_is_replaced_without_waiting_for_its_lease(store: Store) -> None:
    running_job(store)
    store.end_attempt(JOB, AttemptNo(1), AttemptState.FAILED, error="driver crashed")

    second = store.start_attempt(JOB, OWNER_B, TTL, expected_current=AttemptNo(1))

    assert second.attempt == 2
    first = store.get_attempt(JOB, AttemptNo(1))
    assert first is not None
    assert (first.state, first.error, first.ended_at) == (
        AttemptState.FAILED,
        "driver crashed",
        T0,
    )


@pytest.mark.parametrize("expected", [0, 2, 7])
def test_start_attempt_compares_and_swaps_the_current_attempt(
    store: Store, clock: ManualClock, expected: int
) -> None:
    first = running_job(store)
    clock.advance(TTL + 1)

    with pytest.raises(DuplicateJob) as info:
        store.start_attempt(JOB, OWNER_B, TTL, expected_current=AttemptNo(expected))

    assert "attempt 1 started meanwhile" in str(info.value)
    assert store.list_attempts(JOB) == [first]
    assert store.get_job(JOB).current_attempt == 1


def test_terminal_job_is_not_restarted_unless_asked(store: Store, clock: ManualClock) -> None:
    running_job(store)
    store.end_attempt(JOB, AttemptNo(1), AttemptState.FINISHED)
    finished = store.set_job_state(JOB, JobState.FINISHED)
    clock.advance(1)

    with pytest.raises(JobTerminal) as info:
        store.start_attempt(JOB, OWNER_B, TTL, expected_current=AttemptNo(1))
    assert (info.value.job_id, info.value.state) == (JOB, "FINISHED")
    assert store.get_job(JOB) == finished

    again = store.start_attempt(JOB, OWNER_B, TTL, expected_current=AttemptNo(1), restart=True)

    assert again.attempt == 2
    job = store.get_job(JOB)
    assert (job.state, job.current_attempt, job.last_error) == (JobState.RUNNING, 2, None)


def test_failed_job_restart_clears_the_error(store: Store) -> None:
    running_job(store)
    store.end_attempt(JOB, AttemptNo(1), AttemptState.FAILED, error="boom")
    store.set_job_state(JOB, JobState.FAILED, error="boom")

    with pytest.raises(JobTerminal):
        store.start_attempt(JOB, OWNER, TTL, expected_current=AttemptNo(1))
    store.start_attempt(JOB, OWNER, TTL, expected_current=AttemptNo(1), restart=True)

    job = store.get_job(JOB)
    assert (job.state, job.current_attempt, job.last_error) == (JobState.RUNNING, 2, None)


@pytest.mark.parametrize("situation", ["fresh job", "lapsed lease"])
def test_concurrent_start_attempt_has_exactly_one_winner(
    open_new: OpenStore, clock: ManualClock, situation: str
) -> None:
    stores = [open_new() for _ in range(16)]
    stores[0].create_job(JOB, "orders", SPEC, CONFIG)
    expected = AttemptNo(0)
    seen = None
    if situation == "lapsed lease":
        seen = stores[0].start_attempt(JOB, OWNER, TTL, expected_current=AttemptNo(0)).lease_seen
        clock.advance(TTL + 1)
        expected = AttemptNo(1)

    results = race(
        16,
        lambda i: stores[i].start_attempt(
            JOB, Owner(f"host-{i}", 1000 + i, "boot"), TTL, expected_current=expected, lapsed=seen
        ),
    )

    won = [r for r in results if isinstance(r, AttemptRecord)]
    lost = [r for r in results if not isinstance(r, AttemptRecord)]
    assert len(won) == 1
    assert len(lost) == 15
    assert all(type(e) is DuplicateJob for e in lost), lost
    assert won[0].attempt == expected + 1
    assert store_attempt_numbers(stores[0]) == list(range(1, expected + 2))
    assert stores[0].get_job(JOB).current_attempt == expected + 1


def store_attempt_numbers(store: Store) -> list[int]:
    return [a.attempt for a in store.list_attempts(JOB)]


def test_renew_lease_extends_the_current_attempt(store: Store, clock: ManualClock) -> None:
    running_job(store)
    clock.advance(TTL - 1)

    assert store.renew_lease(JOB, AttemptNo(1), 30.0) is True

    att = store.get_attempt(JOB, AttemptNo(1))
    assert att is not None
    assert att.lease_expires_at == T0 + TTL - 1 + 30.0
    clock.advance(TTL)  # past the first lease, within the renewed one
    with pytest.raises(DuplicateJob):
        store.start_attempt(JOB, OWNER_B, TTL, expected_current=AttemptNo(1))


def test_renew_lease_fails_once_superseded(store: Store, clock: ManualClock) -> None:
    running_job(store)
    store.start_attempt(JOB, OWNER_B, TTL, expected_current=AttemptNo(1), previous_dead=True)
    before = store.get_attempt(JOB, AttemptNo(1))

    assert store.renew_lease(JOB, AttemptNo(1), TTL) is False
    assert store.get_attempt(JOB, AttemptNo(1)) == before
    assert store.renew_lease(JOB, AttemptNo(2), TTL) is True


@pytest.mark.parametrize("step", [0.0, 0.25, 100.0, -600.0])
def test_a_renewal_counts_whatever_the_wall_clock_says(
    store: Store, clock: ManualClock, step: float
) -> None:
    """A holder's renewal is refused only when it no longer owns the job: a wall clock stepped
    past its expiry (or back) once made a healthy driver lose its lease."""
    first = running_job(store)
    clock.step(TTL + step)

    assert store.renew_lease(JOB, AttemptNo(1), TTL) is True
    after = store.get_attempt(JOB, AttemptNo(1))
    assert after is not None and after.renewals == first.renewals + 1
    assert after.lease_seen != first.lease_seen  # what an observer sees change


def test_renew_lease_fails_for_an_ended_attempt(store: Store) -> None:
    running_job(store)
    store.end_attempt(JOB, AttemptNo(1), AttemptState.CANCELED)

    assert store.renew_lease(JOB, AttemptNo(1), TTL) is False


def test_end_attempt_only_ends_a_running_attempt(store: Store, clock: ManualClock) -> None:
    running_job(store)
    clock.advance(2)
    store.end_attempt(JOB, AttemptNo(1), AttemptState.FINISHED)
    ended = store.get_attempt(JOB, AttemptNo(1))
    clock.advance(2)

    store.end_attempt(JOB, AttemptNo(1), AttemptState.FAILED, error="late")

    assert ended is not None
    assert (ended.state, ended.ended_at, ended.lease_expires_at) == (
        AttemptState.FINISHED,
        T0 + 2,
        T0 + 2,
    )
    assert store.get_attempt(JOB, AttemptNo(1)) == ended


def test_finish_attempt_ends_attempt_and_job_in_one_call(store: Store) -> None:
    running_job(store)

    job = store.finish_attempt(JOB, AttemptNo(1), AttemptState.CANCELED, JobState.CANCELED)

    # RUNNING -> CANCELED passes through CANCELING inside the same transaction.
    assert job.state == JobState.CANCELED
    att = store.get_attempt(JOB, AttemptNo(1))
    assert att is not None and att.state == AttemptState.CANCELED
    assert job.resolved_at is None  # an ended job owes the resolution of its sinks


def test_finish_attempt_leaves_the_job_of_a_newer_attempt_alone(
    store: Store, clock: ManualClock
) -> None:
    first = running_job(store)
    clock.advance(TTL + 1)
    store.start_attempt(JOB, OWNER_B, TTL, expected_current=AttemptNo(1), lapsed=first.lease_seen)

    job = store.finish_attempt(JOB, AttemptNo(1), AttemptState.FAILED, JobState.FAILED, "late")

    assert (job.state, job.current_attempt) == (JobState.RUNNING, 2)


def test_finish_attempt_without_job_state_leaves_it_to_the_manager(store: Store) -> None:
    running_job(store)

    job = store.finish_attempt(JOB, AttemptNo(1), AttemptState.FAILED, None, "boom")

    assert job.state == JobState.RUNNING
    att = store.get_attempt(JOB, AttemptNo(1))
    assert att is not None and (att.state, att.error) == (AttemptState.FAILED, "boom")


def test_attempt_failed_twice_counts_one_failure(open_new: OpenStore) -> None:
    a, b = open_new(), open_new()  # two managers that both think they lead
    running_job(a)

    first = a.attempt_failed(JOB, AttemptNo(1), "driver gone", next_attempt_at=T0 + 1)
    second = b.attempt_failed(JOB, AttemptNo(1), "driver gone", next_attempt_at=T0 + 1)

    assert first.failures == second.failures == 1
    assert second.state == JobState.RESTARTING


def test_attempt_failed_with_reset_starts_the_count_afresh(store: Store) -> None:
    running_job(store)
    store.attempt_failed(JOB, AttemptNo(1), "first", next_attempt_at=T0)
    store.start_attempt(JOB, OWNER, TTL, expected_current=AttemptNo(1))
    store.attempt_failed(JOB, AttemptNo(2), "second", next_attempt_at=T0)
    assert store.get_job(JOB).failures == 2
    store.start_attempt(JOB, OWNER, TTL, expected_current=AttemptNo(2))

    job = store.attempt_failed(JOB, AttemptNo(3), "after a healthy run", T0 + 1, reset=True)
    again = store.attempt_failed(JOB, AttemptNo(3), "after a healthy run", T0 + 1, reset=True)

    assert (job.state, job.failures, job.next_attempt_at) == (JobState.RESTARTING, 1, T0 + 1)
    assert again.failures == 1  # a second call (another manager) changes nothing


def test_an_attempt_keeps_whose_failure_ended_it(store: Store) -> None:
    """The cause is recorded on the attempt by whoever ends it, and the restart budget counts
    by it, never by the error's text: an upgrade rolled back ends the new code's attempt
    FAILED with the new code's own error, which reads like any failure of the job, and is
    still not the job's (before, the store did not count it but the strategy's window did)."""
    running_job(store)
    job = store.attempt_failed(
        JOB, AttemptNo(1), "ValueError: boom", T0 + 1, FailureCause.UPGRADE_ROLLED_BACK
    )
    assert job.failures == 0
    att = store.get_attempt(JOB, AttemptNo(1))
    assert att is not None and att.cause == "upgrade-rolled-back"
    assert cause_of(att) is FailureCause.UPGRADE_ROLLED_BACK and not counted(att)
    assert att.to_dict()["cause"] == "upgrade-rolled-back"

    store.start_attempt(JOB, OWNER, TTL, expected_current=AttemptNo(1))
    job = store.attempt_failed(JOB, AttemptNo(2), "ValueError: boom", T0 + 2)
    att = store.get_attempt(JOB, AttemptNo(2))
    assert job.failures == 1 and att is not None and att.cause == "job" and counted(att)
    # an end that is no failure records no cause
    store.start_attempt(JOB, OWNER, TTL, expected_current=AttemptNo(2))
    store.finish_attempt(JOB, AttemptNo(3), AttemptState.CANCELED, JobState.CANCELED)
    att = store.get_attempt(JOB, AttemptNo(3))
    assert att is not None and att.cause is None and cause_of(att) is None


def test_an_error_after_a_finished_attempt_is_noted_on_it(store: Store) -> None:
    """The app failed after its job ended FINISHED: the error goes on the attempt, which stays
    FINISHED with no failure's cause (the query binds every parameter, the cause's too)."""
    running_job(store)
    store.finish_attempt(JOB, AttemptNo(1), AttemptState.FINISHED, JobState.FINISHED)
    assert store.note_attempt_error(JOB, AttemptNo(1), "ValueError: after the job")
    att = store.get_attempt(JOB, AttemptNo(1))
    assert att is not None
    assert (att.state, att.error, att.cause) == (
        AttemptState.FINISHED,
        "ValueError: after the job",
        None,
    )
