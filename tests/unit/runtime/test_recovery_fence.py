"""Recovery is fenced: the job's recovery hold, the attempt bound, and a sink set that changed.

A real SQLite store on a ManualClock and real files sinks (staged parts made by hand, no
Spark); the frozen-process case on real Spark and PostgreSQL is
tests/integration/test_recovery_fence.py.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from stoker.clock import ManualClock
from stoker.errors import StaleAttempt
from stoker.procs import host_id
from stoker.runtime.recovery import recover
from stoker.runtime.recovery_hold import Hold
from stoker.runtime.sinkset import forget_removed, open_removed, record_sinks
from stoker.sinks.base import Decision, Recovered, SinkOwner
from stoker.sinks.files import FilesSink
from stoker.store import Owner, Store, open_store
from stoker.types import (
    AttemptNo,
    AttemptState,
    ControlVersion,
    Epoch,
    EpochState,
    TxnState,
    job_id,
)

JOB = job_id("fenced")
ME = Owner(host_id(), 4242, "mine")
ELSEWHERE = Owner("another-host", 1, "boot")  # alive as far as this host can tell
ONE, TWO, THREE = AttemptNo(1), AttemptNo(2), AttemptNo(3)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1_000.0)


@pytest.fixture
def store(tmp_path: Path, clock: ManualClock) -> Iterator[Store]:
    st = open_store(tmp_path / "store.db", clock)
    try:
        yield st
    finally:
        st.close()


def dead_owner() -> Owner:
    """A process of this host that has exited."""
    p = subprocess.Popen(["true"])
    p.wait()
    return Owner(host_id(), p.pid, "gone")


# the hold ----------------------------------------------------------------------------------------
def test_a_live_hold_is_waited_for_and_a_lapsed_one_taken_over(
    store: Store, clock: ManualClock
) -> None:
    theirs = store.take_recovery_hold(JOB, ONE, ELSEWHERE, 10.0)
    looks = []

    def waiting() -> None:
        looks.append(clock.now())
        if len(looks) == 3:
            clock.advance(10.0)  # the holder stopped renewing: its hold lapses

    hold = Hold(store, JOB, TWO, 10.0, owner=ME, waiting=waiting)
    hold.acquire()
    try:
        assert len(looks) == 3
        now = store.get_recovery_hold(JOB)
        assert now is not None and (now.attempt, now.owner) == (TWO, ME)
        # The frozen holder wakes up: it cannot renew, and its release takes nothing away.
        assert not store.renew_recovery_hold(theirs, 10.0)
        store.release_recovery_hold(theirs)
        assert store.get_recovery_hold(JOB) == now
    finally:
        hold.release()
    assert store.get_recovery_hold(JOB) is None


def test_a_dead_holder_is_taken_over_at_once(store: Store) -> None:
    store.take_recovery_hold(JOB, ONE, dead_owner(), 10.0)

    def waiting() -> None:
        raise AssertionError("waited for a holder that is provably gone")

    with Hold(store, JOB, TWO, 10.0, owner=ME, waiting=waiting):
        held = store.get_recovery_hold(JOB)
        assert held is not None and held.owner == ME


def test_a_later_attempts_hold_leaves_nothing_to_an_earlier_recovery(store: Store) -> None:
    store.take_recovery_hold(JOB, THREE, ELSEWHERE, 10.0)
    with pytest.raises(StaleAttempt, match="attempt 3 of job 'fenced' recovers it now"):
        Hold(store, JOB, TWO, 10.0, owner=ME).acquire()


def test_a_recovery_whose_hold_was_taken_over_stops_at_its_next_step(
    store: Store, clock: ManualClock
) -> None:
    with Hold(store, JOB, ONE, 10.0, owner=ME) as hold:
        hold.check()  # still ours
        clock.advance(10.0)  # frozen past the lapse
        store.take_recovery_hold(JOB, TWO, ELSEWHERE, 10.0)  # the next attempt took it
        with pytest.raises(StaleAttempt, match="lapsed and was taken over"):
            hold.check()
    held = store.get_recovery_hold(JOB)
    assert held is not None and held.attempt == TWO  # its release left the new holder alone


# the bound -------------------------------------------------------------------------------------
class BoundSink:
    """Reports what recovery asked of it, and (wrongly) a later attempt's part as aborted."""

    name = "bound"

    def __init__(self) -> None:
        self.asked: list[AttemptNo | None] = []

    def recover(self, decision: Decision, up_to: AttemptNo | None = None) -> Recovered:
        self.asked.append(up_to)
        return Recovered(aborted=[(Epoch(1), TWO)])


def test_recovery_up_to_an_attempt_leaves_a_later_attempts_epochs_and_records(
    store: Store,
) -> None:
    store.create_job(JOB, "p", {}, {})
    store.start_attempt(JOB, ME, 30.0, expected_current=AttemptNo(0))
    store.end_attempt(JOB, ONE, AttemptState.FAILED)
    store.start_attempt(JOB, ME, 30.0, expected_current=ONE)
    sink = BoundSink()
    store.pin_epoch(JOB, Epoch(0), TWO, ControlVersion(0))
    store.record_txn(JOB, Epoch(0), sink.name, TWO, TxnState.PREPARED, {})
    store.decide_epoch(JOB, Epoch(0), TWO, 1, False)
    store.pin_epoch(JOB, Epoch(1), TWO, ControlVersion(0))
    store.record_txn(JOB, Epoch(1), sink.name, TWO, TxnState.PREPARED, {})

    recover(store, JOB, [sink], up_to=ONE, phase="end")  # attempt 1's end, late

    assert sink.asked == [ONE]
    decided = store.get_epoch(JOB, Epoch(0))
    assert decided is not None and decided.state == EpochState.DECIDED
    prepared = [(t.epoch, t.attempt) for t in store.list_txns(JOB, TxnState.PREPARED)]
    assert prepared == [(0, TWO), (1, TWO)]


# a sink removed after a decision ---------------------------------------------------------------
def _staged(sink: FilesSink, epoch: int, attempt: int, uid: str) -> None:
    folder = sink.staging / f"epoch={epoch}.attempt={attempt}.owner={uid}"
    folder.mkdir(parents=True)
    (folder / "part-0.json").write_text('{"id": 1}\n')


def test_a_removed_sinks_decided_part_is_committed_from_its_recorded_descriptor(
    store: Store, tmp_path: Path
) -> None:
    job, _ = store.create_job(JOB, "p", {}, {})
    owner = SinkOwner(JOB, job.uid)
    kept, gone = FilesSink(str(tmp_path / "kept")), FilesSink(str(tmp_path / "gone"))
    # Attempt 1 runs with both sinks; epoch 0 is decided, then the driver dies.
    store.start_attempt(JOB, ME, 30.0, expected_current=AttemptNo(0))
    for s in (kept, gone):
        s.open(owner, tmp_path)
    record_sinks(store, JOB, [kept, gone])
    store.pin_epoch(JOB, Epoch(0), ONE, ControlVersion(0))
    for s in (kept, gone):
        _staged(s, 0, 1, job.uid)
        store.record_txn(JOB, Epoch(0), s.name, ONE, TxnState.PREPARED, {})
    store.decide_epoch(JOB, Epoch(0), ONE, 1, False)
    store.end_attempt(JOB, ONE, AttemptState.FAILED)

    # Attempt 2's pipeline has only `kept`: `gone` is rebuilt from what the store recorded.
    store.start_attempt(JOB, ME, 30.0, expected_current=ONE)
    sinkset = record_sinks(store, JOB, [kept])
    assert [d["name"] for d in sinkset.removed] == [gone.name]
    assert [d["name"] for d in store.get_job_sinks(JOB)] == [kept.name, gone.name]
    removed = open_removed(store, JOB, sinkset, owner, tmp_path)
    recover(store, JOB, [kept, *removed], up_to=TWO)
    forget_removed(store, JOB, sinkset)

    for s in (kept, gone):
        assert (Path(s.path) / "epoch=0" / "part-0.json").exists(), s.name
        assert list(s.staging.iterdir()) == []
    epoch0 = store.get_epoch(JOB, Epoch(0))
    assert epoch0 is not None and epoch0.state == EpochState.COMMITTED
    assert store.list_txns(JOB, TxnState.PREPARED) == []
    assert [d["name"] for d in store.get_job_sinks(JOB)] == [kept.name]
