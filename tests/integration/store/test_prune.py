"""The store contract for retention: what ``prune_epochs`` deletes and, above all, what it keeps.

Run against SQLite and PostgreSQL alike (fixtures in conftest.py). Time is a
:class:`~stoker.clock.ManualClock`.
"""

from __future__ import annotations

import pytest

from stoker.clock import ManualClock
from stoker.errors import InvalidInput
from stoker.store import RetentionPolicy, Store
from stoker.types import AttemptNo, ControlVersion, Epoch, EpochState, TxnState
from tests.integration.store.support import JOB, OTHER, TTL, raw_rows, running_job


def _commit(store: Store, epoch: int, attempt: int = 1, final: bool = False) -> None:
    """Epoch ``epoch`` through the whole protocol, as the runtime drives it."""
    e, a = Epoch(epoch), AttemptNo(attempt)
    store.renew_lease(JOB, a, TTL)
    store.pin_epoch(JOB, e, a, ControlVersion(0))
    store.record_txn(JOB, e, "out", a, TxnState.PREPARED, {"gids": [f"g{epoch}"]})
    store.decide_epoch(JOB, e, a, rows_in=1, final=final)
    store.record_txn(JOB, e, "out", a, TxnState.COMMITTED, {})
    store.mark_epoch_committed(JOB, e)


def _epochs(store: Store) -> list[int]:
    return sorted(r.epoch for r in store.list_epochs(JOB, limit=1_000_000))


def _txns(store: Store) -> list[tuple[int, int, str]]:
    return [(t.epoch, t.attempt, str(t.state)) for t in store.list_txns(JOB)]


def test_prune_keeps_what_recovery_needs_and_the_last_n(store: Store) -> None:
    running_job(store)
    for n in range(60):
        if n == 10:  # decided, not committed: recovery commits it
            store.pin_epoch(JOB, Epoch(n), AttemptNo(1), ControlVersion(0))
            store.record_txn(JOB, Epoch(n), "out", AttemptNo(1), TxnState.PREPARED, {})
            store.decide_epoch(JOB, Epoch(n), AttemptNo(1), rows_in=1, final=False)
        elif n == 11:  # pinned only: its replay reuses the pin
            store.pin_epoch(JOB, Epoch(n), AttemptNo(1), ControlVersion(0))
        elif n == 30:  # a final epoch: tells a restarted job it is done
            _commit(store, n, final=True)
        else:
            _commit(store, n)
    # A zombie attempt's part of committed epoch 12, still prepared: resolved by recovery or
    # the janitor, which need the record and the epoch's decision.
    store.record_txn(JOB, Epoch(12), "out", AttemptNo(7), TxnState.PREPARED, {"gids": ["z"]})

    done = store.prune_epochs(JOB, RetentionPolicy(epochs=5))

    assert _epochs(store) == [10, 11, 12, 30, 55, 56, 57, 58, 59]
    assert done.epochs == 60 - 9
    assert done.txns == 60 - 9  # the one sink's record of each pruned epoch
    assert _txns(store) == [
        (10, 1, "PREPARED"),
        (12, 1, "COMMITTED"),
        (12, 7, "PREPARED"),
        (30, 1, "COMMITTED"),
        *[(n, 1, "COMMITTED") for n in range(55, 60)],
    ]
    kept = store.get_epoch(JOB, Epoch(10))
    assert kept is not None and kept.state == EpochState.DECIDED
    # The control version every kept epoch pinned is still there (all versions are kept).
    assert store.control_snapshot(JOB, ControlVersion(0)).version == 0
    # Nothing more to do: a second call deletes nothing.
    again = store.prune_epochs(JOB, RetentionPolicy(epochs=5))
    assert (again.epochs, again.txns) == (0, 0)


def test_prune_never_takes_the_latest_epoch(store: Store, clock: ManualClock) -> None:
    running_job(store)
    for n in range(3):
        _commit(store, n)
    clock.advance(3600)

    store.prune_epochs(JOB, RetentionPolicy(seconds=60))

    assert _epochs(store) == [2]


def test_prune_by_time_keeps_the_window(store: Store, clock: ManualClock) -> None:
    running_job(store)
    for n in range(10):
        _commit(store, n)
        clock.advance(5)  # within the lease, which _commit renews
    # Epoch n was committed at T0 + 5 n; now is T0 + 50.

    store.prune_epochs(JOB, RetentionPolicy(seconds=22.5))

    assert _epochs(store) == [6, 7, 8, 9]  # committed at +30..+45, within 22.5 s of +50


def test_prune_with_both_limits_keeps_either(store: Store, clock: ManualClock) -> None:
    running_job(store)
    for n in range(10):
        _commit(store, n)
        clock.advance(5)  # within the lease, which _commit renews

    store.prune_epochs(JOB, RetentionPolicy(epochs=2, seconds=22.5))
    assert _epochs(store) == [6, 7, 8, 9]  # the window keeps more than the count
    store.prune_epochs(JOB, RetentionPolicy(epochs=3, seconds=2.5))
    assert _epochs(store) == [7, 8, 9]  # the count keeps more than the window


def test_prune_goes_in_batches(store: Store) -> None:
    running_job(store)
    for n in range(25):
        _commit(store, n)

    first = store.prune_epochs(JOB, RetentionPolicy(epochs=1), batch_size=10, max_batches=1)
    assert (first.epochs, first.batches, first.more) == (10, 1, True)
    assert _epochs(store)[0] == 10

    rest = store.prune_epochs(JOB, RetentionPolicy(epochs=1), batch_size=10)
    assert (rest.epochs, rest.batches, rest.more) == (14, 2, False)
    assert _epochs(store) == [24]


def test_prune_touches_only_its_job(store: Store) -> None:
    running_job(store)
    store.create_job(OTHER, "other", {}, {})
    store.start_attempt(OTHER, store.get_attempt(JOB, AttemptNo(1)).owner, TTL, AttemptNo(0))  # type: ignore[union-attr]
    for n in range(5):
        _commit(store, n)
        store.pin_epoch(OTHER, Epoch(n), AttemptNo(1), ControlVersion(0))
        store.decide_epoch(OTHER, Epoch(n), AttemptNo(1), rows_in=1, final=False)
        store.mark_epoch_committed(OTHER, Epoch(n))

    store.prune_epochs(JOB, RetentionPolicy(epochs=1))

    assert _epochs(store) == [4]
    assert len(store.list_epochs(OTHER)) == 5


def test_prune_sweeps_aborted_records_of_pruned_epochs(store: Store) -> None:
    running_job(store)
    for n in range(5):
        _commit(store, n)
    store.prune_epochs(JOB, RetentionPolicy(epochs=1))
    # A zombie prepares a part of pruned epoch 1; recovery aborts it (no decision left).
    store.record_txn(JOB, Epoch(1), "out", AttemptNo(9), TxnState.PREPARED, {})
    store.prune_epochs(JOB, RetentionPolicy(epochs=1))
    assert (1, 9, "PREPARED") in _txns(store)  # prepared: kept for recovery
    store.record_txn(JOB, Epoch(1), "out", AttemptNo(9), TxnState.ABORTED, {})

    store.prune_epochs(JOB, RetentionPolicy(epochs=1))

    assert _txns(store) == [(4, 1, "COMMITTED")]


def test_no_policy_keeps_everything(store: Store, clock: ManualClock) -> None:
    running_job(store)
    for n in range(5):
        _commit(store, n)
    clock.advance(10**6)

    done = store.prune_epochs(JOB, RetentionPolicy())

    assert done.epochs == 0
    assert _epochs(store) == [0, 1, 2, 3, 4]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"epochs": 0}, "retention.epochs"), ({"seconds": -1.0}, "retention.time")],
)
def test_a_bad_policy_is_refused(kwargs: dict[str, float], field: str) -> None:
    with pytest.raises(InvalidInput) as err:
        RetentionPolicy(**kwargs)  # type: ignore[arg-type]
    assert err.value.field == field


def test_a_bad_batch_size_is_refused_and_nothing_is_deleted(store: Store, store_url: str) -> None:
    running_job(store)
    for n in range(3):
        _commit(store, n)

    with pytest.raises(InvalidInput):
        store.prune_epochs(JOB, RetentionPolicy(epochs=1), batch_size=0)

    assert raw_rows(store_url, "SELECT COUNT(*) FROM epochs") == [(3,)]
