"""PendingEpoch: its status moves only forward and every method checks it (real SQLite store)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from stoker.errors import InvalidTransition, SinkError
from stoker.runtime.pending import PendingEpoch, PendingStatus
from stoker.sinks.base import Decision, Prepared, Recovered, SinkOwner
from stoker.store import Owner, Store
from stoker.types import AttemptNo, ControlVersion, Epoch, EpochState, TxnState, job_id

JOB = job_id("pending-job")


class FakeFrame:
    """Stands in for the epoch's DataFrame: this sink never looks at it."""


class RecordingSink:
    """A sink that remembers what it was asked to commit (the rule under test is the runtime's)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.committed: list[tuple[Epoch, AttemptNo, dict[str, Any]]] = []

    def describe(self) -> str:
        return self.name

    def validate(self, owner: SinkOwner) -> None: ...

    def open(self, owner: SinkOwner, state_dir: Path) -> None: ...

    def prepare(self, df: Any, epoch: Epoch, attempt: AttemptNo) -> Prepared:
        return Prepared(rows=3, detail={"gids": [f"{self.name}:{epoch}:{attempt}"]})

    def commit(self, epoch: Epoch, attempt: AttemptNo, detail: Mapping[str, Any]) -> None:
        self.committed.append((epoch, attempt, dict(detail)))

    def abort(self, epoch: Epoch, attempt: AttemptNo) -> None: ...

    def recover(self, decision: Decision, up_to: AttemptNo | None = None) -> Recovered:
        return Recovered()


@pytest.fixture
def store(store: Store) -> Store:
    store.create_job(JOB, "p", {}, {})
    store.start_attempt(JOB, Owner("h", 1, "b"), 30.0, expected_current=AttemptNo(0))
    return store


def pinned(store: Store) -> PendingEpoch:
    store.pin_epoch(JOB, Epoch(0), AttemptNo(1), ControlVersion(0))
    return PendingEpoch(store, JOB, Epoch(0), AttemptNo(1), ControlVersion(0))


def test_commit_without_prepare_and_decide_raises(store: Store) -> None:
    sink = RecordingSink("s")
    pending = pinned(store)
    with pytest.raises(InvalidTransition, match="cannot commit"):
        pending.commit([sink])
    pending.prepare(sink, FakeFrame())  # type: ignore[arg-type]
    with pytest.raises(InvalidTransition, match="cannot commit"):
        pending.commit([sink])  # prepared, not decided
    pending.all_prepared([sink])
    with pytest.raises(InvalidTransition):
        pending.prepare(sink, FakeFrame())  # type: ignore[arg-type]
    assert sink.committed == []


def test_the_protocol_in_order_commits_what_was_recorded(store: Store) -> None:
    a, b = RecordingSink("a"), RecordingSink("b")
    pending = pinned(store)
    pending.prepare(a, FakeFrame())  # type: ignore[arg-type]
    with pytest.raises(InvalidTransition, match="have not prepared"):
        pending.all_prepared([a, b])
    pending.prepare(b, FakeFrame())  # type: ignore[arg-type]
    assert store.get_txn(JOB, Epoch(0), "a", AttemptNo(1)).state == TxnState.PREPARED  # type: ignore[union-attr]
    pending.all_prepared([a, b])
    with pytest.raises(InvalidTransition, match="cannot mark committed"):
        pending.mark_committed()
    pending.decide(final=False)
    pending.commit([a, b])
    pending.mark_committed()
    assert pending.status == PendingStatus.COMMITTED
    assert a.committed == [(0, 1, {"gids": ["a:0:1"]})]
    assert store.get_epoch(JOB, Epoch(0)).state == EpochState.COMMITTED  # type: ignore[union-attr]
    with pytest.raises(InvalidTransition):
        pending.commit([a, b])


def test_recovery_side_rebuilds_a_decided_epoch_from_the_store(store: Store) -> None:
    a = RecordingSink("a")
    pending = pinned(store)
    pending.prepare(a, FakeFrame())  # type: ignore[arg-type]
    pending.all_prepared([a])
    pending.decide(final=False)
    # The driver died here; recovery works from the store's record alone.
    rec = store.get_epoch(JOB, Epoch(0))
    assert rec is not None
    again = PendingEpoch.decided(store, rec, [a])
    assert again.status == PendingStatus.DECIDED
    again.commit([a])
    again.mark_committed()
    assert a.committed == [(0, 1, {"gids": ["a:0:1"]})]
    # A sink with no record of a decided epoch was added to the pipeline after the decision:
    # it has no part of the epoch, and committing the epoch passes it by.
    store.pin_epoch(JOB, Epoch(1), AttemptNo(1), ControlVersion(0))
    store.record_txn(JOB, Epoch(1), "a", AttemptNo(1), TxnState.PREPARED, {"gids": []})
    rec1 = store.decide_epoch(JOB, Epoch(1), AttemptNo(1), 0, False)
    added = RecordingSink("added-later")
    later = PendingEpoch.decided(store, rec1, [a, added])
    assert later.absent == {"added-later"}
    later.commit([a, added])
    later.mark_committed()
    assert added.committed == [] and a.committed[-1] == (1, 1, {"gids": []})
    # A recorded part that was aborted cannot be committed: that is an error, not a new sink.
    store.pin_epoch(JOB, Epoch(2), AttemptNo(1), ControlVersion(0))
    store.record_txn(JOB, Epoch(2), "a", AttemptNo(1), TxnState.PREPARED, {"gids": []})
    store.record_txn(JOB, Epoch(2), "b", AttemptNo(1), TxnState.PREPARED, {"gids": []})
    store.record_txn(JOB, Epoch(2), "b", AttemptNo(1), TxnState.ABORTED, {})
    rec2 = store.decide_epoch(JOB, Epoch(2), AttemptNo(1), 0, False)
    with pytest.raises(SinkError, match="recorded ABORTED"):
        PendingEpoch.decided(store, rec2, [a, RecordingSink("b")])
    pinned_rec = store.get_epoch(JOB, Epoch(0))
    assert pinned_rec is not None
    with pytest.raises(InvalidTransition):
        PendingEpoch.decided(store, pinned_rec, [a])  # COMMITTED, not DECIDED
