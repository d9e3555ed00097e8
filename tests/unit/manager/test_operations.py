"""Long calls as operations (stoker.manager.operations) over a real SQLite store, with work
that a test releases: a call checked at once, run in the background, found again by a retry
(by its Idempotency-Key, or by the same request while it runs), bounded, and never left
RUNNING by a manager that died (a real process, SIGKILLed) or stopped."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from stoker.errors import ClusterConflict, InvalidInput, TooManyRequests
from stoker.manager.operations import Operations, holder_text
from stoker.procs import process_start_marker, this_owner
from stoker.store import Store, open_store
from stoker.store.records import Owner
from stoker.types import OperationState
from tests.support import wait_for


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    yield s
    s.close()


@pytest.fixture
def ops(store: Store) -> Iterator[Operations]:
    o = Operations(store, max_running=2)
    yield o
    o.close()


class Gate:
    """Work that runs until the test opens the gate; counts its starts."""

    def __init__(self, result: dict[str, Any] | None = None, error: Exception | None = None):
        self.opened = threading.Event()
        self.started = 0
        self.result = result or {"ok": True}
        self.error = error

    def prepare(self) -> Callable[[], dict[str, Any]]:
        def work() -> dict[str, Any]:
            self.started += 1
            assert self.opened.wait(30)
            if self.error is not None:
                raise self.error
            return self.result

        return work


def ended(store: Store, op_id: str) -> Any:
    return wait_for(
        f"operation {op_id} to end",
        lambda: (op := store.get_operation(op_id)).state != OperationState.RUNNING and op,
        timeout=30,
        every=0.05,
    )


def test_the_call_answers_at_once_and_the_operation_ends_with_the_answer(
    ops: Operations, store: Store
) -> None:
    gate = Gate({"name": "c1", "state": "RUNNING"})
    op, created = ops.start("start-cluster", "c1", {"name": "c1"}, gate.prepare)
    assert created and op.state == OperationState.RUNNING
    assert store.get_operation(op.op_id).state == OperationState.RUNNING
    gate.opened.set()
    done = ended(store, op.op_id)
    assert (done.state, done.result, gate.started) == (
        OperationState.SUCCEEDED,
        {"name": "c1", "state": "RUNNING"},
        1,
    )


def test_a_refusal_in_the_check_records_nothing(ops: Operations, store: Store) -> None:
    def refuse() -> Callable[[], dict[str, Any]]:
        raise ClusterConflict("cluster 'c1' exists (RUNNING)")

    with pytest.raises(ClusterConflict):
        ops.start("start-cluster", "c1", {"name": "c1"}, refuse)
    assert store.running_operations() == []


def test_an_error_of_the_work_ends_it_failed_with_the_errors_class(
    ops: Operations, store: Store
) -> None:
    gate = Gate(error=InvalidInput("partitions", "is 4 already"))
    op, _ = ops.start("repartition", "job-a", {"partitions": 4}, gate.prepare)
    gate.opened.set()
    done = ended(store, op.op_id)
    assert (done.state, done.error, done.error_type) == (
        OperationState.FAILED,
        "partitions: is 4 already",
        "InvalidInput",
    )
    # Not a stoker error (a bug): FAILED too, with what it was.
    gate = Gate(error=KeyError("x"))
    op, _ = ops.start("repartition", "job-b", {"partitions": 4}, gate.prepare)
    gate.opened.set()
    assert ended(store, op.op_id).error == "KeyError: 'x'"


def test_a_retry_with_the_key_gets_the_same_operation_even_after_it_ended(
    ops: Operations, store: Store
) -> None:
    gate = Gate()
    first, created = ops.start("add-worker", "c1", {"cores": None}, gate.prepare, "key-1")
    again, created_again = ops.start("add-worker", "c1", {"cores": None}, gate.prepare, "key-1")
    assert (created, created_again, again.op_id) == (True, False, first.op_id)
    gate.opened.set()
    ended(store, first.op_id)
    late, created_late = ops.start("add-worker", "c1", {"cores": None}, gate.prepare, "key-1")
    assert (late.op_id, late.state, created_late) == (first.op_id, "SUCCEEDED", False)
    assert gate.started == 1  # one worker, however often the client sent it
    # The key with another request: refused, nothing started.
    with pytest.raises(InvalidInput, match=r"Idempotency-Key.*another request"):
        ops.start("add-worker", "c2", {"cores": None}, gate.prepare, "key-1")
    with pytest.raises(InvalidInput, match="printable ASCII"):
        ops.start("add-worker", "c1", {}, gate.prepare, "a key with spaces")


def test_without_a_key_the_same_request_while_it_runs_is_that_operation(
    ops: Operations, store: Store
) -> None:
    gate = Gate()
    first, _ = ops.start("add-worker", "c1", {"cores": 1}, gate.prepare)
    again, created = ops.start("add-worker", "c1", {"cores": 1}, gate.prepare)
    assert (again.op_id, created) == (first.op_id, False)
    gate.opened.set()
    ended(store, first.op_id)
    # Ended: the same request again is a new call (a second worker is meant).
    gate2 = Gate()
    gate2.opened.set()
    second, created = ops.start("add-worker", "c1", {"cores": 1}, gate2.prepare)
    assert created and second.op_id != first.op_id


def test_past_the_bound_a_call_is_refused_and_nothing_is_recorded(
    ops: Operations, store: Store
) -> None:
    gates = [Gate(), Gate()]
    started = [ops.start("add-worker", f"c{i}", {}, g.prepare)[0] for i, g in enumerate(gates)]
    with pytest.raises(TooManyRequests, match="at most 2"):
        ops.start("add-worker", "c9", {}, Gate().prepare)
    assert len(store.running_operations()) == 2
    gates[0].opened.set()
    ended(store, started[0].op_id)
    third = Gate()
    third.opened.set()
    assert ops.start("add-worker", "c9", {}, third.prepare)[1]
    gates[1].opened.set()


def test_an_operation_of_a_killed_manager_ends_failed_when_read(
    store: Store, ops: Operations
) -> None:
    # A real process takes the manager's part and is SIGKILLed with its operation RUNNING.
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        owner = Owner(this_owner().host, proc.pid, process_start_marker(proc.pid))
        store.create_operation("op-dead", "start-cluster", "c1", {}, holder_text(owner))
        store.create_operation("op-live", "start-cluster", "c2", {}, holder_text(this_owner()))
        assert ops.get("op-dead").state == OperationState.RUNNING  # its manager lives
        proc.kill()
        proc.wait()
        dead = ops.get("op-dead")
        assert (dead.state, dead.error_type) == (OperationState.FAILED, "ManagerUnavailable")
        assert f"pid {proc.pid}" in str(dead.error)
        # The sweep ends every such one; a live manager's stays RUNNING.
        assert ops.sweep() == 0
        assert store.get_operation("op-live").state == OperationState.RUNNING
    finally:
        proc.kill()


def test_a_manager_that_stops_ends_its_unfinished_operations(store: Store) -> None:
    ops = Operations(store)
    gate = Gate()
    op, _ = ops.start("remove-worker", "c1", {"worker": "worker-1"}, gate.prepare)
    wait_for("the work to start", lambda: gate.started == 1, timeout=30, every=0.05)
    ops.close()
    closed = store.get_operation(op.op_id)
    assert (closed.state, closed.error_type) == (OperationState.FAILED, "ManagerUnavailable")
    gate.opened.set()  # the thread's late end leaves the first end
    wait_for("the thread to end", lambda: not ops._mine, timeout=30, every=0.05)
    assert store.get_operation(op.op_id) == closed
