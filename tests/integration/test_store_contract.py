"""The store contract: one suite, run against SQLite and PostgreSQL alike.

Time is a :class:`~stoker.clock.ManualClock`; leases lapse because the test moves the clock.
Concurrency tests give every thread a store (a connection) of its own and line the threads up
on a barrier so that they really race.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pytest

from stoker.clock import ManualClock
from stoker.errors import (
    DuplicateJob,
    InvalidTransition,
    JobNotFound,
    JobTerminal,
    StaleAttempt,
)
from stoker.store import (
    AttemptRecord,
    ControlSnapshot,
    EpochRecord,
    JobRecord,
    Owner,
    SinkTxn,
    Store,
    _sql,
    open_store,
)
from stoker.types import (
    AttemptNo,
    AttemptState,
    ControlVersion,
    Epoch,
    EpochState,
    JobState,
    TxnState,
    job_id,
)

T = TypeVar("T")
OpenStore = Callable[[], Store]

T0 = 1_000_000.0  # the ManualClock's start
TTL = 10.0
JOB = job_id("job-1")
OTHER = job_id("job-2")
OWNER = Owner(host="host-a", pid=101, pid_started="boot-1")
OWNER_B = Owner(host="host-b", pid=202, pid_started="boot-2")
SPEC = {"source": {"kind": "generator", "rows": 10}, "sinks": ["pg"]}
CONFIG = {"batch_rows": 100, "rate": 1.5}


# fixtures --------------------------------------------------------------------------------------
@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_url(backend: str, request: pytest.FixtureRequest) -> str:
    if backend == "sqlite":
        return f"sqlite:///{request.getfixturevalue('sqlite_path')}"
    return str(request.getfixturevalue("pg_dsn"))


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def open_new(store_url: str, clock: ManualClock) -> Iterator[OpenStore]:
    """Opens another store (own connection) on the test's database; all closed at the end."""
    opened: list[Store] = []
    lock = threading.Lock()

    def _open() -> Store:
        s = open_store(store_url, clock)
        with lock:
            opened.append(s)
        return s

    yield _open
    for s in opened:
        s.close()


@pytest.fixture
def store(open_new: OpenStore) -> Store:
    return open_new()


# helpers ---------------------------------------------------------------------------------------
def _race(n: int, work: Callable[[int], T]) -> list[T | BaseException]:
    """Run ``work(0..n-1)`` on n threads released together; each result or its exception."""
    barrier = threading.Barrier(n, timeout=60)

    def one(i: int) -> T | BaseException:
        barrier.wait()
        try:
            return work(i)
        except Exception as e:  # collected and asserted on by the caller
            return e

    with ThreadPoolExecutor(max_workers=n) as pool:
        return list(pool.map(one, range(n)))


def _raw_rows(url: str, query: str) -> list[tuple[Any, ...]]:
    """Rows of ``query`` read around the store, straight from the database."""
    if url.startswith("sqlite:///"):
        conn = sqlite3.connect(url[len("sqlite:///") :])
        try:
            return [tuple(r) for r in conn.execute(query).fetchall()]
        finally:
            conn.close()
    with psycopg.connect(url) as pconn:
        return [tuple(r) for r in pconn.execute(query.encode()).fetchall()]


def _running_job(store: Store) -> AttemptRecord:
    store.create_job(JOB, "orders", SPEC, CONFIG)
    return store.start_attempt(JOB, OWNER, TTL, expected_current=AttemptNo(0))


# jobs ------------------------------------------------------------------------------------------
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
    )
    assert store.get_job(JOB) == rec
    assert store.control_snapshot(JOB) == ControlSnapshot(ControlVersion(0), CONFIG)


def test_create_job_twice_returns_the_first_record(store: Store, clock: ManualClock) -> None:
    first, _ = store.create_job(JOB, "orders", SPEC, CONFIG)
    clock.advance(5)

    again, created = store.create_job(JOB, "other-name", {"x": 1}, {"batch_rows": 1})

    assert created is False
    assert again == first
    assert store.control_snapshot(JOB) == ControlSnapshot(ControlVersion(0), CONFIG)
    assert store.list_jobs() == [first]


def test_concurrent_create_job_creates_exactly_once(open_new: OpenStore) -> None:
    stores = [open_new() for _ in range(32)]

    results = _race(32, lambda i: stores[i].create_job(JOB, f"name-{i}", {"i": i}, {"i": i}))

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
    assert stores[0].control_snapshot(JOB) == ControlSnapshot(ControlVersion(0), {"i": w})


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
    assert store.control_snapshot(third) == ControlSnapshot(ControlVersion(0), {"k": 1})
    assert store.create_jobs([]) == []


def test_concurrent_create_jobs_batches_create_each_id_exactly_once(
    open_new: OpenStore,
) -> None:
    stores = [open_new() for _ in range(8)]
    ids = [job_id(f"b{k}") for k in range(16)]

    results = _race(8, lambda i: stores[i].create_jobs([(j, f"n{i}", {"i": i}, {}) for j in ids]))

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


# attempts --------------------------------------------------------------------------------------
def test_first_attempt_is_number_one(store: Store) -> None:
    store.create_job(JOB, "orders", SPEC, CONFIG)

    att = store.start_attempt(JOB, OWNER, TTL, expected_current=AttemptNo(0))

    assert att == AttemptRecord(
        job_id=JOB,
        attempt=AttemptNo(1),
        state=AttemptState.RUNNING,
        owner=OWNER,
        lease_expires_at=T0 + TTL,
        started_at=T0,
        ended_at=None,
        error=None,
    )
    job = store.get_job(JOB)
    assert (job.state, job.current_attempt) == (JobState.RUNNING, 1)
    assert store.get_attempt(JOB, AttemptNo(1)) == att
    assert store.get_attempt(JOB, AttemptNo(2)) is None
    assert store.list_attempts(JOB) == [att]


def test_start_attempt_of_unknown_job_raises_job_not_found(store: Store) -> None:
    with pytest.raises(JobNotFound):
        store.start_attempt(job_id("nope"), OWNER, TTL, expected_current=AttemptNo(0))


def test_second_start_while_lease_is_live_is_a_duplicate(store: Store, clock: ManualClock) -> None:
    first = _running_job(store)
    clock.advance(TTL - 0.5)

    with pytest.raises(DuplicateJob) as info:
        store.start_attempt(JOB, OWNER_B, TTL, expected_current=AttemptNo(1))

    assert info.value.job_id == JOB
    assert "attempt 1 runs as pid 101 on host-a, lease valid for 0.5s" in str(info.value)
    assert store.list_attempts(JOB) == [first]
    assert store.get_job(JOB).current_attempt == 1


def test_after_the_lease_lapses_a_new_attempt_supersedes_the_old(
    store: Store, clock: ManualClock
) -> None:
    _running_job(store)
    clock.advance(TTL)  # lease_expires_at == now: lapsed

    second = store.start_attempt(JOB, OWNER_B, TTL, expected_current=AttemptNo(1))

    now = T0 + TTL
    assert second == AttemptRecord(
        job_id=JOB,
        attempt=AttemptNo(2),
        state=AttemptState.RUNNING,
        owner=OWNER_B,
        lease_expires_at=now + TTL,
        started_at=now,
        ended_at=None,
        error=None,
    )
    assert store.list_attempts(JOB) == [
        AttemptRecord(
            job_id=JOB,
            attempt=AttemptNo(1),
            state=AttemptState.SUPERSEDED,
            owner=OWNER,
            lease_expires_at=now,
            started_at=T0,
            ended_at=now,
            error="superseded by a newer attempt",
        ),
        second,
    ]
    job = store.get_job(JOB)
    assert (job.state, job.current_attempt, job.updated_at) == (JobState.RUNNING, 2, now)


def test_previous_dead_allows_takeover_of_a_live_lease(store: Store, clock: ManualClock) -> None:
    _running_job(store)
    clock.advance(1)

    second = store.start_attempt(
        JOB, OWNER_B, TTL, expected_current=AttemptNo(1), previous_dead=True
    )

    assert second.attempt == 2
    first = store.get_attempt(JOB, AttemptNo(1))
    assert first is not None
    assert (first.state, first.ended_at) == (AttemptState.SUPERSEDED, T0 + 1)
    assert store.get_job(JOB).current_attempt == 2


def test_an_ended_attempt_is_replaced_without_waiting_for_its_lease(store: Store) -> None:
    _running_job(store)
    store.end_attempt(JOB, AttemptNo(1), AttemptState.FAILED, error="driver crashed")

    second = store.start_attempt(JOB, OWNER_B, TTL, expected_current=AttemptNo(1))

    assert second.attempt == 2
    first = store.get_attempt(JOB, AttemptNo(1))
    assert first is not None
    assert (first.state, first.error, first.ended_at) == (
        AttemptState.FAILED,
        "driver crashed",
        T0,
    )


@pytest.mark.parametrize("expected", [0, 2, 7])
def test_start_attempt_compares_and_swaps_the_current_attempt(
    store: Store, clock: ManualClock, expected: int
) -> None:
    first = _running_job(store)
    clock.advance(TTL + 1)

    with pytest.raises(DuplicateJob) as info:
        store.start_attempt(JOB, OWNER_B, TTL, expected_current=AttemptNo(expected))

    assert "attempt 1 started meanwhile" in str(info.value)
    assert store.list_attempts(JOB) == [first]
    assert store.get_job(JOB).current_attempt == 1


def test_terminal_job_is_not_restarted_unless_asked(store: Store, clock: ManualClock) -> None:
    _running_job(store)
    store.end_attempt(JOB, AttemptNo(1), AttemptState.FINISHED)
    finished = store.set_job_state(JOB, JobState.FINISHED)
    clock.advance(1)

    with pytest.raises(JobTerminal) as info:
        store.start_attempt(JOB, OWNER_B, TTL, expected_current=AttemptNo(1))
    assert (info.value.job_id, info.value.state) == (JOB, "FINISHED")
    assert store.get_job(JOB) == finished

    again = store.start_attempt(JOB, OWNER_B, TTL, expected_current=AttemptNo(1), restart=True)

    assert again.attempt == 2
    job = store.get_job(JOB)
    assert (job.state, job.current_attempt, job.last_error) == (JobState.RUNNING, 2, None)


def test_failed_job_restart_clears_the_error(store: Store) -> None:
    _running_job(store)
    store.end_attempt(JOB, AttemptNo(1), AttemptState.FAILED, error="boom")
    store.set_job_state(JOB, JobState.FAILED, error="boom")

    with pytest.raises(JobTerminal):
        store.start_attempt(JOB, OWNER, TTL, expected_current=AttemptNo(1))
    store.start_attempt(JOB, OWNER, TTL, expected_current=AttemptNo(1), restart=True)

    job = store.get_job(JOB)
    assert (job.state, job.current_attempt, job.last_error) == (JobState.RUNNING, 2, None)


@pytest.mark.parametrize("situation", ["fresh job", "lapsed lease"])
def test_concurrent_start_attempt_has_exactly_one_winner(
    open_new: OpenStore, clock: ManualClock, situation: str
) -> None:
    stores = [open_new() for _ in range(16)]
    stores[0].create_job(JOB, "orders", SPEC, CONFIG)
    expected = AttemptNo(0)
    if situation == "lapsed lease":
        stores[0].start_attempt(JOB, OWNER, TTL, expected_current=AttemptNo(0))
        clock.advance(TTL + 1)
        expected = AttemptNo(1)

    results = _race(
        16,
        lambda i: stores[i].start_attempt(
            JOB, Owner(f"host-{i}", 1000 + i, "boot"), TTL, expected_current=expected
        ),
    )

    won = [r for r in results if isinstance(r, AttemptRecord)]
    lost = [r for r in results if not isinstance(r, AttemptRecord)]
    assert len(won) == 1
    assert len(lost) == 15
    assert all(type(e) is DuplicateJob for e in lost), lost
    assert won[0].attempt == expected + 1
    assert store_attempt_numbers(stores[0]) == list(range(1, expected + 2))
    assert stores[0].get_job(JOB).current_attempt == expected + 1


def store_attempt_numbers(store: Store) -> list[int]:
    return [a.attempt for a in store.list_attempts(JOB)]


def test_renew_lease_extends_the_current_attempt(store: Store, clock: ManualClock) -> None:
    _running_job(store)
    clock.advance(TTL - 1)

    assert store.renew_lease(JOB, AttemptNo(1), 30.0) is True

    att = store.get_attempt(JOB, AttemptNo(1))
    assert att is not None
    assert att.lease_expires_at == T0 + TTL - 1 + 30.0
    clock.advance(TTL)  # past the first lease, within the renewed one
    with pytest.raises(DuplicateJob):
        store.start_attempt(JOB, OWNER_B, TTL, expected_current=AttemptNo(1))


def test_renew_lease_fails_once_superseded(store: Store, clock: ManualClock) -> None:
    _running_job(store)
    store.start_attempt(JOB, OWNER_B, TTL, expected_current=AttemptNo(1), previous_dead=True)
    before = store.get_attempt(JOB, AttemptNo(1))

    assert store.renew_lease(JOB, AttemptNo(1), TTL) is False
    assert store.get_attempt(JOB, AttemptNo(1)) == before
    assert store.renew_lease(JOB, AttemptNo(2), TTL) is True


@pytest.mark.parametrize("past_expiry", [0.0, 0.25, 100.0])
def test_renew_lease_fails_once_the_lease_lapsed(
    store: Store, clock: ManualClock, past_expiry: float
) -> None:
    first = _running_job(store)
    clock.advance(TTL + past_expiry)

    assert store.renew_lease(JOB, AttemptNo(1), TTL) is False
    assert store.get_attempt(JOB, AttemptNo(1)) == first


def test_renew_lease_fails_for_an_ended_attempt(store: Store) -> None:
    _running_job(store)
    store.end_attempt(JOB, AttemptNo(1), AttemptState.CANCELED)

    assert store.renew_lease(JOB, AttemptNo(1), TTL) is False


def test_end_attempt_only_ends_a_running_attempt(store: Store, clock: ManualClock) -> None:
    _running_job(store)
    clock.advance(2)
    store.end_attempt(JOB, AttemptNo(1), AttemptState.FINISHED)
    ended = store.get_attempt(JOB, AttemptNo(1))
    clock.advance(2)

    store.end_attempt(JOB, AttemptNo(1), AttemptState.FAILED, error="late")

    assert ended is not None
    assert (ended.state, ended.ended_at, ended.lease_expires_at) == (
        AttemptState.FINISHED,
        T0 + 2,
        T0 + 2,
    )
    assert store.get_attempt(JOB, AttemptNo(1)) == ended


# control ---------------------------------------------------------------------------------------
def test_declare_defaults_versions_only_changes(store: Store, clock: ManualClock) -> None:
    store.create_job(JOB, "orders", SPEC, CONFIG)

    assert store.declare_defaults(JOB, dict(CONFIG)) == ControlSnapshot(ControlVersion(0), CONFIG)
    assert store.get_job(JOB).control_version == 0

    clock.advance(1)
    changed = {"batch_rows": 200, "rate": 1.5}
    assert store.declare_defaults(JOB, changed) == ControlSnapshot(ControlVersion(1), changed)
    job = store.get_job(JOB)
    assert (job.control_version, job.updated_at) == (1, T0 + 1)
    assert store.declare_defaults(JOB, changed) == ControlSnapshot(ControlVersion(1), changed)

    # Back to the old values is a change too: a new version, the old ones untouched.
    assert store.declare_defaults(JOB, dict(CONFIG)) == ControlSnapshot(ControlVersion(2), CONFIG)
    assert store.control_snapshot(JOB) == ControlSnapshot(ControlVersion(2), CONFIG)
    assert store.control_snapshot(JOB, ControlVersion(0)) == ControlSnapshot(
        ControlVersion(0), CONFIG
    )
    assert store.control_snapshot(JOB, ControlVersion(1)) == ControlSnapshot(
        ControlVersion(1), changed
    )


def test_control_of_unknown_job_raises_job_not_found(store: Store) -> None:
    with pytest.raises(JobNotFound):
        store.control_snapshot(job_id("nope"))
    with pytest.raises(JobNotFound):
        store.declare_defaults(job_id("nope"), {})
    store.create_job(JOB, "orders", SPEC, CONFIG)
    with pytest.raises(JobNotFound):
        store.control_snapshot(JOB, ControlVersion(9))


# epochs ----------------------------------------------------------------------------------------
def _pinned(epoch: int, by: int = 1, cv: int = 0, at: float = T0) -> EpochRecord:
    return EpochRecord(
        job_id=JOB,
        epoch=Epoch(epoch),
        control_version=ControlVersion(cv),
        state=EpochState.PINNED,
        pinned_by=AttemptNo(by),
        decided_by=None,
        rows_in=None,
        final=False,
        pinned_at=at,
        decided_at=None,
        committed_at=None,
    )


def test_pin_epoch_inserts_only_if_absent(store: Store, clock: ManualClock) -> None:
    _running_job(store)

    first = store.pin_epoch(JOB, Epoch(0), AttemptNo(1), ControlVersion(0))
    assert first == _pinned(0)

    clock.advance(5)
    again = store.pin_epoch(JOB, Epoch(0), AttemptNo(2), ControlVersion(3))
    assert again == first
    assert store.get_epoch(JOB, Epoch(0)) == first
    assert store.get_epoch(JOB, Epoch(1)) is None


def test_decide_epoch_by_the_current_attempt(store: Store, clock: ManualClock) -> None:
    _running_job(store)
    store.pin_epoch(JOB, Epoch(0), AttemptNo(1), ControlVersion(0))
    clock.advance(1)

    decided = store.decide_epoch(JOB, Epoch(0), AttemptNo(1), rows_in=42, final=True)

    assert decided == EpochRecord(
        job_id=JOB,
        epoch=Epoch(0),
        control_version=ControlVersion(0),
        state=EpochState.DECIDED,
        pinned_by=AttemptNo(1),
        decided_by=AttemptNo(1),
        rows_in=42,
        final=True,
        pinned_at=T0,
        decided_at=T0 + 1,
        committed_at=None,
    )
    assert store.get_epoch(JOB, Epoch(0)) == decided


def test_decide_epoch_again_by_the_same_attempt_is_idempotent(
    store: Store, clock: ManualClock
) -> None:
    _running_job(store)
    store.pin_epoch(JOB, Epoch(0), AttemptNo(1), ControlVersion(0))
    decided = store.decide_epoch(JOB, Epoch(0), AttemptNo(1), rows_in=42, final=False)
    clock.advance(1)

    again = store.decide_epoch(JOB, Epoch(0), AttemptNo(1), rows_in=99, final=True)

    assert again == decided
    assert store.get_epoch(JOB, Epoch(0)) == decided


def test_decide_epoch_by_a_superseded_attempt_is_stale(store: Store, clock: ManualClock) -> None:
    _running_job(store)
    pinned = store.pin_epoch(JOB, Epoch(0), AttemptNo(1), ControlVersion(0))
    store.start_attempt(JOB, OWNER_B, TTL, expected_current=AttemptNo(1), previous_dead=True)

    with pytest.raises(StaleAttempt):
        store.decide_epoch(JOB, Epoch(0), AttemptNo(1), rows_in=42, final=False)

    assert store.get_epoch(JOB, Epoch(0)) == pinned
    # The new owner may decide the epoch its predecessor pinned.
    decided = store.decide_epoch(JOB, Epoch(0), AttemptNo(2), rows_in=7, final=False)
    assert (decided.state, decided.pinned_by, decided.decided_by, decided.rows_in) == (
        EpochState.DECIDED,
        1,
        2,
        7,
    )


@pytest.mark.parametrize("past_expiry", [0.0, 0.25, 100.0])
def test_decide_epoch_after_the_lease_lapsed_is_stale(
    store: Store, clock: ManualClock, past_expiry: float
) -> None:
    _running_job(store)
    pinned = store.pin_epoch(JOB, Epoch(0), AttemptNo(1), ControlVersion(0))
    clock.advance(TTL + past_expiry)

    with pytest.raises(StaleAttempt):
        store.decide_epoch(JOB, Epoch(0), AttemptNo(1), rows_in=42, final=False)

    assert store.get_epoch(JOB, Epoch(0)) == pinned


def test_decide_epoch_decided_by_another_attempt_is_stale(store: Store, clock: ManualClock) -> None:
    _running_job(store)
    store.pin_epoch(JOB, Epoch(0), AttemptNo(1), ControlVersion(0))
    decided = store.decide_epoch(JOB, Epoch(0), AttemptNo(1), rows_in=42, final=False)
    store.start_attempt(JOB, OWNER_B, TTL, expected_current=AttemptNo(1), previous_dead=True)

    with pytest.raises(StaleAttempt):
        store.decide_epoch(JOB, Epoch(0), AttemptNo(2), rows_in=1, final=False)

    assert store.get_epoch(JOB, Epoch(0)) == decided


def test_decide_epoch_that_was_never_pinned_is_stale(store: Store) -> None:
    _running_job(store)

    with pytest.raises(StaleAttempt):
        store.decide_epoch(JOB, Epoch(3), AttemptNo(1), rows_in=1, final=False)

    assert store.get_epoch(JOB, Epoch(3)) is None


def test_mark_epoch_committed_moves_decided_to_committed(store: Store, clock: ManualClock) -> None:
    _running_job(store)
    store.pin_epoch(JOB, Epoch(0), AttemptNo(1), ControlVersion(0))
    pinned = store.pin_epoch(JOB, Epoch(1), AttemptNo(1), ControlVersion(0))
    decided = store.decide_epoch(JOB, Epoch(0), AttemptNo(1), rows_in=5, final=False)
    clock.advance(2)

    store.mark_epoch_committed(JOB, Epoch(0))
    store.mark_epoch_committed(JOB, Epoch(1))  # not decided: left alone

    committed = store.get_epoch(JOB, Epoch(0))
    assert committed is not None
    assert committed == EpochRecord(
        **{**decided.__dict__, "state": EpochState.COMMITTED, "committed_at": T0 + 2}
    )
    assert store.get_epoch(JOB, Epoch(1)) == pinned

    clock.advance(2)
    store.mark_epoch_committed(JOB, Epoch(0))  # again: nothing changes
    assert store.get_epoch(JOB, Epoch(0)) == committed


def test_list_epochs_newest_first_with_limit(store: Store, open_new: OpenStore) -> None:
    _running_job(store)
    store.create_job(OTHER, "other", SPEC, CONFIG)
    store.start_attempt(OTHER, OWNER, TTL, expected_current=AttemptNo(0))
    for e in (2, 0, 4, 1, 3):
        store.pin_epoch(JOB, Epoch(e), AttemptNo(1), ControlVersion(0))
    store.pin_epoch(OTHER, Epoch(9), AttemptNo(1), ControlVersion(0))

    assert store.list_epochs(JOB) == [_pinned(e) for e in (4, 3, 2, 1, 0)]
    assert [r.epoch for r in store.list_epochs(JOB, limit=3)] == [4, 3, 2]
    assert [r.epoch for r in store.list_epochs(JOB, limit=1)] == [4]
    assert store.list_epochs(JOB, limit=0) == []
    assert [r.epoch for r in store.list_epochs(OTHER)] == [9]
    assert store.list_epochs(job_id("nope")) == []


def test_epochs_in_state(store: Store) -> None:
    _running_job(store)
    for e in range(5):
        store.pin_epoch(JOB, Epoch(e), AttemptNo(1), ControlVersion(0))
    for e in (3, 1, 4):
        store.decide_epoch(JOB, Epoch(e), AttemptNo(1), rows_in=e, final=False)
    store.mark_epoch_committed(JOB, Epoch(4))

    assert [r.epoch for r in store.epochs_in_state(JOB, "PINNED")] == [0, 2]
    assert [r.epoch for r in store.epochs_in_state(JOB, EpochState.DECIDED)] == [1, 3]
    assert [r.epoch for r in store.epochs_in_state(JOB, "COMMITTED")] == [4]
    assert store.epochs_in_state(OTHER, "PINNED") == []


# sink transactions -----------------------------------------------------------------------------
def test_record_txn_upserts_and_list_txns_filters(store: Store, clock: ManualClock) -> None:
    _running_job(store)
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


# migrations ------------------------------------------------------------------------------------
def test_reopening_the_store_migrates_nothing_twice(
    store: Store, open_new: OpenStore, store_url: str
) -> None:
    created, _ = store.create_job(JOB, "orders", SPEC, CONFIG)
    second = open_new()  # while the first is still open
    store.close()
    third = open_new()

    assert second.get_job(JOB) == created
    assert third.get_job(JOB) == created
    numbers = [n for n, _ in _sql.migrations()]
    assert numbers == list(range(1, len(numbers) + 1))
    rows = _raw_rows(store_url, "SELECT version, applied_at FROM schema_migrations ORDER BY 1")
    assert rows == [(n, T0) for n in numbers]


def test_concurrent_first_opens_migrate_once(open_new: OpenStore, store_url: str) -> None:
    results = _race(8, lambda i: open_new())

    assert [r for r in results if isinstance(r, BaseException)] == []
    numbers = [n for n, _ in _sql.migrations()]
    rows = _raw_rows(store_url, "SELECT version FROM schema_migrations ORDER BY 1")
    assert rows == [(n,) for n in numbers]


def test_sqlite_files_opened_by_8_at_once_open_every_time(tmp_path: Path) -> None:
    """Switching a new file to WAL fails at once with "database is locked" (no busy handler)
    while another connection holds a lock; one race in ten hit it before the retry."""
    for n in range(50):
        url = f"sqlite:///{tmp_path / f'race-{n}.db'}"
        results = _race(8, lambda i, url=url: open_store(url, ManualClock(T0)))
        assert [r for r in results if isinstance(r, BaseException)] == []
        for r in results:
            r.close()  # type: ignore[union-attr]


def test_open_store_accepts_a_plain_path_for_sqlite(sqlite_path: Path) -> None:
    s = open_store(sqlite_path, ManualClock(T0))
    try:
        s.create_job(JOB, "orders", SPEC, CONFIG)
        assert s.url == f"sqlite:///{sqlite_path}"
    finally:
        s.close()
    again = open_store(f"sqlite:///{sqlite_path}", ManualClock(T0))
    try:
        assert again.get_job(JOB).name == "orders"
    finally:
        again.close()


# PostgreSQL: the fence under concurrency ---------------------------------------------------------
def test_decide_epoch_cannot_land_after_a_takeover(pg_dsn: str, clock: ManualClock) -> None:
    """Once attempt 2 has taken over and seen epoch 0 PINNED, attempt 1 never decides it.

    SQLite serialises writers (BEGIN IMMEDIATE), so only PostgreSQL, where a statement reads a
    snapshot and waits on row locks, can interleave the two: attempt 1's decide reads the job
    before the takeover commits, then waits on the epoch row (held here by ``blocker``) until
    after the takeover committed and the new owner looked at the epoch.
    """
    store, new_owner = open_store(pg_dsn, clock), open_store(pg_dsn, clock)
    try:
        _running_job(store)
        pinned = store.pin_epoch(JOB, Epoch(0), AttemptNo(1), ControlVersion(0))
        with (
            psycopg.connect(pg_dsn) as blocker,
            psycopg.connect(pg_dsn) as takeover,
            psycopg.connect(pg_dsn, autocommit=True) as spy,
        ):
            blocker.execute("SELECT 1 FROM epochs WHERE job_id = %s FOR UPDATE", [JOB])
            # What start_attempt does for attempt 2, not committed yet.
            takeover.execute("SELECT 1 FROM jobs WHERE job_id = %s FOR UPDATE", [JOB])
            takeover.execute(
                "UPDATE attempts SET state = 'SUPERSEDED', ended_at = %s "
                "WHERE job_id = %s AND attempt = 1",
                [T0, JOB],
            )
            takeover.execute(
                "INSERT INTO attempts (job_id, attempt, state, host, pid, pid_started, "
                "lease_expires_at, started_at) VALUES (%s, 2, 'RUNNING', 'host-b', 202, "
                "'boot-2', %s, %s)",
                [JOB, T0 + TTL, T0],
            )
            takeover.execute("UPDATE jobs SET current_attempt = 2 WHERE job_id = %s", [JOB])

            outcome: list[EpochRecord | BaseException] = []

            def decide() -> None:
                try:
                    outcome.append(
                        store.decide_epoch(JOB, Epoch(0), AttemptNo(1), rows_in=1, final=False)
                    )
                except Exception as e:  # asserted on below
                    outcome.append(e)

            racer = threading.Thread(target=decide)
            racer.start()
            # Bounded wait until the decide has read its snapshot and queued on a row lock.
            for _ in range(6000):
                row = spy.execute(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND wait_event_type = 'Lock'"
                ).fetchone()
                if not racer.is_alive() or (row is not None and row[0] > 0):
                    break
                racer.join(timeout=0.01)
            assert racer.is_alive(), f"decide did not wait for the locks: {outcome}"

            takeover.commit()
            assert new_owner.get_job(JOB).current_attempt == 2
            assert new_owner.get_epoch(JOB, Epoch(0)) == pinned  # the new owner will replay it
            blocker.rollback()
            racer.join(timeout=60)

        assert len(outcome) == 1
        assert isinstance(outcome[0], StaleAttempt), outcome
        assert new_owner.get_epoch(JOB, Epoch(0)) == pinned
    finally:
        store.close()
        new_owner.close()
