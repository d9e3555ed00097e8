"""``/metrics``: Prometheus series built at each scrape from the store, through the manager.

Per-job series are the live jobs' only (not FINISHED, CANCELED or FAILED): a job that ends
leaves the scrape, and the fleet-wide series (jobs by state, attempts, epochs committed)
keep their totals from the store's counts. Each scrape reads the jobs table once
(``Store.fleet_snapshot``), so its time and size follow the live jobs, not every job the
store keeps (a scrape of every job took 34-53 s and 65.5 MB at 10,000 jobs). It runs on the server's
request threads (``GET /metrics`` is a sync route: Starlette's threadpool), never on the
supervisor's.

A custom collector (:class:`StokerCollector`) in a registry of each app's own (tests run
several apps in one process; the global default registry would mix them). Per-job
histograms and counters must only grow between scrapes, so the collector folds each newly
committed epoch and newly applied control event into running totals once; what it reads per
scrape is bounded: the live jobs' rows, and per live job its newest ``RATE_EPOCHS`` epochs
(its newest ``EPOCHS_READ`` when it is new here or more came since the last scrape) and
(only when its control version moved or an event was still on its way) its newest
``CONTROLS_READ`` control events. A manager that starts counts from the
epochs and events the store still holds within those bounds (a Prometheus counter reset).
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

from stoker.errors import JobNotFound
from stoker.server.exposition import render
from stoker.server.progress_metrics import newest_progress, progress_families
from stoker.types import JobId, JobKind, JobState

if TYPE_CHECKING:
    from stoker.manager import JobManager, Supervisor
    from stoker.manager.rescales import RescaleTally
    from stoker.store import ControlEvent, EpochRecord, FleetSnapshot, JobRecord

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)  # submit latency
# An epoch's steps run from milliseconds (an empty epoch) to minutes (a cold start).
EPOCH_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
# Control applies at the next epoch boundary: about a trigger interval, or a paused job's.
CONTROL_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
EPOCHS_READ = 100
CONTROLS_READ = 50
RATE_EPOCHS = 10  # the input and processing rates are over a job's newest epochs
_SEEN_CONTROLS_KEPT = 4 * CONTROLS_READ

_APPLICATION_SERIES = (
    ("executors", "Executors the application's driver reports registered (its jobs share them)."),
    ("executor_target", "Executors the autoscaler wants for the application."),
)
_SCALING_SERIES = (
    ("executors", "Executors the job's driver reports registered (the driver not counted)."),
    ("executor_target", "Executors the autoscaler wants for the job's owner."),
    (
        "backlog",
        "Records the job's sources had beyond its newest epoch's end (rows; files for a "
        "files source).",
    ),
    (
        "utilization",
        "Ratio (1 = the whole interval): the newest epoch's duration over the trigger "
        "interval in force (none at trigger 0); above 1 the epochs overrun their trigger.",
    ),
)
STEPS = ("total", "write", "commit", "spark")
_STEPS_HELP = (
    "Committed epochs' duration by step: total (Spark's triggerExecution, the whole "
    "micro-batch), write (pin to decide: transform and sinks' prepare), commit (decide to "
    "committed: the sinks' commit), spark (total less write and commit: planning, offsets "
    "and Spark's logs). The store keeps these timestamps, not a finer split."
)


class Histogram:
    """A cumulative histogram of seconds, as Prometheus expects it; thread-safe."""

    def __init__(self, buckets: Sequence[float] = BUCKETS) -> None:
        self._lock = threading.Lock()
        self.buckets = tuple(buckets)
        self.counts = [0] * (len(self.buckets) + 1)
        self.total = 0.0
        self.n = 0

    def observe(self, seconds: float) -> None:
        with self._lock:
            self.counts[bisect_left(self.buckets, seconds)] += 1
            self.total += seconds
            self.n += 1

    def cumulative(self) -> tuple[list[tuple[str, float]], float]:
        """``([(le, count), ..., ("+Inf", n)], sum)`` for a HistogramMetricFamily."""
        with self._lock:
            out, acc = [], 0
            for bound, c in zip(self.buckets, self.counts, strict=False):
                acc += c
                out.append((repr(float(bound)), float(acc)))
            out.append(("+Inf", float(self.n)))
            return out, self.total


@dataclass
class _JobTotals:
    """What the collector has folded of one job so far."""

    steps: dict[str, Histogram] = field(
        default_factory=lambda: {s: Histogram(EPOCH_BUCKETS) for s in STEPS}
    )
    control_latency: Histogram = field(default_factory=lambda: Histogram(CONTROL_BUCKETS))
    rows: float = 0.0
    last_epoch: int = -1
    recent: deque[EpochRecord] = field(default_factory=lambda: deque(maxlen=RATE_EPOCHS))
    control_version: int | None = None
    controls_open: bool = True  # an event seen PENDING: read again until it resolves
    seen_controls: deque[str] = field(default_factory=lambda: deque(maxlen=_SEEN_CONTROLS_KEPT))

    def fold_epochs(self, epochs: Iterable[EpochRecord]) -> None:
        """Count each committed epoch newer than the last one counted, oldest first."""
        for e in sorted(epochs, key=lambda e: e.epoch):
            if e.committed_at is None or e.epoch <= self.last_epoch:
                continue
            self.last_epoch = e.epoch
            self.rows += e.rows_read or 0
            self.recent.append(e)
            for step, seconds in epoch_steps(e).items():
                self.steps[step].observe(seconds)

    def fold_controls(self, events: Iterable[ControlEvent]) -> None:
        """Count the apply latency of each event applied since the last read, once."""
        self.controls_open = False
        for ev in events:
            if ev.applied_at is None:
                self.controls_open = self.controls_open or ev.ended_at is None
                continue
            if ev.control_id in self.seen_controls:
                continue
            self.seen_controls.append(ev.control_id)
            self.control_latency.observe(max(0.0, ev.applied_at - ev.created_at))


def epoch_steps(e: EpochRecord) -> dict[str, float]:
    """An epoch's duration by step, in seconds; a step whose timestamps are missing is left
    out (``spark``: when Spark's duration is known and not below stoker's own steps)."""
    out: dict[str, float] = {}
    if e.decided_at is not None:
        out["write"] = max(0.0, e.decided_at - e.pinned_at)
        if e.committed_at is not None:
            out["commit"] = max(0.0, e.committed_at - e.decided_at)
    if e.duration_ms is not None:
        out["total"] = e.duration_ms / 1000.0
        own = out.get("write", 0.0) + out.get("commit", 0.0)
        if out["total"] >= own:
            out["spark"] = out["total"] - own
    elif e.committed_at is not None:
        out["total"] = max(0.0, e.committed_at - e.pinned_at)
    return out


def rates(recent: Sequence[EpochRecord], now: float) -> tuple[float, float]:
    """(input, processing) rows per second over ``recent`` epochs: rows over the wall time
    from the first one's pin until ``now``, and rows over the time the epochs took."""
    if not recent:
        return 0.0, 0.0
    rows = sum(e.rows_read or 0 for e in recent)
    wall = now - min(e.pinned_at for e in recent)
    busy = 0.0
    for e in recent:
        if e.duration_ms is not None:
            busy += e.duration_ms / 1000.0
        elif e.committed_at is not None:
            busy += max(0.0, e.committed_at - e.pinned_at)
    return (rows / wall if wall > 0 else 0.0), (rows / busy if busy > 0 else 0.0)


class StokerCollector(Collector):
    """Every stoker series, read from the store (through the manager) at each scrape."""

    def __init__(
        self,
        manager: JobManager,
        supervisor: Supervisor | None,
        submit_latency: Histogram,
        rescale_tally: RescaleTally,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.manager = manager
        self.supervisor = supervisor
        self.submit_latency = submit_latency
        self.rescale_tally = rescale_tally
        self.clock = clock
        self._jobs: dict[str, _JobTotals] = {}
        self._lock = threading.Lock()  # two scrapes at once fold each epoch once
        self._live_owners: set[str] | None = None  # owners live at the last scrape (rescales)

    def collect(self) -> Iterator[Metric]:
        # One read of the jobs table per scrape: the live records, a count
        # per state of all of them, the counters. At 10,000 jobs the scrape read every job
        # three times and wrote series for each; it is now bounded by the live ones.
        snap = self.manager.store.fleet_snapshot()
        jobs = [r for r in snap.live if r.kind == JobKind.JOB]
        apps = [r for r in snap.live if r.kind == JobKind.APPLICATION]
        yield from self._overall(snap, jobs, apps)
        with self._lock:
            totals = self._fold(jobs)
            yield from self._per_job(jobs, totals)

    # the fleet's totals --------------------------------------------------------------------
    def _overall(
        self, snap: FleetSnapshot, jobs: Sequence[JobRecord], apps: Sequence[JobRecord]
    ) -> Iterator[Metric]:
        yield _by_state("stoker_jobs", "Jobs by state.", snap.by_state, JobKind.JOB)
        yield _by_state(
            "stoker_applications", "Applications by state.", snap.by_state, JobKind.APPLICATION
        )
        yield CounterMetricFamily(
            "stoker_attempts_started_total",
            "Attempts started (all jobs).",
            snap.counters.get("attempts", 0),
        )
        yield CounterMetricFamily(
            "stoker_epochs_committed_total",
            "Epochs committed (all jobs).",
            snap.counters.get("epochs_committed", 0),
        )
        leader = GaugeMetricFamily(
            "stoker_leader", "1 if this manager holds the leader lease.", labels=["manager"]
        )
        leader.add_metric(["self"], 1.0 if self.supervisor and self.supervisor.is_leader else 0.0)
        yield leader
        yield _histogram(
            "stoker_submit_latency_seconds", "Time to answer POST /v1/jobs.", self.submit_latency
        )
        # Scaling, per live job and application (an application's job: its application's
        # target); a series a job has no value for yet is left out.
        series = self.manager.scaling_series(snap.live)
        for name, help_text in _SCALING_SERIES:
            g = GaugeMetricFamily(f"stoker_job_{name}", help_text, labels=["job_id"])
            for jid, value in sorted(series[name].items()):
                g.add_metric([jid], value)
            yield g
        for name, help_text in _APPLICATION_SERIES:
            g = GaugeMetricFamily(f"stoker_application_{name}", help_text, labels=["app_id"])
            for aid, value in sorted(series[f"application_{name}"].items()):
                g.add_metric([aid], value)
            yield g
        rescales = CounterMetricFamily(
            "stoker_rescales_total",
            "Rescales recorded (all owners), by kind: decision, observed, bounds.",
            labels=["kind"],
        )
        owners = self._owners(snap.live)
        for kind, value in sorted(self.manager.rescale_totals(self.rescale_tally, owners).items()):
            rescales.add_metric([kind], value)
        yield rescales
        yield from self._standbys(jobs, apps)

    def _owners(self, live: Sequence[JobRecord]) -> list[JobRecord]:
        """The live owners, and those live at the last scrape that have ended since (read
        once more, ended, so the tally counts their last rescales and then lets them go).
        The first scrape reads every owner, as before: the rescales of the ended ones are
        counted once (the total is fleet-wide), then never read again."""
        with self._lock:
            owners = [r for r in live if r.app_id is None]
            now_live = {str(r.job_id) for r in owners}
            if self._live_owners is None:
                every = self.manager.store.list_jobs(kind=None)
                owners += [r for r in every if r.app_id is None and r.state.terminal]
            for jid in sorted((self._live_owners or set()) - now_live):
                try:
                    owners.append(self.manager.store.get_job(JobId(jid)))
                except JobNotFound:
                    continue  # deleted since (retention of ended jobs)
            self._live_owners = now_live
            return owners

    def _standbys(self, jobs: Sequence[JobRecord], apps: Sequence[JobRecord]) -> Iterator[Metric]:
        """Warm standby drivers: 1 for a live job whose standby is READY, 0 for one that asked
        for a standby and has none ready now (warming, just taken over, failed); and the
        attempts this manager handed to a standby."""
        ready = {
            s.job_id
            for s in self.manager.store.list_standbys()
            if s.state == "READY" and s.role == "standby"
        }
        g = GaugeMetricFamily(
            "stoker_job_standby_ready",
            "1 if the job's warm standby driver is ready to take over, 0 if it asked for one "
            "and none is ready now.",
            labels=["job_id"],
        )
        for j in jobs:
            if j.spec.get("standby") and not j.state.terminal:
                g.add_metric([str(j.job_id)], 1.0 if j.job_id in ready else 0.0)
        yield g
        a = GaugeMetricFamily(
            "stoker_application_standby_ready",
            "1 if the application's warm standby driver is ready to take over, 0 if it asked "
            "for one and none is ready now.",
            labels=["app_id"],
        )
        for app in apps:
            if app.spec.get("standby") and not app.state.terminal:
                a.add_metric([str(app.job_id)], 1.0 if app.job_id in ready else 0.0)
        yield a
        handed = self.supervisor.standbys.handed if self.supervisor is not None else 0
        yield CounterMetricFamily(
            "stoker_standby_takeovers_total",
            "Attempts this manager handed to a warm standby driver.",
            handed,
        )

    # per job -------------------------------------------------------------------------------
    def _fold(self, jobs: Sequence[JobRecord]) -> dict[str, _JobTotals]:
        """Fold what is new since the last scrape; reads only jobs that can have changed."""
        known = {str(j.job_id) for j in jobs}
        for gone in set(self._jobs) - known:
            del self._jobs[gone]  # ended (its series leave the scrape) or deleted
        fresh: list[JobId] = []
        seen: list[JobId] = []
        want_controls: list[JobId] = []
        for j in jobs:
            t = self._jobs.setdefault(str(j.job_id), _JobTotals())
            (seen if t.last_epoch >= 0 else fresh).append(j.job_id)
            if t.controls_open or t.control_version != j.control_version:
                want_controls.append(j.job_id)
        # A job folded before reads its newest few epochs (scrapes come far more often than
        # RATE_EPOCHS epochs); deeper only when all of those are new (some may lie below).
        epochs = self.manager.recent_epochs_of(seen, RATE_EPOCHS)
        deeper = [
            jid
            for jid, es in epochs.items()
            if len(es) >= RATE_EPOCHS and min(e.epoch for e in es) > self._jobs[jid].last_epoch + 1
        ]
        epochs.update(self.manager.recent_epochs_of(fresh + deeper, EPOCHS_READ))
        controls = self.manager.recent_controls_of(want_controls, CONTROLS_READ)
        for j in jobs:
            t = self._jobs[str(j.job_id)]
            if j.job_id in epochs:
                t.fold_epochs(epochs[j.job_id])
            if j.job_id in controls:
                t.fold_controls(controls[j.job_id])
                t.control_version = j.control_version
        return self._jobs

    def _per_job(
        self, jobs: Sequence[JobRecord], totals: Mapping[str, _JobTotals]
    ) -> Iterator[Metric]:
        now = self.clock()
        steps = HistogramMetricFamily(
            "stoker_job_epoch_duration_seconds", _STEPS_HELP, labels=["job_id", "step"]
        )
        control = HistogramMetricFamily(
            "stoker_job_control_apply_latency_seconds",
            "From a control event's submission to the epoch boundary that applied it.",
            labels=["job_id"],
        )
        rows = CounterMetricFamily(
            "stoker_job_rows_total",
            "Rows read by the job's committed epochs (those this manager has seen: from the "
            f"newest {EPOCHS_READ} at its start).",
            labels=["job_id"],
        )
        in_rate = GaugeMetricFamily(
            "stoker_job_input_rows_per_second",
            f"Rows read over the wall time since the newest {RATE_EPOCHS} epochs began "
            "(0 once the job has ended).",
            labels=["job_id"],
        )
        proc_rate = GaugeMetricFamily(
            "stoker_job_processing_rows_per_second",
            f"Rows over the time the newest {RATE_EPOCHS} epochs took (Spark's processing rate).",
            labels=["job_id"],
        )
        last_epoch = GaugeMetricFamily(
            "stoker_job_last_epoch", "The job's newest committed epoch.", labels=["job_id"]
        )
        attempts = CounterMetricFamily(
            "stoker_job_attempts_total", "Attempts of the job started so far.", labels=["job_id"]
        )
        restarts = CounterMetricFamily(
            "stoker_job_restarts_total",
            "Attempts after the first: restarts after a failure, a failover, a resume.",
            labels=["job_id"],
        )
        state = GaugeMetricFamily(
            "stoker_job_state", "1 for the job's state now.", labels=["job_id", "state"]
        )
        for j in jobs:
            jid = str(j.job_id)
            t = totals[jid]
            for step in STEPS:
                buckets, total = t.steps[step].cumulative()
                steps.add_metric([jid, step], buckets, total)
            buckets, total = t.control_latency.cumulative()
            control.add_metric([jid], buckets, total)
            rows.add_metric([jid], t.rows)
            live_in, live_proc = rates(t.recent, now)
            in_rate.add_metric([jid], 0.0 if j.state.terminal else live_in)
            proc_rate.add_metric([jid], live_proc)
            if t.last_epoch >= 0:
                last_epoch.add_metric([jid], float(t.last_epoch))
            attempts.add_metric([jid], float(j.current_attempt))
            restarts.add_metric([jid], float(max(0, j.current_attempt - 1)))
            state.add_metric([jid, str(j.state)], 1.0)
        yield from (steps, control, rows, in_rate, proc_rate, last_epoch, attempts, restarts, state)
        # Spark's own figures of each job's newest epoch: rates, phases, stateful operators.
        yield from progress_families(
            (str(j.job_id), newest_progress(totals[str(j.job_id)].recent)) for j in jobs
        )


def _by_state(
    name: str, help_text: str, by_state: Mapping[tuple[JobKind, JobState], int], kind: JobKind
) -> GaugeMetricFamily:
    counts = {str(s): 0.0 for s in JobState}
    for (k, state), n in by_state.items():
        if k == kind:
            counts[str(state)] += float(n)
    g = GaugeMetricFamily(name, help_text, labels=["state"])
    for s, count in sorted(counts.items()):
        g.add_metric([s], count)
    return g


def _histogram(name: str, help_text: str, h: Histogram) -> HistogramMetricFamily:
    buckets, total = h.cumulative()
    return HistogramMetricFamily(name, help_text, buckets=buckets, sum_value=total)


def registry_for(
    manager: JobManager,
    supervisor: Supervisor | None,
    submit_latency: Histogram,
    rescale_tally: RescaleTally,
) -> CollectorRegistry:
    """A registry of the app's own holding its :class:`StokerCollector`."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StokerCollector(manager, supervisor, submit_latency, rescale_tally))
    return registry


def exposition(registry: CollectorRegistry) -> tuple[bytes, str]:
    """The registry's series as Prometheus text, and its content type."""
    from prometheus_client import CONTENT_TYPE_LATEST

    return render(registry.collect()), CONTENT_TYPE_LATEST


__all__ = [
    "Histogram",
    "StokerCollector",
    "epoch_steps",
    "exposition",
    "rates",
    "registry_for",
]
