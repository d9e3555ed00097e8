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
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from stoker.scalespec import ScalingSpec
from stoker.scaling import verify, window
from stoker.scaling.signals import EpochSample, PolicyMemory, Signals

UP = "up"
DOWN = "down"
HOUR = 3600.0


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
        r = _Round.of(spec, signals, memory)
        early = self._unsized(r)
        if early is not None:
            return early
        windows = window.windows(self, signals, memory)
        early = self._unmeasured(r, windows)
        if early is not None:
            return early
        demand = self._demand(r, windows)
        wanted, capped, held = self._wanted(r, demand)
        return self._answer(r, windows, demand, wanted, capped, held)

    # the steps of a decision, in order ----------------------------------------------------
    def _unsized(self, r: _Round) -> Decision | None:
        """Before any epoch is read: nothing reported yet, a cluster starting, or a size
        outside the bounds (set at once: the user asked, no stabilization)."""
        current, signals = r.current, r.signals
        if current is None:
            return r.keep("no executors reported yet")
        if current == 0 and signals.target is None and not self._ran(signals):
            # Its cluster is starting (no executor registered, nothing committed by this
            # driver): the executors it was started with are on their way, not missing.
            return r.keep("no executor registered yet and no epoch committed: starting")
        if current < r.lo_bound:
            return r.change(r.lo_bound, f"{current} executors is below the minimum {r.lo_bound}")
        if current > r.hi_bound:
            return r.change(r.hi_bound, f"{current} executors is above the maximum {r.hi_bound}")
        return None

    def _unmeasured(self, r: _Round, windows: dict[str, window.JobWindow]) -> Decision | None:
        """The window read: a rollback of a scale-up that did not help, an idle owner, or too
        little in it to measure a rate from."""
        spec, memory, now, sig = r.spec, r.memory, r.now, r.sig
        current = r.size
        sig["window_s"] = round(max((w.wall_s for w in windows.values()), default=0.0), 3)
        sig["epochs"] = sum(len(w.samples) for w in windows.values())
        if not windows:
            return r.keep("no epochs: nothing to decide on")
        settled = memory.last_change_at is None or now - memory.last_change_at >= spec.cooldown_s
        rollback = verify.verdict(memory, r.signals, self.min_epochs) if settled else None
        if rollback is not None and rollback[0] < current:
            sig["rolled_back_from"] = current
            return r.change(max(r.lo_bound, rollback[0]), rollback[1])
        rows = sum(w.rows for w in windows.values())
        backlogs = [w.backlog for w in windows.values() if w.backlog is not None]
        sig["rows"] = rows
        sig["backlog"] = sum(backlogs) if backlogs else None
        if window.idle(self, windows, r.signals):
            wanted = r.lo_bound
            sig["idle"] = True
            why = f"idle: no rows and no backlog over {self.window_s:g} s"
            if wanted >= current:
                return r.keep(f"{why}; already at the minimum")
            return self._gate(r, DOWN, wanted, why)
        if not any(w.recent for w in windows.values()):
            return r.keep(
                f"no epochs in the last {self.window_s:g} s and a backlog not known to be 0"
            )
        if rows == 0:
            return r.keep("no rows read in the window: nothing to measure a rate from")
        if not any(w.rows > 0 and w.busy_s > 0 for w in windows.values()):
            return r.keep("no epoch durations reported: no processing rate")
        return None

    def _demand(self, r: _Round, windows: dict[str, window.JobWindow]) -> _Demand:
        """The executors' worth of work per second the owner wants done, from each job's
        arrival rate, backlog and true processing rate; recorded in the signals."""
        spec, sig = r.spec, r.sig
        executors_now = max(1, r.signals.executors or 1)
        catch_up = max(spec.catch_up_s, 1.0)
        need = 0.0
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
        backlog = sig["backlog"]
        d = _Demand(
            need=need,
            busy=max(w.busy for w in windows.values()),
            required=need / executors_now,  # the utilization the current size would need
            growing=(
                backlog is not None
                and backlog > 0
                and growth > self.growth_tolerance * max(processed, 1.0)
            ),
            back_to_back=any(
                w.trigger_s <= 0 for w in windows.values() if w.rows > 0 and w.busy_s > 0
            ),
        )
        sig.update(
            busy=round(d.busy, 4),
            input_rate=round(arrival, 3),
            processed_rate=round(processed, 3),
            backlog_growth=round(growth, 3),
            true_rate_per_executor=round(min(true_rates), 3) if true_rates else None,
            wanted_rate=round(arrival + (backlog or 0) / catch_up, 3),
            required_utilization=round(d.required, 4),
            growing=d.growing,
        )
        fixed = [w.fixed_s for w in windows.values() if w.fixed_s is not None]
        if fixed:
            sig["fixed_cost_s"] = round(max(fixed), 3)  # per epoch, the costliest job's
        if any(w.backlog_reset for w in windows.values()):
            sig["backlog_reset"] = True
        return d

    def _wanted(self, r: _Round, d: _Demand) -> tuple[int, str, int | None]:
        """The size the demand asks for, within the bounds, the tasks the owner can run and
        the ceiling a scale-up that did not help left; the words for a task cap; that
        ceiling."""
        sig, signals = r.sig, r.signals
        wanted = math.ceil(d.need / r.spec.target_utilization - 1e-9)
        wanted = min(r.hi_bound, max(r.lo_bound, wanted))
        sig["unclamped"] = wanted
        capped = ""
        cap = _task_cap(signals)
        if cap is not None and wanted > max(cap, r.lo_bound):
            wanted = max(cap, r.lo_bound)
            sig["task_cap"] = cap
            capped = (
                f"; capped at {wanted}: the {signals.max_tasks} state partitions (max "
                "parallelism) give no task to more executors"
            )
        held = verify.ceiling(r.memory, r.now)
        if held is not None and wanted > max(held, r.size):
            wanted = max(held, r.size)
            sig["held_at"] = held
        return wanted, capped, held

    def _answer(
        self,
        r: _Round,
        windows: dict[str, window.JobWindow],
        d: _Demand,
        wanted: int,
        capped: str,
        held: int | None,
    ) -> Decision:
        """Up, down or keep: the dead band around the target utilization, a growing backlog,
        the scale-down step, then stabilization and cooldown (:meth:`_gate`)."""
        spec, memory, now, sig, current = r.spec, r.memory, r.now, r.sig, r.size
        required, growing = d.required, d.growing
        lo = spec.target_utilization - self.boundary
        hi = spec.target_utilization + self.boundary
        if held is not None and sig.get("unclamped", 0) > current >= held:
            left = (memory.ceiling_until or now) - now
            return r.keep(
                f"wants {sig['unclamped']}, held at {current}: a scale-up above {held} did not "
                f"help ({left / 60:.0f} min more)"
            )
        if wanted > current:
            if required <= hi and not growing:
                return r.keep(
                    f"utilization {required:.2f} within [{lo:.2f}, {hi:.2f}], backlog not growing"
                )
            if d.busy < lo and not d.back_to_back:
                return r.keep(
                    f"backlog grows while epochs are busy {d.busy:.0%} of the time: executors "
                    "are not what holds it back (a rate limit?)"
                )
            why = (
                f"needs {d.need:.2f} executors' work at utilization "
                f"{spec.target_utilization:g} (required {required:.2f} now"
                + (", backlog growing" if growing else "")
                + ")"
                + capped
            )
            decided = self._gate(r, UP, wanted, why)
            if decided.target is not None:
                samples = [s for w in windows.values() for s in w.samples]
                verify.expect(memory, now, current, decided.target, samples)
            return decided
        if wanted < current:
            if required >= lo or growing:
                return r.keep(
                    f"utilization {required:.2f} within [{lo:.2f}, {hi:.2f}]"
                    if not growing
                    else "backlog growing: no scale-down"
                )
            floor = math.ceil(current * (1.0 - self.max_scale_down) - 1e-9)
            wanted = max(wanted, floor, r.lo_bound)
            if wanted >= current:
                return r.keep("scale-down step too small")
            why = (
                f"needs {d.need:.2f} executors' work; required utilization "
                f"{required:.2f} < {lo:.2f}"
            )
            return self._gate(r, DOWN, wanted, why)
        return r.keep(f"{current} executors is what is wanted")

    # helpers ------------------------------------------------------------------------------
    def _gate(self, r: _Round, direction: str, wanted: int, why: str) -> Decision:
        """Stabilization and cooldown between wanting a change and deciding it."""
        spec, memory, now, sig = r.spec, r.memory, r.now, r.sig
        sig["wanted"] = wanted
        if memory.direction != direction:
            memory.direction, memory.since = direction, now
        held = now - (memory.since if memory.since is not None else now)
        sig["held_s"] = round(held, 3)
        if memory.last_change_at is not None and now - memory.last_change_at < spec.cooldown_s:
            left = spec.cooldown_s - (now - memory.last_change_at)
            return r.keep(f"wants {wanted} ({why}); cooldown {left:.0f} s left", reset=False)
        if held < spec.stabilization_s:
            return r.keep(
                f"wants {wanted} ({why}); held {held:.0f} of {spec.stabilization_s:g} s",
                reset=False,
            )
        recent = [t for t in memory.changes if now - t < HOUR]
        if len(recent) >= spec.max_rescales_per_hour:
            free_at = sorted(recent)[len(recent) - spec.max_rescales_per_hour] + HOUR
            return r.keep(
                f"wants {wanted} ({why}); {len(recent)} rescales in the last hour, the most "
                f"allowed (max_rescales_per_hour): the next in {free_at - now:.0f} s",
                reset=False,
            )
        return r.change(wanted, why)


@dataclass
class _Round:
    """One decision: its inputs, the bounds in force, the signals it records, and its two
    answers (keep, change), which update the policy's memory."""

    spec: ScalingSpec
    signals: Signals
    memory: PolicyMemory
    current: int | None  # the target in force, else the executors reported
    lo_bound: int
    hi_bound: int
    sig: dict[str, Any]

    @property
    def now(self) -> float:
        return self.signals.now

    @property
    def size(self) -> int:
        """The current size, once :meth:`DefaultPolicy._unsized` let the decision go on."""
        assert self.current is not None
        return self.current

    @classmethod
    def of(cls, spec: ScalingSpec, signals: Signals, memory: PolicyMemory) -> _Round:
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
        return cls(spec, signals, memory, current, lo_bound, hi_bound, sig)

    def keep(self, reason: str, reset: bool = True) -> Decision:
        if reset:
            self.memory.direction = self.memory.since = None
        return Decision(None, reason, self.sig)

    def change(self, target: int, reason: str) -> Decision:
        memory, now = self.memory, self.now
        memory.direction = memory.since = None
        memory.last_change_at = now
        memory.changes = [t for t in memory.changes if now - t < HOUR] + [now]
        self.sig["wanted"] = target
        return Decision(target, reason, self.sig)


@dataclass(frozen=True)
class _Demand:
    """What the window says the owner needs."""

    need: float  # executors' worth of work per second
    busy: float  # the busiest job's busy fraction
    required: float  # the utilization the current size would need
    growing: bool  # the backlog grows faster than the tolerance
    back_to_back: bool  # a measured job runs at trigger 0


def _task_cap(signals: Signals) -> int | None:
    """The most executors the owner's tasks can use: its state partitions over the cores of
    one executor (1 when not known). None when its partitions are not known."""
    if signals.max_tasks is None or signals.max_tasks <= 0:
        return None
    per = 1
    if signals.cores and signals.executors:
        per = max(1, signals.cores // signals.executors)
    return max(1, math.ceil(signals.max_tasks / per))


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
