"""The store contract for standby drivers (issue 24): one per job, WARMING -> READY -> TAKEN,
its lease renewed by the standby itself, an attempt handed to it only while it is READY and
alive, and one handover when two leaders race.

Run against SQLite and PostgreSQL alike (fixtures in conftest.py), on a ManualClock.
"""

from __future__ import annotations

import pytest

from stoker.clock import ManualClock
from stoker.errors import InvalidTransition
from stoker.store import Store
from stoker.types import AttemptNo, StandbyState
from tests.integration.store.support import JOB, OTHER, OWNER, OWNER_B, T0, TTL, OpenStore, race


def test_a_standby_warms_is_ready_and_is_handed_an_attempt(
    store: Store, clock: ManualClock
) -> None:
    made = store.add_standby(JOB, OWNER, "/logs/standby-1.log", TTL)
    assert (made.state, made.owner, made.attempt, made.started_at, made.ready_at) == (
        StandbyState.WARMING,
        OWNER,
        None,
        T0,
        None,
    )
    assert made.lease_expires_at == T0 + TTL
    # Not READY yet: nothing to hand over.
    assert store.take_standby(JOB, AttemptNo(2)) is None
    clock.advance(5.0)
    ready = store.renew_standby(JOB, OWNER, TTL, ready=True)
    assert ready is not None
    assert (ready.state, ready.ready_at, ready.lease_expires_at) == (
        StandbyState.READY,
        T0 + 5,
        T0 + 5 + TTL,
    )
    clock.advance(1.0)
    again = store.renew_standby(JOB, OWNER, TTL, ready=True)
    assert again is not None and again.ready_at == T0 + 5  # the first READY is kept
    taken = store.take_standby(JOB, AttemptNo(2))
    assert taken is not None and (taken.state, taken.attempt) == (StandbyState.TAKEN, 2)
    # The standby's next look finds its attempt; a TAKEN one's lease is not renewed.
    clock.advance(1.0)
    seen = store.renew_standby(JOB, OWNER, TTL)
    assert seen is not None and (seen.state, seen.attempt) == (StandbyState.TAKEN, 2)
    assert seen.lease_expires_at == again.lease_expires_at
    # Handed once.
    assert store.take_standby(JOB, AttemptNo(3)) is None
    assert store.get_standby(JOB) == seen


def test_one_standby_per_job(store: Store) -> None:
    store.add_standby(JOB, OWNER, "/l1", TTL)
    with pytest.raises(InvalidTransition, match="has a standby already"):
        store.add_standby(JOB, OWNER_B, "/l2", TTL)
    store.add_standby(OTHER, OWNER_B, "/l2", TTL)
    assert [(s.job_id, s.owner) for s in store.list_standbys()] == [
        (JOB, OWNER),
        (OTHER, OWNER_B),
    ]


def test_a_wall_clock_step_does_not_keep_a_ready_standby_from_its_attempt(
    store: Store, clock: ManualClock
) -> None:
    """Whether a standby's lease lapsed is its manager's to judge on a monotonic clock
    (stoker.leases; tests/unit/manager/test_standbys.py): the store compares no wall clock,
    which a step moves past every expiry."""
    store.add_standby(JOB, OWNER, "/l", TTL)
    store.renew_standby(JOB, OWNER, TTL, ready=True)
    clock.step(TTL + 600)
    taken = store.take_standby(JOB, AttemptNo(2))
    assert taken is not None and taken.state == StandbyState.TAKEN


def test_a_replaced_standby_learns_it_is_not_wanted(store: Store) -> None:
    store.add_standby(JOB, OWNER, "/l", TTL)
    # Removed by someone else's owner: nothing goes.
    assert not store.remove_standby(JOB, OWNER_B)
    assert store.remove_standby(JOB, OWNER)
    assert store.renew_standby(JOB, OWNER, TTL, ready=True) is None
    store.add_standby(JOB, OWNER_B, "/l2", TTL)
    # The old process renews: the row is another's, left as it is.
    assert store.renew_standby(JOB, OWNER, TTL, ready=True) is None
    got = store.get_standby(JOB)
    assert got is not None and (got.owner, got.state) == (OWNER_B, StandbyState.WARMING)
    assert store.remove_standby(JOB)
    assert store.get_standby(JOB) is None
    assert not store.remove_standby(JOB)


def test_two_leaders_racing_hand_the_standby_over_once(store: Store, open_new: OpenStore) -> None:
    store.add_standby(JOB, OWNER, "/l", TTL)
    store.renew_standby(JOB, OWNER, TTL, ready=True)
    stores = [open_new() for _ in range(4)]

    results = race(4, lambda i: stores[i].take_standby(JOB, AttemptNo(2 + i)))

    assert [r for r in results if isinstance(r, BaseException)] == []
    won = [r for r in results if r is not None]
    assert len(won) == 1
    got = store.get_standby(JOB)
    assert got is not None and got.attempt == won[0].attempt  # type: ignore[union-attr]
