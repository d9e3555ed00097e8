"""The store contract for the per-job recovery hold: taken when free, lapsed, already the
caller's, or held by exactly the holder the caller saw gone; renewed and released by its holder
only; one holder at a time under a race.

Run against SQLite and PostgreSQL alike (fixtures in conftest.py). Time is a
:class:`~stoker.clock.ManualClock`: a hold lapses because the test moves the clock.
"""

from __future__ import annotations

from stoker.clock import ManualClock
from stoker.store import Owner, RecoveryHold, Store
from stoker.types import AttemptNo
from tests.integration.store.support import JOB, OTHER, OWNER, OWNER_B, T0, TTL, OpenStore, race

ONE, TWO = AttemptNo(1), AttemptNo(2)


def test_a_free_hold_is_taken_and_a_live_one_is_not(store: Store, clock: ManualClock) -> None:
    mine = store.take_recovery_hold(JOB, ONE, OWNER, TTL)
    assert mine == RecoveryHold(JOB, ONE, OWNER, T0 + TTL)
    clock.advance(1.0)
    assert store.take_recovery_hold(JOB, TWO, OWNER_B, TTL) == mine  # live: not taken
    assert store.take_recovery_hold(OTHER, TWO, OWNER_B, TTL).owner == OWNER_B  # per job
    again = store.take_recovery_hold(JOB, ONE, OWNER, TTL)  # the holder's own: renewed
    assert again == RecoveryHold(JOB, ONE, OWNER, T0 + 1.0 + TTL)


def test_a_lapsed_or_gone_holder_loses_it_and_cannot_renew_or_release(
    store: Store, clock: ManualClock
) -> None:
    first = store.take_recovery_hold(JOB, ONE, OWNER, TTL)
    clock.advance(TTL)
    second = store.take_recovery_hold(JOB, TWO, OWNER_B, TTL)
    assert (second.attempt, second.owner) == (TWO, OWNER_B)
    assert not store.renew_recovery_hold(first, TTL)
    store.release_recovery_hold(first)
    assert store.get_recovery_hold(JOB) == second
    # Seen gone: taken at once, but only from exactly that holder.
    third_owner = Owner("host-c", 303, "boot-3")
    stale_view = RecoveryHold(JOB, ONE, OWNER, first.expires_at)
    assert store.take_recovery_hold(JOB, TWO, third_owner, TTL, gone=stale_view) == second
    taken = store.take_recovery_hold(JOB, TWO, third_owner, TTL, gone=second)
    assert taken.owner == third_owner
    assert store.renew_recovery_hold(taken, TTL)
    store.release_recovery_hold(taken)
    assert store.get_recovery_hold(JOB) is None


def test_of_many_takers_at_once_exactly_one_holds_it(open_new: OpenStore) -> None:
    owners = [Owner(f"host-{i}", 100 + i, "boot") for i in range(6)]
    stores = [open_new() for _ in owners]
    got = race(len(owners), lambda i: stores[i].take_recovery_hold(JOB, ONE, owners[i], TTL))
    assert all(isinstance(g, RecoveryHold) for g in got), got
    holders = {g.owner for g in got if isinstance(g, RecoveryHold)}
    assert len(holders) == 1
