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

The default (:data:`DEFAULT_STRATEGY`, what Flink 1.19+ uses for a checkpointed job) never
gives up: exponential delays 1 s, 1.5 s, 2.25 s ... up to a minute, each multiplied by a factor
drawn from [0.9, 1.1]. What every job shares (a sink's server, the store) has outages of
minutes; a budget counted in restarts a second apart failed every job for good, all at once,
on one PostgreSQL restart, and their restarts without jitter came in lockstep. The factor is
drawn from a generator seeded with the job id and the failed attempt's number: the same
failure gets the same delay (reproducible), two jobs failing together get different ones.
"""

from __future__ import annotations

import logging
import math
import random as _random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from stoker.errors import InvalidInput
from stoker.types import AttemptState

log = logging.getLogger("stoker.restart")

# A failed attempt that had run this long was healthy: its failure starts the count afresh
# (for the explicit strategies that leave ``reset_after`` out; the default's is an hour).
DEFAULT_RESET_AFTER = 600.0
# The error of an attempt replaced because its manager died before starting its driver: the
# manager's failure, not the job's, so no restart strategy counts it.
NEVER_LAUNCHED = "its manager died before starting the driver"
# The error of an attempt handed to a standby that did not hold it (frozen or cut off): the
# handover's failure, not the job's. The text stoker.manager.standbys writes (a test holds
# the two equal; this leaf module imports no manager code).
HANDOVER_LOST = "its standby was handed the attempt and did not hold it (frozen or cut off)"


class FailureCause(StrEnum):
    """Whose failure ended an attempt FAILED, as a restart budget sees it: the job's own
    failures use restarts up, the manager's do not (the store did not count them either).
    Recorded on the attempt by whoever ends it (``Store.attempt_failed``)."""

    JOB = "job"  # the job's code or what it talks to (a sink, a source, the store)
    NEVER_LAUNCHED = "never-launched"  # its manager died before starting the driver
    HANDOVER_LOST = "handover-lost"  # a standby was handed the attempt and did not hold it
    # The new code of an upgrade failed: the upgrade is rolled back to the old code, which did
    # not fail (stoker.manager.reconciler).
    UPGRADE_ROLLED_BACK = "upgrade-rolled-back"
    # An application's program raised (its ``main``, or the file did not import): recorded by
    # its driver, which keeps the application's jobs running until the job manager's strategy
    # for the application has decided (runtime/appattempt.py).
    MAIN_RAISED = "main-raised"
    # The same, for bad input (the error's exit code 2): no restart can fix it.
    MAIN_BAD_INPUT = "main-bad-input"

    @property
    def counted(self) -> bool:
        """Whether a failure of this cause uses up the job's restart budget."""
        return self in (FailureCause.JOB, FailureCause.MAIN_RAISED, FailureCause.MAIN_BAD_INPUT)

    @property
    def of_main(self) -> bool:
        """Whether an application's program raised (its driver said so)."""
        return self in (FailureCause.MAIN_RAISED, FailureCause.MAIN_BAD_INPUT)


# Attempt records of code before the cause was recorded (migration 0023) keep an error text
# only: their manager's failures are told apart by the exact texts their writers used.
_MANAGER_FAILURES = {
    NEVER_LAUNCHED: FailureCause.NEVER_LAUNCHED,
    HANDOVER_LOST: FailureCause.HANDOVER_LOST,
}


@dataclass(frozen=True)
class Failure:
    """One failed attempt, as the strategy sees it."""

    failures: int  # failures counted so far for the job, this one not included
    ran_for: float  # seconds the failed attempt ran
    now: float  # when the failure was seen (store clock)
    earlier: tuple[float, ...] = ()  # when the job's earlier counted failures happened
    seed: str = ""  # what a jitter is drawn from: the job id and the failed attempt's number


@dataclass(frozen=True)
class Decision:
    """Restart after ``delay`` seconds, or give up (``delay`` None). ``reset``: this failure
    counts as the first one (the budget forgave the earlier ones). ``jitter``: the factor the
    strategy's backoff was multiplied by to give ``delay`` (1.0: none)."""

    delay: float | None
    reset: bool = False
    jitter: float = 1.0

    @property
    def backoff(self) -> float | None:
        """The delay before its jitter."""
        return None if self.delay is None else self.delay / self.jitter


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


def seeded_random(seed: str) -> float:
    """A number in [0, 1) that only depends on ``seed`` (string seeds hash the same in every
    process, whatever ``PYTHONHASHSEED``)."""
    return _random.Random(seed).random()


@dataclass(frozen=True)
class ExponentialDelay:
    """Delays growing by ``multiplier`` from ``initial`` up to ``max_delay``; at most
    ``attempts`` restarts in a row (None: no limit). An attempt that ran ``reset_after``
    seconds (Flink's ``reset-backoff-threshold``) starts the count, and so the delay, afresh.

    ``jitter`` (Flink's ``jitter-factor``): each delay is multiplied by a factor in
    [1 - jitter, 1 + jitter], drawn by ``random`` from the failure's seed (the job id and the
    failed attempt), so that jobs failing together do not restart together.
    """

    initial: float = 1.0
    max_delay: float = 60.0
    multiplier: float = 2.0
    attempts: int | None = 10
    reset_after: float | None = DEFAULT_RESET_AFTER
    jitter: float = 0.0
    random: Callable[[str], float] = field(default=seeded_random, compare=False, repr=False)

    def delay(self, failures: int) -> float | None:
        """The backoff before restart number ``failures`` (1-based), before its jitter; None
        past the budget."""
        if self.attempts is not None and failures > self.attempts:
            return None
        try:
            grown = self.initial * self.multiplier ** (failures - 1)
        except OverflowError:  # no limit: the count may grow past what a float holds
            grown = math.inf
        return float(min(self.max_delay, grown))

    def jitter_factor(self, seed: str) -> float:
        """The factor in [1 - jitter, 1 + jitter] the backoff of this failure is multiplied by."""
        if not self.jitter:
            return 1.0
        return 1.0 + self.jitter * (2.0 * self.random(seed) - 1.0)

    def decide(self, failure: Failure) -> Decision:
        reset = _healthy(failure, self.reset_after)
        backoff = self.delay(1 if reset else failure.failures + 1)
        if backoff is None:
            return Decision(None, reset)
        factor = self.jitter_factor(failure.seed)
        return Decision(backoff * factor, reset, factor)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "strategy": "exponential-delay",
            "initial": self.initial,
            "max": self.max_delay,
            "multiplier": self.multiplier,
            "attempts": self.attempts,
            "reset_after": self.reset_after,
        }
        if self.jitter:  # absent when none: the specs stored before jitter existed stay equal
            out["jitter"] = self.jitter
        return out


# What a job without a restart strategy of its own gets: Flink's exponential-delay default
# for a checkpointed job (1.19+). It never gives up: a job fails for good only on bad input
# (which no restart fixes), on an explicit strategy's budget, or when canceled.
DEFAULT_STRATEGY = ExponentialDelay(
    initial=1.0,
    max_delay=60.0,
    multiplier=1.5,
    attempts=None,
    reset_after=3600.0,
    jitter=0.1,
)
# The default until the above replaced it; ask for it explicitly to keep its behavior:
# ``{"strategy": "fixed-delay", "attempts": 3, "delay": 1}``.
FORMER_DEFAULT = FixedDelay(attempts=3, delay_s=1.0, reset_after=DEFAULT_RESET_AFTER)


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
    def job_id(self) -> str: ...

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

    @property
    def cause(self) -> str | None: ...


def cause_of(attempt: PastAttempt) -> FailureCause | None:
    """Whose failure ended the attempt (None: it did not fail): the cause recorded on it; for
    a record of older code without one, read from the texts that code wrote."""
    if attempt.state != AttemptState.FAILED:
        return None
    if attempt.cause is not None:
        try:
            return FailureCause(attempt.cause)
        except ValueError:  # a cause of newer code: the job's unless it says otherwise
            return FailureCause.JOB
    return _MANAGER_FAILURES.get(attempt.error or "", FailureCause.JOB)


def counted(attempt: PastAttempt) -> bool:
    """Whether the attempt ended as a failure of the job: FAILED, and for the job's own cause
    (an attempt whose manager died before starting its driver, or that a standby was handed
    and did not hold, failed for the manager, not for the job's code; the store did not count
    it either)."""
    cause = cause_of(attempt)
    return cause is not None and cause.counted


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
    ``ran_for``: from the attempt's start (or, with earlier failures, that of the attempts it
    took over without a failure: :func:`_run_started`) to its end, or to ``now`` while it is
    not ended.
    """
    earlier: list[float] = []
    started = None if failed is None else failed.started_at
    if failures:
        past = list(attempts())
        ended = [
            a.ended_at
            for a in past
            if counted(a)
            and (failed is None or a.attempt != failed.attempt)
            and a.ended_at is not None
        ]
        earlier = sorted(ended)[-failures:]
        if failed is not None:
            started = _run_started(past, failed)
    ran_for = 0.0 if failed is None or started is None else (failed.ended_at or now) - started
    seed = "" if failed is None else f"{failed.job_id}/{failed.attempt}"
    return Failure(failures, max(0.0, ran_for), now, tuple(earlier), seed)


def _run_started(past: list[PastAttempt], failed: PastAttempt) -> float:
    """When the run that ``failed`` ended began: its own start, or that of the attempts it
    continued without a failure between (each SUPERSEDED by the next: a job re-adopted by
    its application's next ``main``), so that a healthy run's length is not
    cut by a re-adoption."""
    by_number = {a.attempt: a for a in past}
    started = failed.started_at
    n = failed.attempt - 1
    while (prev := by_number.get(n)) is not None and prev.state == AttemptState.SUPERSEDED:
        started = prev.started_at
        n -= 1
    return started


def restart_decision(
    strategy: RestartStrategy,
    failures: int,
    failed: PastAttempt | None,
    attempts: Callable[[], Iterable[PastAttempt]],
    now: float,
) -> Decision:
    """Whether (and after how long) a job restarts after attempt ``failed`` failed: the one
    decision of the job manager's supervisor and of an application's driver. Logged with
    its backoff and jitter (the caller records the restart's due time)."""
    failure = failure_of(failures, failed, attempts, now)
    decision = strategy.decide(failure)
    who = "a job" if failed is None else f"job {failed.job_id} attempt {failed.attempt}"
    in_a_row = 1 if decision.reset else failures + 1
    if decision.delay is None:
        log.info("%s failed: the restart strategy gives up (failure %d in a row)", who, in_a_row)
    else:
        log.info(
            "%s failed: the restart strategy restarts it in %.3f s (backoff %.3f s x jitter "
            "%.3f; failure %d in a row)",
            who,
            decision.delay,
            decision.backoff,
            decision.jitter,
            in_a_row,
        )
    return decision


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
    "exponential-delay": {"initial", "max", "multiplier", "attempts", "reset_after", "jitter"},
    "failure-rate": {"max_failures", "interval", "delay"},
}


def parse_strategy(spec: dict[str, Any] | None) -> RestartStrategy:
    """A strategy from its JSON form; :class:`InvalidInput` names the bad field.

    E.g. ``{"strategy": "fixed-delay", "attempts": 3, "delay": 2}``; none given:
    :data:`DEFAULT_STRATEGY`. A key an explicit strategy leaves out has the default it always
    had (``exponential-delay``: multiplier 2, 10 attempts, reset after 600 s, no jitter), so a
    strategy once given means the same after the default changed.
    """
    if not spec:
        return DEFAULT_STRATEGY
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
    jitter = _num(spec, "jitter", 0.0, 0)
    if jitter > 1:
        raise InvalidInput("restart_strategy.jitter", f"must be a number in [0, 1], got {jitter}")
    no_limit = "attempts" in spec and spec["attempts"] is None
    return ExponentialDelay(
        initial=_num(spec, "initial", 1.0, 0),
        max_delay=_num(spec, "max", 60.0, 0),
        multiplier=_num(spec, "multiplier", 2.0, 1),
        attempts=None if no_limit else _count(spec, "attempts", 10, 0),
        reset_after=_reset_after(spec),
        jitter=jitter,
    )
