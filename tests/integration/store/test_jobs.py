"""The store contract for jobs: insert-if-absent, the transition table, cancel, restart, uid.

Run against SQLite and PostgreSQL alike (fixtures in conftest.py). Time is a
:class:`~stoker.clock.ManualClock`; leases lapse because the test moves the clock.
"""

from __future__ import annotations

import pytest

from stoker.clock import ManualClock
from stoker.errors import InvalidTransition, JobNotFound
from stoker.store import ControlSnapshot, JobRecord, Store
from stoker.types import AttemptNo, AttemptState, ControlVersion, JobKind, JobState, job_id
from tests.integration.store.support import (
    CONFIG,
    JOB,
    OTHER,
    OWNER,
    OWNER_B,
    SPEC,
    T0,
    TTL,
    OpenStore,
    race,
    running_job,
)


def test_create_job_returns_the_new_record(store: Store) -> None:
    rec, created = store.create_job(JOB, "orders", SPEC, CONFIG)

    assert created is True
    assert rec == JobRecord(
        job_id=JOB,
        name="orders",
        state=JobState.CREATED,
        spec=SPEC,
        current_attempt=AttemptNo(0),
        control_version=ControlVersion(0),
        last_error=None,
        created_at=T0,
        updated_at=T0,
        uid=rec.uid,
    )
    assert len(rec.uid) == 32  # a random uid of this job record
    assert store.get_job(JOB) == rec
    assert store.control_snapshot(JOB) == ControlSnapshot(
        ControlVersion(0), CONFIG, {"base": CONFIG}
    )


def test_create_job_twice_returns_the_first_record(store: Store, clock: ManualClock) -> None:
    first, _ = store.create_job(JOB, "orders", SPEC, CONFIG)
    clock.advance(5)

    again, created = store.create_job(JOB, "other-name", {"x": 1}, {"batch_rows": 1})

    assert created is False
    assert again == first
    assert store.control_snapshot(JOB) == ControlSnapshot(
        ControlVersion(0), CONFIG, {"base": CONFIG}
    )
    assert store.list_jobs() == [first]


def test_concurrent_create_job_creates_exactly_once(open_new: OpenStore) -> None:
    stores = [open_new() for _ in range(32)]

    results = race(32, lambda i: stores[i].create_job(JOB, f"name-{i}", {"i": i}, {"i": i}))

    errors = [r for r in results if isinstance(r, BaseException)]
    assert errors == []
    outcomes = [r for r in results if not isinstance(r, BaseException)]
    winners = [i for i, (_, created) in enumerate(outcomes) if created]
    assert len(winners) == 1
    (w,) = winners
    expected = outcomes[w][0]
    assert expected.name == f"name-{w}"
    assert expected.spec == {"i": w}
    assert [rec for rec, _ in outcomes] == [expected] * 32
    assert stores[0].control_snapshot(JOB) == ControlSnapshot(
        ControlVersion(0), {"i": w}, {"base": {"i": w}}
    )


def test_create_jobs_is_create_job_for_each_in_one_transaction(store: Store) -> None:
    existing, _ = store.create_job(JOB, "orders", SPEC, CONFIG)
    third = job_id("third")

    results = store.create_jobs(
        [
            (JOB, "again", {"x": 1}, {}),
            (OTHER, "b", SPEC, CONFIG),
            (OTHER, "b-twice", {"x": 2}, {}),
            (third, "c", SPEC, {"k": 1}),
        ]
    )

    assert [created for _, created in results] == [False, True, False, True]
    assert results[0][0] == existing
    assert results[1][0] == results[2][0] == store.get_job(OTHER)
    assert store.get_job(OTHER).name == "b"
    assert store.control_snapshot(third) == ControlSnapshot(
        ControlVersion(0), {"k": 1}, {"base": {"k": 1}}
    )
    assert store.create_jobs([]) == []


def test_concurrent_create_jobs_batches_create_each_id_exactly_once(
    open_new: OpenStore,
) -> None:
    stores = [open_new() for _ in range(8)]
    ids = [job_id(f"b{k}") for k in range(16)]

    results = race(8, lambda i: stores[i].create_jobs([(j, f"n{i}", {"i": i}, {}) for j in ids]))

    assert [r for r in results if isinstance(r, BaseException)] == []
    for k, j in enumerate(ids):
        outcomes = [r[k] for r in results]  # type: ignore[index]
        assert sum(created for _, created in outcomes) == 1
        assert [rec for rec, _ in outcomes] == [stores[0].get_job(j)] * 8


def test_get_job_of_unknown_id_raises_job_not_found(store: Store) -> None:
    with pytest.raises(JobNotFound) as info:
        store.get_job(job_id("nope"))
    assert info.value.job_id == "nope"


def test_list_jobs_filters_by_state(store: Store, clock: ManualClock) -> None:
    a, _ = store.create_job(JOB, "a", SPEC, CONFIG)
    clock.advance(1)
    store.create_job(OTHER, "b", SPEC, CONFIG)
    running = store.set_job_state(OTHER, JobState.RUNNING)

    assert store.list_jobs() == [a, running]
    assert store.list_jobs(JobState.CREATED) == [a]
    assert store.list_jobs(JobState.RUNNING) == [running]
    assert store.list_jobs(JobState.FAILED) == []


def test_list_live_jobs_is_every_record_not_ended_of_every_kind(
    store: Store, clock: ManualClock
) -> None:
    """What the leader tends each tick (issue 21, item 9: it read every job the store kept)."""
    live = []
    for state in JobState:
        clock.advance(1)
        jid = job_id(f"j-{state.lower()}")
        store.create_job(jid, jid, SPEC, CONFIG)
        path = {
            JobState.CREATED: [],
            JobState.RESTARTING: [JobState.RUNNING, JobState.RESTARTING],
            JobState.CANCELED: [JobState.RUNNING, JobState.CANCELING, JobState.CANCELED],
        }.get(state, [JobState.RUNNING, state] if state != JobState.RUNNING else [state])
        for step in path:
            store.set_job_state(jid, step)
        if not state.terminal:
            live.append(jid)
    clock.advance(1)
    app = job_id("an-app")
    store.create_job(app, "an-app", SPEC, CONFIG, kind=JobKind.APPLICATION)
    assert [j.job_id for j in store.list_live_jobs()] == [*live, app]


def test_pages_of_jobs_follow_their_cursor_and_never_shift(
    store: Store, clock: ManualClock
) -> None:
    """Issue 21 item 9: a list read a page at a time, in (created_at, job_id) order; records
    made while a client pages come after every cursor handed out; a kind and a state filter."""
    made = []
    for n in range(7):
        if n != 3:  # two records at the same instant: ordered by id
            clock.advance(1)
        jid = job_id(f"p-{n}")
        store.create_job(jid, jid, SPEC, CONFIG)
        made.append(jid)
    store.create_job(job_id("an-app"), "an-app", SPEC, CONFIG, kind=JobKind.APPLICATION)
    seen: list[str] = []
    after = None
    while True:
        page = store.list_jobs_page(JobKind.JOB, 3, after)
        seen += [j.job_id for j in page]
        if len(page) < 3:
            break
        after = (page[-1].created_at, page[-1].job_id)
        if len(seen) == 3:
            clock.advance(1)
            store.create_job(job_id("late"), "late", SPEC, CONFIG)  # made while paging
    assert seen == [*made, "late"]
    assert [j.job_id for j in store.list_jobs_page(JobKind.APPLICATION, 10)] == ["an-app"]
    store.set_job_state(made[1], JobState.RUNNING)
    assert [j.job_id for j in store.list_jobs_page(JobKind.JOB, 10, state=JobState.RUNNING)] == [
        made[1]
    ]


def test_unsettled_jobs_are_the_ended_ones_not_resolved_well_after_their_end(
    store: Store, clock: ManualClock
) -> None:
    """What the janitor reads each second instead of every job (issue 21 item 9)."""
    ids = {}
    for name in ("live", "open", "early", "settled"):
        clock.advance(1)
        ids[name] = job_id(name)
        store.create_job(ids[name], name, SPEC, CONFIG)
        store.set_job_state(ids[name], JobState.RUNNING)
    for name in ("open", "early", "settled"):
        store.set_job_state(ids[name], JobState.FINISHED)
    store.set_resolved(ids["early"])
    clock.advance(100)
    store.set_resolved(ids["settled"])  # resolved 100 s after its end: settled for 30 s
    assert [j.job_id for j in store.list_unsettled_jobs(30.0)] == ["early", "open"]
    assert [j.job_id for j in store.list_unsettled_jobs(500.0)] == ["early", "open", "settled"]


def test_set_job_state_follows_the_transition_table(store: Store, clock: ManualClock) -> None:
    store.create_job(JOB, "orders", SPEC, CONFIG)
    clock.advance(1)
    running = store.set_job_state(JOB, JobState.RUNNING)
    assert (running.state, running.updated_at, running.last_error) == (
        JobState.RUNNING,
        T0 + 1,
        None,
    )
    clock.advance(1)
    failed = store.set_job_state(JOB, JobState.FAILED, error="boom")
    assert (failed.state, failed.updated_at, failed.last_error) == (JobState.FAILED, T0 + 2, "boom")

    clock.advance(1)
    with pytest.raises(InvalidTransition):
        store.set_job_state(JOB, JobState.RUNNING)
    assert store.get_job(JOB) == failed

    restarting = store.set_job_state(JOB, JobState.RESTARTING)
    assert restarting.state == JobState.RESTARTING


def test_finished_job_cannot_become_running(store: Store) -> None:
    store.create_job(JOB, "orders", SPEC, CONFIG)
    store.set_job_state(JOB, JobState.RUNNING)
    finished = store.set_job_state(JOB, JobState.FINISHED)

    with pytest.raises(InvalidTransition) as info:
        store.set_job_state(JOB, JobState.RUNNING)

    assert str(info.value) == "job state FINISHED cannot become RUNNING"
    assert store.get_job(JOB) == finished


def test_set_job_state_of_unknown_job_raises_job_not_found(store: Store) -> None:
    with pytest.raises(JobNotFound):
        store.set_job_state(job_id("nope"), JobState.RUNNING)


def test_set_job_spec_replaces_the_spec(store: Store, clock: ManualClock) -> None:
    store.create_job(JOB, "orders", SPEC, CONFIG)
    clock.advance(3)
    store.set_job_spec(JOB, {"new": True})
    job = store.get_job(JOB)
    assert (job.spec, job.updated_at) == ({"new": True}, T0 + 3)


def test_suspended_job_resumes_without_restart_and_can_be_canceled(store: Store) -> None:
    running_job(store)
    job = store.finish_attempt(JOB, AttemptNo(1), AttemptState.SUSPENDED, JobState.SUSPENDED)
    assert job.state == JobState.SUSPENDED and not job.state.terminal

    again = store.start_attempt(JOB, OWNER_B, TTL, expected_current=AttemptNo(1))
    assert again.attempt == 2 and store.get_job(JOB).state == JobState.RUNNING

    store.finish_attempt(JOB, AttemptNo(2), AttemptState.SUSPENDED, JobState.SUSPENDED)
    assert store.request_cancel(JOB).state == JobState.CANCELED


def test_job_uid_is_kept_by_the_first_creation(store: Store) -> None:
    made, created = store.create_job(JOB, "n", SPEC, CONFIG, uid="uid-a")
    again, created_again = store.create_job(JOB, "n", SPEC, CONFIG, uid="uid-b")
    other, _ = store.create_job(OTHER, "n", SPEC, CONFIG)

    assert (created, created_again) == (True, False)
    assert made.uid == again.uid == "uid-a"
    assert other.uid and other.uid != "uid-a"


def test_set_resolved_and_a_new_end_owes_it_again(store: Store) -> None:
    running_job(store)
    store.finish_attempt(JOB, AttemptNo(1), AttemptState.FAILED, JobState.FAILED, "x")
    store.set_resolved(JOB)
    assert store.get_job(JOB).resolved_at == T0

    store.start_attempt(JOB, OWNER, TTL, expected_current=AttemptNo(1), restart=True)
    store.finish_attempt(JOB, AttemptNo(2), AttemptState.FAILED, JobState.FAILED, "y")
    assert store.get_job(JOB).resolved_at is None


def test_a_settled_end_leaves_the_unsettled_list_until_the_job_ends_again(
    store: Store, clock: ManualClock
) -> None:
    """Issue 23 item 10: the janitor records an end settled (every process was gone when its
    cleanup began); a restarted leader then owes it nothing. Only the end it looked at: not
    an unresolved one, not one that changed since, and a new end is owed again."""
    running_job(store)
    store.finish_attempt(JOB, AttemptNo(1), AttemptState.FAILED, JobState.FAILED, "x")
    end = store.get_job(JOB).updated_at
    assert not store.set_settled(JOB, end)  # not resolved yet: nothing to settle
    store.set_resolved(JOB)
    assert not store.set_settled(JOB, end - 1)  # another end than this one
    assert [j.job_id for j in store.list_unsettled_jobs(60.0)] == [JOB]
    assert store.set_settled(JOB, end)
    assert store.list_unsettled_jobs(60.0) == []
    assert store.list_unsettled_jobs(1e9) == []

    clock.advance(5)
    store.start_attempt(JOB, OWNER, TTL, expected_current=AttemptNo(1), restart=True)
    assert not store.set_settled(JOB, end)  # live again
    store.finish_attempt(JOB, AttemptNo(2), AttemptState.FAILED, JobState.FAILED, "y")
    assert [j.job_id for j in store.list_unsettled_jobs(60.0)] == [JOB]


def test_job_sinks_are_recorded_replaced_and_kept_out_of_the_record(store: Store) -> None:
    running_job(store)
    assert store.get_job_sinks(JOB) == []  # no attempt opened its sinks yet
    first = [
        {"kind": "files", "path": "/out", "format": "parquet", "name": "files:/out"},
        {"kind": "postgres", "dsn": "postgresql://u:secret@h/db", "table": "t", "tag": "0a1b2c3d"},
    ]
    store.set_job_sinks(JOB, first)
    assert store.get_job_sinks(JOB) == first
    # A later attempt records its own (the sinks may have changed).
    store.set_job_sinks(JOB, first[:1])
    assert store.get_job_sinks(JOB) == first[:1]
    # Trusted metadata: not in the record's answer.
    assert "secret" not in repr(store.get_job(JOB).to_dict())
    assert "sinks" not in store.get_job(JOB).to_dict()


def test_job_sinks_of_an_unknown_job_raise_job_not_found(store: Store) -> None:
    with pytest.raises(JobNotFound):
        store.get_job_sinks(job_id("nope"))
    with pytest.raises(JobNotFound):
        store.set_job_sinks(job_id("nope"), [])


def test_ended_records_are_deleted_whole_once_resolved(store: Store, clock: ManualClock) -> None:
    """Issue 21 item 9: ended-job retention. A lone job goes with everything of it once it
    ended before the cutoff and its sinks were resolved; an application with its jobs, once
    every job of it ended and was resolved. Nothing else is touched."""
    from stoker.types import Epoch, TxnState

    att = running_job(store)
    store.pin_epoch(JOB, Epoch(0), att.attempt, ControlVersion(0))
    store.record_txn(JOB, Epoch(0), "files:/o", att.attempt, TxnState.PREPARED, {})
    store.decide_epoch(JOB, Epoch(0), att.attempt, 5, False)
    store.finish_attempt(JOB, att.attempt, AttemptState.FAILED, JobState.FAILED, "x")
    store.create_job(OTHER, "other", SPEC, CONFIG)  # never ended: never deleted
    app, part = job_id("app"), job_id("app.part")
    store.create_job(app, "app", SPEC, CONFIG, kind=JobKind.APPLICATION)
    store.create_job(part, "part", SPEC, CONFIG, app_id=app)
    store.set_job_state(app, JobState.CANCELED)
    clock.advance(100)
    cutoff = clock.now()
    # Not resolved yet: kept. The application: one of its jobs has not ended.
    assert store.ended_before(cutoff) == [app]
    assert store.delete_ended(JOB, cutoff) == []
    assert store.delete_ended(app, cutoff) == []
    store.set_resolved(JOB)
    assert store.ended_before(cutoff - 200) == []  # nothing ended that early
    assert store.delete_ended(JOB, cutoff - 200) == []
    assert store.delete_ended(JOB, cutoff) == [JOB]
    with pytest.raises(JobNotFound):
        store.get_job(JOB)
    assert store.list_epochs(JOB, limit=10) == []
    assert store.list_attempts(JOB) == []
    # The application's job ends and is resolved: both go, the job first.
    store.set_job_state(part, JobState.CANCELED)
    assert store.delete_ended(app, cutoff) == []  # its job is not resolved yet
    store.set_resolved(part)
    assert store.delete_ended(app, cutoff) == [part, app]
    assert [j.job_id for j in store.list_jobs()] == [OTHER]
