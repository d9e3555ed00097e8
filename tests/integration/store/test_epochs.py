"""The store contract for epochs: pin, the fenced decide, commit.

Run against SQLite and PostgreSQL alike (fixtures in conftest.py). Time is a
:class:`~stoker.clock.ManualClock`; leases lapse because the test moves the clock.
"""

from __future__ import annotations

import threading

import psycopg
import pytest

from stoker.clock import ManualClock
from stoker.errors import InvalidTransition, StaleAttempt
from stoker.store import EpochRecord, Store, open_store
from stoker.types import AttemptNo, ControlVersion, Epoch, EpochState, TxnState, job_id
from tests.integration.store.support import (
    CONFIG,
    JOB,
    OTHER,
    OWNER,
    OWNER_B,
    SPEC,
    T0,
    TTL,
    OpenStore,
    running_job,
)


def _pinned(epoch: int, by: int = 1, cv: int = 0, at: float = T0) -> EpochRecord:
    return EpochRecord(
        job_id=JOB,
        epoch=Epoch(epoch),
        control_version=ControlVersion(cv),
        state=EpochState.PINNED,
        pinned_by=AttemptNo(by),
        decided_by=None,
        rows_in=None,
        final=False,
        pinned_at=at,
        decided_at=None,
        committed_at=None,
    )


def test_pin_epoch_inserts_only_if_absent(store: Store, clock: ManualClock) -> None:
    running_job(store)

    first = store.pin_epoch(JOB, Epoch(0), AttemptNo(1), ControlVersion(0))
    assert first == _pinned(0)

    clock.advance(5)
    again = store.pin_epoch(JOB, Epoch(0), AttemptNo(2), ControlVersion(3))
    assert again == first
    assert store.get_epoch(JOB, Epoch(0)) == first
    assert store.get_epoch(JOB, Epoch(1)) is None


def test_decide_epoch_by_the_current_attempt(store: Store, clock: ManualClock) -> None:
    running_job(store)
    store.pin_epoch(JOB, Epoch(0), AttemptNo(1), ControlVersion(0))
    clock.advance(1)

    decided = store.decide_epoch(JOB, Epoch(0), AttemptNo(1), rows_in=42, final=True)

    assert decided == EpochRecord(
        job_id=JOB,
        epoch=Epoch(0),
        control_version=ControlVersion(0),
        state=EpochState.DECIDED,
        pinned_by=AttemptNo(1),
        decided_by=AttemptNo(1),
        rows_in=42,
        final=True,
        pinned_at=T0,
        decided_at=T0 + 1,
        committed_at=None,
    )
    assert store.get_epoch(JOB, Epoch(0)) == decided


def test_decide_epoch_again_by_the_same_attempt_is_idempotent(
    store: Store, clock: ManualClock
) -> None:
    running_job(store)
    store.pin_epoch(JOB, Epoch(0), AttemptNo(1), ControlVersion(0))
    decided = store.decide_epoch(JOB, Epoch(0), AttemptNo(1), rows_in=42, final=False)
    clock.advance(1)

    again = store.decide_epoch(JOB, Epoch(0), AttemptNo(1), rows_in=99, final=True)

    assert again == decided
    assert store.get_epoch(JOB, Epoch(0)) == decided


def test_decide_epoch_by_a_superseded_attempt_is_stale(store: Store, clock: ManualClock) -> None:
    running_job(store)
    pinned = store.pin_epoch(JOB, Epoch(0), AttemptNo(1), ControlVersion(0))
    store.start_attempt(JOB, OWNER_B, TTL, expected_current=AttemptNo(1), previous_dead=True)

    with pytest.raises(StaleAttempt):
        store.decide_epoch(JOB, Epoch(0), AttemptNo(1), rows_in=42, final=False)

    assert store.get_epoch(JOB, Epoch(0)) == pinned
    # The new owner may decide the epoch its predecessor pinned.
    decided = store.decide_epoch(JOB, Epoch(0), AttemptNo(2), rows_in=7, final=False)
    assert (decided.state, decided.pinned_by, decided.decided_by, decided.rows_in) == (
        EpochState.DECIDED,
        1,
        2,
        7,
    )


@pytest.mark.parametrize("step", [0.0, 0.25, 100.0, -600.0])
def test_decide_is_fenced_by_the_attempt_not_by_a_wall_clock(
    store: Store, clock: ManualClock, step: float
) -> None:
    """The current attempt decides whatever the wall clock says (a step past its lease's
    expiry once failed every epoch of a healthy driver); a superseded one never does. The
    holder stops itself once its lease lapsed by its own monotonic clock (LeaseKeeper)."""
    running_job(store)
    store.pin_epoch(JOB, Epoch(0), AttemptNo(1), ControlVersion(0))
    store.pin_epoch(JOB, Epoch(1), AttemptNo(1), ControlVersion(0))
    clock.step(TTL + step)

    decided = store.decide_epoch(JOB, Epoch(0), AttemptNo(1), rows_in=42, final=False)
    assert decided.state == EpochState.DECIDED

    store.start_attempt(JOB, OWNER_B, TTL, expected_current=AttemptNo(1), previous_dead=True)
    with pytest.raises(StaleAttempt):
        store.decide_epoch(JOB, Epoch(1), AttemptNo(1), rows_in=42, final=False)


def test_decide_epoch_decided_by_another_attempt_is_stale(store: Store, clock: ManualClock) -> None:
    running_job(store)
    store.pin_epoch(JOB, Epoch(0), AttemptNo(1), ControlVersion(0))
    decided = store.decide_epoch(JOB, Epoch(0), AttemptNo(1), rows_in=42, final=False)
    store.start_attempt(JOB, OWNER_B, TTL, expected_current=AttemptNo(1), previous_dead=True)

    with pytest.raises(StaleAttempt):
        store.decide_epoch(JOB, Epoch(0), AttemptNo(2), rows_in=1, final=False)

    assert store.get_epoch(JOB, Epoch(0)) == decided


def test_decide_epoch_that_was_never_pinned_is_stale(store: Store) -> None:
    running_job(store)

    with pytest.raises(StaleAttempt):
        store.decide_epoch(JOB, Epoch(3), AttemptNo(1), rows_in=1, final=False)

    assert store.get_epoch(JOB, Epoch(3)) is None


def test_mark_epoch_committed_moves_decided_to_committed(store: Store, clock: ManualClock) -> None:
    running_job(store)
    store.pin_epoch(JOB, Epoch(0), AttemptNo(1), ControlVersion(0))
    pinned = store.pin_epoch(JOB, Epoch(1), AttemptNo(1), ControlVersion(0))
    decided = store.decide_epoch(JOB, Epoch(0), AttemptNo(1), rows_in=5, final=False)
    clock.advance(2)

    store.mark_epoch_committed(JOB, Epoch(0))
    with pytest.raises(InvalidTransition, match="PINNED cannot become COMMITTED"):
        store.mark_epoch_committed(JOB, Epoch(1))  # not decided: refused, left alone

    committed = store.get_epoch(JOB, Epoch(0))
    assert committed is not None
    assert committed == EpochRecord(
        **{**decided.__dict__, "state": EpochState.COMMITTED, "committed_at": T0 + 2}
    )
    assert store.get_epoch(JOB, Epoch(1)) == pinned

    clock.advance(2)
    store.mark_epoch_committed(JOB, Epoch(0))  # again: nothing changes
    assert store.get_epoch(JOB, Epoch(0)) == committed


def test_list_epochs_newest_first_with_limit(store: Store, open_new: OpenStore) -> None:
    running_job(store)
    store.create_job(OTHER, "other", SPEC, CONFIG)
    store.start_attempt(OTHER, OWNER, TTL, expected_current=AttemptNo(0))
    for e in (2, 0, 4, 1, 3):
        store.pin_epoch(JOB, Epoch(e), AttemptNo(1), ControlVersion(0))
    store.pin_epoch(OTHER, Epoch(9), AttemptNo(1), ControlVersion(0))

    assert store.list_epochs(JOB) == [_pinned(e) for e in (4, 3, 2, 1, 0)]
    assert [r.epoch for r in store.list_epochs(JOB, limit=3)] == [4, 3, 2]
    assert [r.epoch for r in store.list_epochs(JOB, limit=1)] == [4]
    assert store.list_epochs(JOB, limit=0) == []
    assert [r.epoch for r in store.list_epochs(OTHER)] == [9]
    assert store.list_epochs(job_id("nope")) == []


def test_epochs_in_state(store: Store) -> None:
    running_job(store)
    for e in range(5):
        store.pin_epoch(JOB, Epoch(e), AttemptNo(1), ControlVersion(0))
    for e in (3, 1, 4):
        store.decide_epoch(JOB, Epoch(e), AttemptNo(1), rows_in=e, final=False)
    store.mark_epoch_committed(JOB, Epoch(4))

    assert [r.epoch for r in store.epochs_in_state(JOB, "PINNED")] == [0, 2]
    assert [r.epoch for r in store.epochs_in_state(JOB, EpochState.DECIDED)] == [1, 3]
    assert [r.epoch for r in store.epochs_in_state(JOB, "COMMITTED")] == [4]
    assert store.epochs_in_state(OTHER, "PINNED") == []


def test_decide_epoch_cannot_land_after_a_takeover(pg_dsn: str, clock: ManualClock) -> None:
    """Once attempt 2 has taken over and seen epoch 0 PINNED, attempt 1 never decides it.

    SQLite serialises writers (BEGIN IMMEDIATE), so only PostgreSQL, where a statement reads a
    snapshot and waits on row locks, can interleave the two: attempt 1's decide reads the job
    before the takeover commits, then waits on the epoch row (held here by ``blocker``) until
    after the takeover committed and the new owner looked at the epoch.
    """
    store, new_owner = open_store(pg_dsn, clock), open_store(pg_dsn, clock)
    try:
        running_job(store)
        pinned = store.pin_epoch(JOB, Epoch(0), AttemptNo(1), ControlVersion(0))
        with (
            psycopg.connect(pg_dsn) as blocker,
            psycopg.connect(pg_dsn) as takeover,
            psycopg.connect(pg_dsn, autocommit=True) as spy,
        ):
            blocker.execute("SELECT 1 FROM epochs WHERE job_id = %s FOR UPDATE", [JOB])
            # What start_attempt does for attempt 2, not committed yet.
            takeover.execute("SELECT 1 FROM jobs WHERE job_id = %s FOR UPDATE", [JOB])
            takeover.execute(
                "UPDATE attempts SET state = 'SUPERSEDED', ended_at = %s "
                "WHERE job_id = %s AND attempt = 1",
                [T0, JOB],
            )
            takeover.execute(
                "INSERT INTO attempts (job_id, attempt, state, host, pid, pid_started, "
                "lease_expires_at, started_at) VALUES (%s, 2, 'RUNNING', 'host-b', 202, "
                "'boot-2', %s, %s)",
                [JOB, T0 + TTL, T0],
            )
            takeover.execute("UPDATE jobs SET current_attempt = 2 WHERE job_id = %s", [JOB])

            outcome: list[EpochRecord | BaseException] = []

            def decide() -> None:
                try:
                    outcome.append(
                        store.decide_epoch(JOB, Epoch(0), AttemptNo(1), rows_in=1, final=False)
                    )
                except Exception as e:  # asserted on below
                    outcome.append(e)

            racer = threading.Thread(target=decide)
            racer.start()
            # Bounded wait until the decide has read its snapshot and queued on a row lock.
            for _ in range(6000):
                row = spy.execute(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND wait_event_type = 'Lock'"
                ).fetchone()
                if not racer.is_alive() or (row is not None and row[0] > 0):
                    break
                racer.join(timeout=0.01)
            assert racer.is_alive(), f"decide did not wait for the locks: {outcome}"

            takeover.commit()
            assert new_owner.get_job(JOB).current_attempt == 2
            assert new_owner.get_epoch(JOB, Epoch(0)) == pinned  # the new owner will replay it
            blocker.rollback()
            racer.join(timeout=60)

        assert len(outcome) == 1
        assert isinstance(outcome[0], StaleAttempt), outcome
        assert new_owner.get_epoch(JOB, Epoch(0)) == pinned
    finally:
        store.close()
        new_owner.close()


def test_decided_range_and_a_reset_of_the_epochs_under_a_new_uid(store: Store) -> None:
    """decided_range: what a job's checkpoint must not be behind; reset_epochs (stoker run
    --reset-checkpoint): the current attempt drops the job's epochs and sink transactions and
    gives it a new uid, in one transaction; another job's are left alone."""
    running_job(store)
    assert store.decided_range(JOB) is None
    for e in range(3):
        store.pin_epoch(JOB, Epoch(e), AttemptNo(1), ControlVersion(0))
        store.record_txn(JOB, Epoch(e), "files", AttemptNo(1), TxnState.PREPARED, {})
        if e < 2:
            store.decide_epoch(JOB, Epoch(e), AttemptNo(1), rows_in=1, final=False)
    store.mark_epoch_committed(JOB, Epoch(0))
    assert store.decided_range(JOB) == (Epoch(0), Epoch(1))  # PINNED epoch 2 is not decided
    store.create_job(OTHER, "other", SPEC, CONFIG)
    store.start_attempt(OTHER, OWNER_B, TTL, expected_current=AttemptNo(0))
    store.pin_epoch(OTHER, Epoch(0), AttemptNo(1), ControlVersion(0))

    with pytest.raises(StaleAttempt):
        store.reset_epochs(JOB, AttemptNo(2), "new-uid")  # not the current attempt
    assert store.decided_range(JOB) == (Epoch(0), Epoch(1))

    assert store.reset_epochs(JOB, AttemptNo(1), "new-uid") == 3
    assert store.get_job(JOB).uid == "new-uid"
    assert store.list_epochs(JOB) == [] and store.list_txns(JOB) == []
    assert store.decided_range(JOB) is None
    assert [e.epoch for e in store.list_epochs(OTHER)] == [Epoch(0)]
    # Epoch 0 of the new uid is a new epoch, not a replay of the old one.
    assert store.pin_epoch(JOB, Epoch(0), AttemptNo(1), ControlVersion(0)).state == (
        EpochState.PINNED
    )
