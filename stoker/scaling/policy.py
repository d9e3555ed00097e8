"""Scaling policies: from an owner's recent epochs to an executor target. Pure: no store, no
clock of their own (time comes in :attr:`Signals.now`), no Spark.

The default policy follows the shape of Flink's operator autoscaler, adapted to micro-batches:
an epoch's duration is the time the owner's query was busy, so a window of epochs gives the
busy fraction; of that duration, only the time its sinks' Spark writes took (the transform runs
inside them) is work that more executors share (the rest, planning, offsets and the commit
protocol, is a fixed cost per epoch that they do not), so rows read over executor-seconds of
that work give the true processing rate of one executor (as DS2 and Flink's autoscaler use
busy time, not wall time); the rate rows arrive at (read plus backlog growth) and the backlog
to catch up give the rate wanted; wanted over (rate per executor x target utilization) is the
executor count.
A dead band, a stabilization time, a cooldown and a bounded scale-down step keep it from
flapping.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from stoker.scalespec import ScalingSpec

UP = "up"
DOWN = "down"
HOUR = 3600.0


@dataclass(frozen=True)
class EpochSample:
    """One committed epoch of one of the owner's jobs, as the scaler reads it from the store."""

    job_id: str
    epoch: int
    at: float  # committed at (store clock)
    duration_s: float | None  # Spark's triggerExecution
    rows: int | None  # rows read
    backlog: int | None  # rows (or files) the sources had beyond the epoch's end
    executors: int | None  # executors at the epoch's end
    cores: int | None
    # The part of ``duration_s`` spent on its rows (its sinks' Spark writes, the transform
    # inside them): the work more executors share. The rest is the epoch's fixed cost
    # (planning, offsets, the store's and the sinks' protocol), which they do not. None:
    # unknown, the whole duration counts as work.
    work_s: float | None = None

    @property
    def work(self) -> float:
        """Seconds of the epoch that more executors would shorten."""
        whole = self.duration_s or 0.0
        return whole if self.work_s is None else min(self.work_s, whole or self.work_s)

    @property
    def start(self) -> float:
        """When the epoch began (its commit time less its duration)."""
        return self.at - (self.duration_s or 0.0)


@dataclass(frozen=True)
class Signals:
    """What a policy sees of one owner at one moment."""

    now: float
    samples: Sequence[EpochSample]  # oldest first; may reach back beyond the policy's window
    triggers: Mapping[str, float]  # job id -> trigger interval in force (s); 0: back to back
    executors: int | None  # executors the owner's driver reports now (None: no report yet)
    cores: int | None = None
    target: int | None = None  # the executor target set now (None: none)
    running_since: float | None = None  # epochs before this (an earlier attempt) are ignored
    # job id -> when its epoch now running was pinned (an epoch in flight: the job is not idle,
    # however long since its last commit)
    in_flight: Mapping[str, float] = field(default_factory=dict)


@dataclass
class PolicyMemory:
    """What a policy keeps of one owner between calls; lost with the leader (a new leader
    re-stabilizes, and takes the cooldown from the last decision in the store)."""

    direction: str | None = None  # the change wanted since ``since``: "up" or "down"
    since: float | None = None
    last_change_at: float | None = None  # the last decided change
    # Warm-up: the first epoch seen of each job under the driver that started at
    # ``started``; the first epochs from there on are left out.
    started: float | None = None
    first_epoch: dict[str, int] = field(default_factory=dict)
    changes: list[float] = field(default_factory=list)  # when the policy's changes were decided


@dataclass(frozen=True)
class Decision:
    """A policy's answer: ``target`` None keeps the current size. ``signals`` (JSON) goes
    into the rescale record as is."""

    target: int | None
    reason: str
    signals: dict[str, Any] = field(default_factory=dict)


class ScalingPolicy(Protocol):
    """Decides an owner's executor target from its signals. ``memory`` is the policy's own,
    per owner, kept by the caller between calls."""

    @property
    def name(self) -> str:
        """The policy's name, recorded with each decision."""
        ...

    def decide(self, spec: ScalingSpec, signals: Signals, memory: PolicyMemory) -> Decision:
        """The target for this moment (None: keep), updating ``memory``."""
        ...


@dataclass(frozen=True)
class _JobWindow:
    """One job's figures over its window."""

    samples: list[EpochSample]
    wall_s: float
    rows: int
    busy_s: float  # sum of epoch durations
    executor_s: float  # sum of work (the rows' part of each duration) x executors
    fixed_s: float | None  # the median fixed cost of an epoch (duration less work), if known
    backlog: int | None  # the newest known
    growth: float  # backlog change per second over the newest epochs
    arrival: float | None  # rows arriving per second over the newest epochs (read + growth)
    fresh_arrival: float | None  # the same over the newest ``fresh_epochs`` only
    backlog_reset: bool  # the backlog fell by more than was read: offsets re-based, ignored
    trigger_s: float
    recent: int  # epochs within the last window_s
    recent_rows: int  # rows read by those

    @property
    def processed(self) -> float:
        return self.rows / self.wall_s

    @property
    def busy(self) -> float:
        return min(1.0, self.busy_s / self.wall_s)


@dataclass(frozen=True)
class DefaultPolicy:
    """Flink-style target from true processing rate, input rate and backlog; see the module.

    ``window_s`` / ``min_epochs``: each job's window is its epochs of the last ``window_s``
    seconds, or its last ``min_epochs`` epochs if that reaches further back. ``boundary``: the
    dead band around the target utilization. ``max_scale_down``: one step removes at most
    this share of the executors (Flink's ``scale-down.max-factor``). ``growth_epochs``: the
    newest epochs whose backlog gives its growth; it grows when that adds more than
    ``growth_tolerance`` of the rate read. ``warmup_epochs``: the first epochs of each job
    after its driver started (JVMs warming up, Python workers starting, a start-up backlog)
    say nothing of its steady cost and are left out, as Flink's autoscaler ignores the
    metrics of a stabilization period after a job starts. ``fresh_epochs``: the arrival rate
    taken is the higher of the window's and that of the newest few epochs, so that a step up
    in input is sized from the new rate at once, not from a window still full of the old one
    (scaling up in one decision instead of several, each paying a stabilization and a
    cooldown); the higher rate also makes scaling down the more careful.
    """

    name: str = "default"
    window_s: float = 60.0
    min_epochs: int = 10
    boundary: float = 0.3
    max_scale_down: float = 0.6
    growth_epochs: int = 10
    growth_tolerance: float = 0.05
    warmup_epochs: int = 3
    fresh_epochs: int = 3

    @staticmethod
    def _ran(signals: Signals) -> bool:
        """Whether the owner's driver has committed an epoch (since it started)."""
        since = signals.running_since
        return any(since is None or s.at >= since for s in signals.samples)

    def lookback(self, triggers: Mapping[str, float]) -> float:
        """How far back the caller should read epochs for one decision."""
        slowest = max([0.5, *triggers.values()])
        return max(self.window_s, 2 * self.min_epochs * slowest) * 2

    def decide(self, spec: ScalingSpec, signals: Signals, memory: PolicyMemory) -> Decision:
        now = signals.now
        reported = signals.executors
        current = signals.target if signals.target is not None else reported
        lo_bound = spec.min_executors
        hi_bound = (
            spec.max_executors
            if spec.max_executors is not None
            else max(lo_bound, current or lo_bound)
        )
        sig: dict[str, Any] = {
            "executors": reported,
            "cores": signals.cores,
            "target": signals.target,
            "min_executors": lo_bound,
            "max_executors": hi_bound,
            "target_utilization": spec.target_utilization,
        }

        def keep(reason: str, reset: bool = True) -> Decision:
            if reset:
                memory.direction = memory.since = None
            return Decision(None, reason, sig)

        def change(target: int, reason: str) -> Decision:
            memory.direction = memory.since = None
            memory.last_change_at = now
            memory.changes = [t for t in memory.changes if now - t < HOUR] + [now]
            sig["wanted"] = target
            return Decision(target, reason, sig)

        if current is None:
            return keep("no executors reported yet")
        if current == 0 and signals.target is None and not self._ran(signals):
            # Its cluster is starting (no executor registered, nothing committed by this
            # driver): the executors it was started with are on their way, not missing.
            return keep("no executor registered yet and no epoch committed: starting")
        # Bounds first, at once: a user changed them (PUT /resources) or the owner started
        # outside them. No stabilization: the user asked.
        if current < lo_bound:
            return change(lo_bound, f"{current} executors is below the minimum {lo_bound}")
        if current > hi_bound:
            return change(hi_bound, f"{current} executors is above the maximum {hi_bound}")

        windows = self._windows(signals, memory)
        sig["window_s"] = round(max((w.wall_s for w in windows.values()), default=0.0), 3)
        sig["epochs"] = sum(len(w.samples) for w in windows.values())
        if not windows:
            return keep("no epochs: nothing to decide on")
        rows = sum(w.rows for w in windows.values())
        backlogs = [w.backlog for w in windows.values() if w.backlog is not None]
        backlog = sum(backlogs) if backlogs else None
        sig["rows"] = rows
        sig["backlog"] = backlog
        if self._idle(windows, signals):
            wanted = lo_bound
            sig["idle"] = True
            direction = DOWN if wanted < current else None
            why = f"idle: no rows and no backlog over {self.window_s:g} s"
            if direction is None:
                return keep(f"{why}; already at the minimum")
            return self._gate(spec, sig, memory, now, DOWN, wanted, why, keep, change)
        if not any(w.recent for w in windows.values()):
            return keep(
                f"no epochs in the last {self.window_s:g} s and a backlog not known to be 0"
            )
        if rows == 0:
            return keep("no rows read in the window: nothing to measure a rate from")
        measured = {j: w for j, w in windows.items() if w.rows > 0 and w.busy_s > 0}
        if not measured:
            return keep("no epoch durations reported: no processing rate")

        executors_now = max(1, reported or 1)
        catch_up = max(spec.catch_up_s, 1.0)
        need = 0.0  # executors' worth of work per second the owner wants done
        processed = arrival = growth = 0.0
        true_rates: list[float] = []
        for w in windows.values():
            job_arrival = w.processed if w.arrival is None else w.arrival
            if w.fresh_arrival is not None:
                job_arrival = max(job_arrival, w.fresh_arrival)
            wanted_rate = job_arrival + (w.backlog or 0) / catch_up
            processed += w.processed
            arrival += job_arrival
            growth += w.growth
            if w.rows == 0 or w.busy_s == 0:
                continue
            if w.trigger_s <= 0:
                # Back to back: time says nothing of spare capacity. Take the current size as
                # right at the target utilization while the job keeps up; scale with demand
                # beyond what it reads.
                need += executors_now * spec.target_utilization * wanted_rate / w.processed
            elif w.executor_s > 0:
                rate = w.rows / w.executor_s  # rows per second of one busy executor
                true_rates.append(rate)
                need += wanted_rate / rate
        busy = max(w.busy for w in windows.values())
        required = need / executors_now  # the utilization the current size would need
        growing = (
            backlog is not None
            and backlog > 0
            and growth > self.growth_tolerance * max(processed, 1.0)
        )
        back_to_back = any(w.trigger_s <= 0 for w in measured.values())
        sig.update(
            busy=round(busy, 4),
            input_rate=round(arrival, 3),
            processed_rate=round(processed, 3),
            backlog_growth=round(growth, 3),
            true_rate_per_executor=round(min(true_rates), 3) if true_rates else None,
            wanted_rate=round(arrival + (backlog or 0) / catch_up, 3),
            required_utilization=round(required, 4),
            growing=growing,
        )
        fixed = [w.fixed_s for w in windows.values() if w.fixed_s is not None]
        if fixed:
            sig["fixed_cost_s"] = round(max(fixed), 3)  # per epoch, the costliest job's
        if any(w.backlog_reset for w in windows.values()):
            sig["backlog_reset"] = True
        wanted = math.ceil(need / spec.target_utilization - 1e-9)
        wanted = min(hi_bound, max(lo_bound, wanted))
        sig["unclamped"] = wanted
        lo = spec.target_utilization - self.boundary
        hi = spec.target_utilization + self.boundary
        if wanted > current:
            if required <= hi and not growing:
                return keep(
                    f"utilization {required:.2f} within [{lo:.2f}, {hi:.2f}], backlog not growing"
                )
            if busy < lo and not back_to_back:
                return keep(
                    f"backlog grows while epochs are busy {busy:.0%} of the time: executors "
                    "are not what holds it back (a rate limit?)"
                )
            why = (
                f"needs {need:.2f} executors' work at utilization "
                f"{spec.target_utilization:g} (required {required:.2f} now"
                + (", backlog growing" if growing else "")
                + ")"
            )
            return self._gate(spec, sig, memory, now, UP, wanted, why, keep, change)
        if wanted < current:
            if required >= lo or growing:
                return keep(
                    f"utilization {required:.2f} within [{lo:.2f}, {hi:.2f}]"
                    if not growing
                    else "backlog growing: no scale-down"
                )
            floor = math.ceil(current * (1.0 - self.max_scale_down) - 1e-9)
            wanted = max(wanted, floor, lo_bound)
            if wanted >= current:
                return keep("scale-down step too small")
            why = (
                f"needs {need:.2f} executors' work; required utilization {required:.2f} < {lo:.2f}"
            )
            return self._gate(spec, sig, memory, now, DOWN, wanted, why, keep, change)
        return keep(f"{current} executors is what is wanted")

    # helpers ------------------------------------------------------------------------------
    def _gate(
        self,
        spec: ScalingSpec,
        sig: dict[str, Any],
        memory: PolicyMemory,
        now: float,
        direction: str,
        wanted: int,
        why: str,
        keep: Any,
        change: Any,
    ) -> Decision:
        """Stabilization and cooldown between wanting a change and deciding it."""
        sig["wanted"] = wanted
        if memory.direction != direction:
            memory.direction, memory.since = direction, now
        held = now - (memory.since if memory.since is not None else now)
        sig["held_s"] = round(held, 3)
        if memory.last_change_at is not None and now - memory.last_change_at < spec.cooldown_s:
            left = spec.cooldown_s - (now - memory.last_change_at)
            return keep(f"wants {wanted} ({why}); cooldown {left:.0f} s left", reset=False)
        if held < spec.stabilization_s:
            return keep(
                f"wants {wanted} ({why}); held {held:.0f} of {spec.stabilization_s:g} s",
                reset=False,
            )
        recent = [t for t in memory.changes if now - t < HOUR]
        if len(recent) >= spec.max_rescales_per_hour:
            free_at = sorted(recent)[len(recent) - spec.max_rescales_per_hour] + HOUR
            return keep(
                f"wants {wanted} ({why}); {len(recent)} rescales in the last hour, the most "
                f"allowed (max_rescales_per_hour): the next in {free_at - now:.0f} s",
                reset=False,
            )
        return change(wanted, why)

    def _windows(self, signals: Signals, memory: PolicyMemory) -> dict[str, _JobWindow]:
        by_job: dict[str, list[EpochSample]] = {}
        since = signals.running_since
        for s in sorted(signals.samples, key=lambda s: (s.at, s.epoch)):
            if since is not None and s.at < since:
                continue
            by_job.setdefault(s.job_id, []).append(s)
        if self.warmup_epochs > 0:
            # Each job's first epochs seen under this driver are warm-up. Seen, not run: a
            # new leader takes the oldest epoch it reads as the first, and so waits a few
            # epochs more before it decides (it re-stabilizes anyway).
            if memory.started != since:
                memory.started, memory.first_epoch = since, {}
            for job, samples in by_job.items():
                memory.first_epoch.setdefault(job, samples[0].epoch)
            by_job = {
                job: kept
                for job, samples in by_job.items()
                if (
                    kept := [
                        s
                        for s in samples
                        if s.epoch >= memory.first_epoch[job] + self.warmup_epochs
                    ]
                )
            }
        out: dict[str, _JobWindow] = {}
        now = signals.now
        for job, samples in by_job.items():
            recent = [s for s in samples if s.at >= now - self.window_s]
            if len(recent) < self.min_epochs:
                recent = samples[-self.min_epochs :]
            start = min(now - self.window_s, recent[0].start)
            if since is not None:
                start = max(start, since)
            wall = max(now - start, 1e-3)
            execs_default = max(1, signals.executors or 1)
            rows = sum(s.rows or 0 for s in recent)
            busy_s = sum(s.duration_s or 0.0 for s in recent)
            # Executor time is the rows' work only: an epoch's fixed cost does not shrink with
            # more executors (counting it made a slow host read as a busy job, and a job
            # needing a fifth of an executor was scaled to its maximum).
            executor_s = sum(s.work * max(1, s.executors or execs_default) for s in recent)
            fixed = sorted((s.duration_s or 0.0) - s.work for s in recent if s.work_s is not None)
            known = [s for s in recent if s.backlog is not None]
            last = known[-self.growth_epochs :]
            growth, arrival, reset = 0.0, None, False
            measured = _arrival(recent, last)
            if measured is None and len(last) >= 2 and last[-1].at > last[0].at:
                reset = True
            elif measured is not None:
                growth, arrival = measured
            fresh = _arrival(recent, known[-self.fresh_epochs :])
            out[job] = _JobWindow(
                samples=recent,
                wall_s=wall,
                rows=rows,
                busy_s=busy_s,
                executor_s=executor_s,
                fixed_s=fixed[len(fixed) // 2] if fixed else None,
                backlog=known[-1].backlog if known else None,
                growth=growth,
                arrival=arrival,
                fresh_arrival=None if fresh is None or reset else fresh[1],
                backlog_reset=reset,
                trigger_s=float(signals.triggers.get(job, 0.5)),
                recent=sum(1 for s in recent if s.at >= now - self.window_s),
                recent_rows=sum(s.rows or 0 for s in recent if s.at >= now - self.window_s),
            )
        return out

    def _idle(self, windows: Mapping[str, _JobWindow], signals: Signals) -> bool:
        """Every job read no rows in the last ``window_s`` (Spark runs no epoch when nothing
        came: no epoch at all counts) and its newest known backlog is 0; the owner has run
        that long. An epoch in flight (a long one: no commit for a while) is not idleness."""
        if signals.in_flight:
            return False
        for w in windows.values():
            if w.recent_rows > 0 or w.backlog != 0:
                return False
        if signals.running_since is not None:
            return signals.now - signals.running_since >= self.window_s
        # Not known since when it runs: an epoch a whole window old says it ran that long.
        oldest = min(s.at for w in windows.values() for s in w.samples)
        return signals.now - oldest >= self.window_s


def _arrival(
    recent: Sequence[EpochSample], last: Sequence[EpochSample]
) -> tuple[float, float] | None:
    """(backlog growth, arrival) in rows per second over the epochs ``last`` (those of
    ``recent`` with a known backlog): rows that arrived = what they read + how much the
    backlog grew, over the same span. None when they span no time, or when less than nothing
    arrived: a source's backlog fell by more than was read (its offsets were re-based, e.g. a
    rate change), and that backlog history says nothing."""
    if len(last) < 2 or last[-1].at <= last[0].at:
        return None
    span = last[-1].at - last[0].at
    read = sum(s.rows or 0 for s in recent if last[0].at < s.at <= last[-1].at)
    grew = int(last[-1].backlog or 0) - int(last[0].backlog or 0)
    if read + grew < 0:
        return None
    return grew / span, (read + grew) / span


__all__ = [
    "DOWN",
    "UP",
    "Decision",
    "DefaultPolicy",
    "EpochSample",
    "PolicyMemory",
    "ScalingPolicy",
    "Signals",
]
