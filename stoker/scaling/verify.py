"""Whether a scale-up helped (Flink's autoscaler calls it scaling
effectiveness). A scale-up is decided for a rate the current executors cannot reach; if the
job's work does not shrink with more executors (a bottleneck elsewhere: a sink, a source with
one partition, a skewed key), the new executors cost and give nothing, and the next decision
would want more still. So the policy records the rate of work before each scale-up (rows per
second of the epochs' work time, the part more executors share) and, once the new size has
run ``min_epochs`` epochs, measures it again. An increase below ``THRESHOLD`` of the one
expected (from -> to executors) rolls the size back, and for ``HOLD`` seconds no scale-up
goes above the size it came from."""

from __future__ import annotations

from collections.abc import Iterable

from stoker.scaling.signals import EpochSample, PolicyMemory, Signals, UpCheck

THRESHOLD = 0.1  # of the expected increase (Flink's scaling.effectiveness.threshold)
HOLD = 3600.0  # s no scale-up goes above a size whose scale-up did not help
GIVE_UP = 900.0  # s after a scale-up whose new size never ran: nothing is verified
LOAD_KEPT = 0.5  # the rows per epoch after, of those before, for the rates to compare


def work_rate(samples: Iterable[EpochSample]) -> float | None:
    """Rows per second of work over ``samples`` (None: no rows or no work)."""
    rows = work = 0.0
    for s in samples:
        rows += s.rows or 0
        work += s.work
    return rows / work if rows > 0 and work > 0 else None


def expect(
    memory: PolicyMemory, at: float, current: int, target: int, samples: list[EpochSample]
) -> None:
    """Record a scale-up from ``current`` to ``target`` decided at ``at`` on the window
    ``samples``, to verify later."""
    rate = work_rate(samples)
    if rate is not None and current > 0 and samples:
        rows = sum(s.rows or 0 for s in samples) / len(samples)
        memory.up_check = UpCheck(current, target, at, rate, rows)


def verdict(memory: PolicyMemory, signals: Signals, min_epochs: int) -> tuple[int, str] | None:
    """(size to go back to, why) when the scale-up under check did not help; None while it
    cannot be told yet, or when it helped (then the check is done)."""
    check = memory.up_check
    if check is None:
        return None
    ran = [
        s
        for s in signals.samples
        if s.start >= check.at and (s.executors or 0) >= check.to_executors
    ]
    if len(ran) < min_epochs:
        if signals.now - check.at > GIVE_UP:
            memory.up_check = None  # the new size never ran (no room on the cluster)
        return None
    memory.up_check = None
    after = work_rate(ran)
    if after is None or sum(s.rows or 0 for s in ran) / len(ran) < LOAD_KEPT * check.rows_before:
        # The load fell since (epochs of a few rows spend their work on per-task costs): the
        # rate says nothing of the new size, and the policy scales down on its own anyway.
        return None
    expected = check.rate_before * (check.to_executors / check.from_executors - 1.0)
    if after - check.rate_before >= THRESHOLD * expected:
        return None
    memory.ceiling = check.from_executors
    memory.ceiling_until = signals.now + HOLD
    return check.from_executors, (
        f"the scale-up from {check.from_executors} to {check.to_executors} executors did not "
        f"raise the rate of work ({check.rate_before:.1f} -> {after:.1f} rows/s, at least "
        f"{check.rate_before + THRESHOLD * expected:.1f} expected): back to "
        f"{check.from_executors}, and no scale-up above it for {HOLD / 60:.0f} min"
    )


def ceiling(memory: PolicyMemory, now: float) -> int | None:
    """The size no scale-up may pass now (a scale-up above it did not help), if any."""
    if memory.ceiling is None or memory.ceiling_until is None or now >= memory.ceiling_until:
        memory.ceiling = memory.ceiling_until = None
        return None
    return memory.ceiling


__all__ = ["GIVE_UP", "HOLD", "LOAD_KEPT", "THRESHOLD", "ceiling", "expect", "verdict", "work_rate"]
