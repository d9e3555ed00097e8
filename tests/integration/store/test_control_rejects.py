"""Store contract: a rejected control event leaves no trace in the job's control state.

An event's version becomes the job's latest when it is stored; when the job's end (or a
handler) rejects the event, the store writes a new version that undoes it, so a restart of
the job starts from what was really in effect (SQLite and PostgreSQL alike).
"""

from __future__ import annotations

from typing import Any

import pytest

from stoker.clock import ManualClock
from stoker.store import Store
from stoker.store.records import ControlEvent
from stoker.types import (
    AttemptNo,
    AttemptState,
    ControlKind,
    ControlStatus,
    ControlVersion,
    Epoch,
    JobState,
    TxnState,
)
from tests.integration.store.support import CONFIG, JOB, OWNER_B, SPEC, TTL, running_job


def _add(store: Store, kind: ControlKind, body: dict[str, Any] | None = None) -> ControlEvent:
    event, created = store.add_control(JOB, kind, body or {}, sender="ops")
    assert created
    return event


def _set(**values: Any) -> dict[str, Any]:
    return {"set": values, "unset": []}


def _commit(store: Store, epoch: int, version: int) -> None:
    e, a = Epoch(epoch), AttemptNo(1)
    store.renew_lease(JOB, a, TTL)
    store.pin_epoch(JOB, e, a, ControlVersion(version))
    store.record_txn(JOB, e, "out", a, TxnState.PREPARED, {})
    store.decide_epoch(JOB, e, a, rows_in=1, final=False)
    store.record_txn(JOB, e, "out", a, TxnState.COMMITTED, {})
    store.mark_epoch_committed(JOB, e)


def _restart(store: Store, clock: ManualClock) -> None:
    """The ended job is restarted and its new attempt declares its defaults again."""
    store.restart_job(JOB, SPEC)
    clock.advance(TTL + 1)
    store.start_attempt(JOB, OWNER_B, TTL, AttemptNo(1))
    store.declare_defaults(JOB, dict(CONFIG))


def test_a_config_and_a_pause_the_end_rejected_are_undone_for_the_restart(
    store: Store, clock: ManualClock
) -> None:
    running_job(store)
    _add(store, ControlKind.CONFIG, _set(rate=2.0))  # v1: committed at epoch 0
    _commit(store, 0, version=1)
    _add(store, ControlKind.CONFIG, _set(rate=3.0))  # v2: applied at epoch 1, never decided
    store.pin_epoch(JOB, Epoch(1), AttemptNo(1), ControlVersion(2))
    _add(store, ControlKind.PAUSE)  # v3: still pending as the job ends
    _add(store, ControlKind.RATE_LIMIT, {"rows_per_second": 5.0})  # v4: pending

    store.finish_attempt(JOB, AttemptNo(1), AttemptState.FINISHED, JobState.FINISHED)

    statuses = {int(e.version): e.status for e in store.list_controls(JOB)}
    assert statuses == {
        1: ControlStatus.COMMITTED,
        2: ControlStatus.REJECTED,
        3: ControlStatus.REJECTED,
        4: ControlStatus.REJECTED,
    }
    latest = store.control_snapshot(JOB)
    # A new version (versions only grow) with what epoch 0 committed, and nothing after it.
    assert latest.version == 5
    assert latest.config == {**CONFIG, "rate": 2.0}
    assert not latest.state.get("paused")
    assert not latest.state.get("rate_limit")
    assert latest.state.get("overrides") == {"rate": 2.0}
    # The history is left as it was.
    assert store.control_snapshot(JOB, ControlVersion(3)).state["paused"] is True
    # A replay of the epoch pinned at a rejected version applies the undone state instead.
    assert store.get_epoch(JOB, Epoch(1)).control_version == 5
    assert store.get_epoch(JOB, Epoch(0)).control_version == 1

    _restart(store, clock)
    after = store.control_snapshot(JOB)
    assert after.config == {**CONFIG, "rate": 2.0}
    assert not after.state.get("paused")
    # The restarted job is not paused: a pause is taken, not refused as "paused already".
    assert _add(store, ControlKind.PAUSE).status == ControlStatus.PENDING


def test_an_undo_keeps_defaults_a_later_attempt_declared(store: Store, clock: ManualClock) -> None:
    running_job(store)
    _add(store, ControlKind.CONFIG, _set(rate=9.0))  # v1: pending through a restart
    store.attempt_failed(JOB, AttemptNo(1), "crash", next_attempt_at=clock.now() + 1)
    clock.advance(TTL + 1)
    store.start_attempt(JOB, OWNER_B, TTL, AttemptNo(1))
    defaults = {"batch_rows": 500, "rate": 1.5}
    assert store.declare_defaults(JOB, defaults).config == {"batch_rows": 500, "rate": 9.0}

    store.set_job_state(JOB, JobState.FAILED, "gave up")

    latest = store.control_snapshot(JOB)
    assert latest.config == defaults
    assert latest.state.get("base") == defaults
    assert not latest.state.get("overrides")


def test_rejecting_an_event_that_changes_no_state_writes_no_version(store: Store) -> None:
    running_job(store)
    custom = _add(store, ControlKind.EVENT, {"name": "reload", "payload": {}})
    _add(store, ControlKind.SAVEPOINT, {"stop": False, "dir": None})

    store.reject_control(JOB, custom.control_id, "handler raised")
    store.finish_attempt(JOB, AttemptNo(1), AttemptState.CANCELED, JobState.CANCELED)

    assert store.get_job(JOB).control_version == 2


@pytest.mark.parametrize("kind", [ControlKind.PAUSE, ControlKind.LOG_LEVEL])
def test_reject_control_undoes_the_event(store: Store, kind: ControlKind) -> None:
    running_job(store)
    body = {"level": "DEBUG"} if kind == ControlKind.LOG_LEVEL else {}
    sent = _add(store, kind, body)
    _add(store, ControlKind.CONFIG, _set(rate=4.0))  # a later event that still counts

    store.reject_control(JOB, sent.control_id, "refused")

    latest = store.control_snapshot(JOB)
    assert latest.version == 3
    assert latest.config == {**CONFIG, "rate": 4.0}
    assert not latest.state.get("paused")
    assert not latest.state.get("log_level")
