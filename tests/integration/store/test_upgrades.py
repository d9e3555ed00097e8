"""The store contract for upgrades (issue 24): PENDING -> SWAPPED -> CONFIRMED | ROLLED_BACK,
or PENDING -> REFUSED; one live upgrade per job, also when two requests race; the moves that
change the job's code change its spec in the same transaction; and a job's two standbys (its
own and an upgrade's) kept apart by role.

Run against SQLite and PostgreSQL alike (fixtures in conftest.py), on a ManualClock.
"""

from __future__ import annotations

import pytest

from stoker.clock import ManualClock
from stoker.errors import InvalidTransition, JobNotFound
from stoker.store import Store
from stoker.types import AttemptNo, JobId, StandbyRole, StandbyState, UpgradeState
from tests.integration.store.support import JOB, OWNER, OWNER_B, SPEC, T0, TTL, OpenStore, race

OLD = {**SPEC, "entrypoint": "/apps/v1.py"}
NEW = {**SPEC, "entrypoint": "/apps/v2.py", "config": {"rate": 2}}
CHECKS = {"sources": ["generator"], "sinks_kept": ["files:/out"]}


def _job(store: Store) -> None:
    store.create_job(JOB, "orders", OLD, {})


def test_an_upgrade_is_swapped_then_confirmed(store: Store, clock: ManualClock) -> None:
    _job(store)
    up = store.add_upgrade(JOB, "up-1", OLD, NEW, 3, 60.0, CHECKS)
    assert (up.state, up.old_spec, up.new_spec, up.checks, up.created_at) == (
        UpgradeState.PENDING,
        OLD,
        NEW,
        CHECKS,
        T0,
    )
    assert store.live_upgrade(JOB) == up
    clock.advance(2)
    stopping = store.upgrade_stopping("up-1", AttemptNo(1))
    assert stopping is not None and (stopping.stop_attempt, stopping.stop_at) == (1, T0 + 2)
    assert store.upgrade_stopping("up-1", AttemptNo(1)) is None  # asked once
    swapped = store.swap_upgrade("up-1")
    assert swapped is not None and swapped.state == UpgradeState.SWAPPED
    assert store.get_job(JOB).spec == NEW  # the same transaction
    assert store.swap_upgrade("up-1") is None
    assert store.upgrade_swap_attempt("up-1", AttemptNo(2))
    assert not store.upgrade_swap_attempt("up-1", AttemptNo(3))  # the first one only
    clock.advance(5)
    done = store.end_upgrade("up-1", UpgradeState.CONFIRMED, "3 epochs")
    assert done is not None and (done.state, done.swap_attempt, done.ended_at, done.detail) == (
        UpgradeState.CONFIRMED,
        2,
        T0 + 7,
        "3 epochs",
    )
    assert store.get_job(JOB).spec == NEW
    assert store.live_upgrade(JOB) is None and store.live_upgrades() == []
    assert [u.upgrade_id for u in store.list_upgrades(JOB)] == ["up-1"]


def test_a_rollback_puts_the_old_spec_back_in_the_same_transaction(store: Store) -> None:
    _job(store)
    store.add_upgrade(JOB, "up-1", OLD, NEW, 3, 60.0, CHECKS)
    assert store.swap_upgrade("up-1") is not None
    back = store.end_upgrade("up-1", UpgradeState.ROLLED_BACK, "attempt 2 failed")
    assert back is not None and back.state == UpgradeState.ROLLED_BACK
    assert store.get_job(JOB).spec == OLD
    # Ended: no further move, and a new upgrade may be asked for.
    assert store.end_upgrade("up-1", UpgradeState.CONFIRMED) is None
    assert store.add_upgrade(JOB, "up-2", OLD, NEW, 3, 60.0, CHECKS).state == UpgradeState.PENDING


def test_a_refusal_leaves_the_job_as_it_was(store: Store) -> None:
    _job(store)
    store.add_upgrade(JOB, "up-1", OLD, NEW, 3, 60.0, CHECKS)
    refused = store.end_upgrade("up-1", UpgradeState.REFUSED, "the key differs")
    assert refused is not None and refused.detail == "the key differs"
    assert store.get_job(JOB).spec == OLD
    assert store.swap_upgrade("up-1") is None  # a refused upgrade is never swapped
    with pytest.raises(InvalidTransition):
        store.end_upgrade("up-1", UpgradeState.PENDING)


def test_one_live_upgrade_per_job_even_when_requests_race(
    store: Store, open_new: OpenStore
) -> None:
    _job(store)
    with pytest.raises(JobNotFound):
        store.add_upgrade(JobId("nope"), "up-0", OLD, NEW, 3, 60.0, CHECKS)
    stores = [open_new() for _ in range(4)]
    got = race(4, lambda i: stores[i].add_upgrade(JOB, f"up-{i}", OLD, NEW, 3, 60.0, CHECKS))
    made = [g for g in got if not isinstance(g, BaseException)]
    assert len(made) == 1, got
    assert all(isinstance(g, InvalidTransition) for g in got if g not in made), got
    # SWAPPED is live too.
    assert store.swap_upgrade(made[0].upgrade_id) is not None
    with pytest.raises(InvalidTransition):
        store.add_upgrade(JOB, "up-9", OLD, NEW, 3, 60.0, CHECKS)


def test_a_jobs_own_standby_and_its_upgrades_are_kept_apart(store: Store) -> None:
    own = store.add_standby(JOB, OWNER, "/logs/standby.log", TTL, spec_key="old")
    new = store.add_standby(JOB, OWNER_B, "/logs/upgrade.log", TTL, StandbyRole.UPGRADE, "new")
    assert (own.role, own.spec_key, new.role, new.spec_key) == (
        StandbyRole.STANDBY,
        "old",
        StandbyRole.UPGRADE,
        "new",
    )
    assert store.get_standby(JOB) == own
    assert store.get_standby(JOB, StandbyRole.UPGRADE) == new
    # Each renews and is handed over under its own role only.
    assert store.renew_standby(JOB, OWNER_B, TTL, ready=True) is None  # not the job's own
    ready = store.renew_standby(JOB, OWNER_B, TTL, ready=True, role=StandbyRole.UPGRADE)
    assert ready is not None and ready.state == StandbyState.READY
    assert store.take_standby(JOB, AttemptNo(2)) is None  # the own one is WARMING
    taken = store.take_standby(JOB, AttemptNo(2), StandbyRole.UPGRADE)
    assert taken is not None and taken.attempt == 2
    assert store.get_standby(JOB).state == StandbyState.WARMING  # type: ignore[union-attr]
    assert store.remove_standby(JOB, OWNER_B, StandbyRole.UPGRADE)
    assert [s.role for s in store.list_standbys()] == [StandbyRole.STANDBY]
