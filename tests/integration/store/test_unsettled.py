"""The janitor's reads and writes of ended jobs (issue 39 item 3): a walk of the unsettled jobs
a slice at a time, ends settled in one write, every write fenced by the leader's token; and
the leader's one read of the live jobs with their current attempts."""

from __future__ import annotations

import pytest

from stoker.clock import ManualClock
from stoker.errors import NotLeader
from stoker.store import Store
from stoker.types import AttemptNo, AttemptState, JobKind, JobState, job_id
from tests.integration.store.support import OWNER, TTL

MANAGED = {"kind": "app", "entrypoint": "/srv/app.py"}
RUN = {"entrypoint": "/srv/pipeline.py"}  # `stoker run`: no kind


def _ended(store: Store, clock: ManualClock, name: str, spec: dict[str, str]) -> float:
    clock.advance(1)
    jid = job_id(name)
    store.create_job(jid, name, spec, {})
    store.set_job_state(jid, JobState.RUNNING)
    store.set_job_state(jid, JobState.FINISHED)
    return store.get_job(jid).updated_at


def _walk(store: Store, limit: int) -> list[list[str]]:
    pages, after = [], None
    while True:
        page = store.unsettled_page(after, limit)
        pages.append([j.job_id for j in page])
        if len(page) < limit:
            return pages
        after = (page[-1].updated_at, page[-1].job_id)


def test_the_walk_reads_the_unsettled_ended_jobs_in_slices_in_end_order(
    store: Store, clock: ManualClock
) -> None:
    ends = {n: _ended(store, clock, n, MANAGED) for n in ("a", "b", "c", "d", "e")}
    store.create_job(job_id("live"), "live", MANAGED, {})
    store.create_job(job_id("app"), "app", {"kind": "application"}, {}, kind=JobKind.APPLICATION)
    store.set_job_state(job_id("app"), JobState.CANCELED)
    store.set_resolved(job_id("b"))
    store.set_settled(job_id("b"), ends["b"])
    clock.advance(1000)
    store.set_resolved(job_id("c"))  # resolved long after its end: still walked (to settle)

    assert _walk(store, 2) == [["a", "c"], ["d", "e"], []]
    assert _walk(store, 10) == [["a", "c", "d", "e"]]


def test_a_slice_comes_with_the_attempts_of_its_jobs(store: Store, clock: ManualClock) -> None:
    for name in ("a", "b", "c"):
        clock.advance(1)
        store.create_job(job_id(name), name, MANAGED, {})
    for name in ("a", "c"):
        store.start_attempt(job_id(name), OWNER, TTL, AttemptNo(0))
        store.attempt_failed(job_id(name), AttemptNo(1), "x", clock.now())
        store.start_attempt(job_id(name), OWNER, TTL, AttemptNo(1))
        store.finish_attempt(job_id(name), AttemptNo(2), AttemptState.FAILED, JobState.FAILED)
    store.set_job_state(job_id("b"), JobState.CANCELED)

    jobs, attempts = store.unsettled_slice(None, 2)
    assert [j.job_id for j in jobs] == ["a", "b"]  # ended at once: by id
    assert {j: [a.attempt for a in atts] for j, atts in attempts.items()} == {"a": [1, 2]}
    assert attempts[job_id("a")] == store.list_attempts(job_id("a"))
    jobs, attempts = store.unsettled_slice((jobs[-1].updated_at, jobs[-1].job_id), 2)
    assert [j.job_id for j in jobs] == ["c"]
    assert list(attempts) == ["c"]


def test_settled_ends_leave_the_walk_until_their_job_ends_again(
    store: Store, clock: ManualClock
) -> None:
    ends = {n: _ended(store, clock, n, s) for n, s in (("run", RUN), ("new", MANAGED))}
    ends["old"] = _ended(store, clock, "old", MANAGED)

    # Not resolved (a `stoker run` job whose runner did it, or not): settled all the same.
    assert store.settle_ends([(job_id("run"), ends["run"]), (job_id("old"), ends["old"] - 1)]) == 1
    assert store.get_job(job_id("run")).resolved_at is None
    # No driver ever ran: resolved and settled in the same write.
    assert store.settle_ends([(job_id("new"), ends["new"])], resolve=True) == 1
    assert store.get_job(job_id("new")).resolved_at == clock.now()
    assert _walk(store, 10) == [["old"]]  # another end than the one it saw: left

    clock.advance(5)
    store.restart_job(job_id("run"), RUN)
    store.set_job_state(job_id("run"), JobState.FAILED)
    assert _walk(store, 10) == [["old", "run"]]  # a new end is walked again


def test_a_janitor_write_with_an_old_token_is_refused(store: Store, clock: ManualClock) -> None:
    """The janitor of a manager replaced without noticing changes nothing: its writes carry
    the fencing token it led with, and the store refuses them once another holds the lease."""
    end = _ended(store, clock, "done", MANAGED)
    jid = job_id("done")
    old = store.acquire_leadership("manager-a", "http://a", 3.0)
    assert old is not None
    assert store.settle_ends([], leader=("manager-a", old.token)) == 0
    store.resign_leadership("manager-a", old.token)
    new = store.acquire_leadership("manager-b", "http://b", 3.0)
    assert new is not None and new.token != old.token

    with pytest.raises(NotLeader):
        store.settle_ends([(jid, end)], resolve=True, leader=("manager-a", old.token))
    store.set_resolved(jid)
    with pytest.raises(NotLeader):
        store.set_settled(jid, end, leader=("manager-a", old.token))
    assert _walk(store, 10) == [["done"]]  # nothing changed

    assert store.set_settled(jid, end, leader=("manager-b", new.token))
    assert _walk(store, 10) == [[]]


def test_the_live_jobs_come_with_their_current_attempts_in_one_read(
    store: Store, clock: ManualClock
) -> None:
    for name in ("waiting", "running", "restarted", "ended"):
        clock.advance(1)
        store.create_job(job_id(name), name, MANAGED, {})
    for name in ("running", "restarted", "ended"):
        store.start_attempt(job_id(name), OWNER, TTL, AttemptNo(0))
    store.attempt_failed(job_id("restarted"), AttemptNo(1), "x", clock.now())
    store.start_attempt(job_id("restarted"), OWNER, TTL, AttemptNo(1))
    store.finish_attempt(job_id("ended"), AttemptNo(1), AttemptState.FINISHED, JobState.FINISHED)

    live, attempts = store.live_jobs_and_attempts()

    assert [j.job_id for j in live] == ["waiting", "running", "restarted"]
    assert {j: (a.attempt, a.state) for j, a in attempts.items()} == {
        "running": (1, AttemptState.RUNNING),
        "restarted": (2, AttemptState.RUNNING),
    }
    assert attempts[job_id("running")] == store.get_attempt(job_id("running"), AttemptNo(1))
