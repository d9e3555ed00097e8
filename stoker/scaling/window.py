"""Each job's window of epochs, as the default policy reads it: its recent epochs (past the
warm-up of its driver), their rate, busy time, executor work, fixed cost and backlog growth;
and whether an owner is idle."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from stoker.scaling.signals import EpochSample, PolicyMemory, Signals


class WindowParams(Protocol):
    """The policy's settings a window is read with (:class:`~.policy.DefaultPolicy`)."""

    @property
    def window_s(self) -> float: ...
    @property
    def min_epochs(self) -> int: ...
    @property
    def warmup_epochs(self) -> int: ...
    @property
    def growth_epochs(self) -> int: ...
    @property
    def fresh_epochs(self) -> int: ...


@dataclass(frozen=True)
class JobWindow:
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


def windows(p: WindowParams, signals: Signals, memory: PolicyMemory) -> dict[str, JobWindow]:
    by_job: dict[str, list[EpochSample]] = {}
    since = signals.running_since
    for s in sorted(signals.samples, key=lambda s: (s.at, s.epoch)):
        if since is not None and s.at < since:
            continue
        by_job.setdefault(s.job_id, []).append(s)
    if p.warmup_epochs > 0:
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
                kept := [s for s in samples if s.epoch >= memory.first_epoch[job] + p.warmup_epochs]
            )
        }
    out: dict[str, JobWindow] = {}
    now = signals.now
    for job, samples in by_job.items():
        recent = [s for s in samples if s.at >= now - p.window_s]
        if len(recent) < p.min_epochs:
            recent = samples[-p.min_epochs :]
        start = min(now - p.window_s, recent[0].start)
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
        last = known[-p.growth_epochs :]
        growth, arrival, reset = 0.0, None, False
        measured = _arrival(recent, last)
        if measured is None and len(last) >= 2 and last[-1].at > last[0].at:
            reset = True
        elif measured is not None:
            growth, arrival = measured
        fresh = _arrival(recent, known[-p.fresh_epochs :])
        out[job] = JobWindow(
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
            recent=sum(1 for s in recent if s.at >= now - p.window_s),
            recent_rows=sum(s.rows or 0 for s in recent if s.at >= now - p.window_s),
        )
    return out


def idle(p: WindowParams, windows: Mapping[str, JobWindow], signals: Signals) -> bool:
    """Every job read no rows in the last ``window_s`` (Spark runs no epoch when nothing
    came: no epoch at all counts) and its newest known backlog is 0; the owner has run
    that long. An epoch in flight (a long one: no commit for a while) is not idleness."""
    if signals.in_flight:
        return False
    for w in windows.values():
        if w.recent_rows > 0 or w.backlog != 0:
            return False
    if signals.running_since is not None:
        return signals.now - signals.running_since >= p.window_s
    # Not known since when it runs: an epoch a whole window old says it ran that long.
    oldest = min(s.at for w in windows.values() for s in w.samples)
    return signals.now - oldest >= p.window_s


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


__all__ = ["JobWindow", "WindowParams", "idle", "windows"]
