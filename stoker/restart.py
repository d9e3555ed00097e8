"""Restart strategies, as Flink names them: ``none``, ``fixed-delay``, ``exponential-delay``,
``failure-rate``.

A strategy sees one :class:`Failure` (what the store knows when an attempt has failed) and
returns a :class:`Decision`: restart after a delay, or give up (the job ends FAILED). It reads
no clock of its own: its caller hands it ``now``, so tests drive it with a ManualClock.

A leaf module (errors and types only), because two layers apply the same strategies: the job
manager's supervisor to jobs with their own driver and to applications, and an application's
driver to a job that fails inside it (``stoker.runtime.application``), which the manager never
restarts. Both take the decision through :func:`restart_decision`, which builds the
:class:`Failure` from the job's attempt records.

Streaming jobs run for months, so a budget that never forgets ends every job some day: the
counting strategies forgive. ``fixed-delay`` and ``exponential-delay`` start counting afresh
when the failed attempt had run for ``reset_after`` seconds (a period of healthy running);
``failure-rate`` counts only the failures of the last ``interval`` seconds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from stoker.errors import InvalidInput
from stoker.types import AttemptState

# A failed attempt that had run this long was healthy: its failure starts the count afresh.
DEFAULT_RESET_AFTER = 600.0
# The error of an attempt replaced because its manager died before starting its driver: the
# manager's failure, not the job's, so no restart strategy counts it.
NEVER_LAUNCHED = "its manager died before starting the driver"


@dataclass(frozen=True)
class Failure:
    """One failed attempt, as the strategy sees it."""

    failures: int  # failures counted so far for the job, this one not included
    ran_for: float  # seconds the failed attempt ran
    now: float  # when the failure was seen (store clock)
    earlier: tuple[float, ...] = ()  # when the job's earlier counted failures happened


@dataclass(frozen=True)
class Decision:
    """Restart after ``delay`` seconds, or give up (``delay`` None). ``reset``: this failure
    counts as the first one (the budget forgave the earlier ones)."""

    delay: float | None
    reset: bool = False


class RestartStrategy(Protocol):
    """Decides whether a failed attempt is followed by another, and after how long."""

    def decide(self, failure: Failure) -> Decision:
        """Restart (and after when) or give up (job FAILED)."""
        ...

    def to_dict(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class NoRestart:
    """Fail the job on the first failure."""

    def decide(self, failure: Failure) -> Decision:
        return Decision(None)

    def to_dict(self) -> dict[str, Any]:
        return {"strategy": "none"}


def _healthy(failure: Failure, reset_after: float | None) -> bool:
    return reset_after is not None and failure.ran_for >= reset_after


@dataclass(frozen=True)
class FixedDelay:
    """Up to ``attempts`` restarts in a row, ``delay`` seconds apart; the count starts afresh
    after an attempt that ran ``reset_after`` seconds (None: never)."""

    attempts: int = 3
    delay_s: float = 1.0
    reset_after: float | None = DEFAULT_RESET_AFTER

    def delay(self, failures: int) -> float | None:
        """The delay before restart number ``failures`` (1-based), None past the budget."""
        return self.delay_s if failures <= self.attempts else None

    def decide(self, failure: Failure) -> Decision:
        reset = _healthy(failure, self.reset_after)
        return Decision(self.delay(1 if reset else failure.failures + 1), reset)

    def to_dict(self) -> dict[str, Any]:
        return {
            "strategy": "fixed-delay",
            "attempts": self.attempts,
            "delay": self.delay_s,
            "reset_after": self.reset_after,
        }


@dataclass(frozen=True)
class ExponentialDelay:
    """Delays growing by ``multiplier`` from ``initial`` up to ``max_delay``; at most
    ``attempts`` restarts in a row. An attempt that ran ``reset_after`` seconds (Flink's
    ``reset-backoff-threshold``) starts the count, and so the delay, afresh."""

    initial: float = 1.0
    max_delay: float = 60.0
    multiplier: float = 2.0
    attempts: int = 10
    reset_after: float | None = DEFAULT_RESET_AFTER

    def delay(self, failures: int) -> float | None:
        if failures > self.attempts:
            return None
        return float(min(self.max_delay, self.initial * self.multiplier ** (failures - 1)))

    def decide(self, failure: Failure) -> Decision:
        reset = _healthy(failure, self.reset_after)
        return Decision(self.delay(1 if reset else failure.failures + 1), reset)

    def to_dict(self) -> dict[str, Any]:
        return {
            "strategy": "exponential-delay",
            "initial": self.initial,
            "max": self.max_delay,
            "multiplier": self.multiplier,
            "attempts": self.attempts,
            "reset_after": self.reset_after,
        }


@dataclass(frozen=True)
class FailureRate:
    """Restart ``delay`` seconds later while at most ``max_failures`` failures (this one
    included) fell within the last ``interval`` seconds; give up on the one beyond.

    Flink's ``failure-rate`` (``max-failures-per-interval``, ``failure-rate-interval``,
    ``delay``): a rate, so a long-running job is never worn down by rare transient failures.
    """

    max_failures: int = 3
    interval: float = 60.0
    delay_s: float = 1.0

    def decide(self, failure: Failure) -> Decision:
        since = failure.now - self.interval
        recent = sum(1 for t in failure.earlier if t > since)
        return Decision(self.delay_s if recent + 1 <= self.max_failures else None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "strategy": "failure-rate",
            "max_failures": self.max_failures,
            "interval": self.interval,
            "delay": self.delay_s,
        }


class PastAttempt(Protocol):
    """What the decision reads of an attempt record (:class:`stoker.store.AttemptRecord`)."""

    @property
    def attempt(self) -> int: ...

    @property
    def state(self) -> AttemptState: ...

    @property
    def started_at(self) -> float: ...

    @property
    def ended_at(self) -> float | None: ...

    @property
    def error(self) -> str | None: ...


def counted(attempt: PastAttempt) -> bool:
    """Whether the attempt ended as a failure of the job: FAILED, and launched (an attempt
    whose manager died before starting its driver failed for the manager, not for the job's
    code; the store did not count it either)."""
    return attempt.state == AttemptState.FAILED and attempt.error != NEVER_LAUNCHED


def failure_of(
    failures: int,
    failed: PastAttempt | None,
    attempts: Callable[[], Iterable[PastAttempt]],
    now: float,
) -> Failure:
    """The failure of attempt ``failed`` as a strategy sees it, from the store's records.

    ``failures``: the job's count so far (this one not included); ``attempts``: the job's
    attempt records, read only when there are earlier failures. Their times are the ends of
    the job's counted failed attempts (see :func:`counted`), the latest ``failures`` of them:
    none from before the count was last set back by an explicit restart or a reset.
    ``ran_for``: from the attempt's start to its end, or to ``now`` while it is not ended.
    """
    earlier: list[float] = []
    if failures:
        ended = [
            a.ended_at
            for a in attempts()
            if counted(a)
            and (failed is None or a.attempt != failed.attempt)
            and a.ended_at is not None
        ]
        earlier = sorted(ended)[-failures:]
    ran_for = 0.0 if failed is None else (failed.ended_at or now) - failed.started_at
    return Failure(failures, max(0.0, ran_for), now, tuple(earlier))


def restart_decision(
    strategy: RestartStrategy,
    failures: int,
    failed: PastAttempt | None,
    attempts: Callable[[], Iterable[PastAttempt]],
    now: float,
) -> Decision:
    """Whether (and after how long) a job restarts after attempt ``failed`` failed: the one
    decision of the job manager's supervisor and of an application's driver."""
    return strategy.decide(failure_of(failures, failed, attempts, now))


def _num(spec: dict[str, Any], key: str, default: float, minimum: float) -> float:
    value = spec.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < minimum:
        raise InvalidInput(
            f"restart_strategy.{key}", f"must be a number >= {minimum}, got {value!r}"
        )
    return float(value)


def _count(spec: dict[str, Any], key: str, default: int, minimum: int) -> int:
    value = spec.get(key, default)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidInput(
            f"restart_strategy.{key}", f"must be a whole number >= {minimum}, got {value!r}"
        )
    return value


def _reset_after(spec: dict[str, Any]) -> float | None:
    if spec.get("reset_after", DEFAULT_RESET_AFTER) is None:
        return None  # never forgive: the count only grows
    value = spec.get("reset_after", DEFAULT_RESET_AFTER)
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise InvalidInput(
            "restart_strategy.reset_after",
            f"must be a number of seconds > 0, or null for never, got {value!r}",
        )
    return float(value)


_ALLOWED = {
    "none": set(),
    "fixed-delay": {"attempts", "delay", "reset_after"},
    "exponential-delay": {"initial", "max", "multiplier", "attempts", "reset_after"},
    "failure-rate": {"max_failures", "interval", "delay"},
}


def parse_strategy(spec: dict[str, Any] | None) -> RestartStrategy:
    """A strategy from its JSON form; :class:`InvalidInput` names the bad field.

    E.g. ``{"strategy": "fixed-delay", "attempts": 3, "delay": 2}``; default: fixed-delay,
    3 restarts in a row, 1 s apart, forgiven after 600 s of healthy running.
    """
    if not spec:
        return FixedDelay()
    if not isinstance(spec, dict):
        raise InvalidInput("restart_strategy", f"must be a JSON object, got {spec!r}")
    kind = spec.get("strategy")
    if kind not in _ALLOWED:
        raise InvalidInput(
            "restart_strategy.strategy", f"{kind!r} is not one of {', '.join(_ALLOWED)}"
        )
    unknown = set(spec) - _ALLOWED[kind] - {"strategy"}
    if unknown:
        raise InvalidInput(
            "restart_strategy",
            f"unknown keys for {kind}: {', '.join(sorted(unknown))} "
            f"(allowed: {', '.join(sorted(_ALLOWED[kind])) or 'none'})",
        )
    if kind == "none":
        return NoRestart()
    if kind == "fixed-delay":
        return FixedDelay(
            _count(spec, "attempts", 3, 0), _num(spec, "delay", 1.0, 0), _reset_after(spec)
        )
    if kind == "failure-rate":
        interval = _num(spec, "interval", 60.0, 0)
        if interval <= 0:
            raise InvalidInput("restart_strategy.interval", "must be a number of seconds > 0")
        return FailureRate(
            max_failures=_count(spec, "max_failures", 3, 1),
            interval=interval,
            delay_s=_num(spec, "delay", 1.0, 0),
        )
    return ExponentialDelay(
        initial=_num(spec, "initial", 1.0, 0),
        max_delay=_num(spec, "max", 60.0, 0),
        multiplier=_num(spec, "multiplier", 2.0, 1),
        attempts=_count(spec, "attempts", 10, 0),
        reset_after=_reset_after(spec),
    )
