"""The store contract for operations (long REST calls that answer 202): made RUNNING, ended
once, found again by a retry of the same request while it runs or lately ended, dropped by
retention once ended long enough.

Run against SQLite and PostgreSQL alike (fixtures in conftest.py), on a ManualClock.
"""

from __future__ import annotations

import pytest

from stoker.clock import ManualClock
from stoker.errors import InvalidTransition, OperationNotFound, StoreError
from stoker.store import Store
from stoker.types import OperationState
from tests.integration.store.support import T0, OpenStore, race

A = "manager-a"
BODY = {"workers": 2, "cores": 1, "memory": "1g", "name": "c1"}


def test_an_operation_is_made_running_and_ends_once_with_its_answer(
    store: Store, clock: ManualClock
) -> None:
    op = store.create_operation("op-1", "start-cluster", "c1", BODY, A)
    assert (op.state, op.holder, op.created_at, op.ended_at) == (
        OperationState.RUNNING,
        A,
        T0,
        None,
    )
    assert store.get_operation("op-1") == op
    assert op.to_dict()["request"] == BODY
    clock.advance(20.0)
    done = store.end_operation("op-1", OperationState.SUCCEEDED, result={"name": "c1", "n": 2})
    assert (done.state, done.result, done.ended_at, done.error) == (
        OperationState.SUCCEEDED,
        {"name": "c1", "n": 2},
        T0 + 20,
        None,
    )
    # The first end stays: a second (a late thread, another manager) is refused.
    with pytest.raises(InvalidTransition, match="ended already"):
        store.end_operation("op-1", OperationState.FAILED, error="late")
    assert store.get_operation("op-1") == done
    with pytest.raises(InvalidTransition):
        store.end_operation("op-1", OperationState.RUNNING)


def test_a_failed_operation_keeps_its_error_and_the_errors_class(store: Store) -> None:
    store.create_operation("op-2", "repartition", "job-a", {"partitions": 4}, A)
    op = store.end_operation(
        "op-2", OperationState.FAILED, error="job 'job-a' runs", error_type="InvalidInput"
    )
    assert (op.state, op.error, op.error_type, op.result) == (
        OperationState.FAILED,
        "job 'job-a' runs",
        "InvalidInput",
        None,
    )


def test_unknown_and_taken_ids(store: Store) -> None:
    with pytest.raises(OperationNotFound, match="op-x"):
        store.get_operation("op-x")
    with pytest.raises(OperationNotFound):
        store.end_operation("op-x", OperationState.SUCCEEDED)
    store.create_operation("op-3", "add-worker", "c1", {}, A)
    with pytest.raises(StoreError):
        store.create_operation("op-3", "add-worker", "c1", {}, A)


def test_a_retry_finds_the_same_request_while_it_runs_and_for_a_while_after(
    store: Store, clock: ManualClock
) -> None:
    store.create_operation("op-4", "start-cluster", "c1", BODY, A)
    # Key order does not matter; another body, kind or target is another request.
    reordered = dict(reversed(list(BODY.items())))
    assert store.find_operation("start-cluster", "c1", reordered, since=T0).op_id == "op-4"
    assert store.find_operation("start-cluster", "c1", {**BODY, "workers": 3}, T0) is None
    assert store.find_operation("start-cluster", "c2", BODY, T0) is None
    assert store.find_operation("add-worker", "c1", BODY, T0) is None
    clock.advance(100.0)  # running: found however old
    assert store.find_operation("start-cluster", "c1", BODY, since=T0 + 99).op_id == "op-4"
    store.end_operation("op-4", OperationState.SUCCEEDED, result={})
    assert store.find_operation("start-cluster", "c1", BODY, since=T0 + 100).op_id == "op-4"
    assert store.find_operation("start-cluster", "c1", BODY, since=T0 + 101) is None
    # A newer one of the same request is the one found.
    clock.advance(1.0)
    store.create_operation("op-5", "start-cluster", "c1", BODY, A)
    assert store.find_operation("start-cluster", "c1", BODY, since=T0).op_id == "op-5"


def test_running_operations_and_retention(store: Store, clock: ManualClock) -> None:
    for i in range(3):
        store.create_operation(f"op-{i}", "add-worker", "c1", {"i": i}, A)
        clock.advance(1.0)
    store.end_operation("op-1", OperationState.SUCCEEDED, result={})
    assert [o.op_id for o in store.running_operations()] == ["op-0", "op-2"]
    clock.advance(10.0)
    store.end_operation("op-0", OperationState.FAILED, error="x", error_type="ClusterError")
    assert store.delete_ended_operations(before=T0 + 4) == 1  # op-1 ended at T0 + 3
    assert [o.op_id for o in store.running_operations()] == ["op-2"]
    with pytest.raises(OperationNotFound):
        store.get_operation("op-1")
    assert store.get_operation("op-0").state == OperationState.FAILED
    assert store.delete_ended_operations(before=T0 + 100) == 1
    assert store.get_operation("op-2").state == OperationState.RUNNING  # never by age


def test_two_managers_ending_one_operation_at_once_end_it_once(
    store: Store, open_new: OpenStore
) -> None:
    store.create_operation("op-r", "remove-worker", "c1", {"worker": "worker-1"}, A)
    stores = [open_new() for _ in range(4)]
    states = [OperationState.SUCCEEDED, OperationState.FAILED] * 2
    results = race(4, lambda i: stores[i].end_operation("op-r", states[i], error=str(i)))
    ended = [r for r in results if not isinstance(r, BaseException)]
    assert len(ended) == 1, results
    assert all(isinstance(r, InvalidTransition) for r in results if r not in ended), results
    assert store.get_operation("op-r") == ended[0]


def test_an_idempotency_key_finds_its_operation_and_is_taken_once(
    store: Store, clock: ManualClock
) -> None:
    assert store.keyed_operation("k-1") is None
    store.create_operation("op-k", "add-worker", "c1", {"cores": None}, A, "k-1")
    store.create_operation("op-n1", "add-worker", "c1", {"cores": None}, A)  # no key: many
    store.create_operation("op-n2", "add-worker", "c1", {"cores": None}, A)
    assert store.keyed_operation("k-1").op_id == "op-k"
    clock.advance(3600.0)
    store.end_operation("op-k", OperationState.SUCCEEDED, result={})
    clock.advance(3600.0)
    assert store.keyed_operation("k-1").state == OperationState.SUCCEEDED  # ended: still found
    with pytest.raises(StoreError):
        store.create_operation("op-k2", "add-worker", "c2", {}, A, "k-1")
