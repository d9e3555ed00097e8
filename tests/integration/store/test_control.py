"""The store contract for control: versions, events, and how epochs and job ends move them.

Run against SQLite and PostgreSQL alike (fixtures in conftest.py). Time is a
:class:`~stoker.clock.ManualClock`; leases lapse because the test moves the clock.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from stoker.clock import ManualClock
from stoker.errors import (
    ControlConflict,
    ControlNotFound,
    InvalidInput,
    InvalidTransition,
    JobNotFound,
    JobTerminal,
)
from stoker.store import ControlSnapshot, RetentionPolicy, Store, _sql, open_store
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
    job_id,
)
from tests.integration.store.support import (
    CONFIG,
    JOB,
    OTHER,
    OWNER_B,
    SPEC,
    T0,
    TTL,
    OpenStore,
    race,
    raw_rows,
    running_job,
)

BASE = {"base": CONFIG}
PIPELINE = {"name": "orders", "sources": ["generator(rows=10)"], "config": CONFIG, "events": []}


def _set(**values: Any) -> dict[str, Any]:
    """A validated config event's body."""
    return {"set": values, "unset": []}


def _add(store: Store, kind: ControlKind, body: dict[str, Any] | None = None) -> ControlEvent:
    event, created = store.add_control(JOB, kind, body or {}, sender="ops")
    assert created
    return event


def _statuses(store: Store) -> dict[int, tuple[str, int | None]]:
    return {
        e.version: (str(e.status), e.applied_epoch) for e in store.list_controls(JOB, limit=1000)
    }


def _commit(store: Store, epoch: int, version: int, attempt: int = 1) -> None:
    """Epoch ``epoch`` through the whole protocol, as the runtime drives it."""
    e, a = Epoch(epoch), AttemptNo(attempt)
    store.renew_lease(JOB, a, TTL)
    store.pin_epoch(JOB, e, a, ControlVersion(version))
    store.record_txn(JOB, e, "out", a, TxnState.PREPARED, {})
    store.decide_epoch(JOB, e, a, rows_in=1, final=False)
    store.record_txn(JOB, e, "out", a, TxnState.COMMITTED, {})
    store.mark_epoch_committed(JOB, e)


# versions and declared defaults ----------------------------------------------------------------


def test_declare_defaults_versions_only_changes(store: Store, clock: ManualClock) -> None:
    store.create_job(JOB, "orders", SPEC, CONFIG)

    v0 = ControlSnapshot(ControlVersion(0), CONFIG, BASE)
    assert store.control_snapshot(JOB) == v0
    assert store.declare_defaults(JOB, dict(CONFIG)) == v0
    assert store.get_job(JOB).control_version == 0

    clock.advance(1)
    changed = {"batch_rows": 200, "rate": 1.5}
    v1 = ControlSnapshot(ControlVersion(1), changed, {"base": changed})
    assert store.declare_defaults(JOB, changed) == v1
    job = store.get_job(JOB)
    assert (job.control_version, job.updated_at) == (1, T0 + 1)
    assert store.declare_defaults(JOB, changed) == v1

    # Back to the old values is a change too: a new version, the old ones untouched.
    v2 = ControlSnapshot(ControlVersion(2), CONFIG, BASE)
    assert store.declare_defaults(JOB, dict(CONFIG)) == v2
    assert store.control_snapshot(JOB) == v2
    assert store.control_snapshot(JOB, ControlVersion(0)) == v0
    assert store.control_snapshot(JOB, ControlVersion(1)) == v1


def test_declare_defaults_keeps_the_pipeline_description(store: Store) -> None:
    store.create_job(JOB, "orders", SPEC, CONFIG)

    # The description alone is no new version: no epoch applies it (version 0 stays the
    # submitted config, which is what an epoch pinned at 0 sees).
    first = store.declare_defaults(JOB, dict(CONFIG), pipeline=PIPELINE)
    assert first == ControlSnapshot(ControlVersion(0), CONFIG, {**BASE, "pipeline": PIPELINE})
    # The same description again (tuples read back as lists): no version.
    same = {**PIPELINE, "sources": ("generator(rows=10)",)}
    assert store.declare_defaults(JOB, dict(CONFIG), pipeline=same) == first
    # Without one, the recorded description stays.
    assert store.declare_defaults(JOB, dict(CONFIG)) == first
    # A changed description (a new handler registered) replaces it, still no version.
    newer = {**PIPELINE, "events": ["reload_rules"]}
    assert store.declare_defaults(JOB, dict(CONFIG), pipeline=newer).version == 0
    assert store.control_snapshot(JOB).state["pipeline"] == newer
    # With changed defaults, a new version carries both.
    changed = {**CONFIG, "batch_rows": 7}
    v1 = store.declare_defaults(JOB, changed, pipeline=newer)
    assert v1.version == 1 and v1.config["batch_rows"] == 7 and v1.state["pipeline"] == newer


def test_declare_defaults_keeps_what_control_set(store: Store) -> None:
    running_job(store)
    _add(store, ControlKind.CONFIG, _set(rate=2.5))
    assert store.control_snapshot(JOB).config == {"batch_rows": 100, "rate": 2.5}

    # A new attempt declares new defaults: the key set by control survives.
    defaults = {"batch_rows": 200, "rate": 1.5, "label": "x"}
    snap = store.declare_defaults(JOB, defaults)
    assert snap.version == 2
    assert snap.config == {"batch_rows": 200, "rate": 2.5, "label": "x"}
    assert snap.state == {"base": defaults, "overrides": {"rate": 2.5}}
    assert store.declare_defaults(JOB, defaults).version == 2  # nothing changed

    # An override of a key the pipeline no longer declares is dropped.
    snap = store.declare_defaults(JOB, {"batch_rows": 200})
    assert (snap.version, snap.config, snap.state) == (
        ControlVersion(3),
        {"batch_rows": 200},
        {"base": {"batch_rows": 200}},
    )


def test_control_of_unknown_job_raises_job_not_found(store: Store) -> None:
    nope = job_id("nope")
    with pytest.raises(JobNotFound):
        store.control_snapshot(nope)
    with pytest.raises(JobNotFound):
        store.declare_defaults(nope, {})
    with pytest.raises(JobNotFound):
        store.add_control(nope, ControlKind.PAUSE, {}, sender="ops")
    with pytest.raises(JobNotFound):
        store.get_control(nope, "abc")
    with pytest.raises(JobNotFound):
        store.list_controls(nope)
    with pytest.raises(JobNotFound):
        store.reject_control(nope, "abc", "no")
    store.create_job(JOB, "orders", SPEC, CONFIG)
    with pytest.raises(JobNotFound):
        store.control_snapshot(JOB, ControlVersion(9))
    with pytest.raises(ControlNotFound) as info:
        store.get_control(JOB, "abc")
    assert (info.value.job_id, info.value.control_id) == (JOB, "abc")
    assert store.list_controls(JOB) == []
    assert store.applied_controls(JOB, Epoch(0)) == []


# add_control ------------------------------------------------------------------------------------


def test_add_control_stores_the_event_and_a_new_version(store: Store, clock: ManualClock) -> None:
    running_job(store)
    clock.advance(2)

    event, created = store.add_control(
        JOB, ControlKind.CONFIG, _set(rate=3.0), sender="alice", origin="10.0.0.7"
    )

    assert created
    assert len(event.control_id) == 16 and int(event.control_id, 16) >= 0
    assert event == ControlEvent(
        job_id=JOB,
        control_id=event.control_id,
        version=ControlVersion(1),
        kind=ControlKind.CONFIG,
        body=_set(rate=3.0),
        status=ControlStatus.PENDING,
        sender="alice",
        created_at=T0 + 2,
        origin="10.0.0.7",
    )
    assert store.get_control(JOB, event.control_id) == event
    job = store.get_job(JOB)
    assert (job.control_version, job.updated_at) == (1, T0 + 2)
    assert store.control_snapshot(JOB) == ControlSnapshot(
        ControlVersion(1),
        {"batch_rows": 100, "rate": 3.0},
        {**BASE, "overrides": {"rate": 3.0}},
    )
    # The version before it is untouched (an epoch pinned at it replays with it).
    assert store.control_snapshot(JOB, ControlVersion(0)).config == CONFIG

    pause = _add(store, ControlKind.PAUSE)
    assert pause.version == 2 and store.control_snapshot(JOB).paused
    trig = _add(store, ControlKind.TRIGGER, {"interval": "2s", "seconds": 2.0})
    assert trig.version == 3 and store.control_snapshot(JOB).trigger_s == 2.0
    # A savepoint changes no state, and still makes a version of its own.
    sp = _add(store, ControlKind.SAVEPOINT, {"stop": False, "dir": None})
    assert sp.version == 4
    assert store.control_snapshot(JOB).state == store.control_snapshot(JOB, trig.version).state


def test_add_control_refuses_an_unknown_kind(store: Store) -> None:
    running_job(store)
    with pytest.raises(InvalidInput) as info:
        store.add_control(JOB, "bogus", {}, sender="ops")  # type: ignore[arg-type]
    assert info.value.field == "kind"
    assert store.get_job(JOB).control_version == 0


def test_request_id_returns_the_same_event_or_conflicts(store: Store, clock: ManualClock) -> None:
    running_job(store)
    store.create_job(OTHER, "other", SPEC, CONFIG)
    first, created = store.add_control(
        JOB, ControlKind.CONFIG, _set(rate=2.0), sender="ops", request_id="r-1"
    )
    assert created and first.request_id == "r-1"

    clock.advance(1)
    again, created = store.add_control(
        JOB, ControlKind.CONFIG, _set(rate=2.0), sender="someone else", request_id="r-1"
    )
    assert (again, created) == (first, False)

    with pytest.raises(ControlConflict) as info:
        store.add_control(JOB, ControlKind.CONFIG, _set(rate=9.0), sender="ops", request_id="r-1")
    assert "'r-1'" in str(info.value) and first.control_id in str(info.value)
    with pytest.raises(ControlConflict):
        store.add_control(JOB, ControlKind.PAUSE, {}, sender="ops", request_id="r-1")
    # Nothing stored by the retry or the conflicts.
    assert store.get_job(JOB).control_version == 1
    assert store.list_controls(JOB) == [first]

    # A request_id is the job's: another job may use it; events without one never collide.
    other, created = store.add_control(OTHER, ControlKind.PAUSE, {}, sender="ops", request_id="r-1")
    assert created and other.job_id == OTHER
    assert _add(store, ControlKind.PAUSE).request_id is None
    assert _add(store, ControlKind.RESUME).request_id is None


def test_an_ended_job_takes_no_control(store: Store) -> None:
    running_job(store)
    kept, _ = store.add_control(
        JOB, ControlKind.CONFIG, _set(rate=2.0), sender="ops", request_id="r-1"
    )
    store.finish_attempt(JOB, AttemptNo(1), AttemptState.FINISHED, JobState.FINISHED)

    with pytest.raises(JobTerminal) as info:
        store.add_control(JOB, ControlKind.PAUSE, {}, sender="ops")
    assert info.value.state == "FINISHED"
    # Version 2 undoes the config change the end rejected (tests/.../test_control_rejects.py).
    assert store.get_job(JOB).control_version == 2
    assert store.control_snapshot(JOB).config == CONFIG
    # A retry of an event stored before the end still finds it (rejected by the end).
    again, created = store.add_control(
        JOB, ControlKind.CONFIG, _set(rate=2.0), sender="ops", request_id="r-1"
    )
    assert not created and again.control_id == kept.control_id
    assert again.status == ControlStatus.REJECTED


def test_pause_while_paused_conflicts_and_stores_nothing(store: Store) -> None:
    running_job(store)
    _add(store, ControlKind.PAUSE)

    with pytest.raises(ControlConflict) as info:
        store.add_control(JOB, ControlKind.PAUSE, {}, sender="ops", request_id="p-2")
    assert "paused already" in str(info.value)
    with pytest.raises(ControlConflict):
        store.add_control(JOB, ControlKind.CHECKPOINT, {}, sender="ops")

    assert store.get_job(JOB).control_version == 1
    assert [e.kind for e in store.list_controls(JOB)] == [ControlKind.PAUSE]
    with pytest.raises(JobNotFound):
        store.control_snapshot(JOB, ControlVersion(2))
    # The request_id of the refused event is free.
    resumed, created = store.add_control(
        JOB, ControlKind.RESUME, {}, sender="ops", request_id="p-2"
    )
    assert created and resumed.version == 2


def test_concurrent_add_control_each_get_their_own_version(open_new: OpenStore) -> None:
    running_job(open_new())
    stores = [open_new() for _ in range(8)]

    def add(i: int) -> ControlEvent:
        body = {"level": "DEBUG", "logger": f"app.part{i}"}
        return stores[i].add_control(JOB, ControlKind.LOG_LEVEL, body, sender=f"s{i}")[0]

    results = race(8, add)

    assert [r for r in results if isinstance(r, BaseException)] == []
    events = [r for r in results if isinstance(r, ControlEvent)]
    assert sorted(e.version for e in events) == list(range(1, 9))
    assert len({e.control_id for e in events}) == 8
    # Each applied on top of the one before: the latest version has every logger.
    snap = stores[0].control_snapshot(JOB)
    assert snap.version == 8
    assert snap.log_level == {"loggers": {f"app.part{i}": "DEBUG" for i in range(8)}}
    for e in events:
        seen = stores[0].control_snapshot(JOB, e.version).log_level["loggers"]
        assert len(seen) == e.version and seen[e.body["logger"]] == "DEBUG"


# epochs move events ------------------------------------------------------------------------------


def test_pin_applies_pending_events_up_to_its_version_but_not_savepoints(store: Store) -> None:
    running_job(store)
    cfg = _add(store, ControlKind.CONFIG, _set(rate=2.0))
    sp = _add(store, ControlKind.SAVEPOINT, {"stop": False, "dir": None})
    lvl = _add(store, ControlKind.LOG_LEVEL, {"level": "DEBUG"})

    store.pin_epoch(JOB, Epoch(0), AttemptNo(1), ControlVersion(2))

    assert _statuses(store) == {1: ("APPLIED", 0), 2: ("PENDING", None), 3: ("PENDING", None)}
    applied = store.applied_controls(JOB, Epoch(0))
    assert [e.control_id for e in applied] == [cfg.control_id]
    assert applied[0].applied_at == T0

    store.pin_epoch(JOB, Epoch(1), AttemptNo(1), ControlVersion(3))
    assert [e.control_id for e in store.applied_controls(JOB, Epoch(1))] == [lvl.control_id]
    assert store.get_control(JOB, sp.control_id).status == ControlStatus.PENDING
    # An epoch pinned at the same version applies nothing.
    store.pin_epoch(JOB, Epoch(2), AttemptNo(1), ControlVersion(3))
    assert store.applied_controls(JOB, Epoch(2)) == []


def test_events_between_two_epochs_apply_together_in_version_order(store: Store) -> None:
    running_job(store)
    store.pin_epoch(JOB, Epoch(0), AttemptNo(1), ControlVersion(0))
    made = [_add(store, ControlKind.LOG_LEVEL, {"level": lv}) for lv in ("DEBUG", "INFO", "WARN")]

    store.pin_epoch(JOB, Epoch(1), AttemptNo(1), ControlVersion(3))

    assert store.applied_controls(JOB, Epoch(0)) == []
    assert [e.control_id for e in store.applied_controls(JOB, Epoch(1))] == [
        e.control_id for e in made
    ]


def test_pin_forward_takes_epoch_local_events_but_stops_at_a_rate_limit(store: Store) -> None:
    """Events stored after an epoch's sources planned under version 0: the epoch may take
    the config and log-level events (they leave offsets alone), never the rate limit, nor
    what comes after it."""
    from stoker.runtime.epoch import pin_forward

    running_job(store)
    _add(store, ControlKind.CONFIG, _set(rate=2.0))
    _add(store, ControlKind.LOG_LEVEL, {"level": "DEBUG"})
    _add(store, ControlKind.RATE_LIMIT, {"rows_per_second": 5.0})
    _add(store, ControlKind.CONFIG, _set(rate=3.0))
    latest = store.get_job(JOB).control_version
    assert latest == 4

    assert pin_forward(store, JOB, ControlVersion(0), latest) == 2
    # Planned under the rate limit's version: the config after it may come along.
    assert pin_forward(store, JOB, ControlVersion(3), latest) == 4
    store.pin_epoch(JOB, Epoch(0), AttemptNo(1), ControlVersion(2))
    assert _statuses(store) == {
        1: ("APPLIED", 0),
        2: ("APPLIED", 0),
        3: ("PENDING", None),
        4: ("PENDING", None),
    }
    # A pause is never skipped over either.
    _add(store, ControlKind.PAUSE, {})
    assert pin_forward(store, JOB, ControlVersion(4), store.get_job(JOB).control_version) == 4


def test_a_replayed_pin_returns_the_same_applied_set(store: Store, clock: ManualClock) -> None:
    running_job(store)
    first = _add(store, ControlKind.CONFIG, _set(rate=2.0))
    rec = store.pin_epoch(JOB, Epoch(0), AttemptNo(1), ControlVersion(1))
    before = store.applied_controls(JOB, Epoch(0))
    assert [e.control_id for e in before] == [first.control_id]

    # The attempt dies; meanwhile a newer event arrives; the next attempt replays epoch 0.
    newer = _add(store, ControlKind.CONFIG, _set(rate=3.0))
    clock.advance(TTL + 1)
    store.start_attempt(JOB, OWNER_B, TTL, AttemptNo(1), previous_dead=True)
    replay = store.pin_epoch(JOB, Epoch(0), AttemptNo(2), ControlVersion(2))

    assert replay == rec and replay.control_version == 1
    assert store.applied_controls(JOB, Epoch(0)) == before
    assert store.get_control(JOB, newer.control_id).status == ControlStatus.PENDING
    # The newer one applies from the next epoch on.
    store.pin_epoch(JOB, Epoch(1), AttemptNo(2), ControlVersion(2))
    assert [e.control_id for e in store.applied_controls(JOB, Epoch(1))] == [newer.control_id]


def test_commit_of_the_epoch_commits_its_events(store: Store, clock: ManualClock) -> None:
    running_job(store)
    a = _add(store, ControlKind.CONFIG, _set(rate=2.0))
    store.pin_epoch(JOB, Epoch(0), AttemptNo(1), ControlVersion(1))
    b = _add(store, ControlKind.LOG_LEVEL, {"level": "DEBUG"})
    store.pin_epoch(JOB, Epoch(1), AttemptNo(1), ControlVersion(2))
    store.decide_epoch(JOB, Epoch(0), AttemptNo(1), rows_in=1, final=False)
    store.decide_epoch(JOB, Epoch(1), AttemptNo(1), rows_in=1, final=False)
    assert _statuses(store) == {1: ("APPLIED", 0), 2: ("APPLIED", 1)}

    clock.advance(3)
    store.mark_epoch_committed(JOB, Epoch(0))

    assert _statuses(store) == {1: ("COMMITTED", 0), 2: ("APPLIED", 1)}
    done = store.get_control(JOB, a.control_id)
    assert (done.ended_at, done.applied_at) == (T0 + 3, T0)
    # COMMITTED events are still what the epoch applied (a replay of it applies them again).
    assert [e.control_id for e in store.applied_controls(JOB, Epoch(0))] == [a.control_id]
    # Again: nothing changes.
    clock.advance(1)
    store.mark_epoch_committed(JOB, Epoch(0))
    assert store.get_control(JOB, a.control_id) == done
    store.mark_epoch_committed(JOB, Epoch(1))
    assert store.get_control(JOB, b.control_id).status == ControlStatus.COMMITTED
    # An epoch pruned since (no record): nothing to mark, no error.
    store.mark_epoch_committed(JOB, Epoch(77))


# the job's end ---------------------------------------------------------------------------------

End = Callable[[Store], object]
ENDS: dict[str, tuple[End, str]] = {
    "finish_attempt": (
        lambda s: s.finish_attempt(JOB, AttemptNo(1), AttemptState.FINISHED, JobState.FINISHED),
        "FINISHED",
    ),
    "finish_attempt_canceled": (
        lambda s: s.finish_attempt(JOB, AttemptNo(1), AttemptState.CANCELED, JobState.CANCELED),
        "CANCELED",
    ),
    "attempt_failed": (
        lambda s: s.attempt_failed(JOB, AttemptNo(1), "boom", next_attempt_at=None),
        "FAILED",
    ),
    "set_job_state": (lambda s: s.set_job_state(JOB, JobState.FAILED, "gave up"), "FAILED"),
    "cancel_after_canceling": (
        lambda s: (
            s.request_cancel(JOB),
            s.attempt_failed(JOB, AttemptNo(1), "stopped", next_attempt_at=None),
        ),
        "CANCELED",
    ),
}


@pytest.mark.parametrize("how", sorted(ENDS))
def test_the_jobs_end_rejects_what_can_no_longer_take_effect(
    store: Store, clock: ManualClock, how: str
) -> None:
    running_job(store)
    _add(store, ControlKind.CONFIG, _set(rate=2.0))  # v1: applied at 0, committed
    _commit(store, 0, version=1)
    _add(store, ControlKind.LOG_LEVEL, {"level": "DEBUG"})  # v2: applied at 1, decided
    store.pin_epoch(JOB, Epoch(1), AttemptNo(1), ControlVersion(2))
    store.decide_epoch(JOB, Epoch(1), AttemptNo(1), rows_in=1, final=False)
    _add(store, ControlKind.TRIGGER, {"interval": "1s", "seconds": 1.0})  # v3: at 2, pinned
    store.pin_epoch(JOB, Epoch(2), AttemptNo(1), ControlVersion(3))
    _add(store, ControlKind.SAVEPOINT, {"stop": False, "dir": None})  # v4: pending

    clock.advance(5)
    end, state = ENDS[how]
    end(store)

    assert store.get_job(JOB).state == state
    events = {int(e.version): e for e in store.list_controls(JOB)}
    assert _statuses(store) == {
        1: ("COMMITTED", 0),
        2: ("APPLIED", 1),  # recovery commits epoch 1, and this event with it
        3: ("REJECTED", 2),
        4: ("REJECTED", None),
    }
    assert events[3].reason == "the job ended before epoch 2 committed"
    assert events[4].reason == f"the job ended ({state}) before the event applied"
    assert events[3].ended_at == events[4].ended_at == T0 + 5
    assert store.applied_controls(JOB, Epoch(2)) == []

    # Recovery (or the janitor) commits the decided epoch afterwards.
    store.mark_epoch_committed(JOB, Epoch(1))
    assert store.list_controls(JOB, status=ControlStatus.COMMITTED)[0].version == 2


def test_a_cancel_before_any_attempt_rejects_pending_events(store: Store) -> None:
    store.create_job(JOB, "orders", SPEC, CONFIG)
    sent = _add(store, ControlKind.CONFIG, _set(rate=2.0))

    store.request_cancel(JOB)

    got = store.get_control(JOB, sent.control_id)
    assert (got.status, got.reason) == (
        ControlStatus.REJECTED,
        "the job ended (CANCELED) before the event applied",
    )


def test_events_outlive_a_restart_and_a_suspend(store: Store, clock: ManualClock) -> None:
    """Only an end rejects: between attempts (RESTARTING, SUSPENDED) events wait."""
    running_job(store)
    sent = _add(store, ControlKind.CONFIG, _set(rate=2.0))
    store.attempt_failed(JOB, AttemptNo(1), "crash", next_attempt_at=T0 + 1)
    assert store.get_job(JOB).state == JobState.RESTARTING
    clock.advance(TTL + 1)
    store.start_attempt(JOB, OWNER_B, TTL, AttemptNo(1))
    store.finish_attempt(JOB, AttemptNo(2), AttemptState.SUSPENDED, JobState.SUSPENDED)

    assert store.get_control(JOB, sent.control_id).status == ControlStatus.PENDING


# reject_control, finish_control, list_controls -----------------------------------------------


def test_reject_control(store: Store, clock: ManualClock) -> None:
    running_job(store)
    pending = _add(store, ControlKind.EVENT, {"name": "reload", "payload": {}})
    applied = _add(store, ControlKind.EVENT, {"name": "reload", "payload": {"n": 1}})
    store.pin_epoch(JOB, Epoch(0), AttemptNo(1), ControlVersion(2))
    clock.advance(1)

    got = store.reject_control(JOB, pending.control_id, "handler raised")
    assert (got.status, got.reason, got.ended_at) == (
        ControlStatus.REJECTED,
        "handler raised",
        T0 + 1,
    )
    got = store.reject_control(JOB, applied.control_id, "handler raised too")
    assert (got.status, got.applied_epoch) == (ControlStatus.REJECTED, 0)
    # A rejected event is not what the epoch applied.
    assert store.applied_controls(JOB, Epoch(0)) == []
    # An ended event is left as it is.
    clock.advance(1)
    assert store.reject_control(JOB, pending.control_id, "again") == store.get_control(
        JOB, pending.control_id
    )
    assert store.get_control(JOB, pending.control_id).reason == "handler raised"
    with pytest.raises(ControlNotFound):
        store.reject_control(JOB, "0123456789abcdef", "no such event")


def test_finish_control_moves_a_savepoint_along_the_table(store: Store, clock: ManualClock) -> None:
    running_job(store)
    sp = _add(store, ControlKind.SAVEPOINT, {"stop": True, "dir": "/sp"})
    store.pin_epoch(JOB, Epoch(0), AttemptNo(1), ControlVersion(1))
    assert store.get_control(JOB, sp.control_id).status == ControlStatus.PENDING

    with pytest.raises(InvalidTransition):
        store.finish_control(JOB, sp.control_id, ControlStatus.COMMITTED, Epoch(0))
    with pytest.raises(InvalidInput) as info:
        store.finish_control(JOB, sp.control_id, ControlStatus.REJECTED)
    assert info.value.field == "status"

    clock.advance(1)
    got = store.finish_control(
        JOB, sp.control_id, ControlStatus.APPLIED, Epoch(0), {"path": "/sp/a"}
    )
    assert (got.status, got.applied_epoch, got.applied_at, got.result) == (
        ControlStatus.APPLIED,
        0,
        T0 + 1,
        {"path": "/sp/a"},
    )
    # The same status again only updates the result.
    clock.advance(1)
    got = store.finish_control(JOB, sp.control_id, ControlStatus.APPLIED, None, {"path": "/sp/b"})
    assert (got.applied_epoch, got.applied_at, got.result) == (0, T0 + 1, {"path": "/sp/b"})
    got = store.finish_control(JOB, sp.control_id, ControlStatus.COMMITTED)
    assert (got.status, got.ended_at, got.result) == (
        ControlStatus.COMMITTED,
        T0 + 2,
        {"path": "/sp/b"},
    )
    with pytest.raises(InvalidTransition):
        store.finish_control(JOB, sp.control_id, ControlStatus.APPLIED)

    # A pause the runtime took itself (no epoch committed yet): APPLIED without an epoch.
    pause = _add(store, ControlKind.PAUSE)
    store.finish_control(JOB, pause.control_id, ControlStatus.APPLIED, None)
    got = store.finish_control(JOB, pause.control_id, ControlStatus.COMMITTED, None)
    assert (got.status, got.applied_epoch) == (ControlStatus.COMMITTED, None)
    rejected = _add(store, ControlKind.RESUME)
    store.reject_control(JOB, rejected.control_id, "no")
    with pytest.raises(InvalidTransition):
        store.finish_control(JOB, rejected.control_id, ControlStatus.APPLIED)
    with pytest.raises(ControlNotFound):
        store.finish_control(JOB, "nope", ControlStatus.APPLIED)


def test_list_controls_pages_newest_first_and_filters(store: Store) -> None:
    running_job(store)
    for n in range(5):
        _add(store, ControlKind.LOG_LEVEL, {"level": "DEBUG", "logger": f"l{n}"})
        _add(store, ControlKind.CONFIG, _set(rate=float(n)))
    store.pin_epoch(JOB, Epoch(0), AttemptNo(1), ControlVersion(4))

    assert [e.version for e in store.list_controls(JOB)] == list(range(10, 0, -1))
    page = store.list_controls(JOB, limit=3)
    assert [e.version for e in page] == [10, 9, 8]
    page = store.list_controls(JOB, limit=3, before_version=page[-1].version)
    assert [e.version for e in page] == [7, 6, 5]
    configs = store.list_controls(JOB, kind=ControlKind.CONFIG)
    assert [e.version for e in configs] == [10, 8, 6, 4, 2]
    applied = store.list_controls(JOB, status=ControlStatus.APPLIED)
    assert [e.version for e in applied] == [4, 3, 2, 1]
    both = store.list_controls(
        JOB,
        kind=ControlKind.LOG_LEVEL,
        status=ControlStatus.PENDING,
        before_version=ControlVersion(9),
    )
    assert [e.version for e in both] == [7, 5]
    with pytest.raises(InvalidInput):
        store.list_controls(JOB, limit=0)


# retention and migration ------------------------------------------------------------------------


def test_retention_keeps_a_bounded_consistent_control_history(store: Store, store_url: str) -> None:
    running_job(store)
    # 20 epochs, each applying one event; then one applied (pinned), one pending.
    for n in range(20):
        _add(store, ControlKind.LOG_LEVEL, {"level": "DEBUG", "logger": f"l{n}"})
        _commit(store, n, version=n + 1)
    rejected = _add(store, ControlKind.EVENT, {"name": "x", "payload": {}})  # v21
    store.reject_control(JOB, rejected.control_id, "handler raised")
    _add(store, ControlKind.CONFIG, _set(rate=2.0))  # v22: applied at the pinned epoch 20
    store.pin_epoch(JOB, Epoch(20), AttemptNo(1), ControlVersion(22))
    _add(store, ControlKind.PAUSE)  # v23: pending
    before = {int(e.version): e for e in store.list_controls(JOB, limit=100)}

    policy = RetentionPolicy(epochs=3, keep_control_events=4)
    done = store.prune_epochs(JOB, policy, batch_size=5)

    # Kept: the 4 newest ended events (v18..v21) and those not ended (v22 applied, v23 pending).
    kept = sorted(e.version for e in store.list_controls(JOB, limit=100))
    assert kept == [18, 19, 20, 21, 22, 23]
    assert done.controls == 17
    for v in kept:
        assert store.get_control(JOB, before[v].control_id) == before[v]
    with pytest.raises(ControlNotFound):
        store.get_control(JOB, before[1].control_id)
    # Every version stays: a kept epoch's pinned config is readable.
    assert store.control_snapshot(JOB, ControlVersion(1)).version == 1
    rows = raw_rows(store_url, "SELECT COUNT(*) FROM control_versions")
    assert rows == [(24,)]
    # What the kept epochs applied is intact.
    assert [e.version for e in store.applied_controls(JOB, Epoch(20))] == [22]
    assert [e.version for e in store.applied_controls(JOB, Epoch(19))] == [20]
    again = store.prune_epochs(JOB, policy, batch_size=5)
    assert (again.epochs, again.controls) == (0, 0)


def test_retention_never_deletes_the_latest_epochs_events(store: Store) -> None:
    running_job(store)
    for n in range(3):
        _add(store, ControlKind.LOG_LEVEL, {"level": "DEBUG", "logger": f"l{n}"})
    _commit(store, 0, version=3)  # all three applied and committed at the latest epoch

    done = store.prune_epochs(JOB, RetentionPolicy(epochs=1, keep_control_events=0))

    assert done.controls == 0
    assert [e.version for e in store.applied_controls(JOB, Epoch(0))] == [1, 2, 3]


def test_retention_prunes_control_in_batches_and_paces(store: Store) -> None:
    store.create_job(JOB, "orders", SPEC, CONFIG)
    for n in range(12):
        ev = _add(store, ControlKind.LOG_LEVEL, {"level": "DEBUG", "logger": f"l{n}"})
        store.reject_control(JOB, ev.control_id, "no")
    policy = RetentionPolicy(epochs=1, keep_control_events=2)

    first = store.prune_epochs(JOB, policy, batch_size=4, max_batches=2)
    assert (first.controls, first.batches, first.more) == (8, 2, True)
    rest = store.prune_epochs(JOB, policy, batch_size=4, max_batches=2)
    assert (rest.controls, rest.more) == (2, False)
    # Each rejection wrote a version that undoes its event: the events hold the odd ones.
    assert [e.version for e in store.list_controls(JOB)] == [23, 21]
    with pytest.raises(InvalidInput) as info:
        RetentionPolicy(keep_control_events=-1)
    assert info.value.field == "retention.keep_control_events"


def test_a_store_from_before_control_events_migrates(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TABLE schema_migrations (version BIGINT PRIMARY KEY, applied_at DOUBLE PRECISION)"
    )
    for number, script in _sql.migrations():
        if number > 5:
            break
        for statement in _sql.split_statements(script):
            conn.execute(statement)
        conn.execute("INSERT INTO schema_migrations VALUES (?, 0)", (number,))
    conn.execute(
        "INSERT INTO jobs (job_id, name, state, spec, created_at, updated_at, uid) "
        "VALUES ('old-job', 'old', 'RUNNING', '{}', 1.0, 1.0, 'u')"
    )
    conn.execute(
        "INSERT INTO control_versions (job_id, version, config, reason, created_at) "
        "VALUES ('old-job', 0, '{\"a\": 1}', 'declared defaults', 1.0)"
    )
    conn.commit()
    conn.close()

    store = open_store(path, ManualClock(T0))
    try:
        old = job_id("old-job")
        assert store.control_snapshot(old) == ControlSnapshot(ControlVersion(0), {"a": 1}, {})
        ev, _ = store.add_control(old, ControlKind.CONFIG, _set(a=2), sender="ops")
        assert store.control_snapshot(old, ev.version).config == {"a": 2}
        # Declaring the same defaults keeps control's change.
        assert store.declare_defaults(old, {"a": 1}).config == {"a": 2}
    finally:
        store.close()
