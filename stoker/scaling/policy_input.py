"""The signals the scaler's policy decides on, read from the store: an owner's jobs' recent
epochs (what each cost and left behind), their trigger intervals, the epochs in flight, when
the owner's attempt started, and its driver's resource report."""

from __future__ import annotations

from typing import Any

from stoker.errors import StokerError
from stoker.scaling.policy import EpochSample, ScalingPolicy, Signals
from stoker.store import JobRecord, Store
from stoker.types import JobKind

# How far back epochs are read when the policy does not say (seconds).
_DEFAULT_LOOKBACK = 600.0
_DEFAULT_TRIGGER = 0.5


def read_signals(
    store: Store, policy: ScalingPolicy, owner: JobRecord, res: dict[str, Any], now: float
) -> Signals:
    """What the policy decides on for ``owner``: its jobs' recent epochs (the newest one of a
    job with none lately), their triggers, the epochs in flight, and the driver's report
    ``res``."""
    if owner.kind == JobKind.APPLICATION:
        jobs = [
            j
            for j in store.list_jobs(kind=JobKind.JOB, app_id=owner.job_id)
            if not j.state.terminal
        ]
    else:
        jobs = [owner]
    triggers = {str(j.job_id): trigger_of(store, j) for j in jobs}
    lookback = getattr(policy, "lookback", None)
    back = float(lookback(triggers)) if callable(lookback) else _DEFAULT_LOOKBACK
    ids = [j.job_id for j in jobs]
    epochs = list(store.recent_epochs(ids, now - back)) if ids else []
    seen = {e.job_id for e in epochs}
    for jid in ids:
        if jid not in seen:  # no epoch lately: its newest one says what it left behind
            newest = next((e for e in store.list_epochs(jid, limit=5) if e.committed_at), None)
            if newest is not None:
                epochs.append(newest)
    samples = [
        EpochSample(
            job_id=str(e.job_id),
            epoch=int(e.epoch),
            at=float(e.committed_at or e.pinned_at),
            duration_s=None if e.duration_ms is None else e.duration_ms / 1000.0,
            rows=e.rows_in,
            backlog=e.backlog,
            executors=e.executors,
            cores=e.cores,
            work_s=None if e.work_ms is None else e.work_ms / 1000.0,
        )
        for e in epochs
    ]
    in_flight: dict[str, float] = {}
    for jid in ids:
        newest = next(iter(store.list_epochs(jid, limit=1)), None)
        if newest is not None and newest.committed_at is None:
            in_flight[str(jid)] = float(newest.pinned_at)
    executors = res.get("executors")
    cores = res.get("cores")
    return Signals(
        max_tasks=max_tasks(jobs),
        now=now,
        samples=sorted(samples, key=lambda s: (s.at, s.epoch)),
        triggers=triggers,
        executors=None if executors is None else int(executors),
        cores=None if cores is None else int(cores),
        target=owner.executor_target,
        running_since=running_since(store, owner),
        in_flight=in_flight,
    )


def max_tasks(jobs: list[JobRecord]) -> int | None:
    """The tasks the jobs can run at once at most: the sum of their state partitions (the
    ``max_parallelism`` each attempt records in its spec); None if one is not known."""
    total = 0
    for j in jobs:
        n = j.spec.get("max_parallelism")
        if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
            return None
        total += n
    return total or None


def trigger_of(store: Store, job: JobRecord) -> float:
    """The trigger interval in force: set by control, else the job's own."""
    try:
        t = store.control_snapshot(job.job_id).trigger_s
    except StokerError:
        t = None
    if t is None:
        t = job.spec.get("trigger_s")
    return float(_DEFAULT_TRIGGER if t is None else t)


def running_since(store: Store, owner: JobRecord) -> float | None:
    if not owner.current_attempt:
        return None
    att = store.get_attempt(owner.job_id, owner.current_attempt)
    return None if att is None else att.started_at


__all__ = ["max_tasks", "read_signals", "running_since", "trigger_of"]
