"""The store contract for savepoint lineage (migration 0019): which job each savepoint was
restored into. Run against SQLite and PostgreSQL alike (fixtures in conftest.py)."""

from __future__ import annotations

from dataclasses import replace

from stoker.store import SavepointRestore, Store
from stoker.types import Epoch, JobId
from tests.integration.store.support import OpenStore, race

FIRST = SavepointRestore(
    savepoint="a/u1/c0ffee",
    uid="u1",
    job_id=JobId("b"),
    store="sqlite:////s/b/store.db",
    state_dir="/s/b",
    from_job_id=JobId("a"),
    from_uid="u1",
    epoch=Epoch(4),
    path="/sp/one",
    fork=False,
    sinks=({"name": "postgres:ids", "target": "table ids of db"},),
    restored_at=1000.0,
)


def test_a_savepoint_goes_on_under_its_uid_once(store: Store) -> None:
    stored, new = store.record_restore(FIRST)
    assert (stored, new) == (FIRST, True)
    # Again (a rerun of the same restore): the row there, not a second one.
    assert store.record_restore(replace(FIRST, restored_at=2000.0)) == (FIRST, False)
    # Another job under the same uid: refused by the key, the first one's row comes back.
    other = replace(FIRST, job_id=JobId("c"), state_dir="/s/c", restored_at=3000.0)
    assert store.record_restore(other) == (FIRST, False)
    # A fork (a uid of its own) is a row of its own.
    fork = replace(other, uid="u2", fork=True, sinks=())
    assert store.record_restore(fork) == (fork, True)

    assert store.restores_of_savepoint("a/u1/c0ffee") == [FIRST, fork]
    assert store.restores_of_savepoint("a/u1/other") == []
    assert store.restores_of_uid("u1") == [FIRST]
    assert store.restores_of_uid("u2") == [fork]
    assert store.restores_from_job(JobId("a"), "u1") == [FIRST, fork]
    assert store.restores_from_job(JobId("a"), "u9") == []
    assert FIRST.is_job("b", "/s/b") and not FIRST.is_job("b", "/s/elsewhere")


def test_two_restores_racing_under_one_uid_make_one_row(open_new: OpenStore) -> None:
    def restore(i: int) -> tuple[SavepointRestore, bool]:
        s = open_new()
        return s.record_restore(replace(FIRST, job_id=JobId(f"j{i}"), state_dir=f"/s/j{i}"))

    results = race(6, restore)
    assert [r for r in results if isinstance(r, BaseException)] == []
    won = [r for r in results if not isinstance(r, BaseException) and r[1]]
    assert len(won) == 1
    assert all(r[0] == won[0][0] for r in results if not isinstance(r, BaseException))
