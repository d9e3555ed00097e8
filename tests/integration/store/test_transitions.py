"""The attempt and epoch transition tables (types.py), enforced by the store on both backends.

Every move the table refuses raises :class:`InvalidTransition` and changes nothing, or is one
of the documented exceptions: an ended attempt asked to end again is left as it ended (ends
are idempotent; asked to end as a live state, it is refused like any attempt), a
driver's claim is refused as :class:`StaleAttempt` (its fence), a decide refused by the table
is :class:`StaleAttempt` too (another attempt decided), re-pinning returns the stored epoch,
and marking a committed or pruned epoch committed again changes nothing.
"""

from __future__ import annotations

import pytest

from stoker.clock import ManualClock
from stoker.errors import InvalidTransition, StaleAttempt
from stoker.store import AttemptRecord, Store
from stoker.types import (
    ATTEMPT_TRANSITIONS,
    EPOCH_TRANSITIONS,
    AttemptNo,
    AttemptState,
    ControlVersion,
    Epoch,
    EpochState,
    JobId,
    job_id,
)
from tests.integration.store.support import CONFIG, OWNER, OWNER_B, SPEC, TTL

A = AttemptState
LIVE = (A.STARTING, A.RUNNING)


def _attempt_in(store: Store, jid: JobId, state: AttemptState) -> AttemptRecord:
    """A job whose attempt 1 is in ``state``."""
    store.create_job(jid, "t", SPEC, CONFIG)
    first = A.STARTING if state == A.STARTING else A.RUNNING
    store.start_attempt(jid, OWNER, TTL, expected_current=AttemptNo(0), state=first)
    if state not in LIVE:
        store.end_attempt(jid, AttemptNo(1), state, "set up")
    rec = store.get_attempt(jid, AttemptNo(1))
    assert rec is not None and rec.state == state
    return rec


def test_the_attempt_table_ends_live_attempts_only_and_keeps_ended_ones(store: Store) -> None:
    for source in AttemptState:
        for target in AttemptState:
            jid = job_id(f"a-{source}-{target}".lower())
            before = _attempt_in(store, jid, source)
            if source.ended and target.ended:
                store.end_attempt(jid, AttemptNo(1), target, "late")  # documented no-op
                assert store.get_attempt(jid, AttemptNo(1)) == before, (source, target)
            elif target in ATTEMPT_TRANSITIONS[source] and target.ended:
                store.end_attempt(jid, AttemptNo(1), target, "end")
                after = store.get_attempt(jid, AttemptNo(1))
                assert after is not None and after.state == target, (source, target)
            else:
                with pytest.raises(InvalidTransition):
                    store.end_attempt(jid, AttemptNo(1), target, "bad")
                assert store.get_attempt(jid, AttemptNo(1)) == before, (source, target)


def test_the_attempt_table_guards_every_way_an_attempt_ends(store: Store) -> None:
    """finish_attempt, attempt_failed and a cancel end attempts through the same check."""
    starting = job_id("starting")
    before = _attempt_in(store, starting, A.STARTING)
    with pytest.raises(InvalidTransition, match="STARTING cannot become FINISHED"):
        store.finish_attempt(starting, AttemptNo(1), A.FINISHED, None)
    assert store.get_attempt(starting, AttemptNo(1)) == before
    with pytest.raises(InvalidTransition, match="not an end state"):
        store.finish_attempt(starting, AttemptNo(1), A.RUNNING, None)

    running = job_id("running")
    _attempt_in(store, running, A.RUNNING)
    store.attempt_failed(running, AttemptNo(1), "boom", next_attempt_at=None)
    failed = store.get_attempt(running, AttemptNo(1))
    assert failed is not None and failed.state == A.FAILED
    store.finish_attempt(running, AttemptNo(1), A.FINISHED, None)  # ended: left as it ended
    assert store.get_attempt(running, AttemptNo(1)) == failed


@pytest.mark.parametrize("state", [s for s in AttemptState if s not in LIVE])
def test_an_attempt_is_born_starting_or_running_only(store: Store, state: AttemptState) -> None:
    jid = job_id("born")
    store.create_job(jid, "t", SPEC, CONFIG)
    job = store.get_job(jid)

    with pytest.raises(InvalidTransition, match=f"without a record cannot become {state}"):
        store.start_attempt(jid, OWNER, TTL, expected_current=AttemptNo(0), state=state)

    assert store.list_attempts(jid) == []
    assert store.get_job(jid) == job


def test_only_a_starting_attempt_can_be_claimed(store: Store) -> None:
    for source in AttemptState:
        jid = job_id(f"claim-{source}".lower())
        before = _attempt_in(store, jid, source)
        if A.RUNNING in ATTEMPT_TRANSITIONS[source]:
            claimed = store.claim_attempt(jid, AttemptNo(1), OWNER, TTL)
            assert claimed.state == A.RUNNING
            continue
        with pytest.raises(StaleAttempt, match=f"it is {source}") as err:
            store.claim_attempt(jid, AttemptNo(1), OWNER, TTL)
        assert isinstance(err.value.__cause__, InvalidTransition)
        assert store.get_attempt(jid, AttemptNo(1)) == before


def test_a_starting_attempt_is_held_by_its_driver_while_it_starts(
    store: Store, clock: ManualClock
) -> None:
    """A job manager's driver holds its STARTING attempt while Spark starts (issue 21 item 1):
    it becomes the owner, renews the lease past the manager's start lease, and the attempt
    stays STARTING (counted as a driver starting) until the driver claims it."""
    jid = job_id("held")
    _attempt_in(store, jid, A.STARTING)
    assert store.count_starting() == 1
    clock.advance(TTL - 1)
    held = store.hold_start(jid, AttemptNo(1), OWNER_B, TTL)
    assert (held.state, held.owner) == (A.STARTING, OWNER_B)
    for _ in range(5):  # a start far longer than the manager's start lease
        clock.advance(TTL - 1)
        assert store.renew_lease(jid, AttemptNo(1), TTL)
    assert store.count_starting() == 1
    assert store.claim_attempt(jid, AttemptNo(1), OWNER_B, TTL).state == A.RUNNING
    assert store.count_starting() == 0


def test_a_start_is_not_held_once_given_up(store: Store, clock: ManualClock) -> None:
    """Ended or superseded: the driver finds itself fenced (StaleAttempt) and the attempt is
    left as it was. A wall clock past the manager's start lease is no reason: the manager
    gives a start up by ending its attempt; a manager whose clock ran behind the driver's
    once made every new attempt fail at its start."""
    stepped = job_id("stepped")
    _attempt_in(store, stepped, A.STARTING)
    clock.step(TTL + 600)
    held = store.hold_start(stepped, AttemptNo(1), OWNER_B, TTL)
    assert (held.state, held.owner) == (A.STARTING, OWNER_B)
    for source in AttemptState:
        if source == A.STARTING:
            continue
        jid = job_id(f"hold-{source}".lower())
        before = _attempt_in(store, jid, source)
        with pytest.raises(StaleAttempt, match=f"it is {source}"):
            store.hold_start(jid, AttemptNo(1), OWNER_B, TTL)
        assert store.get_attempt(jid, AttemptNo(1)) == before
    assert store.count_starting() == 1  # the lapsed one, until the leader fails it


# epochs -----------------------------------------------------------------------------------------
def _epoch_in(store: Store, jid: JobId, state: EpochState) -> None:
    """A job with a RUNNING attempt 1 and epoch 0 in ``state``, moved there by attempt 1."""
    store.create_job(jid, "t", SPEC, CONFIG)
    store.start_attempt(jid, OWNER, TTL, expected_current=AttemptNo(0))
    store.pin_epoch(jid, Epoch(0), AttemptNo(1), ControlVersion(0))
    if state != EpochState.PINNED:
        store.decide_epoch(jid, Epoch(0), AttemptNo(1), rows_in=1, final=False)
    if state == EpochState.COMMITTED:
        store.mark_epoch_committed(jid, Epoch(0))


def test_the_epoch_table(store: Store) -> None:
    assert EPOCH_TRANSITIONS[None] == {EpochState.PINNED}
    for source in EpochState:
        jid = job_id(f"e-{source}".lower())
        _epoch_in(store, jid, source)
        before = store.get_epoch(jid, Epoch(0))
        assert before is not None and before.state == source

        # PINNED again: the stored record, unchanged (insert if absent).
        assert store.pin_epoch(jid, Epoch(0), AttemptNo(1), ControlVersion(5)) == before

        # COMMITTED: from DECIDED; again from COMMITTED (a no-op); never from PINNED.
        if source == EpochState.PINNED:
            with pytest.raises(InvalidTransition, match="PINNED cannot become COMMITTED"):
                store.mark_epoch_committed(jid, Epoch(0))
            assert store.get_epoch(jid, Epoch(0)) == before
        else:
            assert EpochState.COMMITTED in EPOCH_TRANSITIONS[source]
            store.mark_epoch_committed(jid, Epoch(0))
            after = store.get_epoch(jid, Epoch(0))
            assert after is not None and after.state == EpochState.COMMITTED
            if source == EpochState.COMMITTED:
                assert after == before


@pytest.mark.parametrize("source", [EpochState.DECIDED, EpochState.COMMITTED])
def test_an_epoch_decided_before_is_not_decided_again_by_another_attempt(
    store: Store, source: EpochState
) -> None:
    jid = job_id("decided")
    _epoch_in(store, jid, source)
    before = store.get_epoch(jid, Epoch(0))
    # The same attempt: idempotent, the record as it is.
    assert store.decide_epoch(jid, Epoch(0), AttemptNo(1), rows_in=9, final=True) == before

    store.start_attempt(jid, OWNER, TTL, expected_current=AttemptNo(1), previous_dead=True)
    with pytest.raises(StaleAttempt) as err:
        store.decide_epoch(jid, Epoch(0), AttemptNo(2), rows_in=9, final=True)
    assert isinstance(err.value.__cause__, InvalidTransition)
    assert store.get_epoch(jid, Epoch(0)) == before


def test_an_epoch_without_a_record_is_neither_decided_nor_committed(store: Store) -> None:
    jid = job_id("none")
    store.create_job(jid, "t", SPEC, CONFIG)
    store.start_attempt(jid, OWNER, TTL, expected_current=AttemptNo(0))

    with pytest.raises(StaleAttempt, match="not pinned"):
        store.decide_epoch(jid, Epoch(3), AttemptNo(1), rows_in=1, final=False)
    store.mark_epoch_committed(jid, Epoch(3))  # pruned by retention, or never: no-op

    assert store.get_epoch(jid, Epoch(3)) is None
