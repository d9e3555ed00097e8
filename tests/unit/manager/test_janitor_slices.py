"""The janitor works in bounded slices (issue 39 item 3): after an upgrade over thousands of
unsettled ended jobs the leader's first tick judges one slice, not all of them, the rest
follows over the next ticks; leadership is checked between slices, and a janitor whose lease
was taken changes nothing. Real SQLite store, real leader lease; counts, never times."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from stoker.manager import Supervisor, SupervisorConfig
from stoker.manager.janitor import Janitor, JanitorConfig
from stoker.manager.leader import LeaderLease
from stoker.store import NewJob, Store, open_store
from stoker.types import job_id

MANAGED = {"kind": "app", "entrypoint": "/nonexistent/app.py", "args": [], "conf": {}}
RUN = {"entrypoint": "/srv/pipeline.py"}  # `stoker run`: its runner resolves it, not the janitor
SLICE = 100


def _upgraded_store(path: Path, managed: int, runs: int) -> Store:
    """Ended jobs none of which is settled, as a store migrated from before settling has them:
    ``managed`` of a manager's (no driver ever ran: owed a resolution, no process needed) and
    ``runs`` of ``stoker run`` (not the janitor's)."""
    store = open_store(path)
    jobs: list[NewJob] = [(job_id(f"m-{i:05d}"), "m", MANAGED, {}) for i in range(managed)]
    jobs += [(job_id(f"r-{i:05d}"), "r", RUN, {}) for i in range(runs)]
    store.create_jobs(jobs)
    db = sqlite3.connect(path)
    try:
        db.execute("UPDATE jobs SET state = 'FINISHED', settled = 0, resolved_at = NULL")
        db.commit()
    finally:
        db.close()
    return store


def _unsettled(store: Store) -> int:
    return len(store.unsettled_page(None, 1_000_000))


def _leading(store: Store, holder: str) -> LeaderLease:
    lease = LeaderLease(store, holder, "", 3.0)
    assert lease.hold()
    return lease


def _take_over(store: Store, holder: str) -> None:
    """Another manager takes the lease, as one that saw it unrenewed for a whole TTL does."""
    current = store.get_leader()
    assert current is not None
    assert store.acquire_leadership(holder, "", 3.0, current.seen) is not None


def test_the_first_tick_after_an_upgrade_judges_one_slice_and_the_rest_follows(
    tmp_path: Path,
) -> None:
    store = _upgraded_store(tmp_path / "store.db", managed=2_000, runs=1_000)
    sup = Supervisor(store, SupervisorConfig(state_dir=tmp_path, store_url=store.url))
    sup.janitor.config = JanitorConfig(every=0.0, slice=SLICE, budget=0.0)

    sup.step()

    assert sup.is_leader
    assert sup.janitor.slices == [SLICE]  # one slice, not 3,000 jobs
    assert _unsettled(store) == 3_000 - SLICE
    ticks = 1
    while _unsettled(store):
        sup.step()
        ticks += 1
        assert sup.janitor.slices == [SLICE]
    assert ticks == 3_000 // SLICE
    # The manager's jobs are resolved; the `stoker run` jobs are left to their runners, and
    # no later walk reads any of them again.
    assert store.get_job(job_id("m-01999")).resolved_at is not None
    assert store.get_job(job_id("r-00999")).resolved_at is None
    sup.step()
    assert sup.janitor.slices == [0]


def test_a_tick_goes_on_while_its_budget_lasts_and_leads_then_stops_when_the_lease_is_lost(
    tmp_path: Path,
) -> None:
    store = _upgraded_store(tmp_path / "store.db", managed=1_000, runs=0)
    asked: list[bool] = []

    class Watched(LeaderLease):
        """The real lease; another manager takes it just before the third look."""

        def confirm(self) -> bool:
            if len(asked) == 2:
                _take_over(store, "manager-b")  # between the third slice and the fourth
            asked.append(super().confirm())
            return asked[-1]

    lease = Watched(store, "manager-a", "", 3.0)
    assert lease.hold()
    janitor = Janitor(
        store, tmp_path, store.url, JanitorConfig(every=0.0, slice=SLICE, budget=3600.0), lease
    )

    janitor.step()

    assert asked == [True, True, False]
    assert janitor.slices == [SLICE] * 3
    assert not lease.held
    assert _unsettled(store) == 1_000 - 3 * SLICE
    leader = store.get_leader()
    assert leader is not None and leader.holder == "manager-b"


def test_a_janitor_whose_lease_was_taken_settles_nothing(tmp_path: Path) -> None:
    """Fenced: its manager still believes it leads (it renewed a moment ago), but its write
    carries the old token and the store refuses it."""
    store = _upgraded_store(tmp_path / "store.db", managed=300, runs=300)
    lease = _leading(store, "manager-a")
    janitor = Janitor(
        store, tmp_path, store.url, JanitorConfig(every=0.0, slice=SLICE, budget=0.0), lease
    )
    janitor.step()
    assert janitor.slices == [SLICE]
    _take_over(store, "manager-b")
    assert lease.held  # it has not noticed

    janitor.step()

    assert janitor.slices == []
    assert not lease.held
    assert _unsettled(store) == 600 - SLICE


def test_a_supervisor_whose_janitor_found_the_lease_lost_tends_no_job(tmp_path: Path) -> None:
    store = _upgraded_store(tmp_path / "store.db", managed=300, runs=0)
    sup = Supervisor(store, SupervisorConfig(state_dir=tmp_path, store_url=store.url))
    sup.janitor.config = JanitorConfig(every=0.0, slice=SLICE, budget=0.0)
    sup.step()
    assert sup.is_leader
    _take_over(store, "manager-b")
    live = job_id("live")
    store.create_job(live, "live", MANAGED, {})

    sup.step()  # the janitor's write is refused: the tick ends there

    assert not sup.is_leader
    assert store.get_job(live).current_attempt == 0  # not started by a manager that lost
