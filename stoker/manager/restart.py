"""Restart strategies, as Flink names them: ``none``, ``fixed-delay``, ``exponential-delay``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from stoker.errors import InvalidInput


class RestartStrategy(Protocol):
    """Decides whether failed attempt number ``failures`` (1-based) is retried, and after when."""

    def delay(self, failures: int) -> float | None:
        """Seconds to wait before the next attempt, or None to give up (job FAILED)."""
        ...

    def to_dict(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class NoRestart:
    """Fail the job on the first failure."""

    def delay(self, failures: int) -> float | None:
        return None

    def to_dict(self) -> dict[str, Any]:
        return {"strategy": "none"}


@dataclass(frozen=True)
class FixedDelay:
    """Up to ``attempts`` restarts, ``delay`` seconds apart."""

    attempts: int = 3
    delay_s: float = 1.0

    def delay(self, failures: int) -> float | None:
        return self.delay_s if failures <= self.attempts else None

    def to_dict(self) -> dict[str, Any]:
        return {"strategy": "fixed-delay", "attempts": self.attempts, "delay": self.delay_s}


@dataclass(frozen=True)
class ExponentialDelay:
    """Delays growing by ``multiplier`` from ``initial`` up to ``max_delay``.

    At most ``attempts`` restarts.
    """

    initial: float = 1.0
    max_delay: float = 60.0
    multiplier: float = 2.0
    attempts: int = 10

    def delay(self, failures: int) -> float | None:
        if failures > self.attempts:
            return None
        return float(min(self.max_delay, self.initial * self.multiplier ** (failures - 1)))

    def to_dict(self) -> dict[str, Any]:
        return {
            "strategy": "exponential-delay",
            "initial": self.initial,
            "max": self.max_delay,
            "multiplier": self.multiplier,
            "attempts": self.attempts,
        }


def _num(spec: dict[str, Any], key: str, default: float, minimum: float) -> float:
    value = spec.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < minimum:
        raise InvalidInput(
            f"restart_strategy.{key}", f"must be a number >= {minimum}, got {value!r}"
        )
    return float(value)


def parse_strategy(spec: dict[str, Any] | None) -> RestartStrategy:
    """A strategy from its JSON form.

    E.g. ``{"strategy": "fixed-delay", "attempts": 3, "delay": 2}``; default: fixed-delay, 3, 1 s.
    """
    if not spec:
        return FixedDelay()
    kind = spec.get("strategy")
    allowed = {
        "none": set(),
        "fixed-delay": {"attempts", "delay"},
        "exponential-delay": {"initial", "max", "multiplier", "attempts"},
    }
    if kind not in allowed:
        raise InvalidInput(
            "restart_strategy.strategy",
            f"{kind!r} is not one of none, fixed-delay, exponential-delay",
        )
    unknown = set(spec) - allowed[kind] - {"strategy"}
    if unknown:
        raise InvalidInput(
            "restart_strategy", f"unknown keys for {kind}: {', '.join(sorted(unknown))}"
        )
    if kind == "none":
        return NoRestart()
    if kind == "fixed-delay":
        return FixedDelay(int(_num(spec, "attempts", 3, 0)), _num(spec, "delay", 1.0, 0))
    return ExponentialDelay(
        initial=_num(spec, "initial", 1.0, 0),
        max_delay=_num(spec, "max", 60.0, 0),
        multiplier=_num(spec, "multiplier", 2.0, 1),
        attempts=int(_num(spec, "attempts", 10, 0)),
    )
