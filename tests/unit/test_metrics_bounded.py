"""``/metrics`` bounded at any number of jobs (issue 39 item 2): per-job series for the live
jobs only, the fleet-wide series keeping their totals, one read of the jobs table per scrape.
A real SQLite store, no server; sizes, never times, are asserted."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from stoker.manager import JobManager
from stoker.manager.rescales import RescaleTally
from stoker.server.exposition import render
from stoker.server.metrics import Histogram, StokerCollector
from stoker.store import Store
from stoker.store.records import Owner
from stoker.store.sqlite import SqliteStore
from stoker.types import (
    AttemptNo,
    AttemptState,
    ControlVersion,
    Epoch,
    JobId,
    JobState,
    job_id,
)


@pytest.fixture
def manager(store: Store, tmp_path: Path) -> Iterator[JobManager]:
    m = JobManager(store, tmp_path / "state", [tmp_path])
    try:
        yield m
    finally:
        m.close()


def _job(store: Store, name: str, epochs: int = 2) -> tuple[JobId, AttemptNo]:
    jid = job_id(name)
    store.create_job(jid, name, {"entrypoint": "/nowhere/app.py"}, {})
    att = store.start_attempt(jid, Owner("h", 1, "x"), 600.0, AttemptNo(0)).attempt
    for n in range(epochs):
        cv = ControlVersion(store.get_job(jid).control_version)
        store.pin_epoch(jid, Epoch(n), att, cv)
        store.decide_epoch(jid, Epoch(n), att, 10, False)
        store.mark_epoch_committed(jid, Epoch(n))
        store.set_epoch_metrics(jid, Epoch(n), duration_ms=2000.0, backlog=5)
    return jid, att


def _end(store: Store, jid: JobId, att: AttemptNo) -> None:
    store.finish_attempt(jid, att, AttemptState.FINISHED, JobState.FINISHED)


def _scrape(collector: StokerCollector) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return generate_latest(registry)


def _labelled(text: bytes, job: str) -> list[str]:
    return [ln for ln in text.decode().splitlines() if f'job_id="{job}"' in ln]


def _value(text: bytes, series: str) -> float:
    (line,) = [ln for ln in text.decode().splitlines() if ln.startswith(series + " ")]
    return float(line.split()[-1])


def test_an_ended_job_leaves_the_scrape_and_the_fleet_totals_stay(
    store: Store, manager: JobManager
) -> None:
    live, _ = _job(store, "live")
    done, att = _job(store, "done", epochs=3)
    c = StokerCollector(manager, None, Histogram(), RescaleTally())
    before = _scrape(c)
    assert _labelled(before, "done") and _labelled(before, "live")
    _end(store, done, att)
    after = _scrape(c)
    assert _labelled(after, "done") == []  # every per-job series of it, gone
    assert 'stoker_job_rows_total{job_id="live"} 20.0' in after.decode()
    # The fleet-wide series count it still.
    assert _value(after, "stoker_attempts_started_total") == 2
    assert _value(after, "stoker_epochs_committed_total") == 5
    assert _value(after, 'stoker_jobs{state="FINISHED"}') == 1
    assert _value(after, 'stoker_jobs{state="RUNNING"}') == 1
    # A later scrape neither brings it back nor loses the totals.
    again = _scrape(c)
    assert _labelled(again, "done") == []
    assert _value(again, "stoker_epochs_committed_total") == 5
    assert str(live) in c._jobs and str(done) not in c._jobs


def _clone(path: Path, template: JobId, prefix: str, n: int) -> None:
    """``n`` copies of ``template``'s job, attempt and epoch rows under new ids, straight
    into the SQLite file (thousands of jobs in well under a second)."""
    db = sqlite3.connect(path)
    try:
        for table in ("jobs", "control_versions", "attempts", "epochs"):
            cur = db.execute(f"SELECT * FROM {table} WHERE job_id = ?", (template,))
            cols = [d[0] for d in cur.description]
            rows = cur.fetchall()
            out = []
            for i in range(n):
                new = f"{prefix}-{i:05d}"
                for r in rows:
                    row = dict(zip(cols, r, strict=True))
                    row["job_id"] = new
                    if table == "jobs":
                        row["name"] = new
                        row["uid"] = f"uid-{new}"
                    out.append(tuple(row[c] for c in cols))
            marks = ", ".join("?" for _ in cols)
            db.executemany(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({marks})", out)
        db.commit()
    finally:
        db.close()


def test_the_scrape_is_bounded_by_the_live_jobs(tmp_path: Path) -> None:
    path = tmp_path / "many.db"
    store = SqliteStore(path)
    m = JobManager(store, tmp_path / "state", [tmp_path])
    try:
        live, _ = _job(store, "tpl-live")
        done, att = _job(store, "tpl-done")
        _end(store, done, att)
        c = StokerCollector(m, None, Histogram(), RescaleTally())
        _clone(path, live, "live", 19)  # 20 live with the template
        few = _scrape(c)
        _clone(path, done, "done", 1_980)  # 2,000 jobs in all
        many = _scrape(c)
        # Two thousand ended jobs add not one line: the size follows the live jobs.
        assert len(many.splitlines()) == len(few.splitlines())
        assert abs(len(many) - len(few)) < 64  # only the counts' digits differ
        assert _value(many, 'stoker_jobs{state="FINISHED"}') == 1_981
        assert _value(many, 'stoker_jobs{state="RUNNING"}') == 20
        per_job = len(_labelled(many, "live-00000"))
        assert per_job > 0 and len(_labelled(many, "done-00000")) == 0
        labelled = sum(1 for ln in many.decode().splitlines() if 'job_id="' in ln)
        assert labelled == 20 * per_job
    finally:
        m.close()
        store.close()


def test_a_scrape_reads_the_jobs_table_once(
    store: Store, manager: JobManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("a", "b"):
        _job(store, name)
    reads: list[str] = []
    for name in ("list_jobs", "list_live_jobs", "fleet_snapshot", "counts"):
        real = getattr(store, name)

        def counted(*a: object, _name: str = name, _real: object = real, **k: object) -> object:
            reads.append(_name)
            return _real(*a, **k)  # type: ignore[operator]

        monkeypatch.setattr(store, name, counted)
    c = StokerCollector(manager, None, Histogram(), RescaleTally())
    _scrape(c)
    # The first scrape also reads every owner once: the ended ones' rescales (a fleet total).
    assert reads == ["fleet_snapshot", "list_jobs"]
    reads.clear()
    _scrape(c)
    assert reads == ["fleet_snapshot"]


def _rescale(store: Store, jid: JobId) -> None:
    store.add_rescale(
        jid,
        kind="decision",
        policy="default",
        mode="auto",
        signals={},
        from_executors=1,
        to_executors=2,
        reason="r",
        status="decided",
    )


def test_the_rescales_total_keeps_the_ended_owners(store: Store, manager: JobManager) -> None:
    early, att = _job(store, "early")
    _rescale(store, early)
    _end(store, early, att)  # ended before this manager's first scrape
    late, late_att = _job(store, "late")
    _rescale(store, late)
    c = StokerCollector(manager, None, Histogram(), RescaleTally())
    decisions = 'stoker_rescales_total{kind="decision"}'
    assert _value(_scrape(c), decisions) == 2
    _rescale(store, late)
    _end(store, late, late_att)  # its last rescale came between two scrapes
    assert _value(_scrape(c), decisions) == 3
    assert _value(_scrape(c), decisions) == 3


def test_the_text_is_the_librarys_byte_for_byte(store: Store, manager: JobManager) -> None:
    for name in ("a", "b"):
        _job(store, name, epochs=3)
    _job(store, "odd", epochs=1)
    c = StokerCollector(manager, None, Histogram(), RescaleTally())
    c.collect()  # fold once: both renderings below see the same totals
    families = list(c.collect())
    odd = GaugeMetricFamily("x_odd", "help with \\ and\nnewline", labels=["v"])
    odd.add_metric(['quote " back \\ nl \n'], 12345678.0)
    odd.add_metric(["big"], float("inf"))
    families.append(odd)
    families.append(CounterMetricFamily("x_c", "c", 3.0, created=5.0))

    class _Fixed(Collector):
        def collect(self) -> Iterator[Metric]:
            return iter(families)

    assert render(families) == generate_latest(_Fixed())


def test_many_epochs_between_scrapes_are_each_counted(store: Store, manager: JobManager) -> None:
    jid, att = _job(store, "busy", epochs=2)
    c = StokerCollector(manager, None, Histogram(), RescaleTally())
    count = 'stoker_job_epoch_duration_seconds_count{job_id="busy",step="total"}'
    assert _value(_scrape(c), count) == 2
    for n in range(2, 27):  # 25 more: beyond the newest RATE_EPOCHS a scrape reads first
        cv = ControlVersion(store.get_job(jid).control_version)
        store.pin_epoch(jid, Epoch(n), att, cv)
        store.decide_epoch(jid, Epoch(n), att, 10, False)
        store.mark_epoch_committed(jid, Epoch(n))
    text = _scrape(c)
    assert _value(text, count) == 27
    assert _value(text, 'stoker_job_rows_total{job_id="busy"}') == 270
