"""The store contract for the job managers' heartbeats: made once, refreshed, listed while
fresh (oldest first), forgotten on a clean stop, dropped once not seen for an hour.

Run against SQLite and PostgreSQL alike (fixtures in conftest.py). Time is a
:class:`~stoker.clock.ManualClock`: a heartbeat goes stale because the test moves the clock.
"""

from __future__ import annotations

import pytest

from stoker import __version__
from stoker.clock import ManualClock
from stoker.errors import InvalidInput
from stoker.store import ManagerRecord, Store, _sql
from stoker.store.sql_leader import MANAGERS_FORGOTTEN_AFTER
from tests.integration.store.support import T0, OpenStore, race, raw_rows

A, B, C = "manager-a", "manager-b", "manager-c"
URL_A, URL_B, URL_C = "http://10.0.0.1:8081", "http://10.0.0.2:8081", "http://10.0.0.3:8081"
RUNS = (__version__, _sql.migrations()[-1][0])  # each row names its stoker and schema


def test_a_heartbeat_makes_the_row_once_and_then_moves_only_seen_at(
    store: Store, clock: ManualClock
) -> None:
    store.heartbeat_manager(A, URL_A)
    assert store.list_managers(9.0) == [ManagerRecord(A, URL_A, T0, T0, *RUNS)]
    clock.advance(1.0)
    store.heartbeat_manager(A, URL_A)
    clock.advance(1.0)
    store.heartbeat_manager(A, "http://10.0.0.9:8081")  # restarted elsewhere under its id
    assert store.list_managers(9.0) == [ManagerRecord(A, "http://10.0.0.9:8081", T0, T0 + 2, *RUNS)]


def test_managers_are_listed_oldest_first_while_fresh(store: Store, clock: ManualClock) -> None:
    store.heartbeat_manager(B, URL_B)  # started first, though its id sorts after A's
    clock.advance(1.0)
    store.heartbeat_manager(A, URL_A)
    clock.advance(1.0)
    store.heartbeat_manager(C, URL_C)
    assert [m.holder for m in store.list_managers(9.0)] == [B, A, C]
    # B stops beating (killed); A and C go on.
    clock.advance(7.0)
    store.heartbeat_manager(A, URL_A)
    store.heartbeat_manager(C, URL_C)
    assert [m.holder for m in store.list_managers(9.0)] == [B, A, C]  # B seen 9 s ago: fresh
    clock.advance(0.5)
    assert [m.holder for m in store.list_managers(9.0)] == [A, C]
    assert [m.holder for m in store.list_managers(60.0)] == [B, A, C]  # a wider window
    # Two made at the same moment: the holder decides.
    store.heartbeat_manager("manager-1", "http://10.0.0.5:8081")
    store.heartbeat_manager("manager-0", "http://10.0.0.4:8081")
    assert [m.holder for m in store.list_managers(1.0)] == [A, C, "manager-0", "manager-1"]


def test_a_forgotten_manager_is_gone_at_once_and_others_stay(
    store: Store, clock: ManualClock
) -> None:
    store.heartbeat_manager(A, URL_A)
    store.heartbeat_manager(B, URL_B)
    store.forget_manager(A)
    store.forget_manager("manager-never-seen")  # ignored
    assert [m.holder for m in store.list_managers(9.0)] == [B]
    clock.advance(1.0)
    store.heartbeat_manager(A, URL_A)  # back: a row made afresh, started now
    assert [m.holder for m in store.list_managers(9.0)] == [B, A]


def test_a_manager_not_seen_for_an_hour_is_dropped_on_the_next_heartbeat(
    store: Store, clock: ManualClock, store_url: str
) -> None:
    store.heartbeat_manager(A, URL_A)
    store.heartbeat_manager(B, URL_B)
    clock.advance(MANAGERS_FORGOTTEN_AFTER)
    store.heartbeat_manager(B, URL_B)  # A was seen exactly an hour ago: kept
    assert sorted(r[0] for r in raw_rows(store_url, "SELECT holder FROM managers")) == [A, B]
    clock.advance(0.5)
    assert len(raw_rows(store_url, "SELECT holder FROM managers")) == 2  # reads drop nothing
    store.heartbeat_manager(B, URL_B)
    assert raw_rows(store_url, "SELECT holder FROM managers") == [(B,)]


@pytest.mark.parametrize("fresh_for", [0, -1.0, float("nan"), float("inf"), True, "9"])
def test_a_freshness_window_that_is_not_a_positive_number_is_refused(
    store: Store, fresh_for: object
) -> None:
    store.heartbeat_manager(A, URL_A)
    with pytest.raises(InvalidInput) as e:
        store.list_managers(fresh_for)  # type: ignore[arg-type]
    assert e.value.field == "fresh_for"
    assert [m.holder for m in store.list_managers(9.0)] == [A]


def test_managers_beating_at_once_each_get_one_row(open_new: OpenStore) -> None:
    """Eight managers (a connection each) make their rows together, then all beat again at
    once: one row each, none refused (the upsert takes a conflicting insert on both
    backends)."""
    stores = [open_new() for _ in range(8)]
    for _ in range(2):
        results = race(8, lambda i: stores[i].heartbeat_manager(f"m-{i}", f"http://h{i}:1"))
        assert [r for r in results if isinstance(r, BaseException)] == []
    listed = stores[0].list_managers(9.0)
    assert sorted(m.holder for m in listed) == [f"m-{i}" for i in range(8)]
    # One manager beating from several threads at once (a race the supervisor never runs,
    # the store still takes): still one row.
    results = race(8, lambda i: stores[i].heartbeat_manager("m-0", "http://h0:1"))
    assert [r for r in results if isinstance(r, BaseException)] == []
    assert len(stores[0].list_managers(9.0)) == 8


def test_heartbeats_and_the_leader_lease_are_apart(store: Store, clock: ManualClock) -> None:
    """A heartbeat takes no lease and a lease makes no heartbeat: who leads is the lease's."""
    store.heartbeat_manager(A, URL_A)
    assert store.get_leader() is None
    lease = store.acquire_leadership(B, URL_B, 3.0)
    assert lease is not None and lease.holder == B
    assert [m.holder for m in store.list_managers(9.0)] == [A]
    store.forget_manager(B)
    assert store.renew_leadership(B, lease.token, 3.0)
