"""AttemptRun's phases in order, on a real SQLite store with Spark, the sources and the query
stood in for: what each way a run ends leaves in the store (no Spark started)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from stoker.errors import CheckpointBehind, InvalidSink, JobFailed, StaleAttempt
from stoker.runtime.job import attempt_run, opening
from stoker.runtime.job.plan import RunOptions, plan_job
from stoker.runtime.job.watchdog import ProgressWatchdog
from stoker.runtime.launch import LaunchContext
from stoker.store import Owner, open_store
from stoker.types import AttemptNo, AttemptState, Epoch, JobId, JobState


class FakeHandle:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.held = False

    def start(self) -> None: ...


@pytest.fixture
def stand_ins(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Spark, the sources' stream, the executors' watch and the query stood in for; the
    supervise loop's outcome is ``outcome["run"]`` (a JobState, or an error to raise)."""
    outcome: dict[str, Any] = {"run": JobState.FINISHED, "phases": []}
    monkeypatch.setattr(opening, "start_spark", lambda *a: object())
    monkeypatch.setattr(opening, "open_sources", lambda *a: object())
    monkeypatch.setattr(opening, "watch_resources", lambda *a: (None, opening.nothing))
    monkeypatch.setattr(opening, "progress_watchdog", lambda *a: ProgressWatchdog(0.0))
    monkeypatch.setattr(attempt_run, "QueryHandle", FakeHandle)

    def supervise(*args: Any, **kwargs: Any) -> JobState:
        what = outcome["run"]
        if isinstance(what, BaseException):
            raise what
        return what

    monkeypatch.setattr(attempt_run, "supervise", supervise)
    for phase in ("prepare", "register", "claim", "open", "recover", "run", "end"):
        real = getattr(attempt_run.AttemptRun, phase)

        def traced(self: Any, *a: Any, _real: Any = real, _name: str = phase) -> Any:
            outcome["phases"].append(_name)
            return _real(self, *a)

        monkeypatch.setattr(attempt_run.AttemptRun, phase, traced)
    return outcome


def _plan(tmp_path: Path, ctx: LaunchContext | None = None) -> Any:
    from stoker import Pipeline, sinks, sources

    p = Pipeline("job")
    p.source(sources.generator(total=10))
    p.sink(sinks.files(str(tmp_path / "out")))
    opts = RunOptions(state_dir=tmp_path / "state")
    return plan_job(p, opts, None, ctx or LaunchContext())


def _attempt(tmp_path: Path) -> tuple[JobState, AttemptState]:
    st = open_store(tmp_path / "state" / "store.db")
    try:
        job = st.get_job(JobId("job"))
        rec = st.get_attempt(JobId("job"), AttemptNo(1))
        assert rec is not None
        return job.state, rec.state
    finally:
        st.close()


def test_the_phases_run_in_order_and_a_finished_query_ends_the_job(
    tmp_path: Path, stand_ins: dict[str, Any]
) -> None:
    seen: list[Any] = []
    result = attempt_run.execute(_plan(tmp_path, LaunchContext(on_result=(seen.append,))))
    assert stand_ins["phases"] == ["prepare", "register", "claim", "open", "recover", "run", "end"]
    assert result.state == JobState.FINISHED and result.attempt == 1
    assert seen == [result]  # reported to the launcher
    assert _attempt(tmp_path) == (JobState.FINISHED, AttemptState.FINISHED)


def test_a_failed_query_fails_the_job_and_raises(tmp_path: Path, stand_ins: dict[str, Any]) -> None:
    stand_ins["run"] = RuntimeError("boom")
    with pytest.raises(JobFailed, match="boom"):
        attempt_run.execute(_plan(tmp_path))
    assert _attempt(tmp_path) == (JobState.FAILED, AttemptState.FAILED)


def test_a_signal_before_the_query_suspends(tmp_path: Path, stand_ins: dict[str, Any]) -> None:
    stand_ins["run"] = KeyboardInterrupt()
    result = attempt_run.execute(_plan(tmp_path))
    assert result.state == JobState.SUSPENDED
    assert _attempt(tmp_path) == (JobState.SUSPENDED, AttemptState.SUSPENDED)


def test_a_fenced_attempt_raises_and_records_nothing(
    tmp_path: Path, stand_ins: dict[str, Any]
) -> None:
    stand_ins["run"] = StaleAttempt("attempt 2 owns the job")
    with pytest.raises(StaleAttempt):
        attempt_run.execute(_plan(tmp_path))
    job_state, attempt_state = _attempt(tmp_path)
    assert attempt_state in (AttemptState.STARTING, AttemptState.RUNNING)  # not ours to end
    assert job_state == JobState.RUNNING


def test_a_failure_under_a_job_manager_leaves_the_job_to_it(
    tmp_path: Path, stand_ins: dict[str, Any]
) -> None:
    plan = _plan(tmp_path)
    st = open_store(tmp_path / "state" / "store.db")
    try:  # the manager made the job and attempt 1 for this driver
        st.create_job(JobId("job"), "job", {"kind": "pipeline"}, {}, uid=plan.owner.uid)
        st.start_attempt(
            JobId("job"), Owner("h", 1, "x"), 30.0, AttemptNo(0), state=AttemptState.STARTING
        )
    finally:
        st.close()
    stand_ins["run"] = RuntimeError("boom")
    with pytest.raises(JobFailed):
        attempt_run.execute(_plan(tmp_path, LaunchContext(attempt=1)))
    job_state, attempt_state = _attempt(tmp_path)
    assert attempt_state == AttemptState.FAILED
    assert job_state != JobState.FAILED  # the manager's restart strategy decides


# a lost checkpoint ----------------------------------------------------------------------------
def _decide(tmp_path: Path, epochs: range) -> None:
    """The job's epochs decided and committed in its store, as an attempt that ran them left
    them (its attempt ended)."""
    st = open_store(tmp_path / "state" / "store.db")
    try:
        jid = JobId("job")
        rec = st.start_attempt(jid, Owner("h", 1, "x"), 30.0, st.get_job(jid).current_attempt)
        for e in epochs:
            st.pin_epoch(jid, Epoch(e), rec.attempt, st.get_job(jid).control_version)
            st.decide_epoch(jid, Epoch(e), rec.attempt, 10, final=False)
            st.mark_epoch_committed(jid, Epoch(e))
        st.end_attempt(jid, rec.attempt, AttemptState.SUSPENDED)
    finally:
        st.close()


def test_a_checkpoint_behind_the_store_is_refused_and_a_reset_starts_over(
    tmp_path: Path, stand_ins: dict[str, Any]
) -> None:
    stand_ins["run"] = JobState.SUSPENDED
    attempt_run.execute(_plan(tmp_path))  # the job made
    _decide(tmp_path, range(8))
    st = open_store(tmp_path / "state" / "store.db")
    try:
        old_uid = st.get_job(JobId("job")).uid
        attempts = len(st.list_attempts(JobId("job")))
    finally:
        st.close()
    checkpoint = tmp_path / "state" / "checkpoint"

    # No checkpoint, then one that ends at batch 3: refused in the plan, before Spark.
    for end in ("does not exist", "ends at batch 3 (committed up to 2)"):
        stand_ins["phases"].clear()
        with pytest.raises(CheckpointBehind) as refused:
            attempt_run.execute(_plan(tmp_path))
        assert stand_ins["phases"] == []
        assert str(refused.value).startswith(
            f"checkpoint: the store has epochs 0..7 of job 'job' (uid {old_uid}) decided, but "
            f"its checkpoint folder '{checkpoint}' {end}"
        )
        assert "--from-savepoint" in str(refused.value)
        assert "--reset-checkpoint" in str(refused.value)
        for b in range(4):
            (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
            (checkpoint / "offsets" / str(b)).write_text("v1\n{}\n")
            if b < 3:
                (checkpoint / "commits").mkdir(parents=True, exist_ok=True)
                (checkpoint / "commits" / str(b)).write_text("v1\n{}\n")

    # The epoch in flight (offsets for 8, nothing decided for it) and an epoch decided but
    # not in Spark's commit log (7) are normal: the job resumes.
    for b in (7, 8):
        (checkpoint / "offsets" / str(b)).write_text("v1\n{}\n")
    plan = _plan(tmp_path)
    assert plan.reset is None and plan.owner.uid == old_uid
    for b in (7, 8):
        (checkpoint / "offsets" / str(b)).unlink()

    # --reset-checkpoint: refused by the files sink while its folder holds the old uid's
    # epochs (the new job numbers its own from 0 again); once emptied: a new uid, the old
    # epochs gone, the stale checkpoint kept aside.
    with pytest.raises(InvalidSink, match="belongs to an earlier job of the same id"):
        _plan(tmp_path, LaunchContext(reset_checkpoint=True))
    shutil.rmtree(tmp_path / "out")
    plan = _plan(tmp_path, LaunchContext(reset_checkpoint=True))
    assert plan.reset is not None and plan.owner.uid != old_uid
    result = attempt_run.execute(plan)
    assert result.state == JobState.SUSPENDED
    st = open_store(tmp_path / "state" / "store.db")
    try:
        job = st.get_job(JobId("job"))
        assert job.uid == plan.owner.uid
        assert st.list_epochs(JobId("job")) == [] and st.decided_range(JobId("job")) is None
        assert len(st.list_attempts(JobId("job"))) == attempts + 1
    finally:
        st.close()
    assert not checkpoint.exists()
    [aside] = (tmp_path / "state").glob("checkpoint.lost-*")
    assert sorted(p.name for p in (aside / "offsets").iterdir()) == ["0", "1", "2", "3"]

    # Asked again, with nothing behind: nothing is reset, the uid stays.
    plan = _plan(tmp_path, LaunchContext(reset_checkpoint=True))
    assert plan.reset is None and plan.owner.uid == job.uid
