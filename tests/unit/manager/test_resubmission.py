"""Submitting a job id again (issue 21, item 11): the same spec is idempotent whatever the
job's state, so a client may retry a submission whose answer it lost; running an ended job
again is asked for explicitly. A real SQLite store, a real JobManager, no driver."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from stoker.errors import JobConflict, JobTerminal
from stoker.manager import JobManager
from stoker.store import open_store
from stoker.types import JobState


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[tuple[JobManager, Path]]:
    app = tmp_path / "apps" / "app.py"
    app.parent.mkdir()
    app.write_text("print('never run here')\n")
    m = JobManager(open_store(f"sqlite:///{tmp_path / 'store.db'}"), tmp_path, [app.parent])
    try:
        yield m, app
    finally:
        m.close()
        m.store.close()


def test_the_same_submission_returns_the_job_live_or_ended(
    manager: tuple[JobManager, Path],
) -> None:
    m, app = manager
    first = m.submit("j", str(app), args=["a"])
    assert (first.outcome, first.job.state) == ("created", JobState.CREATED)
    assert m.submit("j", str(app), args=["a"]).outcome == "duplicate"
    with pytest.raises(JobConflict) as live:
        m.submit("j", str(app), args=["b"])
    assert "args: ['a'] (live) vs ['b'] (submitted)" in live.value.difference

    m.store.request_cancel(first.job.job_id)  # CREATED: it ends CANCELED at once
    # A retry of the first submission (its answer lost): the ended job, nothing started.
    again = m.submit("j", str(app), args=["a"])
    assert (again.outcome, again.job.state) == ("duplicate", JobState.CANCELED)
    assert again.job.updated_at == m.store.get_job(first.job.job_id).updated_at
    # The same from the event loop's path (the REST route's).
    loop = asyncio.run(m.submit_async("j", str(app), args=["a"]))
    assert (loop.outcome, loop.job.state) == ("duplicate", JobState.CANCELED)

    # Another spec on an ended job: neither the same submission nor a restart.
    with pytest.raises(JobTerminal) as ended:
        m.submit("j", str(app), args=["b"])
    assert ended.value.state == "CANCELED"
    assert ended.value.difference == "args: ['a'] (ended) vs ['b'] (submitted)"
    assert "has ended in state CANCELED and was submitted with another spec" in str(ended.value)
    assert m.store.get_job(first.job.job_id).state == JobState.CANCELED  # nothing changed

    # Running it again is explicit, with either spec.
    res = m.submit("j", str(app), args=["b"], restart=True)
    assert (res.outcome, res.job.state) == ("restarted", JobState.RESTARTING)
    assert res.job.spec["args"] == ["b"]


def test_a_difference_reads_as_a_person_would_write_it() -> None:
    """Issue 23 item 7: a refusal read ``config: None (live) vs {'mult': 4}``."""
    from stoker.manager.submit import spec_difference

    assert spec_difference({"args": []}, {"args": [], "config": {"mult": 4}}) == (
        "config: not set (live) vs mult=4 (submitted)"
    )
    assert spec_difference({"conf": {"a.b": "1"}}, {"conf": {}}) == (
        "conf: a.b=1 (live) vs none (submitted)"
    )
    # What the driver recorded (the trigger it runs with) is no part of the submission.
    assert spec_difference({"args": [], "trigger_s": 0.5}, {"args": []}) is None


def test_a_job_with_the_former_default_strategy_is_the_same_job_submitted_without_one(
    manager: tuple[JobManager, Path],
) -> None:
    """Specs store the strategy resolved: a job created before the default became
    exponential-delay holds fixed-delay 3 x 1 s (what this explicit strategy stores too). A
    retry of its submission, which gives no strategy, finds it rather than a conflict, and the
    job keeps its strategy; any other difference of strategy is still one."""
    from stoker.restart import DEFAULT_STRATEGY, FORMER_DEFAULT

    m, app = manager
    former = {"strategy": "fixed-delay", "attempts": 3, "delay": 1}
    old = m.submit("old", str(app), restart_strategy=former)
    assert old.job.spec["restart_strategy"] == FORMER_DEFAULT.to_dict()
    again = m.submit("old", str(app))
    assert again.outcome == "duplicate"
    assert again.job.spec["restart_strategy"] == FORMER_DEFAULT.to_dict()

    new = m.submit("new", str(app))
    assert new.job.spec["restart_strategy"] == DEFAULT_STRATEGY.to_dict()
    with pytest.raises(JobConflict) as other:
        m.submit("new", str(app), restart_strategy=former)
    assert other.value.difference.startswith("restart_strategy: ")
    with pytest.raises(JobConflict):
        m.submit("old", str(app), restart_strategy={"strategy": "fixed-delay", "attempts": 4})
