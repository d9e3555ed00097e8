"""stoker.manager.control on a real SQLite store: what a control request is checked against,
what is stored, and the per-job rate limiter (time is a ManualClock)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from stoker.clock import ManualClock
from stoker.errors import (
    ControlConflict,
    ControlNotFound,
    InvalidInput,
    JobNotFound,
    JobTerminal,
    TooManyRequests,
)
from stoker.manager.control import (
    ControlRateLimiter,
    config_view,
    control_history,
    control_view,
    display_state,
    get_control,
    submit_control,
)
from stoker.store import Store, open_store
from stoker.types import ControlKind, ControlStatus, JobState, job_id

JOB = job_id("orders")
# What a local run records: the pipeline's spec (declared config, sources, events).
SPEC = {
    "name": "orders",
    "sources": ["generator(rows_per_second=10)", "files(path='/in')"],
    "sinks": ["files('/out')"],
    "config": {"min_amount": 10.0, "tag": "a"},
    "events": ["reload_rules"],
}


@pytest.fixture
def store(store: Store) -> Store:
    store.create_job(JOB, "orders", SPEC, {"min_amount": 10.0, "tag": "a"})
    return store


def _events(store: Store) -> list[Any]:
    return store.list_controls(JOB, limit=1000)


def test_every_kind_is_stored_pending_with_a_new_version(store: Store) -> None:
    bodies: list[dict[str, Any]] = [
        {"kind": "config", "set": {"min_amount": 20}, "unset": ["tag"]},
        {"kind": "rate_limit", "rows_per_second": 500, "max_files_per_epoch": 3},
        {"kind": "log_level", "level": "debug", "logger": "my.module"},
        {"kind": "trigger", "interval": "2s"},
        {"kind": "pause"},
        {"kind": "resume"},
        {"kind": "checkpoint"},
        {"kind": "event", "name": "reload_rules", "payload": {"x": [1, 2]}},
        {"kind": "savepoint", "stop": False},
    ]
    versions = []
    for body in bodies:
        ev, created = submit_control(store, JOB, body, sender="local:me", origin="cli")
        assert created and ev.status == ControlStatus.PENDING and ev.kind == body["kind"]
        assert (ev.sender, ev.origin) == ("local:me", "cli")
        versions.append(int(ev.version))
    assert versions == sorted(versions) and len(set(versions)) == len(bodies)
    # Stored normalized: a float for a number key, the level's canonical name, seconds.
    first, *_ = reversed(_events(store))
    assert first.body == {"set": {"min_amount": 20.0}, "unset": ["tag"]}
    log = get_control(store, "orders", _events(store)[6].control_id)
    assert log.body == {"level": "DEBUG", "logger": "my.module"}
    view = config_view(store, "orders")
    assert view == {
        "job_id": "orders",
        "version": versions[-1],
        "config": {"min_amount": 20.0, "tag": "a"},
        "paused": False,
        "trigger_s": 2.0,
        "rate_limit": {"rows_per_second": 500.0, "max_files_per_epoch": 3},
        "log_level": {"loggers": {"my.module": "DEBUG"}},
        "pending": len(bodies),
    }
    v = control_view(_events(store)[0])
    assert set(v) == {
        "control_id",
        "job_id",
        "version",
        "kind",
        "status",
        "applied_epoch",
        "reason",
        "result",
        "request_id",
        "sender",
        "origin",
        "created_at",
        "applied_at",
        "ended_at",
        "body",
    }
    assert (v["kind"], v["status"], v["body"]) == (
        "savepoint",
        "PENDING",
        {"stop": False, "dir": None},
    )


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"kind": "nope"}, "kind", "unknown control kind 'nope'"),
        ({"kind": "config", "set": {"max": 1}}, "config.max", "declared: min_amount, tag"),
        ({"kind": "config", "set": {"min_amount": "x"}}, "config.min_amount", "expects number"),
        ({"kind": "rate_limit", "rows_per_second": -5}, "rows_per_second", "must be > 0"),
        ({"kind": "trigger", "interval": "soon"}, "interval", "a duration like '500ms'"),
        ({"kind": "event", "name": "other"}, "name", "registered: reload_rules"),
        ({"kind": "pause", "x": 1}, "x", "is not a field of a pause event"),
        ({"kind": "pause", "request_id": ""}, "request_id", "non-empty string"),
        (["kind"], "body", "JSON object"),
    ],
)
def test_bad_input_names_the_field_and_stores_nothing(
    store: Store, body: Any, field: str, words: str
) -> None:
    with pytest.raises(InvalidInput) as err:
        submit_control(store, JOB, body, sender="x")
    assert err.value.field == field and words in str(err.value), str(err.value)
    assert _events(store) == []
    assert store.control_snapshot(JOB).version == 0


def test_unknown_and_ended_jobs_are_refused(store: Store) -> None:
    with pytest.raises(JobNotFound):
        submit_control(store, "other", {"kind": "pause"}, sender="x")
    with pytest.raises(InvalidInput) as err:
        submit_control(store, "a..b", {"kind": "pause"}, sender="x")
    assert err.value.field == "job_id"
    store.set_job_state(JOB, JobState.CANCELED)
    with pytest.raises(JobTerminal):
        # Checked before the body: an ended job refuses even a bad request as ended.
        submit_control(store, JOB, {"kind": "nope"}, sender="x")
    assert _events(store) == []


def test_a_request_id_retry_returns_the_stored_event_and_another_body_conflicts(
    store: Store,
) -> None:
    body = {"kind": "config", "set": {"tag": "b"}, "request_id": "r-1"}
    ev, created = submit_control(store, JOB, body, sender="x")
    assert created and ev.request_id == "r-1"
    again, created = submit_control(store, JOB, body, sender="x")
    assert (again, created) == (ev, False)
    # The id given beside the body is the same request.
    again, created = submit_control(
        store, JOB, {"kind": "config", "set": {"tag": "b"}}, sender="x", request_id="r-1"
    )
    assert (again.control_id, created) == (ev.control_id, False)
    with pytest.raises(ControlConflict):
        submit_control(store, JOB, {**body, "set": {"tag": "c"}}, sender="x")
    with pytest.raises(InvalidInput) as err:
        submit_control(store, JOB, body, sender="x", request_id="r-2")
    assert err.value.field == "request_id"
    # A retry after the job ended still gets its event back.
    store.set_job_state(JOB, JobState.CANCELED)
    again, created = submit_control(store, JOB, body, sender="x")
    assert (again.control_id, created) == (ev.control_id, False)
    assert len(_events(store)) == 1


def test_pause_state_conflicts_and_the_display_state(store: Store) -> None:
    submit_control(store, JOB, {"kind": "pause"}, sender="x")
    with pytest.raises(ControlConflict):
        submit_control(store, JOB, {"kind": "pause"}, sender="x")
    with pytest.raises(ControlConflict):
        submit_control(store, JOB, {"kind": "checkpoint"}, sender="x")
    job = store.get_job(JOB)
    assert display_state(store, job) == ("CREATED", True)  # only a RUNNING job shows PAUSED
    job = store.set_job_state(JOB, JobState.RUNNING)
    assert display_state(store, job) == ("PAUSED", True)
    submit_control(store, JOB, {"kind": "resume"}, sender="x")
    assert display_state(store, job) == ("RUNNING", False)
    assert store.get_job(JOB).state == JobState.RUNNING


def test_the_declared_pipeline_wins_over_the_spec_and_describe(tmp_path: Path) -> None:
    st = open_store(tmp_path / "store.db")
    try:
        app_spec = {"kind": "app", "entrypoint": "/x/app.py", "config": {"tag": "given"}}
        st.create_job(job_id("m"), "m", app_spec, {})
        asked: list[int] = []

        def describe() -> dict[str, Any]:
            asked.append(1)
            return {"config": {"tag": "a", "limit": 1}, "sources": ["generator()"], "events": []}

        # A manager's job before its driver declared: the app file's description.
        ev, _ = submit_control(
            st, "m", {"kind": "config", "set": {"limit": 5}}, sender="x", describe=describe
        )
        assert asked == [1] and ev.body["set"] == {"limit": 5}
        # Without a description, no config key is known.
        with pytest.raises(InvalidInput) as err:
            submit_control(st, "m", {"kind": "config", "set": {"limit": 5}}, sender="x")
        assert "none: the pipeline declares no config" in str(err.value)
        # The driver declared its pipeline: that is what counts, describe is not asked.
        st.declare_defaults(
            job_id("m"),
            {"tag": "a", "limit": 1, "new": True},
            pipeline={
                "config": {"tag": "a", "limit": 1, "new": True},
                "sources": ["files(path='/in')"],
                "events": ["go"],
            },
        )
        ev, _ = submit_control(
            st, "m", {"kind": "config", "set": {"new": False}}, sender="x", describe=describe
        )
        assert asked == [1]
        with pytest.raises(InvalidInput) as err:
            submit_control(st, "m", {"kind": "rate_limit", "rows_per_second": 5}, sender="x")
        assert "max_files_per_epoch" in str(err.value)  # the declared sources: files only
        submit_control(st, "m", {"kind": "event", "name": "go"}, sender="x")
    finally:
        st.close()


def test_savepoint_dirs_are_checked_when_folders_are_given(store: Store, tmp_path: Path) -> None:
    allowed = [tmp_path / "sp"]
    (tmp_path / "sp").mkdir()
    for folder, words in (
        ("relative/dir", "is not an absolute path"),
        (str(tmp_path / "elsewhere"), "lies outside the allowed folders"),
        (str(tmp_path / "sp" / ".." / "x"), "lies outside the allowed folders"),
    ):
        with pytest.raises(InvalidInput) as err:
            submit_control(
                store, JOB, {"kind": "savepoint", "dir": folder}, sender="x", savepoint_dirs=allowed
            )
        assert err.value.field == "dir" and words in str(err.value)
    (tmp_path / "sp" / "full").mkdir()
    (tmp_path / "sp" / "full" / "f").write_text("x")
    with pytest.raises(InvalidInput, match="exists and is not an empty folder"):
        submit_control(
            store,
            JOB,
            {"kind": "savepoint", "dir": str(tmp_path / "sp" / "full")},
            sender="x",
            savepoint_dirs=allowed,
        )
    assert _events(store) == []
    ev, _ = submit_control(
        store,
        JOB,
        {"kind": "savepoint", "dir": str(tmp_path / "sp" / "a"), "stop": True},
        sender="x",
        savepoint_dirs=allowed,
    )
    assert ev.body == {"stop": True, "dir": str((tmp_path / "sp" / "a").resolve())}


def test_history_pages_newest_first_and_filters(store: Store) -> None:
    for i in range(5):
        submit_control(store, JOB, {"kind": "config", "set": {"tag": str(i)}}, sender="x")
    submit_control(store, JOB, {"kind": "checkpoint"}, sender="x")
    page = control_history(store, "orders", limit=4)
    assert [e["version"] for e in page["events"]] == [6, 5, 4, 3] and page["next"] == 3
    page = control_history(store, "orders", limit=4, before=page["next"])
    assert [e["version"] for e in page["events"]] == [2, 1] and page["next"] is None
    page = control_history(store, "orders", limit=2, before=5, kind=ControlKind.CONFIG)
    assert [e["body"]["set"]["tag"] for e in page["events"]] == ["3", "2"]
    got = control_history(store, "orders", kind=ControlKind.CHECKPOINT)
    assert [e["kind"] for e in got["events"]] == ["checkpoint"] and got["next"] is None
    assert control_history(store, "orders", status=ControlStatus.APPLIED)["events"] == []
    with pytest.raises(InvalidInput, match="limit"):
        control_history(store, "orders", limit=0)
    with pytest.raises(JobNotFound):
        control_history(store, "other")
    with pytest.raises(ControlNotFound):
        get_control(store, "orders", "nope")
    cid = page["events"][0]["control_id"]
    with pytest.raises(ControlNotFound):
        get_control(store, "orders", cid, ControlKind.SAVEPOINT)


def test_the_rate_limiter_allows_bursts_of_twice_the_rate_per_job() -> None:
    clock = ManualClock()
    limiter = ControlRateLimiter(2, clock)
    for _ in range(4):  # burst: 2 * rate
        limiter.take("a")
    with pytest.raises(TooManyRequests) as err:
        limiter.take("a")
    assert err.value.retry_after == pytest.approx(0.5)
    assert "2 per second" in str(err.value) and err.value.job_id == "a"
    limiter.take("b")  # per job
    clock.advance(0.25)
    with pytest.raises(TooManyRequests) as err:
        limiter.take("a")
    assert err.value.retry_after == pytest.approx(0.25)
    clock.advance(0.25)
    limiter.take("a")
    clock.advance(100)  # refills up to the burst, no further
    for _ in range(4):
        limiter.take("a")
    with pytest.raises(TooManyRequests):
        limiter.take("a")


def test_the_rate_limiter_off_slow_and_bad() -> None:
    off = ControlRateLimiter(0, ManualClock())
    for _ in range(1000):
        off.take("a")
    clock = ManualClock()
    slow = ControlRateLimiter(0.1, clock)  # a burst of at least one event
    slow.take("a")
    with pytest.raises(TooManyRequests) as err:
        slow.take("a")
    assert err.value.retry_after == pytest.approx(10.0)
    with pytest.raises(InvalidInput):
        ControlRateLimiter(-1)


def test_the_rate_limiter_forgets_refilled_buckets() -> None:
    clock = ManualClock()
    limiter = ControlRateLimiter(1, clock)
    for i in range(2000):
        limiter.take(f"j{i}")
        clock.advance(0.01)
    clock.advance(10)
    limiter.take("last")
    # Only the buckets of the last second are not full again.
    assert len(limiter._buckets) < 200
