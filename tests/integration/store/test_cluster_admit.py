"""The store's contract for a host's cluster budget (issue 39 item 7): checked and recorded in
one transaction (``admit`` of ``create_cluster`` and ``change_cluster_processes``), one such
transaction at a time across managers (SQLite's write transaction, PostgreSQL's advisory lock),
and counting the live clusters of the host and those of no host (``host_clusters``).

Run against SQLite and PostgreSQL alike (fixtures in conftest.py). The budget here is a plain
callable: the store knows none (the manager's ``HostBudget`` makes one, ``test_cluster_budget``).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

import pytest

from stoker.errors import ClusterConflict, InvalidInput
from stoker.store import ClusterProcess, Store
from stoker.types import ClusterState
from tests.integration.store.support import OpenStore, race, raw_rows

SPEC = {"kind": "standalone", "workers": 1, "cores": 1, "memory": "1g"}


def _running(store: Store, name: str, host: str | None) -> None:
    store.create_cluster(name, "session", SPEC, host=host)
    worker = {"role": "worker", "id": "worker-1", "address": "127.0.0.2", "cores": 1}
    store.update_cluster(
        name,
        state=ClusterState.RUNNING,
        master_url="spark://127.0.0.1:7077",
        web_url="http://127.0.0.1:8080",
        processes=[ClusterProcess.from_json({**worker, "memory": "1g"})],
    )


def _at_most(clusters_: int, workers: int = 1000) -> Callable[[list[Any]], None]:
    """A budget of the store's contract: this many live clusters and workers in all."""

    def admit(live: list[Any]) -> None:
        n = sum(1 for p in (p for c in live for p in c.processes) if p.role == "worker")
        if len(live) >= clusters_ or n >= workers:
            raise ClusterConflict(f"{len(live)} clusters and {n} workers in use: full")

    return admit


def _after_all_read(n: int, admit: Callable[[list[Any]], None]) -> Callable[[list[Any]], None]:
    """``admit``, run once all ``n`` callers have read the host's clusters if they can: with
    the budget's lock only one of them can (the others wait for its transaction), so the first
    gives up waiting after a while and the rest do not wait. Without the lock all of them
    would read room for one more before any records its cluster."""
    barrier = threading.Barrier(n, timeout=2)

    def admit_together(live: list[Any]) -> None:
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait()
        admit(live)

    return admit_together


def test_create_cluster_admits_at_most_the_budget_when_managers_race(
    store: Store, open_new: OpenStore
) -> None:
    stores = [open_new() for _ in range(8)]
    store.create_cluster("theirs", "session", SPEC, host="host-b")  # another host's
    admit = _after_all_read(8, _at_most(3))

    results = race(
        8,
        lambda i: stores[i].create_cluster(f"c{i}", "session", SPEC, host="host-a", admit=admit),
    )

    created = [r for r in results if isinstance(r, tuple) and r[1]]
    assert len(created) == 3, results
    assert [str(r) for r in results if not isinstance(r, tuple)] == [
        "3 clusters and 0 workers in use: full"
    ] * 5
    assert {r[0].host for r in created} == {"host-a"}
    assert len(store.host_clusters("host-a")) == 3


def test_create_cluster_of_a_name_taken_is_returned_without_a_check(store: Store) -> None:
    first, created = store.create_cluster("c", "session", SPEC, host="host-a")
    assert created and first.host == "host-a"

    def refuse(live: list[Any]) -> None:
        raise AssertionError("no check for a cluster that is not created")

    again, created = store.create_cluster("c", "session", SPEC, host="host-a", admit=refuse)
    assert (again, created) == (first, False)
    with pytest.raises(ClusterConflict, match="full"):
        store.create_cluster("d", "session", SPEC, host="host-a", admit=_at_most(1))
    assert [c.name for c in store.list_clusters()] == ["c"]  # nothing written


def test_a_budget_check_names_its_host(store: Store) -> None:
    with pytest.raises(InvalidInput, match="host"):
        store.create_cluster("c", "session", SPEC, admit=_at_most(9))
    store.create_cluster("c", "session", SPEC)
    with pytest.raises(InvalidInput, match="host"):
        store.change_cluster_processes("c", put=[], host=" ", admit=_at_most(9))
    assert store.get_cluster("c").host is None


def test_host_clusters_are_the_live_ones_of_the_host_and_of_no_host(
    store: Store, store_url: str
) -> None:
    _running(store, "a-running", "host-a")
    store.create_cluster("a-starting", "session", SPEC, host="host-a")
    _running(store, "a-stopped", "host-a")
    store.update_cluster("a-stopped", state=ClusterState.STOPPING)
    store.update_cluster("a-stopped", state=ClusterState.STOPPED)
    store.create_cluster("a-failed", "session", SPEC, host="host-a")
    store.update_cluster("a-failed", state=ClusterState.FAILED, error="did not start")
    _running(store, "b-running", "host-b")
    _running(store, "older-code", None)
    assert raw_rows(store_url, "SELECT host FROM clusters WHERE name = 'older-code'") == [(None,)]

    assert sorted(c.name for c in store.host_clusters("host-a")) == [
        "a-running",
        "a-starting",
        "older-code",
    ]
    assert sorted(c.name for c in store.host_clusters("host-b")) == ["b-running", "older-code"]
    assert [c.name for c in store.host_clusters("host-c")] == ["older-code"]


def test_worker_changes_admit_at_most_the_budget_when_managers_race(
    store: Store, open_new: OpenStore
) -> None:
    """Eight managers each reserve a worker of one cluster at once (a placeholder, put in
    the transaction that checks): a budget of 3 workers, one of them running, takes two."""
    _running(store, "c", "host-a")
    stores = [open_new() for _ in range(8)]
    spare = ClusterProcess.from_json({"role": "worker", "cores": 1, "memory": "1g"})
    admit = _after_all_read(8, _at_most(9, workers=3))

    results = race(
        8,
        lambda i: stores[i].change_cluster_processes(
            "c",
            put=[ClusterProcess.from_json({**spare.to_json(), "id": f"reserved-{i}"})],
            host="host-a",
            admit=admit,
        ),
    )

    assert len([r for r in results if not isinstance(r, BaseException)]) == 2, results
    assert [str(r) for r in results if isinstance(r, BaseException)] == [
        "1 clusters and 3 workers in use: full"
    ] * 6
    ids = sorted(p.id for p in store.get_cluster("c").processes)
    assert len(ids) == 3 and ids[2] == "worker-1", ids
    assert all(i.startswith("reserved-") for i in ids[:2]), ids
