"""What a scaling policy sees of one owner (its recent epochs, its executors) and what it keeps
of it between decisions. Pure data: no store, no clock, no Spark."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


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
    # The tasks the owner's jobs can run at once at most: the sum of their state partitions
    # (max parallelism). Executors beyond it get no task. None: not known, no cap.
    max_tasks: int | None = None


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
    # A scale-up to verify once the new size has run: from, to, when, the rate of work before.
    up_check: UpCheck | None = None
    # A scale-up that did not help: no scale-up above ``ceiling`` until ``ceiling_until``.
    ceiling: int | None = None
    ceiling_until: float | None = None


@dataclass(frozen=True)
class UpCheck:
    """A scale-up whose effect is to be measured (:mod:`stoker.scaling.verify`)."""

    from_executors: int
    to_executors: int
    at: float
    rate_before: float  # rows per second of work over the window before the decision
    rows_before: float = 0.0  # rows per epoch over that window (the load it was measured at)


__all__ = ["EpochSample", "PolicyMemory", "Signals", "UpCheck"]
