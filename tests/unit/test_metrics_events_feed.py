"""``/metrics``'s collector and ``/v1/events``' poller over a real SQLite store, no server:
what they fold and emit as epochs commit and control events move."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from stoker.manager import JobManager
from stoker.manager.rescales import RescaleTally
from stoker.server.events import EventFeed
from stoker.server.metrics import Histogram, StokerCollector, epoch_steps, rates
from stoker.store import Store
from stoker.store.records import EpochRecord, Owner
from stoker.types import AttemptNo, ControlKind, ControlVersion, Epoch, EpochState, JobId, job_id


@pytest.fixture
def manager(store: Store, tmp_path: Path) -> Iterator[JobManager]:
    m = JobManager(store, tmp_path / "state", [tmp_path])
    try:
        yield m
    finally:
        m.close()


def _job(store: Store, name: str) -> tuple[JobId, AttemptNo]:
    jid = job_id(name)
    store.create_job(jid, name, {"entrypoint": "/nowhere/app.py"}, {})
    return jid, store.start_attempt(jid, Owner("h", 1, "x"), 600.0, AttemptNo(0)).attempt


def _commit(store: Store, jid: JobId, attempt: AttemptNo, n: int, rows: int = 10) -> None:
    store.pin_epoch(jid, Epoch(n), attempt, ControlVersion(store.get_job(jid).control_version))
    store.decide_epoch(jid, Epoch(n), attempt, rows, False)
    store.mark_epoch_committed(jid, Epoch(n))
    store.set_epoch_metrics(jid, Epoch(n), duration_ms=2000.0, backlog=5)


def _samples(collector: StokerCollector) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in collector.collect()
        for s in fam.samples
    }


def test_epochs_are_folded_once_and_counters_only_grow(store: Store, manager: JobManager) -> None:
    jid, att = _job(store, "m")
    for n in range(3):
        _commit(store, jid, att, n)
    c = StokerCollector(manager, None, Histogram(), RescaleTally())
    count = ("stoker_job_epoch_duration_seconds_count", (("job_id", "m"), ("step", "total")))
    rows = ("stoker_job_rows_total", (("job_id", "m"),))
    first = _samples(c)
    assert first[count] == 3 and first[rows] == 30
    assert _samples(c)[count] == 3  # a scrape with nothing new counts nothing again
    _commit(store, jid, att, 3, rows=5)
    later = _samples(c)
    assert later[count] == 4 and later[rows] == 35
    assert later[("stoker_job_attempts_total", (("job_id", "m"),))] == 1
    assert later[("stoker_job_restarts_total", (("job_id", "m"),))] == 0
    assert later[("stoker_job_last_epoch", (("job_id", "m"),))] == 3


def test_control_apply_latency_counts_applied_events(store: Store, manager: JobManager) -> None:
    jid, att = _job(store, "ctl")
    c = StokerCollector(manager, None, Histogram(), RescaleTally())
    key = ("stoker_job_control_apply_latency_seconds_count", (("job_id", "ctl"),))
    store.add_control(jid, ControlKind.CHECKPOINT, {}, sender="t")
    assert _samples(c)[key] == 0  # PENDING: nothing to measure yet
    _commit(store, jid, att, 0)  # the pin applies it
    assert _samples(c)[key] == 1
    assert _samples(c)[key] == 1


def test_epoch_steps_and_rates() -> None:
    e = EpochRecord(
        job_id=job_id("s"),
        epoch=Epoch(0),
        control_version=ControlVersion(0),
        state=EpochState.COMMITTED,
        pinned_by=AttemptNo(1),
        decided_by=AttemptNo(1),
        rows_in=100,
        final=False,
        pinned_at=10.0,
        decided_at=10.5,
        committed_at=10.75,
        duration_ms=1000.0,
    )
    assert epoch_steps(e) == {"write": 0.5, "commit": 0.25, "total": 1.0, "spark": 0.25}
    assert rates([e], now=12.0) == (50.0, 100.0)  # 100 rows over 2 s of wall, 1 s busy
    assert rates([], now=1.0) == (0.0, 0.0)


def test_feed_baseline_then_new_job_epochs_and_controls(store: Store, manager: JobManager) -> None:
    old, old_att = _job(store, "old")
    _commit(store, old, old_att, 0)
    feed = EventFeed(manager)
    feed.poll_once()  # the baseline: what was there before is no event
    assert feed.after(0) == []
    _commit(store, old, old_att, 1)
    _job(store, "new")
    feed.poll_once()
    got = [(e.kind, e.job_id) for e in feed.after(0)]
    assert ("epoch", "old") in got and ("job", "new") in got
    epoch = next(e for e in feed.after(0) if e.kind == "epoch")
    assert epoch.data["epoch"] == 1
    store.add_control(old, ControlKind.CHECKPOINT, {}, sender="t")
    feed.poll_once()
    control = [e.data for e in feed.after(0) if e.kind == "control"]
    assert [(c["kind"], c["status"]) for c in control] == [("checkpoint", "PENDING")]
    seq = feed.newest()
    assert feed.resume_point(f"{feed.run}-{seq}") == (seq, False)
    assert feed.resume_point(f"other-{seq}") == (seq, True)
    assert [e.job_id for e in feed.after(0, "new")] == ["new"]


def test_the_feed_masks_secrets_as_rest_answers_do(store: Store, manager: JobManager) -> None:
    """Issue 22 item 6: /v1/events sent a job's error raw (a DSN with its password) and a
    control event's payload in clear, while REST masked them."""
    from stoker.types import AttemptState, JobState

    feed = EventFeed(manager)
    feed.poll_once()
    jid, att = _job(store, "leaky")
    store.add_control(
        jid, ControlKind.EVENT, {"name": "rotate", "payload": {"token": "t0k"}}, sender="t"
    )
    store.finish_attempt(
        jid, att, AttemptState.FAILED, JobState.FAILED, "cannot open postgresql://u:pw9@db/x"
    )
    feed.poll_once()
    text = repr([e.data for e in feed.after(0)])
    assert "pw9" not in text and "t0k" not in text, text
    assert "postgresql://u:***@db/x" in text


def test_event_streams_beyond_the_cap_are_refused(
    store: Store, manager: JobManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 22 item 5: a cap on the event streams open at once (each holds a connection and
    a task); the next one is 429 with Retry-After, through the real app."""
    from fastapi.testclient import TestClient

    from stoker.errors import TooManyStreams
    from stoker.server import create_app
    from stoker.server import events as events_mod

    monkeypatch.setattr(events_mod, "MAX_STREAMS", 2)
    feed = EventFeed(manager)
    feed.take_stream()  # one open: room for another
    feed.take_stream()
    with pytest.raises(TooManyStreams):
        feed.take_stream()
    feed.give_back_stream()
    feed.take_stream()
    feed.close()

    app = create_app(manager)
    with TestClient(app) as client:
        app_feed = app.state.stoker.feed
        for _ in range(2):
            app_feed.take_stream()
        r = client.get("/v1/events")
        assert r.status_code == 429 and r.headers["retry-after"] == "5", r.text
        assert "too many event streams" in r.json()["error"]
