"""The store contract for applications (issue 10): kinds, ownership of job ids, and the fencing
of job attempts by the application attempt whose driver made them.

Run against SQLite and PostgreSQL alike (fixtures in conftest.py). Time is a
:class:`~stoker.clock.ManualClock`; leases lapse because the test moves the clock.
"""

from __future__ import annotations

import threading

import psycopg
import pytest

from stoker.clock import ManualClock
from stoker.errors import (
    ApplicationNotFound,
    DuplicateJob,
    InvalidInput,
    JobOwnedElsewhere,
    StaleAttempt,
)
from stoker.restart import FailureCause
from stoker.store import AttemptRecord, EpochRecord, JobRecord, Store, _sql, open_store
from stoker.types import (
    AttemptNo,
    AttemptState,
    ControlVersion,
    Epoch,
    EpochState,
    JobId,
    JobKind,
    JobState,
    job_id,
)
from tests.integration.store.support import (
    APP,
    APP_B,
    APP_JOB,
    APP_SPEC,
    CONFIG,
    JOB,
    OWNER,
    OWNER_B,
    SPEC,
    T0,
    TTL,
    OpenStore,
    app_job,
    race,
    raw_rows,
    running_app,
    running_job,
)

LONG = 1000.0  # a job lease that outlives every application lease of a test


# Kinds ------------------------------------------------------------------------------------------
def test_an_application_is_a_record_of_its_own_kind(store: Store) -> None:
    app, created = store.create_job(APP, "app-1", APP_SPEC, {}, kind=JobKind.APPLICATION)

    assert created is True
    assert (app.kind, app.app_id, app.state, app.spec) == (
        JobKind.APPLICATION,
        None,
        JobState.CREATED,
        APP_SPEC,
    )
    assert store.get_job(APP) == app
    assert app.to_dict()["kind"] == "application"


def test_jobs_made_as_before_are_lone_jobs(store: Store) -> None:
    job, _ = store.create_job(JOB, "orders", SPEC, CONFIG)

    assert (job.kind, job.app_id) == (JobKind.JOB, None)
    assert job.to_dict()["app_id"] is None
    assert store.start_attempt(JOB, OWNER, TTL, AttemptNo(0)).app_attempt is None


def test_a_job_of_an_application_names_it(store: Store) -> None:
    running_app(store)

    job = app_job(store)

    assert (job.kind, job.app_id) == (JobKind.JOB, APP)
    assert store.get_job(APP_JOB) == job
    assert job.to_dict()["app_id"] == APP


def test_creating_a_job_of_an_application_again_returns_it(
    store: Store, clock: ManualClock
) -> None:
    store.create_job(APP, "app-1", APP_SPEC, {}, kind=JobKind.APPLICATION)
    first = app_job(store)
    clock.advance(5)

    again, created = store.create_job(APP_JOB, "other", {"x": 1}, {}, app_id=APP)
    app_again, app_created = store.create_job(APP, "x", {}, {}, kind=JobKind.APPLICATION)

    assert (again, created) == (first, False)
    assert app_created is False and app_again == store.get_job(APP)


def test_list_jobs_filters_by_kind_state_and_application(store: Store, clock: ManualClock) -> None:
    store.create_job(JOB, "orders", SPEC, CONFIG)
    clock.advance(1)  # records list oldest first
    store.create_job(APP, "app-1", APP_SPEC, {}, kind=JobKind.APPLICATION)
    clock.advance(1)
    store.create_job(APP_B, "app-2", APP_SPEC, {}, kind=JobKind.APPLICATION)
    clock.advance(1)
    app_job(store)
    clock.advance(1)
    app_job(store, JobId("app-2.orders"), APP_B)
    store.request_cancel(APP_B)  # CREATED -> CANCELED

    def ids(jobs: list[JobRecord]) -> list[str]:
        return [j.job_id for j in jobs]

    assert ids(store.list_jobs()) == [JOB, APP_JOB, "app-2.orders"]
    assert ids(store.list_jobs(kind=None)) == [JOB, APP, APP_B, APP_JOB, "app-2.orders"]
    assert ids(store.list_jobs(kind=JobKind.APPLICATION)) == [APP, APP_B]
    assert ids(store.list_jobs(app_id=APP)) == [APP_JOB]
    assert ids(store.list_jobs(kind=None, app_id=APP_B)) == ["app-2.orders"]
    assert ids(store.list_jobs(JobState.CANCELED, kind=None)) == [APP_B]
    assert ids(store.list_jobs(JobState.CANCELED)) == []
    assert ids(store.list_jobs(JobState.CREATED, kind=JobKind.APPLICATION)) == [APP]


# Ownership of ids -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("jid", "kind", "app_id", "owner"),
    [
        # An application's id reused as a job id, alone or in another application.
        (APP, JobKind.JOB, None, "it is an application"),
        (APP, JobKind.JOB, APP_B, "it is an application"),
        # A job of application A created for application B, or alone, or as an application.
        (APP_JOB, JobKind.JOB, APP_B, "application 'app-1' owns it"),
        (APP_JOB, JobKind.JOB, None, "application 'app-1' owns it"),
        (APP_JOB, JobKind.APPLICATION, None, "application 'app-1' owns it"),
        # A lone job's id claimed by an application's job, or as an application.
        (JOB, JobKind.JOB, APP_B, "it is a job submitted alone"),
        (JOB, JobKind.APPLICATION, None, "it is a job submitted alone"),
    ],
)
def test_an_id_owned_elsewhere_is_refused_and_left_alone(
    store: Store,
    clock: ManualClock,
    jid: JobId,
    kind: JobKind,
    app_id: JobId | None,
    owner: str,
) -> None:
    store.create_job(JOB, "orders", SPEC, CONFIG)
    store.create_job(APP, "app-1", APP_SPEC, {}, kind=JobKind.APPLICATION)
    store.create_job(APP_B, "app-2", APP_SPEC, {}, kind=JobKind.APPLICATION)
    app_job(store)
    before = store.list_jobs(kind=None)
    clock.advance(1)

    with pytest.raises(JobOwnedElsewhere) as info:
        store.create_job(jid, "x", {"y": 1}, {"z": 2}, kind=kind, app_id=app_id)

    assert info.value.job_id == jid
    assert info.value.owner == owner
    assert str(info.value) == f"id {jid!r} is taken: {owner}"
    assert store.list_jobs(kind=None) == before


def test_a_batch_with_an_id_owned_elsewhere_creates_nothing(store: Store) -> None:
    store.create_job(APP, "app-1", APP_SPEC, {}, kind=JobKind.APPLICATION)

    with pytest.raises(JobOwnedElsewhere):
        store.create_jobs([(JOB, "orders", SPEC, CONFIG), (APP, "app-1", SPEC, CONFIG)])

    assert [j.job_id for j in store.list_jobs(kind=None)] == [APP]


def test_a_job_must_name_an_existing_application(store: Store) -> None:
    store.create_job(JOB, "orders", SPEC, CONFIG)

    with pytest.raises(ApplicationNotFound) as missing:
        store.create_job(APP_JOB, "orders", SPEC, CONFIG, app_id=APP)
    with pytest.raises(ApplicationNotFound) as lone:
        store.create_job(APP_JOB, "orders", SPEC, CONFIG, app_id=JOB)
    with pytest.raises(InvalidInput) as nested:
        store.create_job(APP_B, "app-2", APP_SPEC, {}, kind=JobKind.APPLICATION, app_id=JOB)

    assert (missing.value.app_id, lone.value.app_id) == (APP, JOB)
    assert nested.value.field == "app_id"
    assert [j.job_id for j in store.list_jobs(kind=None)] == [JOB]


def test_two_applications_racing_for_one_job_id_one_wins(store: Store, open_new: OpenStore) -> None:
    store.create_job(APP, "app-1", APP_SPEC, {}, kind=JobKind.APPLICATION)
    store.create_job(APP_B, "app-2", APP_SPEC, {}, kind=JobKind.APPLICATION)
    stores = [open_new() for _ in range(6)]
    shared = JobId("shared")

    results = race(
        6, lambda i: stores[i].create_job(shared, "s", SPEC, CONFIG, app_id=(APP, APP_B)[i % 2])
    )

    created = [r for r in results if isinstance(r, tuple) and r[1]]
    assert len(created) == 1
    winner = created[0][0].app_id
    for i, r in enumerate(results):
        if (APP, APP_B)[i % 2] == winner:
            assert isinstance(r, tuple), r
        else:
            assert isinstance(r, JobOwnedElsewhere), r
    assert store.get_job(shared).app_id == winner


# Job attempts under an application attempt -----------------------------------------------------
def test_a_job_attempt_records_the_application_attempt(store: Store) -> None:
    running_app(store)
    app_job(store)

    att = store.start_attempt(APP_JOB, OWNER, TTL, AttemptNo(0), app_attempt=AttemptNo(1))

    assert (att.attempt, att.state, att.app_attempt) == (1, AttemptState.RUNNING, 1)
    assert store.list_attempts(APP_JOB) == [att]
    assert store.get_job(APP_JOB).state == JobState.RUNNING
    assert store.list_attempts(APP)[0].app_attempt is None  # the driver's own attempt


def test_application_attempts_are_not_counted_with_jobs(store: Store) -> None:
    running_app(store)
    app_job(store)
    store.start_attempt(APP_JOB, OWNER, TTL, AttemptNo(0), app_attempt=AttemptNo(1))

    assert store.counts() == {"attempts": 1, "epochs_committed": 0}


def test_a_job_attempt_under_an_old_application_attempt_is_refused(
    store: Store, clock: ManualClock
) -> None:
    running_app(store)
    app_job(store)
    clock.advance(TTL)  # the driver's lease lapsed: the leader starts a new driver
    store.start_attempt(APP, OWNER_B, TTL, expected_current=AttemptNo(1), lapsed=_seen(store))

    with pytest.raises(StaleAttempt) as info:
        store.start_attempt(APP_JOB, OWNER, TTL, AttemptNo(0), app_attempt=AttemptNo(1))

    assert "current attempt is 2" in str(info.value)
    assert store.list_attempts(APP_JOB) == []
    assert store.get_job(APP_JOB).current_attempt == 0


@pytest.mark.parametrize("end", [AttemptState.FINISHED, AttemptState.FAILED])
def test_a_job_attempt_under_an_ended_application_attempt_is_refused(
    store: Store, end: AttemptState
) -> None:
    running_app(store)
    app_job(store)
    store.end_attempt(APP, AttemptNo(1), end)

    with pytest.raises(StaleAttempt, match="it has ended"):
        store.start_attempt(APP_JOB, OWNER, TTL, AttemptNo(0), app_attempt=AttemptNo(1))

    assert store.list_attempts(APP_JOB) == []


def test_a_job_attempt_under_an_application_attempt_not_yet_made_is_refused(
    store: Store,
) -> None:
    store.create_job(APP, "app-1", APP_SPEC, {}, kind=JobKind.APPLICATION)
    app_job(store)

    with pytest.raises(StaleAttempt):
        store.start_attempt(APP_JOB, OWNER, TTL, AttemptNo(0), app_attempt=AttemptNo(1))


def test_a_starting_application_attempt_may_start_job_attempts(store: Store) -> None:
    store.create_job(APP, "app-1", APP_SPEC, {}, kind=JobKind.APPLICATION)
    store.start_attempt(APP, OWNER, TTL, AttemptNo(0), state=AttemptState.STARTING)
    app_job(store)

    att = store.start_attempt(APP_JOB, OWNER, TTL, AttemptNo(0), app_attempt=AttemptNo(1))

    assert att.app_attempt == 1


def test_app_attempt_for_a_lone_job_is_invalid_input(store: Store) -> None:
    running_app(store)
    store.create_job(JOB, "orders", SPEC, CONFIG)

    with pytest.raises(InvalidInput) as info:
        store.start_attempt(JOB, OWNER, TTL, AttemptNo(0), app_attempt=AttemptNo(1))

    assert info.value.field == "app_attempt"
    assert store.list_attempts(JOB) == []


def test_a_newer_application_attempt_supersedes_the_older_ones_job_attempt(
    store: Store, clock: ManualClock
) -> None:
    running_app(store)
    app_job(store)
    old = store.start_attempt(APP_JOB, OWNER, LONG, AttemptNo(0), app_attempt=AttemptNo(1))
    clock.advance(TTL)
    store.start_attempt(APP, OWNER_B, TTL, expected_current=AttemptNo(1), lapsed=_seen(store))

    # The old job attempt's lease is still live: only the newer driver's claim ends it.
    new = store.start_attempt(APP_JOB, OWNER_B, TTL, AttemptNo(1), app_attempt=AttemptNo(2))

    now = T0 + TTL
    assert (new.attempt, new.app_attempt, new.state) == (2, 2, AttemptState.RUNNING)
    ended = store.get_attempt(APP_JOB, AttemptNo(1))
    assert ended == AttemptRecord(
        job_id=APP_JOB,
        attempt=AttemptNo(1),
        state=AttemptState.SUPERSEDED,
        owner=OWNER,
        lease_expires_at=now,
        started_at=T0,
        ended_at=now,
        error="superseded by a newer attempt",
        app_attempt=AttemptNo(1),
        lease_ttl=LONG,
    )
    assert old.lease_expires_at > now
    assert store.get_job(APP_JOB).current_attempt == 2


def test_an_application_attempt_supersedes_a_job_attempt_made_by_none(store: Store) -> None:
    running_app(store)
    app_job(store)
    store.start_attempt(APP_JOB, OWNER, LONG, AttemptNo(0))  # no app_attempt: NULL

    new = store.start_attempt(APP_JOB, OWNER_B, TTL, AttemptNo(1), app_attempt=AttemptNo(1))

    assert new.attempt == 2
    assert store.list_attempts(APP_JOB)[0].state == AttemptState.SUPERSEDED


def test_the_same_application_attempt_does_not_supersede_its_own_live_job_attempt(
    store: Store,
) -> None:
    running_app(store)
    app_job(store)
    first = store.start_attempt(APP_JOB, OWNER, TTL, AttemptNo(0), app_attempt=AttemptNo(1))

    with pytest.raises(DuplicateJob, match="attempt 1 runs as pid 101"):
        store.start_attempt(APP_JOB, OWNER_B, TTL, AttemptNo(1), app_attempt=AttemptNo(1))

    assert store.list_attempts(APP_JOB) == [first]


def test_compare_and_swap_still_applies_under_an_application_attempt(
    store: Store, clock: ManualClock
) -> None:
    running_app(store)
    app_job(store)
    store.start_attempt(APP_JOB, OWNER, LONG, AttemptNo(0), app_attempt=AttemptNo(1))
    clock.advance(TTL)
    store.start_attempt(APP, OWNER_B, TTL, expected_current=AttemptNo(1), lapsed=_seen(store))

    with pytest.raises(DuplicateJob, match="attempt 1 started meanwhile"):
        store.start_attempt(APP_JOB, OWNER_B, TTL, AttemptNo(0), app_attempt=AttemptNo(2))

    assert [a.state for a in store.list_attempts(APP_JOB)] == [AttemptState.RUNNING]


def test_concurrent_starts_under_one_application_attempt_have_one_winner(
    store: Store, open_new: OpenStore
) -> None:
    running_app(store)
    app_job(store)
    stores = [open_new() for _ in range(6)]

    results = race(
        6,
        lambda i: stores[i].start_attempt(
            APP_JOB, OWNER, TTL, AttemptNo(0), app_attempt=AttemptNo(1)
        ),
    )

    won = [r for r in results if isinstance(r, AttemptRecord)]
    assert len(won) == 1
    assert all(isinstance(r, DuplicateJob) for r in results if r not in won)
    assert store.list_attempts(APP_JOB) == won


# Renew and decide, fenced by the application attempt -------------------------------------------
def _job_under_app_attempt_1(store: Store) -> AttemptRecord:
    """Application attempt 1 (lease TTL) runs the job's attempt 1 (lease LONG), epoch 0
    pinned by it."""
    running_app(store)
    app_job(store)
    att = store.start_attempt(APP_JOB, OWNER, LONG, AttemptNo(0), app_attempt=AttemptNo(1))
    store.pin_epoch(APP_JOB, Epoch(0), att.attempt, ControlVersion(0))
    return att


def test_a_job_attempt_renews_and_decides_while_its_application_attempt_is_current(
    store: Store, clock: ManualClock
) -> None:
    _job_under_app_attempt_1(store)
    clock.advance(1)

    assert store.renew_lease(APP_JOB, AttemptNo(1), LONG) is True
    rec = store.decide_epoch(APP_JOB, Epoch(0), AttemptNo(1), rows_in=3, final=False)

    assert (rec.state, rec.decided_by) == (EpochState.DECIDED, 1)


def test_renew_and_decide_refused_once_the_application_attempt_was_replaced(
    store: Store, clock: ManualClock
) -> None:
    att = _job_under_app_attempt_1(store)
    clock.advance(TTL)  # the driver's lease lapsed; the job attempt's has not
    store.start_attempt(APP, OWNER_B, TTL, expected_current=AttemptNo(1), lapsed=_seen(store))
    pinned = store.get_epoch(APP_JOB, Epoch(0))

    assert store.renew_lease(APP_JOB, att.attempt, LONG) is False
    with pytest.raises(StaleAttempt):
        store.decide_epoch(APP_JOB, Epoch(0), att.attempt, rows_in=3, final=False)

    assert store.get_epoch(APP_JOB, Epoch(0)) == pinned
    # Still the job's current attempt, RUNNING, with its lease as it was: only the application
    # attempt fences it.
    still = store.get_attempt(APP_JOB, att.attempt)
    assert still == att
    assert store.get_job(APP_JOB).current_attempt == att.attempt


def test_the_new_application_attempts_job_attempt_decides_the_epoch(
    store: Store, clock: ManualClock
) -> None:
    _job_under_app_attempt_1(store)
    clock.advance(TTL)
    store.start_attempt(APP, OWNER_B, TTL, expected_current=AttemptNo(1), lapsed=_seen(store))
    new = store.start_attempt(APP_JOB, OWNER_B, TTL, AttemptNo(1), app_attempt=AttemptNo(2))

    rec = store.decide_epoch(APP_JOB, Epoch(0), new.attempt, rows_in=3, final=False)

    assert rec.decided_by == 2
    with pytest.raises(StaleAttempt):
        store.decide_epoch(APP_JOB, Epoch(0), AttemptNo(1), rows_in=3, final=False)


def test_a_lone_job_is_not_fenced_by_an_application(store: Store, clock: ManualClock) -> None:
    running_app(store)
    running_job(store)
    store.pin_epoch(JOB, Epoch(0), AttemptNo(1), ControlVersion(0))
    clock.advance(TTL / 2)
    store.start_attempt(APP, OWNER_B, TTL, AttemptNo(1), previous_dead=True)

    assert store.renew_lease(JOB, AttemptNo(1), TTL) is True
    assert store.decide_epoch(JOB, Epoch(0), AttemptNo(1), 1, False).decided_by == 1


# PostgreSQL: how decides and starts of job attempts interleave with a driver takeover -----------
def _wait_until_blocked(spy: psycopg.Connection, racer: threading.Thread, waiters: int = 1) -> None:
    """Bounded wait until ``waiters`` sessions queue on a row lock, the last of them ``racer``
    (or until it ended: the caller asserts)."""
    for _ in range(6000):
        row = spy.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND wait_event_type = 'Lock'"
        ).fetchone()
        if not racer.is_alive() or (row is not None and row[0] >= waiters):
            return
        racer.join(timeout=0.01)


def _uncommitted_driver_takeover(conn: psycopg.Connection) -> None:
    """What start_attempt does for application attempt 2, not committed yet."""
    conn.execute("SELECT 1 FROM jobs WHERE job_id = %s FOR UPDATE", [APP])
    conn.execute(
        "UPDATE attempts SET state = 'SUPERSEDED', ended_at = %s WHERE job_id = %s AND attempt = 1",
        [T0, APP],
    )
    conn.execute(
        "INSERT INTO attempts (job_id, attempt, state, host, pid, pid_started, "
        "lease_expires_at, started_at) VALUES (%s, 2, 'RUNNING', 'host-b', 202, 'boot-2', %s, %s)",
        [APP, T0 + TTL, T0],
    )
    conn.execute("UPDATE jobs SET current_attempt = 2 WHERE job_id = %s", [APP])


def test_a_decide_racing_a_driver_takeover_lands_before_the_job_is_re_adopted(
    pg_dsn: str, clock: ManualClock
) -> None:
    """The application's row is not locked by a decide (queries.postgres.sql says why), so a
    decide whose snapshot predates a new driver attempt can land just after it. It still lands
    before the new driver's attempt of the job exists (the job row orders the two), so that
    attempt finds the epoch DECIDED and recovers it: never a decision behind its back."""
    store, new_driver = open_store(pg_dsn, clock), open_store(pg_dsn, clock)
    try:
        _job_under_app_attempt_1(store)
        outcome: list[EpochRecord | BaseException] = []
        adopted: list[AttemptRecord | BaseException] = []

        def decide() -> None:
            try:
                outcome.append(store.decide_epoch(APP_JOB, Epoch(0), AttemptNo(1), 1, False))
            except Exception as e:  # asserted on below
                outcome.append(e)

        def adopt() -> None:
            try:
                adopted.append(
                    new_driver.start_attempt(
                        APP_JOB, OWNER_B, TTL, AttemptNo(1), app_attempt=AttemptNo(2)
                    )
                )
            except Exception as e:  # asserted on below
                adopted.append(e)

        with (
            psycopg.connect(pg_dsn) as blocker,
            psycopg.connect(pg_dsn) as takeover,
            psycopg.connect(pg_dsn, autocommit=True) as spy,
        ):
            blocker.execute("SELECT 1 FROM epochs WHERE job_id = %s FOR UPDATE", [APP_JOB])
            _uncommitted_driver_takeover(takeover)
            racer = threading.Thread(target=decide)
            racer.start()
            _wait_until_blocked(spy, racer, 1)  # fence passed, queued on the epoch row
            assert racer.is_alive(), f"decide did not wait for the epoch row: {outcome}"
            takeover.commit()
            adopter = threading.Thread(target=adopt)
            adopter.start()
            _wait_until_blocked(spy, adopter, 2)  # queued on the job row the decide holds
            assert adopter.is_alive(), f"re-adoption did not wait for the decide: {adopted}"
            blocker.rollback()
            racer.join(timeout=60)
            adopter.join(timeout=60)

        assert [type(o) for o in outcome] == [EpochRecord], outcome
        assert [type(a) for a in adopted] == [AttemptRecord], adopted
        epoch = new_driver.get_epoch(APP_JOB, Epoch(0))
        assert epoch is not None and (epoch.state, epoch.decided_by) == (EpochState.DECIDED, 1)
        assert [a.state for a in new_driver.list_attempts(APP_JOB)] == [
            AttemptState.SUPERSEDED,
            AttemptState.RUNNING,
        ]
    finally:
        store.close()
        new_driver.close()


def test_start_cannot_land_after_a_driver_takeover(pg_dsn: str, clock: ManualClock) -> None:
    """A job attempt started under application attempt 1 while attempt 2 is being made waits
    for it and is then refused, never made under a driver that has just lost the application."""
    store = open_store(pg_dsn, clock)
    try:
        running_app(store)
        app_job(store)
        outcome: list[AttemptRecord | BaseException] = []

        def start() -> None:
            try:
                outcome.append(
                    store.start_attempt(APP_JOB, OWNER, TTL, AttemptNo(0), app_attempt=AttemptNo(1))
                )
            except Exception as e:  # asserted on below
                outcome.append(e)

        with (
            psycopg.connect(pg_dsn) as takeover,
            psycopg.connect(pg_dsn, autocommit=True) as spy,
        ):
            _uncommitted_driver_takeover(takeover)
            racer = threading.Thread(target=start)
            racer.start()
            _wait_until_blocked(spy, racer)
            assert racer.is_alive(), f"start did not wait for the application row: {outcome}"
            takeover.commit()
            racer.join(timeout=60)

        assert len(outcome) == 1
        assert isinstance(outcome[0], StaleAttempt), outcome
        assert store.list_attempts(APP_JOB) == []
    finally:
        store.close()


# Migration 7 ------------------------------------------------------------------------------------
def _store_at_version(url: str, version: int) -> None:
    """Make the schema as the code of migration ``version`` left it, around the store."""
    scripts = [(n, s) for n, s in _sql.migrations() if n <= version]
    create = (
        "CREATE TABLE schema_migrations (version BIGINT PRIMARY KEY, "
        "applied_at DOUBLE PRECISION NOT NULL)"
    )
    if url.startswith("sqlite:///"):
        import sqlite3

        conn = sqlite3.connect(url[len("sqlite:///") :])
        try:
            conn.execute(create)
            for number, script in scripts:
                for statement in _sql.split_statements(script):
                    conn.execute(statement)
                conn.execute("INSERT INTO schema_migrations VALUES (?, 0)", (number,))
            conn.commit()
        finally:
            conn.close()
        return
    with psycopg.connect(url) as pconn:
        pconn.execute(create.encode())
        for number, script in scripts:
            for statement in _sql.split_statements(script):
                pconn.execute(statement.encode())
            pconn.execute("INSERT INTO schema_migrations VALUES (%s, 0)", [number])


def _raw(url: str, *statements: str) -> None:
    if url.startswith("sqlite:///"):
        import sqlite3

        conn = sqlite3.connect(url[len("sqlite:///") :])
        try:
            for s in statements:
                conn.execute(s)
            conn.commit()
        finally:
            conn.close()
        return
    with psycopg.connect(url) as pconn:
        for s in statements:
            pconn.execute(s.encode())


def test_a_store_made_at_version_6_reads_its_rows_as_lone_jobs(
    store_url: str, clock: ManualClock
) -> None:
    _store_at_version(store_url, 6)
    _raw(
        store_url,
        "INSERT INTO jobs (job_id, name, state, spec, current_attempt, created_at, updated_at, "
        "uid) VALUES ('old-job', 'old', 'RUNNING', '{}', 1, 5.0, 5.0, 'u1')",
        "INSERT INTO attempts (job_id, attempt, state, host, pid, pid_started, "
        "lease_expires_at, started_at) VALUES ('old-job', 1, 'RUNNING', 'h', 7, 'b', 9.0, 5.0)",
    )

    st = open_store(store_url, clock)
    try:
        old = st.get_job(JobId("old-job"))
        assert (old.kind, old.app_id, old.uid) == (JobKind.JOB, None, "u1")
        assert st.list_attempts(old.job_id)[0].app_attempt is None
        assert [j.job_id for j in st.list_jobs()] == ["old-job"]
        assert st.list_clusters(include_stopped=True) == []
        # The new schema works on the migrated store: an application owns its jobs there too.
        running_app(st)
        app_job(st)
        with pytest.raises(JobOwnedElsewhere):
            st.create_job(JobId("old-job"), "old", {}, {}, app_id=APP)
    finally:
        st.close()
    numbers = [n for n, _ in _sql.migrations()]
    assert raw_rows(store_url, "SELECT version FROM schema_migrations ORDER BY 1") == [
        (n,) for n in numbers
    ]
    assert numbers[-1] >= 7


# Restart -----------------------------------------------------------------------------------------
def test_restarting_an_ended_application_restarts_its_canceled_and_failed_jobs(
    store: Store,
) -> None:
    """Issue 21 item 3: a restart resumes the application's jobs from their checkpoints. In
    one transaction with the application's own restart, the jobs it canceled or that failed
    go to RESTARTING (their spec and folder kept, their failures forgotten); a FINISHED job
    stays FINISHED, a job of another application is not touched."""
    running_app(store)
    ended = {}
    for name, state in (("done", JobState.FINISHED), ("stopped", JobState.CANCELED)):
        jid = job_id(f"app-1.{name}")
        app_job(store, jid)
        store.start_attempt(jid, OWNER, LONG, AttemptNo(0), app_attempt=AttemptNo(1))
        astate = AttemptState.FINISHED if state == JobState.FINISHED else AttemptState.CANCELED
        store.finish_attempt(jid, AttemptNo(1), astate, state)
        ended[name] = jid
    broken = job_id("app-1.broken")
    app_job(store, broken)
    store.start_attempt(broken, OWNER, LONG, AttemptNo(0), app_attempt=AttemptNo(1))
    store.finish_attempt(broken, AttemptNo(1), AttemptState.FAILED, JobState.FAILED, "boom")
    running_app(store, APP_B)
    elsewhere = job_id("app-2.orders")
    app_job(store, elsewhere, APP_B)
    store.start_attempt(elsewhere, OWNER, LONG, AttemptNo(0), app_attempt=AttemptNo(1))
    store.finish_attempt(elsewhere, AttemptNo(1), AttemptState.CANCELED, JobState.CANCELED)
    store.finish_attempt(APP, AttemptNo(1), AttemptState.FAILED, JobState.FAILED, "job failed")

    app = store.restart_job(APP, APP_SPEC)

    assert app.state == JobState.RESTARTING
    assert store.get_job(ended["done"]).state == JobState.FINISHED
    stopped = store.get_job(ended["stopped"])
    assert stopped.state == JobState.RESTARTING and stopped.spec["app_id"] == APP
    again = store.get_job(broken)
    assert (again.state, again.failures, again.last_error) == (JobState.RESTARTING, 0, None)
    assert store.get_job(elsewhere).state == JobState.CANCELED
    # A live application is returned as it is, its jobs untouched.
    assert store.restart_job(APP, APP_SPEC).state == JobState.RESTARTING


# main raised (issue 39 item 7) ---------------------------------------------------------------
def test_main_raised_is_recorded_on_the_live_attempt_and_kept_when_it_ends(
    store: Store,
) -> None:
    running_app(store)
    assert store.note_main_raised(APP, AttemptNo(1), "RuntimeError: boom", FailureCause.MAIN_RAISED)
    att = store.get_attempt(APP, AttemptNo(1))
    assert att is not None
    assert (att.state, att.error, att.cause) == (
        AttemptState.RUNNING,
        "RuntimeError: boom",
        "main-raised",
    )
    assert store.get_job(APP).state == JobState.RUNNING  # the leader's strategy decides
    # Ended FAILED without a cause given, the recorded one stays.
    store.finish_attempt(APP, AttemptNo(1), AttemptState.FAILED, None, "RuntimeError: boom")
    att = store.get_attempt(APP, AttemptNo(1))
    assert att is not None and (att.state, att.cause) == (AttemptState.FAILED, "main-raised")
    # An ended attempt is not written again.
    assert not store.note_main_raised(APP, AttemptNo(1), "x", FailureCause.MAIN_RAISED)


def test_failing_an_application_cancels_its_jobs_with_the_reason_once(store: Store) -> None:
    """One transaction: every live job of the application canceled naming why (a RUNNING one
    CANCELING, the others CANCELED at once), the application CANCELING with its error while
    its attempt is live, its failure counted; a second call changes nothing. A job that then
    ends CANCELED keeps the reason."""
    running_app(store)
    app_job(store)
    store.start_attempt(APP_JOB, OWNER, LONG, AttemptNo(0), app_attempt=AttemptNo(1))
    waiting = job_id("app-1.waiting")
    app_job(store, waiting)
    done = job_id("app-1.done")
    app_job(store, done)
    store.start_attempt(done, OWNER, LONG, AttemptNo(0), app_attempt=AttemptNo(1))
    store.finish_attempt(done, AttemptNo(1), AttemptState.FINISHED, JobState.FINISHED)
    why = "application app-1's main raised: RuntimeError: boom"

    app = store.fail_application(APP, AttemptNo(1), "RuntimeError: boom", why)

    assert (app.state, app.failures, app.last_error) == (
        JobState.CANCELING,
        1,
        "RuntimeError: boom",
    )
    job = store.get_job(APP_JOB)
    assert (job.state, job.last_error) == (JobState.CANCELING, why)
    assert (store.get_job(waiting).state, store.get_job(waiting).last_error) == (
        JobState.CANCELED,
        why,
    )
    assert store.get_job(done).state == JobState.FINISHED
    assert store.fail_application(APP, AttemptNo(1), "again", "again").failures == 1
    store.finish_attempt(APP_JOB, AttemptNo(1), AttemptState.CANCELED, JobState.CANCELED)
    assert (store.get_job(APP_JOB).state, store.get_job(APP_JOB).last_error) == (
        JobState.CANCELED,
        why,
    )
    store.finish_attempt(APP, AttemptNo(1), AttemptState.FAILED, JobState.FAILED, "boom")
    assert store.get_job(APP).state == JobState.FAILED


def test_failing_an_application_whose_attempt_ended_fails_it_at_once(store: Store) -> None:
    running_app(store)
    store.finish_attempt(APP, AttemptNo(1), AttemptState.FAILED, None, "RuntimeError: boom")
    app = store.fail_application(APP, AttemptNo(1), "RuntimeError: boom", "why")
    assert (app.state, app.failures, app.last_error) == (
        JobState.FAILED,
        1,
        "RuntimeError: boom",
    )


def _seen(store: Store) -> tuple[int, float]:
    """The application driver's lease as a leader saw it lapse (stoker.leases)."""
    att = store.get_attempt(APP, AttemptNo(1))
    assert att is not None
    return att.lease_seen
