"""The store contract for sink transactions.

Run against SQLite and PostgreSQL alike (fixtures in conftest.py). Time is a
:class:`~stoker.clock.ManualClock`; leases lapse because the test moves the clock.
"""

from __future__ import annotations

from typing import Any

import pytest

from stoker.clock import ManualClock
from stoker.errors import InvalidTransition
from stoker.store import SinkTxn, Store
from stoker.types import AttemptNo, Epoch, TxnState
from tests.integration.store.support import JOB, OTHER, T0, running_job


def test_record_txn_upserts_and_list_txns_filters(store: Store, clock: ManualClock) -> None:
    running_job(store)
    store.record_txn(JOB, Epoch(1), "pg", AttemptNo(1), TxnState.PREPARED, {"gid": "g1"})
    store.record_txn(JOB, Epoch(0), "pg", AttemptNo(1), TxnState.PREPARED, {"gid": "g0"})
    store.record_txn(JOB, Epoch(0), "files", AttemptNo(1), TxnState.PREPARED, {"dir": "d0"})
    store.record_txn(JOB, Epoch(0), "pg", AttemptNo(2), TxnState.PREPARED, {"gid": "g0b"})
    clock.advance(3)

    store.record_txn(JOB, Epoch(0), "pg", AttemptNo(1), TxnState.COMMITTED, {"gid": "g0", "n": 2})

    def txn(
        e: int, sink: str, a: int, state: TxnState, detail: dict[str, Any], at: float
    ) -> SinkTxn:
        return SinkTxn(JOB, Epoch(e), sink, AttemptNo(a), state, detail, at)

    committed = txn(0, "pg", 1, TxnState.COMMITTED, {"gid": "g0", "n": 2}, T0 + 3)
    prepared = [
        txn(0, "files", 1, TxnState.PREPARED, {"dir": "d0"}, T0),
        txn(0, "pg", 2, TxnState.PREPARED, {"gid": "g0b"}, T0),
        txn(1, "pg", 1, TxnState.PREPARED, {"gid": "g1"}, T0),
    ]
    assert store.list_txns(JOB) == [prepared[0], committed, prepared[1], prepared[2]]
    assert store.list_txns(JOB, TxnState.PREPARED) == prepared
    assert store.list_txns(JOB, TxnState.COMMITTED) == [committed]
    assert store.list_txns(JOB, TxnState.ABORTED) == []
    assert store.list_txns(OTHER) == []


def test_sink_txn_states_follow_their_table_and_keep_the_prepared_detail(store: Store) -> None:
    running_job(store)
    e, a = Epoch(0), AttemptNo(1)

    with pytest.raises(InvalidTransition):
        store.record_txn(JOB, e, "pg", a, TxnState.COMMITTED, {})  # commit without prepare
    assert store.get_txn(JOB, e, "pg", a) is None

    store.record_txn(JOB, e, "pg", a, TxnState.PREPARED, {"gids": ["g1", "g2"]})
    done = store.record_txn(JOB, e, "pg", a, TxnState.COMMITTED, {"by": "recovery"})
    assert done.state == TxnState.COMMITTED
    assert done.detail == {"gids": ["g1", "g2"], "by": "recovery"}
    store.record_txn(JOB, e, "pg", a, TxnState.COMMITTED, {})  # idempotent
    with pytest.raises(InvalidTransition):
        store.record_txn(JOB, e, "pg", a, TxnState.ABORTED, {})
    with pytest.raises(InvalidTransition):
        store.record_txn(JOB, e, "pg", a, TxnState.PREPARED, {})

    # A part found only in the sink may be aborted without a record.
    aborted = store.record_txn(JOB, e, "pg", AttemptNo(7), TxnState.ABORTED, {})
    assert aborted.state == TxnState.ABORTED
