"""The store contract for scaling (issue 11): an owner's scaling spec, executor target and
reported resources, each epoch's metrics, the rescales, and the scaler's read of recent epochs.

Run against SQLite and PostgreSQL alike (fixtures in conftest.py). Time is a
:class:`~stoker.clock.ManualClock`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from stoker.clock import ManualClock
from stoker.errors import InvalidInput, InvalidTransition, JobNotFound, RescaleNotFound
from stoker.store import RescaleRecord, Store, _sql, open_store
from stoker.types import AttemptNo, ControlVersion, Epoch, JobId, job_id
from tests.integration.store.support import (
    APP,
    CONFIG,
    JOB,
    OTHER,
    OWNER,
    SPEC,
    T0,
    TTL,
    OpenStore,
    race,
    raw_rows,
    running_app,
    running_job,
)

AUTO = {
    "mode": "auto",
    "min_executors": 1,
    "max_executors": 4,
    "target_utilization": 0.7,
    "catch_up": 300.0,
    "stabilization": 60.0,
    "cooldown": 120.0,
}
RESOURCES = {
    "executors": 2,
    "cores": 4,
    "executor_ids": ["0", "1"],
    "hosts": ["10.0.0.5", "10.0.0.6"],
    "requested": None,
    "at": T0 + 1.5,
}
SIGNALS = {"utilization": 0.93, "backlog": 1200, "epochs": 5, "per_row_ms": 0.25}


def _commit(store: Store, jid: JobId, epoch: int, attempt: int = 1) -> None:
    store.pin_epoch(jid, Epoch(epoch), AttemptNo(attempt), ControlVersion(0))
    store.decide_epoch(jid, Epoch(epoch), AttemptNo(attempt), rows_in=10, final=False)
    store.mark_epoch_committed(jid, Epoch(epoch))


def _decision(store: Store, jid: JobId = JOB, **kw: object) -> RescaleRecord:
    args: dict[str, object] = {
        "kind": "decision",
        "policy": "default",
        "mode": "auto",
        "signals": SIGNALS,
        "from_executors": 1,
        "to_executors": 3,
        "reason": "utilization 0.93 above 0.7 for 60 s",
        "status": "decided",
    }
    args.update(kw)
    return store.add_rescale(jid, **args)  # type: ignore[arg-type]


# --- scaling, executor target, resources ------------------------------------------------


def test_set_scaling_round_trips_and_none_is_fixed(store: Store, clock: ManualClock) -> None:
    created, _ = store.create_job(JOB, "orders", SPEC, CONFIG)
    assert (created.scaling, created.executor_target, created.resources) == (None, None, None)

    clock.advance(5)
    job = store.set_scaling(JOB, AUTO)
    assert job.scaling == AUTO
    assert store.get_job(JOB).scaling == AUTO
    assert job.to_dict()["scaling"] == AUTO
    assert job.updated_at == created.updated_at  # the record's own change time stays

    assert store.set_scaling(JOB, None).scaling is None
    assert store.get_job(JOB).scaling is None
    assert store.get_job(JOB).spec == SPEC  # nothing else moved


def test_set_executor_target_sets_and_clears(store: Store) -> None:
    store.create_job(JOB, "orders", SPEC, CONFIG)
    store.create_job(OTHER, "other", SPEC, CONFIG)

    store.set_executor_target(JOB, 3)
    assert store.get_job(JOB).executor_target == 3
    assert store.get_job(JOB).to_dict()["executor_target"] == 3
    assert store.get_job(OTHER).executor_target is None
    store.set_executor_target(JOB, None)
    assert store.get_job(JOB).executor_target is None


def test_report_resources_replaces_the_report_and_leaves_updated_at(
    store: Store, clock: ManualClock
) -> None:
    before = running_job(store)
    updated_at = store.get_job(JOB).updated_at

    clock.advance(30)
    store.report_resources(JOB, RESOURCES)
    job = store.get_job(JOB)
    assert job.resources == RESOURCES
    assert job.to_dict()["resources"] == RESOURCES
    assert job.updated_at == updated_at
    store.set_executor_target(JOB, 2)
    assert store.get_job(JOB).updated_at == updated_at

    later = {**RESOURCES, "executors": 1, "executor_ids": ["1"], "at": T0 + 40}
    store.report_resources(JOB, later)
    assert store.get_job(JOB).resources == later
    assert store.get_attempt(JOB, before.attempt) == before  # the attempt is not touched


def test_an_application_and_its_jobs_hold_their_own_scaling(store: Store) -> None:
    from tests.integration.store.support import APP_JOB, app_job

    running_app(store)
    app_job(store)

    store.set_scaling(APP, AUTO)
    store.set_executor_target(APP, 2)
    store.report_resources(APP, RESOURCES)
    store.report_resources(APP_JOB, RESOURCES)

    app = store.get_job(APP)
    assert (app.scaling, app.executor_target, app.resources) == (AUTO, 2, RESOURCES)
    job = store.get_job(APP_JOB)
    assert (job.scaling, job.executor_target, job.resources) == (None, None, RESOURCES)


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.set_scaling(JobId("nope"), AUTO),
        lambda s: s.set_executor_target(JobId("nope"), 2),
        lambda s: s.report_resources(JobId("nope"), RESOURCES),
        lambda s: s.list_rescales(JobId("nope")),
        lambda s: _decision(s, JobId("nope")),
    ],
    ids=["set_scaling", "set_executor_target", "report_resources", "list", "add_rescale"],
)
def test_an_unknown_owner_is_job_not_found(store: Store, call: object) -> None:
    with pytest.raises(JobNotFound, match="nope"):
        call(store)  # type: ignore[operator]


def test_bad_scaling_values_are_refused_naming_the_field(store: Store) -> None:
    store.create_job(JOB, "orders", SPEC, CONFIG)
    store.set_scaling(JOB, AUTO)
    store.set_executor_target(JOB, 2)

    with pytest.raises(InvalidInput, match=r"^scaling: must be an object"):
        store.set_scaling(JOB, "auto")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match=r"^executor_target: must be a whole number"):
        store.set_executor_target(JOB, -1)
    with pytest.raises(InvalidInput, match=r"^executor_target"):
        store.set_executor_target(JOB, True)
    with pytest.raises(InvalidInput, match=r"^resources: must be an object"):
        store.report_resources(JOB, [1, 2])  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match=r"^resources: cannot be stored as JSON"):
        store.report_resources(JOB, {"at": math.nan})

    job = store.get_job(JOB)
    assert (job.scaling, job.executor_target, job.resources) == (AUTO, 2, None)


# --- epoch metrics and recent epochs -----------------------------------------------------


def test_set_epoch_metrics_sets_only_what_is_given(store: Store) -> None:
    running_job(store)
    _commit(store, JOB, 0)
    fresh = store.get_epoch(JOB, Epoch(0))
    assert fresh is not None
    assert (fresh.duration_ms, fresh.backlog, fresh.executors, fresh.cores) == (None,) * 4

    store.set_epoch_metrics(JOB, Epoch(0), duration_ms=812.5, executors=2, cores=4)
    progress = {"numInputRows": 5, "stateOperators": [{"operatorName": "x", "numRowsTotal": 7}]}
    store.set_epoch_metrics(JOB, Epoch(0), backlog=1200, work_ms=300.0, progress=progress)
    store.set_epoch_metrics(JOB, Epoch(0), executors=3)
    store.set_epoch_metrics(JOB, Epoch(0))  # nothing given: nothing changes
    rec = store.get_epoch(JOB, Epoch(0))
    assert rec is not None
    assert (rec.duration_ms, rec.backlog, rec.executors, rec.cores) == (812.5, 1200, 3, 4)
    assert rec.to_dict() == {
        **fresh.to_dict(),
        "duration_ms": 812.5,
        "backlog": 1200,
        "executors": 3,
        "cores": 4,
        "work_ms": 300.0,
        "progress": progress,
    }
    assert store.list_epochs(JOB)[0] == rec
    # An int duration comes back a float; zero is a value, not "unknown".
    store.set_epoch_metrics(JOB, Epoch(0), duration_ms=0, backlog=0)
    again = store.get_epoch(JOB, Epoch(0))
    assert again is not None
    assert (again.duration_ms, again.backlog) == (0.0, 0)
    assert isinstance(again.duration_ms, float)


def test_set_epoch_metrics_of_a_missing_epoch_does_nothing(store: Store) -> None:
    running_job(store)
    _commit(store, JOB, 0)

    store.set_epoch_metrics(JOB, Epoch(7), duration_ms=10.0, backlog=5)
    store.set_epoch_metrics(JobId("nope"), Epoch(0), duration_ms=10.0)

    assert store.get_epoch(JOB, Epoch(7)) is None
    rec = store.get_epoch(JOB, Epoch(0))
    assert rec is not None and rec.duration_ms is None


def test_set_epoch_metrics_refuses_bad_values(store: Store) -> None:
    running_job(store)
    _commit(store, JOB, 0)

    with pytest.raises(InvalidInput, match=r"^duration_ms"):
        store.set_epoch_metrics(JOB, Epoch(0), duration_ms=-1.0)
    with pytest.raises(InvalidInput, match=r"^backlog"):
        store.set_epoch_metrics(JOB, Epoch(0), duration_ms=5.0, backlog=-3)
    with pytest.raises(InvalidInput, match=r"^cores"):
        store.set_epoch_metrics(JOB, Epoch(0), cores=2.5)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match=r"^work_ms"):
        store.set_epoch_metrics(JOB, Epoch(0), work_ms=float("nan"))
    rec = store.get_epoch(JOB, Epoch(0))
    assert rec is not None and (rec.duration_ms, rec.backlog, rec.cores) == (None, None, None)


def test_recent_epochs_are_committed_ones_of_the_jobs_since_oldest_first(
    store: Store, clock: ManualClock
) -> None:
    third = job_id("job-3")
    for jid in (JOB, OTHER, third):
        store.create_job(jid, jid, SPEC, CONFIG)
        # Leases outlast the clock's moves below.
        store.start_attempt(jid, OWNER, 100 * TTL, expected_current=AttemptNo(0))

    _commit(store, JOB, 0)  # T0: before the window
    clock.advance(10)
    _commit(store, OTHER, 0)  # T0 + 10: the window's first instant
    clock.advance(1)
    _commit(store, JOB, 1)
    _commit(store, third, 0)  # another job's: not asked for
    clock.advance(1)
    _commit(store, OTHER, 1)
    store.set_epoch_metrics(OTHER, Epoch(1), duration_ms=90.0, backlog=4, executors=2, cores=4)
    store.pin_epoch(JOB, Epoch(2), AttemptNo(1), ControlVersion(0))  # pinned only
    store.pin_epoch(OTHER, Epoch(2), AttemptNo(1), ControlVersion(0))
    store.decide_epoch(OTHER, Epoch(2), AttemptNo(1), rows_in=1, final=False)  # decided only

    got = store.recent_epochs([JOB, OTHER, JobId("nope"), JOB], since=T0 + 10)

    assert [(e.job_id, e.epoch, e.committed_at) for e in got] == [
        (OTHER, 0, T0 + 10),
        (JOB, 1, T0 + 11),
        (OTHER, 1, T0 + 12),
    ]
    assert (got[2].duration_ms, got[2].backlog, got[2].executors, got[2].cores) == (
        90.0,
        4,
        2,
        4,
    )
    assert store.recent_epochs([JOB, OTHER], since=T0 + 13) == []
    assert store.recent_epochs([], since=0) == []
    assert [e.epoch for e in store.recent_epochs([JOB], since=0)] == [0, 1]
    with pytest.raises(InvalidInput, match=r"^job_ids"):
        store.recent_epochs(JOB, since=0)


# --- rescales ----------------------------------------------------------------------------


def test_add_rescale_records_every_field(store: Store, clock: ManualClock) -> None:
    running_job(store)
    clock.advance(3)

    rec = _decision(store, workers={"added": ["worker-a"], "removed": []}, sender="scaler")

    assert rec == RescaleRecord(
        rescale_id=rec.rescale_id,
        job_id=JOB,
        at=T0 + 3,
        kind="decision",
        policy="default",
        mode="auto",
        signals=SIGNALS,
        from_executors=1,
        to_executors=3,
        workers={"added": ["worker-a"], "removed": []},
        reason="utilization 0.93 above 0.7 for 60 s",
        status="decided",
        in_use_at=None,
        error=None,
        sender="scaler",
    )
    assert rec.to_dict()["seconds_to_in_use"] is None
    assert json.loads(json.dumps(rec.to_dict())) == rec.to_dict()
    assert store.list_rescales(JOB) == [rec]


def test_rescale_defaults_and_the_other_kinds(store: Store, clock: ManualClock) -> None:
    running_job(store)

    observed = store.add_rescale(
        JOB,
        kind="observed",
        policy="reactive",
        mode="reactive",
        signals={},
        from_executors=2,
        to_executors=1,
        reason="executor 1 lost",
        status="observed",
    )
    bounds = store.add_rescale(
        JOB,
        kind="bounds",
        policy="user",
        mode="auto",
        signals={"min_executors": 2, "max_executors": 6},
        from_executors=None,
        to_executors=None,
        reason="bounds set to 2..6",
        status="recorded",
        sender="alice",
        at=T0 - 50,
    )

    assert observed.workers == {"added": [], "removed": []}
    assert (observed.at, observed.sender) == (T0, None)
    assert (bounds.at, bounds.sender, bounds.from_executors) == (T0 - 50, "alice", None)
    assert bounds.rescale_id > observed.rescale_id


def test_rescale_ids_grow_across_owners(store: Store) -> None:
    running_job(store)
    store.create_job(OTHER, "other", SPEC, CONFIG)

    ids = [_decision(store, jid).rescale_id for jid in (JOB, OTHER, JOB, OTHER)]

    assert ids == sorted(ids) and len(set(ids)) == 4
    assert [r.rescale_id for r in store.list_rescales(OTHER)] == [ids[3], ids[1]]


def test_list_rescales_newest_first_with_limit_and_since(store: Store, clock: ManualClock) -> None:
    running_job(store)
    store.create_job(OTHER, "other", SPEC, CONFIG)
    made = []
    for i in range(5):
        made.append(_decision(store, to_executors=i + 1))
        _decision(store, OTHER)
        clock.advance(10)
    # Two at one instant: the later id is the newer.
    same = _decision(store, at=T0 + 40)

    listed = store.list_rescales(JOB)
    assert [r.rescale_id for r in listed] == [same.rescale_id] + [
        r.rescale_id for r in reversed(made)
    ]
    assert {r.job_id for r in listed} == {JOB}
    assert [r.to_executors for r in store.list_rescales(JOB, limit=2)] == [3, 5]
    assert [r.at for r in store.list_rescales(JOB, since=T0 + 20)] == [
        T0 + 40,
        T0 + 40,
        T0 + 30,
        T0 + 20,
    ]
    assert [r.at for r in store.list_rescales(JOB, limit=1, since=T0 + 20)] == [T0 + 40]
    assert store.list_rescales(JOB, since=T0 + 41) == []
    assert store.list_rescales(JOB, limit=0) == []
    with pytest.raises(InvalidInput, match=r"^limit"):
        store.list_rescales(JOB, limit=-1)


def test_update_rescale_to_in_use_sets_the_time(store: Store, clock: ManualClock) -> None:
    running_job(store)
    rec = _decision(store)

    clock.advance(42)
    used = store.update_rescale(rec.rescale_id, status="in_use")
    assert (used.status, used.in_use_at, used.seconds_to_in_use) == ("in_use", T0 + 42, 42.0)
    assert used.to_dict()["seconds_to_in_use"] == 42.0
    assert store.list_rescales(JOB) == [used]

    # The same status again changes only what is given; the time stays as recorded.
    clock.advance(5)
    again = store.update_rescale(rec.rescale_id, status="in_use", workers={"added": ["w1"]})
    assert (again.in_use_at, again.workers) == (T0 + 42, {"added": ["w1"], "removed": []})


def test_update_rescale_changes_only_what_is_given(store: Store, clock: ManualClock) -> None:
    running_job(store)
    rec = _decision(store, workers={"added": ["w1"], "removed": []})

    w = store.update_rescale(rec.rescale_id, workers={"added": ["w1", "w2"], "removed": []})
    assert (w.status, w.workers, w.error, w.in_use_at) == (
        "decided",
        {"added": ["w1", "w2"], "removed": []},
        None,
        None,
    )
    explicit = store.update_rescale(rec.rescale_id, status="in_use", in_use_at=T0 + 7.5)
    assert (explicit.in_use_at, explicit.workers) == (T0 + 7.5, w.workers)
    assert store.update_rescale(rec.rescale_id) == explicit


@pytest.mark.parametrize("end", ["failed", "superseded"])
def test_a_decision_ends_once(store: Store, end: str) -> None:
    running_job(store)
    rec = _decision(store)

    ended = store.update_rescale(
        rec.rescale_id, status=end, error="no worker came up" if end == "failed" else None
    )
    assert ended.status == end and ended.in_use_at is None
    with pytest.raises(InvalidTransition, match=f"rescale {rec.rescale_id} is {end}"):
        store.update_rescale(rec.rescale_id, status="in_use")
    with pytest.raises(InvalidTransition):
        store.update_rescale(rec.rescale_id, status="decided")
    assert store.list_rescales(JOB) == [ended]


def test_observed_and_bounds_rows_do_not_move(store: Store) -> None:
    running_job(store)
    seen = _decision(store, kind="observed", status="observed", policy="reactive", mode="reactive")

    with pytest.raises(InvalidTransition, match="may become nothing else"):
        store.update_rescale(seen.rescale_id, status="in_use")
    assert store.list_rescales(JOB) == [seen]


def test_an_unknown_rescale_is_rescale_not_found(store: Store) -> None:
    running_job(store)
    with pytest.raises(RescaleNotFound, match="rescale 999 not found") as info:
        store.update_rescale(999, status="in_use")
    assert info.value.rescale_id == 999


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"kind": "guess"}, "kind"),
        ({"status": "observed"}, "status"),
        ({"kind": "bounds", "status": "decided"}, "status"),
        ({"signals": "hot"}, "signals"),
        ({"signals": {"utilization": math.inf}}, "signals"),
        ({"workers": ["w1"]}, "workers"),
        ({"from_executors": -1}, "from_executors"),
        ({"to_executors": 1.5}, "to_executors"),
        ({"reason": None}, "reason"),
        ({"sender": 7}, "sender"),
    ],
)
def test_bad_rescales_are_refused_and_nothing_is_stored(
    store: Store, change: dict[str, object], field: str
) -> None:
    running_job(store)
    with pytest.raises(InvalidInput, match=f"^{field}:"):
        _decision(store, **change)
    assert store.list_rescales(JOB) == []


def test_update_rescale_refuses_bad_values(store: Store) -> None:
    running_job(store)
    rec = _decision(store)
    with pytest.raises(InvalidInput, match=r"^workers"):
        store.update_rescale(rec.rescale_id, workers="w1")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match=r"^error"):
        store.update_rescale(rec.rescale_id, status="failed", error=3)  # type: ignore[arg-type]
    assert store.list_rescales(JOB) == [rec]


def test_concurrent_rescales_get_distinct_ids(open_new: OpenStore) -> None:
    first = open_new()
    running_job(first)

    results = race(6, lambda i: _decision(open_new(), to_executors=i + 1))

    assert [r for r in results if isinstance(r, BaseException)] == []
    ids = sorted(r.rescale_id for r in results if isinstance(r, RescaleRecord))
    assert len(set(ids)) == 6
    assert sorted(r.rescale_id for r in first.list_rescales(JOB)) == ids


def test_rescales_survive_reopening_the_store(open_new: OpenStore, store_url: str) -> None:
    first = open_new()
    running_job(first)
    first.set_scaling(JOB, AUTO)
    rec = _decision(first)
    first.close()

    again = open_new()
    assert again.list_rescales(JOB) == [rec]
    assert again.get_job(JOB).scaling == AUTO
    rows = raw_rows(store_url, "SELECT scaling FROM jobs")
    assert [json.loads(r[0]) for r in rows] == [AUTO]


# --- migration of a store made before 0008 -------------------------------------------------


def test_a_store_made_before_scaling_migrates_with_its_rows(tmp_path: Path) -> None:
    """A store file written by the version before migration 8: its jobs get no scaling, its
    epochs no metrics, and rescales start from the first id."""
    import sqlite3

    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TABLE schema_migrations (version BIGINT PRIMARY KEY, applied_at DOUBLE PRECISION)"
    )
    for number, script in _sql.migrations():
        if number > 7:
            break
        for statement in _sql.split_statements(script):
            conn.execute(statement)
        conn.execute("INSERT INTO schema_migrations VALUES (?, 0)", (number,))
    conn.execute(
        "INSERT INTO jobs (job_id, name, state, spec, created_at, updated_at, uid) "
        "VALUES ('old-job', 'old', 'RUNNING', '{}', 123.5, 123.5, 'u1')"
    )
    conn.execute(
        "INSERT INTO epochs (job_id, epoch, control_version, state, pinned_by, decided_by, "
        "rows_in, final, pinned_at, decided_at, committed_at) "
        "VALUES ('old-job', 4, 0, 'COMMITTED', 1, 1, 10, 0, 120.0, 121.0, 122.0)"
    )
    conn.commit()
    conn.close()

    store = open_store(path, ManualClock(T0))
    try:
        old = JobId("old-job")
        job = store.get_job(old)
        assert (job.scaling, job.executor_target, job.resources) == (None, None, None)
        (epoch,) = store.recent_epochs([old], since=0)
        assert (epoch.epoch, epoch.duration_ms, epoch.backlog) == (4, None, None)
        store.set_epoch_metrics(old, Epoch(4), duration_ms=5.0)
        assert store.recent_epochs([old], since=0)[0].duration_ms == 5.0
        assert _decision(store, old).rescale_id == 1
    finally:
        store.close()
