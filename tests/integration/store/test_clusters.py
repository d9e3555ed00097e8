"""The store contract for clusters (issue 10): insert-if-absent, the transition table, the
processes a later leader stops, listing and deleting.

Run against SQLite and PostgreSQL alike (fixtures in conftest.py).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from stoker.clock import ManualClock
from stoker.errors import (
    ApplicationNotFound,
    ClusterConflict,
    ClusterNotFound,
    InvalidInput,
    InvalidTransition,
)
from stoker.store import ClusterProcess, ClusterRecord, Store
from stoker.types import CLUSTER_TRANSITIONS, ClusterState, JobId, JobKind
from tests.integration.store.support import (
    APP,
    APP_SPEC,
    CONFIG,
    JOB,
    SPEC,
    T0,
    OpenStore,
    race,
)

SESSION = "shared-1"
SESSION_SPEC = {"kind": "standalone", "workers": 2, "cores": 1, "memory": "1g"}
MASTER = ClusterProcess(
    role="master",
    id="master",
    host="box-1",
    address="127.0.0.1",
    pid=4242,
    pid_started="918273",
    port=40001,
    web_port=40002,
    log="/state/clusters/shared-1/master.log",
    cores=0,
    memory="",
)
WORKER = replace(
    MASTER,
    role="worker",
    id="worker-1",
    address="127.0.0.2",
    pid=4343,
    port=40003,
    web_port=40004,
    log="/state/clusters/shared-1/worker-1.log",
    cores=1,
    memory="1g",
)
# The moves that bring a new (STARTING) cluster to each state.
PATHS: dict[ClusterState, list[ClusterState]] = {
    ClusterState.STARTING: [],
    ClusterState.RUNNING: [ClusterState.RUNNING],
    ClusterState.STOPPING: [ClusterState.RUNNING, ClusterState.STOPPING],
    ClusterState.FAILED: [ClusterState.FAILED],
    ClusterState.STOPPED: [ClusterState.STOPPING, ClusterState.STOPPED],
}


def _cluster_in(store: Store, state: ClusterState, name: str = SESSION) -> ClusterRecord:
    rec, _ = store.create_cluster(name, "session", SESSION_SPEC)
    for step in PATHS[state]:
        rec = store.update_cluster(name, state=step)
    return rec


def test_create_cluster_returns_a_new_starting_record(store: Store) -> None:
    rec, created = store.create_cluster(SESSION, "session", SESSION_SPEC)

    assert created is True
    assert rec == ClusterRecord(
        name=SESSION,
        kind="session",
        owner_app=None,
        spec=SESSION_SPEC,
        state=ClusterState.STARTING,
        master_url=None,
        web_url=None,
        processes=[],
        error=None,
        created_at=T0,
        updated_at=T0,
    )
    assert store.get_cluster(SESSION) == rec
    assert rec.to_dict()["state"] == "STARTING"


def test_create_cluster_twice_returns_the_first(store: Store, clock: ManualClock) -> None:
    first, _ = store.create_cluster(SESSION, "session", SESSION_SPEC)
    clock.advance(3)

    again, created = store.create_cluster(SESSION, "session", {"kind": "standalone"})

    assert (again, created) == (first, False)


def test_an_app_cluster_belongs_to_an_existing_application(store: Store) -> None:
    store.create_job(APP, "app-1", APP_SPEC, {}, kind=JobKind.APPLICATION)

    rec, created = store.create_cluster(f"app-{APP}", "app", SESSION_SPEC, owner_app=APP)

    assert created is True
    assert (rec.kind, rec.owner_app) == ("app", APP)


@pytest.mark.parametrize(
    ("name", "kind", "owner", "error", "field"),
    [
        ("", "session", None, InvalidInput, "name"),
        ("c", "cloud", None, InvalidInput, "kind"),
        ("c", "app", None, InvalidInput, "owner_app"),
        ("c", "session", APP, InvalidInput, "owner_app"),
        ("c", "app", JobId("no-such-app"), ApplicationNotFound, None),
        ("c", "app", JOB, ApplicationNotFound, None),  # a lone job is no application
    ],
)
def test_a_cluster_no_manager_could_tend_is_refused(
    store: Store,
    name: str,
    kind: str,
    owner: JobId | None,
    error: type[Exception],
    field: str | None,
) -> None:
    store.create_job(APP, "app-1", APP_SPEC, {}, kind=JobKind.APPLICATION)
    store.create_job(JOB, "orders", SPEC, CONFIG)

    with pytest.raises(error) as info:
        store.create_cluster(name, kind, SESSION_SPEC, owner_app=owner)

    if field is not None:
        assert getattr(info.value, "field", None) == field
    assert store.list_clusters(include_stopped=True) == []


def test_get_unknown_cluster_raises_cluster_not_found(store: Store) -> None:
    with pytest.raises(ClusterNotFound) as info:
        store.get_cluster("nope")
    assert info.value.name == "nope"
    with pytest.raises(ClusterNotFound):
        store.update_cluster("nope", state=ClusterState.RUNNING)
    with pytest.raises(ClusterNotFound):
        store.delete_cluster("nope")


def test_update_cluster_records_its_processes_as_they_were_given(
    store: Store, open_new: OpenStore, clock: ManualClock
) -> None:
    store.create_cluster(SESSION, "session", SESSION_SPEC)
    clock.advance(2)
    store.update_cluster(SESSION, processes=[MASTER])
    clock.advance(2)

    rec = store.update_cluster(
        SESSION,
        state=ClusterState.RUNNING,
        master_url="spark://127.0.0.1:40001",
        web_url="http://127.0.0.1:40002",
        processes=[MASTER, WORKER],
    )

    assert (rec.state, rec.master_url, rec.web_url) == (
        ClusterState.RUNNING,
        "spark://127.0.0.1:40001",
        "http://127.0.0.1:40002",
    )
    assert rec.processes == [MASTER, WORKER]
    assert (rec.created_at, rec.updated_at) == (T0, T0 + 4)
    assert open_new().get_cluster(SESSION) == rec  # read back by another connection


def test_update_cluster_leaves_what_is_not_given(store: Store) -> None:
    store.create_cluster(SESSION, "session", SESSION_SPEC)
    store.update_cluster(
        SESSION,
        state=ClusterState.RUNNING,
        master_url="spark://127.0.0.1:40001",
        web_url="http://127.0.0.1:40002",
        processes=[MASTER, WORKER],
    )

    rec = store.update_cluster(SESSION, processes=[MASTER])
    failed = store.update_cluster(SESSION, state=ClusterState.FAILED, error="master lost")
    same = store.update_cluster(SESSION)

    assert (rec.state, rec.master_url, rec.processes) == (
        ClusterState.RUNNING,
        "spark://127.0.0.1:40001",
        [MASTER],
    )
    assert (failed.state, failed.error, failed.processes) == (
        ClusterState.FAILED,
        "master lost",
        [MASTER],
    )
    assert same == failed


@pytest.mark.parametrize("src", list(ClusterState))
@pytest.mark.parametrize("dst", list(ClusterState))
def test_cluster_moves_follow_the_transition_table(
    store: Store, src: ClusterState, dst: ClusterState
) -> None:
    before = _cluster_in(store, src)

    if dst == src or dst in CLUSTER_TRANSITIONS[src]:
        assert store.update_cluster(SESSION, state=dst).state == dst
    else:
        with pytest.raises(InvalidTransition, match=f"cluster {SESSION!r}"):
            store.update_cluster(SESSION, state=dst, processes=[WORKER], error="x")
        assert store.get_cluster(SESSION) == before  # nothing of the refused update stayed


def test_list_clusters_leaves_stopped_ones_out_unless_asked(
    store: Store, clock: ManualClock
) -> None:
    for name, state in [
        ("a", ClusterState.RUNNING),
        ("b", ClusterState.STOPPED),
        ("c", ClusterState.FAILED),
        ("d", ClusterState.STARTING),
    ]:
        _cluster_in(store, state, name)
        clock.advance(1)

    assert [c.name for c in store.list_clusters()] == ["a", "c", "d"]
    assert [c.name for c in store.list_clusters(include_stopped=True)] == ["a", "b", "c", "d"]


@pytest.mark.parametrize("state", [s for s in ClusterState if s != ClusterState.STOPPED])
def test_only_a_stopped_cluster_is_deleted(store: Store, state: ClusterState) -> None:
    before = _cluster_in(store, state)

    with pytest.raises(InvalidTransition, match="only a STOPPED cluster"):
        store.delete_cluster(SESSION)

    assert store.get_cluster(SESSION) == before


def test_a_deleted_cluster_is_gone_and_its_name_free(store: Store, clock: ManualClock) -> None:
    _cluster_in(store, ClusterState.STOPPED)

    store.delete_cluster(SESSION)

    with pytest.raises(ClusterNotFound):
        store.get_cluster(SESSION)
    assert store.list_clusters(include_stopped=True) == []
    clock.advance(1)
    again, created = store.create_cluster(SESSION, "session", SESSION_SPEC)
    assert (created, again.state, again.created_at) == (True, ClusterState.STARTING, T0 + 1)


def test_concurrent_create_cluster_has_exactly_one_creator(
    store: Store, open_new: OpenStore
) -> None:
    stores = [open_new() for _ in range(8)]

    results = race(8, lambda i: stores[i].create_cluster(SESSION, "session", {"n": i}))

    assert [r for r in results if isinstance(r, BaseException)] == []
    created = [r for r in results if isinstance(r, tuple) and r[1]]
    assert len(created) == 1
    assert all(isinstance(r, tuple) and r[0] == created[0][0] for r in results)
    assert store.get_cluster(SESSION) == created[0][0]


def test_concurrent_worker_changes_keep_each_others_processes(
    store: Store, open_new: OpenStore
) -> None:
    """Issue 21, item 8: a worker list read earlier and written back whole lost the worker
    another manager had added meanwhile. Eight managers each add a worker at once, then four
    of them remove theirs at once: every change is kept."""
    store.create_cluster(SESSION, "session", SESSION_SPEC)
    store.update_cluster(SESSION, state=ClusterState.RUNNING, processes=[MASTER])
    stores = [open_new() for _ in range(8)]
    workers = [
        replace(WORKER, id=f"worker-{i}", address=f"127.0.0.{i + 2}", pid=5000 + i)
        for i in range(8)
    ]

    added = race(8, lambda i: stores[i].change_cluster_processes(SESSION, put=[workers[i]]))
    assert [r for r in added if isinstance(r, BaseException)] == []
    ids = [p.id for p in store.get_cluster(SESSION).processes]
    assert sorted(ids) == sorted(["master", *(w.id for w in workers)])

    dropped = race(4, lambda i: stores[i].change_cluster_processes(SESSION, drop=[f"worker-{i}"]))
    assert [r for r in dropped if isinstance(r, BaseException)] == []
    ids = [p.id for p in store.get_cluster(SESSION).processes]
    assert sorted(ids) == sorted(["master", *(w.id for w in workers[4:])])

    # The same id, recorded again by the process it names (its port now known): replaced.
    seen = replace(workers[5], port=41000)
    rec = store.change_cluster_processes(SESSION, put=[seen])
    assert [p for p in rec.processes if p.id == "worker-5"] == [seen]
    # The same id as another live process (two managers picked it): refused, nothing changed.
    other = replace(workers[5], pid=6000, pid_started="1")
    with pytest.raises(ClusterConflict, match="worker-5 was recorded meanwhile"):
        store.change_cluster_processes(SESSION, put=[other])
    assert store.get_cluster(SESSION) == rec
    with pytest.raises(ClusterNotFound):
        store.change_cluster_processes("nosuch", drop=["worker-1"])
    for st in stores:
        st.close()
