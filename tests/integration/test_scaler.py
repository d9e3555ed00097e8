"""The scaler over a real SQLite store: owners, epochs and resource reports written through the
store API, time from a ManualClock (the store's and the scaler's), a provider that records its
calls. Then StandaloneProvider on a real standalone cluster (real worker JVMs started and
removed gracefully).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stoker.clock import ManualClock
from stoker.errors import ClusterError
from stoker.manager import clusters
from stoker.manager.clusters.jvm import group_left
from stoker.scalespec import parse_scaling
from stoker.scaling.policy import DefaultPolicy
from stoker.scaling.provider import SparkExecutorsOnly, StandaloneProvider
from stoker.scaling.scaler import Scaler
from stoker.store import ClusterProcess, JobRecord, Owner, Store, open_store
from stoker.types import AttemptNo, ClusterState, ControlVersion, Epoch, JobId, JobKind, job_id

T0 = 1_000_000.0
JOB = job_id("orders")
APP = job_id("shop")
OWNER = Owner(host="host-a", pid=101, pid_started="boot-1")
LEASE = 1e7  # the ManualClock moves minutes: no lease may lapse meanwhile
JOB_SPEC = {
    "kind": "app",
    "entrypoint": "/apps/orders.py",
    "trigger_s": 1.0,
    "conf": {"spark.master": "spark://127.0.0.1:7077"},
}


class Recorder:
    """A provider that records each ensure and answers what it is told to."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, int | None]] = []
        self.fail: Exception | None = None
        self.answer: dict[str, Any] = {"added": ["worker-9"], "removed": []}

    def describe(self) -> dict[str, Any]:
        return {"kind": "recorder"}

    def ensure(self, owner: JobRecord, executors: int, cores: int | None = None) -> dict[str, Any]:
        self.calls.append((str(owner.job_id), executors, cores))
        if self.fail is not None:
            raise self.fail
        return dict(self.answer)


class Feed:
    """Commits epochs of one job through the store, one per call, with their metrics."""

    def __init__(self, store: Store, jid: JobId, attempt: int = 1) -> None:
        self.store, self.jid, self.attempt, self.n = store, jid, AttemptNo(attempt), 0

    def epoch(self, rows: int, duration: float, backlog: int | None, executors: int) -> None:
        e = Epoch(self.n)
        self.n += 1
        self.store.pin_epoch(self.jid, e, self.attempt, ControlVersion(0))
        self.store.decide_epoch(self.jid, e, self.attempt, rows_in=rows, final=False)
        self.store.mark_epoch_committed(self.jid, e)
        self.store.set_epoch_metrics(
            self.jid,
            e,
            duration_ms=duration * 1000,
            backlog=backlog,
            executors=executors,
            cores=executors,
        )


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def store(tmp_path: Path, clock: ManualClock) -> Iterator[Store]:
    s = open_store(f"sqlite:///{tmp_path / 'store.db'}", clock)
    yield s
    s.close()


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


def _scaler(store: Store, tmp_path: Path, clock: ManualClock, recorder: Recorder) -> Scaler:
    return Scaler(store, tmp_path, DefaultPolicy(), clock.now, providers=lambda owner: recorder)


def _lone_job(store: Store, scaling: str, executors: int = 1) -> None:
    store.create_job(JOB, "orders", JOB_SPEC, {})
    store.start_attempt(JOB, OWNER, LEASE, expected_current=AttemptNo(0))
    store.set_scaling(JOB, parse_scaling(scaling).to_dict())
    _report(store, JOB, executors)


def _report(store: Store, jid: JobId, executors: int, requested: int | None = None) -> None:
    store.report_resources(
        jid,
        {
            "executors": executors,
            "cores": executors,
            "executor_ids": [str(i) for i in range(executors)],
            "hosts": [f"127.0.0.{i + 2}" for i in range(executors)],
            "requested": requested,
            "at": store.clock.now(),
        },
    )


def _overload_until_decided(
    store: Store, clock: ManualClock, scaler: Scaler, feed: Feed, executors: int, limit: int = 200
) -> float:
    """Epochs as long as the trigger, backlog growing 100 rows a second: returns the time of
    the first decision."""
    for i in range(limit):
        clock.advance(1.0)
        feed.epoch(rows=100, duration=1.0, backlog=100 * (i + 1), executors=executors)
        scaler.tick()
        if store.list_rescales(feed.jid if feed.jid == JOB else APP, limit=1):
            return clock.now()
    raise AssertionError("no decision")


def test_auto_decides_sets_the_target_calls_the_provider_and_marks_in_use(
    store: Store, clock: ManualClock, tmp_path: Path, recorder: Recorder
) -> None:
    _lone_job(store, "auto:min=1,max=4,stabilization=10s,cooldown=30s")
    scaler = _scaler(store, tmp_path, clock, recorder)
    at = _overload_until_decided(store, clock, scaler, Feed(store, JOB), executors=1)
    (rec,) = store.list_rescales(JOB)
    assert rec.kind == "decision" and rec.status == "decided" and rec.policy == "default"
    assert rec.mode == "auto" and rec.from_executors == 1 and rec.to_executors is not None
    assert 2 <= rec.to_executors <= 4
    assert rec.at == at and at >= T0 + 10  # not before the stabilization
    for key in ("busy", "input_rate", "true_rate_per_executor", "backlog", "wanted", "epochs"):
        assert key in rec.signals, key
    assert rec.signals["provider"] == {"kind": "recorder"}
    assert rec.workers == {"added": ["worker-9"], "removed": []}
    assert store.get_job(JOB).executor_target == rec.to_executors
    assert recorder.calls == [(JOB, rec.to_executors, 1)]
    # The driver reports the new executors: in use, with how long it took.
    clock.advance(4.0)
    _report(store, JOB, rec.to_executors)
    clock.advance(1.0)
    scaler.tick()
    (done,) = store.list_rescales(JOB)
    assert done.status == "in_use"
    assert done.in_use_at == pytest.approx(at + 4.0)
    assert done.to_dict()["seconds_to_in_use"] == pytest.approx(4.0)


def test_a_newer_decision_supersedes_one_not_in_use(
    store: Store, clock: ManualClock, tmp_path: Path, recorder: Recorder
) -> None:
    _lone_job(store, "auto:min=1,max=4,stabilization=5s,cooldown=30s")
    scaler = _scaler(store, tmp_path, clock, recorder)
    _overload_until_decided(store, clock, scaler, Feed(store, JOB), executors=1)
    first = store.list_rescales(JOB)[0]
    assert first.to_executors is not None and first.to_executors > 2
    # A user lowers the maximum below the target before the executors came: at once.
    store.set_scaling(
        JOB, parse_scaling("auto:min=1,max=2,stabilization=5s,cooldown=30s").to_dict()
    )
    clock.advance(1.0)
    scaler.tick()
    newest, old = store.list_rescales(JOB)[:2]
    assert old.rescale_id == first.rescale_id and old.status == "superseded"
    assert newest.status == "decided" and newest.to_executors == 2
    assert "above the maximum" in newest.reason
    assert store.get_job(JOB).executor_target == 2
    assert [c[1] for c in recorder.calls] == [first.to_executors, 2]


def test_a_provider_failure_marks_the_decision_failed(
    store: Store, clock: ManualClock, tmp_path: Path, recorder: Recorder
) -> None:
    _lone_job(store, "auto:min=1,max=4,stabilization=5s,cooldown=30s")
    recorder.fail = ClusterError("no loopback address left for a worker")
    scaler = _scaler(store, tmp_path, clock, recorder)
    _overload_until_decided(store, clock, scaler, Feed(store, JOB), executors=1)
    (rec,) = store.list_rescales(JOB)
    assert rec.status == "failed"
    assert rec.error is not None and "no loopback address left" in rec.error


def test_a_removal_waits_for_the_driver_and_is_asked_again(
    store: Store, clock: ManualClock, tmp_path: Path, recorder: Recorder
) -> None:
    # Bounds lowered under 3 running executors: decided at once; the provider waits for the
    # driver to lower its request, and is asked again on later passes until it is done.
    _lone_job(store, "auto:min=1,max=4,stabilization=5s,cooldown=30s", executors=3)
    recorder.answer = {"added": [], "removed": [], "waiting": "the driver still requests 3"}
    scaler = _scaler(store, tmp_path, clock, recorder)
    store.set_scaling(JOB, parse_scaling("auto:min=1,max=1").to_dict())
    clock.advance(1.0)
    scaler.tick()
    (rec,) = store.list_rescales(JOB)
    assert rec.to_executors == 1 and rec.status == "decided"
    assert rec.workers["waiting"] == "the driver still requests 3"
    recorder.answer = {"added": [], "removed": ["worker-3", "worker-4"]}
    clock.advance(1.0)
    scaler.tick()
    (rec,) = store.list_rescales(JOB)
    assert rec.workers == {"added": [], "removed": ["worker-3", "worker-4"]}
    assert len(recorder.calls) == 2
    _report(store, JOB, 1)
    clock.advance(1.0)
    scaler.tick()
    assert store.list_rescales(JOB)[0].status == "in_use"
    clock.advance(1.0)
    scaler.tick()
    assert len(recorder.calls) == 2  # nothing in flight: the provider is left alone


@pytest.mark.parametrize("mode", ["reactive", "fixed"])
def test_executors_that_join_and_leave_by_themselves_are_recorded(
    store: Store, clock: ManualClock, tmp_path: Path, recorder: Recorder, mode: str
) -> None:
    """Reactive, and fixed too (issue 21 item 7: a worker added or removed by hand showed
    "no rescales yet")."""
    _lone_job(store, mode, executors=1)
    scaler = _scaler(store, tmp_path, clock, recorder)
    scaler.tick()
    assert store.list_rescales(JOB) == []  # what it has at first is no change
    clock.advance(1.0)
    _report(store, JOB, 2)
    scaler.tick()
    scaler.tick()
    (joined,) = store.list_rescales(JOB)
    assert (joined.kind, joined.status, joined.mode) == ("observed", "observed", mode)
    assert (joined.from_executors, joined.to_executors) == (1, 2)
    assert joined.reason == "1 executor joined"
    assert joined.workers == {"added": ["127.0.0.3"], "removed": []}
    assert joined.signals["joined"] == ["1"]
    # A new leader (a new scaler) still tells a loss that happened in between.
    clock.advance(1.0)
    _report(store, JOB, 1)
    _scaler(store, tmp_path, clock, recorder).tick()
    left = store.list_rescales(JOB)[0]
    assert (left.from_executors, left.to_executors, left.reason) == (2, 1, "1 executor left")
    assert left.workers == {"added": [], "removed": ["127.0.0.3"]}
    assert recorder.calls == []  # observing never asks the provider
    assert store.get_job(JOB).executor_target is None


def test_back_to_fixed_clears_the_target(
    store: Store, clock: ManualClock, tmp_path: Path, recorder: Recorder
) -> None:
    _lone_job(store, "auto:min=1,max=4,stabilization=5s,cooldown=30s")
    scaler = _scaler(store, tmp_path, clock, recorder)
    _overload_until_decided(store, clock, scaler, Feed(store, JOB), executors=1)
    assert store.get_job(JOB).executor_target is not None
    store.set_scaling(JOB, None)
    clock.advance(1.0)
    scaler.tick()
    assert store.get_job(JOB).executor_target is None
    assert store.list_rescales(JOB)[0].status == "superseded"


def test_an_application_is_scaled_from_its_jobs_epochs(
    store: Store, clock: ManualClock, tmp_path: Path, recorder: Recorder
) -> None:
    spec = {
        "kind": "application",
        "entrypoint": "/apps/shop.py",
        "args": [],
        "cluster": "spark://127.0.0.1:7077",
    }
    store.create_job(APP, "shop", spec, {}, kind=JobKind.APPLICATION)
    store.start_attempt(APP, OWNER, LEASE, expected_current=AttemptNo(0))
    store.set_scaling(
        APP, parse_scaling("auto:min=1,max=6,stabilization=5s,cooldown=30s").to_dict()
    )
    feeds = []
    for name in ("shop.a", "shop.b"):
        jid = job_id(name)
        store.create_job(
            jid, name, {"kind": "in_app", "app_id": APP, "trigger_s": 1.0}, {}, app_id=APP
        )
        store.start_attempt(
            jid, OWNER, LEASE, expected_current=AttemptNo(0), app_attempt=AttemptNo(1)
        )
        feeds.append(Feed(store, jid))
    _report(store, APP, 1)
    scaler = _scaler(store, tmp_path, clock, recorder)
    # Each job alone keeps one executor busy 60% of the time: together 1.2 -> 2 executors.
    for _ in range(90):
        clock.advance(1.0)
        for f in feeds:
            f.epoch(rows=60, duration=0.6, backlog=0, executors=1)
        scaler.tick()
    (rec,) = store.list_rescales(APP)
    assert rec.to_executors == 2 and rec.from_executors == 1
    assert rec.signals["required_utilization"] == pytest.approx(1.2, abs=0.05)
    for name in ("shop.a", "shop.b"):
        assert store.list_rescales(job_id(name)) == []  # the application is the owner
    assert [c[:2] for c in recorder.calls] == [(APP, 2)]


def test_the_cooldown_outlives_the_scaler(
    store: Store, clock: ManualClock, tmp_path: Path, recorder: Recorder
) -> None:
    _lone_job(store, "auto:min=1,max=4,stabilization=10s,cooldown=120s")
    feed = Feed(store, JOB)
    first_at = _overload_until_decided(
        store, clock, _scaler(store, tmp_path, clock, recorder), feed, executors=1
    )
    target = store.get_job(JOB).executor_target
    assert target is not None
    _report(store, JOB, target)
    # A new leader: fresh memory. The load is gone (no epochs, nothing left behind): idle
    # wants the minimum after a window plus the stabilization, but the cooldown, read from
    # the store, holds until 120 s after the first decision.
    feed.epoch(rows=0, duration=0.1, backlog=0, executors=target)
    scaler = _scaler(store, tmp_path, clock, recorder)
    decided_at = None
    for _ in range(200):
        clock.advance(1.0)
        scaler.tick()
        if len(store.list_rescales(JOB)) == 2:
            decided_at = clock.now()
            break
    assert decided_at is not None
    assert decided_at >= first_at + 120
    newest = store.list_rescales(JOB)[0]
    assert newest.to_executors == 1 and newest.signals.get("idle") is True


def test_providers_by_cluster(store: Store, tmp_path: Path) -> None:
    scaler = Scaler(store, tmp_path)

    def app(cluster: str) -> JobRecord:
        spec = {"kind": "application", "entrypoint": "/a.py", "cluster": cluster}
        return _record(store, spec, JobKind.APPLICATION)

    assert scaler.provider_for(app("local")) is None
    ext = scaler.provider_for(app("spark://10.0.0.1:7077"))
    assert isinstance(ext, SparkExecutorsOnly) and ext.master == "spark://10.0.0.1:7077"
    own = scaler.provider_for(app("standalone:workers=1,cores=1,memory=512m"))
    assert isinstance(own, StandaloneProvider) and own.cluster.startswith("app-")
    session = scaler.provider_for(app("shared"))
    assert isinstance(session, StandaloneProvider) and session.cluster == "shared"
    assert session.folder == tmp_path / "clusters" / "shared"
    lone = _record(store, {"kind": "app", "conf": {}}, JobKind.JOB)
    assert scaler.provider_for(lone) is None  # local[*]: Spark inside the driver
    lone = _record(store, {"kind": "app", "conf": {"spark.master": "spark://h:7077"}}, JobKind.JOB)
    assert isinstance(scaler.provider_for(lone), SparkExecutorsOnly)


_N = [0]


def _record(store: Store, spec: dict[str, Any], kind: JobKind) -> JobRecord:
    _N[0] += 1
    rec, _ = store.create_job(job_id(f"rec-{_N[0]}"), "x", spec, {}, kind=kind)
    return rec


def test_the_thread_ticks_only_while_leading(
    store: Store, tmp_path: Path, recorder: Recorder
) -> None:
    leading = threading.Event()
    scaler = Scaler(
        store, tmp_path, tick_s=0.02, is_leader=leading.is_set, providers=lambda o: recorder
    )
    scaler.start()
    try:
        time.sleep(0.3)  # not an assertion on time: gives a wrongly ticking thread a chance
        assert scaler.ticks == 0
        leading.set()
        deadline = time.monotonic() + 30
        while scaler.ticks < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert scaler.ticks >= 3
    finally:
        scaler.stop()


# A real standalone cluster ------------------------------------------------------------------
@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Path, clusters.StartedCluster]]:
    folder = tmp_path_factory.mktemp("scaler-cluster")
    spec = clusters.ClusterSpec("standalone", workers=1, cores=1, memory="512m")
    seen: dict[str, ClusterProcess] = {}
    started = clusters.start_standalone(
        "scale", spec, folder / "clusters" / "scale", on_process=lambda p: seen.update({p.id: p})
    )
    try:
        yield folder, started
    finally:
        clusters.stop_processes(list(seen.values()))


@pytest.mark.cluster
def test_standalone_provider_adds_a_worker_and_removes_one_gracefully(
    cluster: tuple[Path, clusters.StartedCluster], tmp_path: Path
) -> None:
    folder, started = cluster
    store = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        store.create_cluster("scale", "session", {"cores": 1, "memory": "512m", "workers": 1})
        store.update_cluster(
            "scale",
            state=ClusterState.RUNNING,
            master_url=started.master_url,
            web_url=started.web_url,
            processes=started.processes,
        )
        owner, _ = store.create_job(JOB, "orders", JOB_SPEC, {})
        provider = StandaloneProvider(store, "scale", folder / "clusters" / "scale")
        assert provider.describe() == {"kind": "standalone", "cluster": "scale"}

        grown = provider.ensure(owner, 2, 1)
        assert len(grown["added"]) == 1 and grown["removed"] == []
        rec = store.get_cluster("scale")
        workers = [p for p in rec.processes if p.role == "worker"]
        assert len(workers) == 2
        assert len(clusters.alive_addresses(clusters.master_status(started.web_url))) == 2
        assert provider.ensure(owner, 2, 1) == {"added": [], "removed": []}  # idempotent

        # The driver still asks for 2: nothing is removed yet.
        store.report_resources(
            JOB,
            {
                "executors": 0,
                "cores": 0,
                "executor_ids": [],
                "hosts": [],
                "requested": 2,
                "at": time.time(),
            },
        )
        waiting = provider.ensure(store.get_job(JOB), 1, 1)
        assert waiting["removed"] == [] and "still requests 2" in waiting["waiting"]

        store.report_resources(
            JOB,
            {
                "executors": 0,
                "cores": 0,
                "executor_ids": [],
                "hosts": [],
                "requested": 1,
                "at": time.time(),
            },
        )
        shrunk = provider.ensure(store.get_job(JOB), 1, 1)
        assert shrunk["added"] == [] and shrunk["removed"] == grown["added"]  # the newest goes
        rec = store.get_cluster("scale")
        left = [p for p in rec.processes if p.role == "worker"]
        assert [p.id for p in left] == [p.id for p in workers[:1]]
        assert clusters.alive_addresses(clusters.master_status(started.web_url)) == {
            left[0].address
        }
        removed = workers[1]
        assert not group_left(removed)  # its JVM is gone
        with open(removed.log, encoding="utf-8", errors="replace") as fh:
            assert "SIGKILL" not in fh.read()  # gracefully: no kill after a timeout
    finally:
        first = {p.id for p in started.processes}
        with contextlib.suppress(Exception):
            extra = [p for p in store.get_cluster("scale").processes if p.id not in first]
            clusters.stop_processes(extra)
        store.close()


@pytest.mark.cluster
def test_a_decision_made_while_the_provider_works_is_provided_for_afterwards(
    store: Store, clock: ManualClock, tmp_path: Path
) -> None:
    # Background mode: the first provider call blocks; a second decision comes meanwhile (its
    # call is skipped, one at a time per owner); once the first returns, the next pass asks
    # the provider for the second.
    release = threading.Event()
    calls: list[int] = []

    class Slow(Recorder):
        def ensure(
            self, owner: JobRecord, executors: int, cores: int | None = None
        ) -> dict[str, Any]:
            calls.append(executors)
            if len(calls) == 1:
                release.wait(60)
            return {"added": [], "removed": []}

    slow = Slow()
    _lone_job(store, "auto:min=1,max=4,stabilization=5s,cooldown=30s")
    scaler = Scaler(
        store, tmp_path, DefaultPolicy(), clock.now, providers=lambda o: slow, background=True
    )
    try:
        _overload_until_decided(store, clock, scaler, Feed(store, JOB), executors=1)
        first = store.list_rescales(JOB)[0]
        store.set_scaling(JOB, parse_scaling("auto:min=1,max=2").to_dict())
        clock.advance(1.0)
        scaler.tick()
        assert store.list_rescales(JOB)[0].to_executors == 2
        assert calls == [first.to_executors]  # the second decision's call was skipped
        release.set()
        deadline = time.monotonic() + 60
        while calls != [first.to_executors, 2] and time.monotonic() < deadline:
            clock.advance(1.0)
            scaler.tick()
            time.sleep(0.05)
        assert calls == [first.to_executors, 2]
        for _ in range(3):  # done: not asked again
            clock.advance(1.0)
            scaler.tick()
            time.sleep(0.05)
        assert calls == [first.to_executors, 2]
    finally:
        release.set()
        scaler.stop()


@pytest.mark.cluster
def test_nothing_new_is_decided_while_a_decision_is_on_its_way(
    store: Store, clock: ManualClock, tmp_path: Path, recorder: Recorder
) -> None:
    """Workers take tens of seconds to start: until the executors reach the decided target,
    the epochs do not show the new size, and no decision is made on them (measured: a
    scale-up superseded by an 'idle' scale-down 11 s later, while its worker started)."""
    _lone_job(store, "auto:min=1,max=4,stabilization=5s,cooldown=5s")
    feed = Feed(store, JOB)
    scaler = _scaler(store, tmp_path, clock, recorder)
    _overload_until_decided(store, clock, scaler, feed, executors=1)
    (first,) = store.list_rescales(JOB)
    assert first.status == "decided" and (first.to_executors or 0) > 1
    # The executors stay at 1 (the worker is still starting) and the load is gone: a policy
    # asked would want the minimum. For a while (less than the patience) nothing is decided.
    for _ in range(120):
        clock.advance(1.0)
        feed.epoch(rows=0, duration=0.1, backlog=0, executors=1)
        scaler.tick()
    assert [r.rescale_id for r in store.list_rescales(JOB)] == [first.rescale_id]
    # In use at last: the cooldown runs from then, then the idle owner may shrink.
    _report(store, JOB, int(first.to_executors or 0))
    scaler.tick()
    in_use = store.list_rescales(JOB)[0]
    assert in_use.status == "in_use" and in_use.in_use_at == clock.now()
    for _ in range(120):
        clock.advance(1.0)
        feed.epoch(rows=0, duration=0.1, backlog=0, executors=int(first.to_executors or 0))
        scaler.tick()
        if len(store.list_rescales(JOB)) == 2:
            break
    newest = store.list_rescales(JOB)[0]
    assert newest.rescale_id != first.rescale_id and newest.to_executors == 1
    assert newest.at >= (in_use.in_use_at or 0) + 5.0
