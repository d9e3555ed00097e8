"""How an owner of executors (a lone job or an application) scales: the scaling spec.

Three modes. ``fixed``: the executors given at start, nothing more (the default). ``reactive``:
every executor the cluster offers is used, and losses are survived. ``auto``: the scaler decides
an executor target between ``min_executors`` and ``max_executors`` from the epochs' signals.

The spec reaches a driver through the store only (``jobs.scaling``, the JSON of
:meth:`ScalingSpec.to_dict`). Every layer may import this module: it is Spark-free and depends
on :mod:`stoker.errors` alone.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from stoker.durations import parse_duration
from stoker.errors import InvalidInput

MODES = ("fixed", "reactive", "auto")

# Keys of to_dict(); the text form and mappings may also say min/max or *_executors.
_ALIASES = {
    "min": "min_executors",
    "min_executors": "min_executors",
    "max": "max_executors",
    "max_executors": "max_executors",
    "target_utilization": "target_utilization",
    "utilization": "target_utilization",
    "catch_up": "catch_up",
    "stabilization": "stabilization",
    "cooldown": "cooldown",
    "max_per_hour": "max_rescales_per_hour",
    "max_rescales_per_hour": "max_rescales_per_hour",
}
_KEYS_TEXT = (
    "min_executors, max_executors, target_utilization, catch_up, stabilization, cooldown, "
    "max_rescales_per_hour"
)


@dataclass(frozen=True)
class ScalingSpec:
    """A validated scaling spec (build it with :func:`parse_scaling`)."""

    mode: str = "fixed"
    min_executors: int = 1
    max_executors: int | None = None
    target_utilization: float = 0.7
    catch_up_s: float = 300.0
    stabilization_s: float = 60.0
    cooldown_s: float = 120.0
    # The policy's own changes within any hour, at most (bounds a user sets are not counted):
    # each rescale costs executors' start or a graceful drain, and a load that swings just
    # outside the dead band must not keep the cluster moving.
    max_rescales_per_hour: int = 10

    def to_dict(self) -> dict[str, Any]:
        """The stored and shown form; durations in seconds."""
        return {
            "mode": self.mode,
            "min_executors": self.min_executors,
            "max_executors": self.max_executors,
            "target_utilization": self.target_utilization,
            "catch_up": self.catch_up_s,
            "stabilization": self.stabilization_s,
            "cooldown": self.cooldown_s,
            "max_rescales_per_hour": self.max_rescales_per_hour,
        }

    def to_text(self) -> str:
        """The CLI form, which :func:`parse_scaling` reads back: ``auto:min=1,max=4,...``."""
        if self.mode != "auto" and self == ScalingSpec(mode=self.mode):
            return self.mode
        parts = [f"min={self.min_executors}"]
        if self.max_executors is not None:
            parts.append(f"max={self.max_executors}")
        parts += [
            f"target_utilization={self.target_utilization:g}",
            f"catch_up={_duration_text(self.catch_up_s)}",
            f"stabilization={_duration_text(self.stabilization_s)}",
            f"cooldown={_duration_text(self.cooldown_s)}",
            f"max_per_hour={self.max_rescales_per_hour}",
        ]
        return f"{self.mode}:" + ",".join(parts)


def parse_scaling(
    value: str | Mapping[str, Any] | ScalingSpec | None, field: str = "scaling"
) -> ScalingSpec:
    """A validated :class:`ScalingSpec` from what a user or the store gives.

    ``None`` -> fixed. Text (the CLI): ``"fixed"``, ``"reactive"`` or
    ``"auto:min=1,max=4,target_utilization=0.7,catch_up=5m,stabilization=1m,cooldown=2m"``
    (and ``max_per_hour=N``: the policy's changes within any hour, at most).
    A mapping (REST, the store): ``{"mode": ..., <keys of to_dict()>}``, durations as seconds or
    text. Anything wrong -> :class:`InvalidInput` on ``field`` naming the key.
    """
    if value is None:
        return ScalingSpec()
    if isinstance(value, ScalingSpec):
        return _checked(value, field)
    if isinstance(value, str):
        mode, options = _split_text(value, field)
    elif isinstance(value, Mapping):
        options = dict(value)
        if "mode" not in options:
            raise InvalidInput(field, f"mode is required: one of {', '.join(MODES)}")
        mode = options.pop("mode")
    else:
        raise InvalidInput(
            field,
            "expects text like 'auto:min=1,max=4' or an object with a mode, "
            f"got {type(value).__name__}",
        )
    return _checked(_build(mode, options, field), field)


def with_bounds(
    spec: ScalingSpec, min_executors: int | None, max_executors: int | None
) -> ScalingSpec:
    """The same spec with new bounds (``None`` keeps a bound), validated like parse_scaling."""
    changes: dict[str, Any] = {}
    if min_executors is not None:
        changes["min_executors"] = _int("min_executors", min_executors, "min_executors")
    if max_executors is not None:
        changes["max_executors"] = _int("max_executors", max_executors, "max_executors")
    if not changes:
        raise InvalidInput("min_executors", "give min_executors, max_executors or both")
    new = replace(spec, **changes)
    if (
        min_executors is not None
        and max_executors is None
        and new.max_executors is not None
        and new.min_executors > new.max_executors
    ):
        raise InvalidInput(
            "min_executors",
            f"must be at most max_executors ({new.max_executors}), got {new.min_executors}",
        )
    if new.min_executors < 1:
        raise InvalidInput("min_executors", f"must be 1 or more, got {new.min_executors}")
    if new.max_executors is not None and new.max_executors < new.min_executors:
        raise InvalidInput(
            "max_executors",
            f"must be at least min_executors ({new.min_executors}), got {new.max_executors}",
        )
    return _checked(new, "scaling")


def _split_text(text: str, field: str) -> tuple[str, dict[str, Any]]:
    mode, sep, rest = text.strip().partition(":")
    options: dict[str, Any] = {}
    if sep and not rest.strip():
        raise InvalidInput(field, f"nothing after {mode.strip()!r}: give key=value pairs")
    for item in rest.split(",") if rest.strip() else []:
        key, eq, raw = item.partition("=")
        if not eq or not key.strip():
            raise InvalidInput(field, f"{item.strip()!r} is not key=value (keys: {_KEYS_TEXT})")
        if key.strip() in options:
            raise InvalidInput(field, f"{key.strip()} is given twice")
        options[key.strip()] = raw.strip()
    return mode, options


def _build(mode: Any, options: Mapping[str, Any], field: str) -> ScalingSpec:
    if not isinstance(mode, str) or mode.strip().lower() not in MODES:
        raise InvalidInput(field, f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    kwargs: dict[str, Any] = {"mode": mode.strip().lower()}
    seen: dict[str, str] = {}
    for key, raw in options.items():
        name = _ALIASES.get(str(key).strip())
        if name is None:
            raise InvalidInput(field, f"unknown key {key!r}; keys: {_KEYS_TEXT}")
        if name in seen:
            raise InvalidInput(field, f"{key} and {seen[name]} say the same thing: give one")
        seen[name] = str(key)
        if name == "max_rescales_per_hour":
            kwargs[name] = _int(field, raw, name)
        elif name in ("min_executors", "max_executors"):
            if raw is None and name == "max_executors":
                kwargs[name] = None
            else:
                kwargs[name] = _int(field, raw, name)
        elif name == "target_utilization":
            kwargs[name] = _utilization(field, raw)
        else:
            kwargs[f"{name}_s"] = _duration(field, raw, name)
    return ScalingSpec(**kwargs)


def _checked(spec: ScalingSpec, field: str) -> ScalingSpec:
    if spec.mode not in MODES:
        raise InvalidInput(field, f"mode must be one of {', '.join(MODES)}, got {spec.mode!r}")
    if isinstance(spec.min_executors, bool) or not isinstance(spec.min_executors, int):
        raise InvalidInput(
            field, f"min_executors must be a whole number, got {spec.min_executors!r}"
        )
    if spec.min_executors < 1:
        raise InvalidInput(field, f"min_executors must be 1 or more, got {spec.min_executors}")
    if spec.max_executors is not None:
        if isinstance(spec.max_executors, bool) or not isinstance(spec.max_executors, int):
            raise InvalidInput(
                field, f"max_executors must be a whole number, got {spec.max_executors!r}"
            )
        if spec.max_executors < spec.min_executors:
            raise InvalidInput(
                field,
                f"max_executors ({spec.max_executors}) must be at least min_executors "
                f"({spec.min_executors})",
            )
    elif spec.mode == "auto":
        raise InvalidInput(field, "max_executors is required in mode auto (e.g. auto:min=1,max=4)")
    cap = spec.max_rescales_per_hour
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
        raise InvalidInput(field, f"max_rescales_per_hour must be 1 or more, got {cap!r}")
    _utilization(field, spec.target_utilization)
    for name in ("catch_up", "stabilization", "cooldown"):
        _duration(field, getattr(spec, f"{name}_s"), name)
    return spec


def _int(field: str, raw: Any, key: str) -> int:
    if isinstance(raw, bool):
        raise InvalidInput(field, f"{key} must be a whole number, got {raw!r}")
    if isinstance(raw, int):
        return raw
    if isinstance(raw, str) and re.fullmatch(r"\s*-?\d+\s*", raw):
        return int(raw)
    raise InvalidInput(field, f"{key} must be a whole number, got {raw!r}")


def _utilization(field: str, raw: Any) -> float:
    bad = InvalidInput(
        field, f"target_utilization must be a number above 0 and at most 1, got {raw!r}"
    )
    if isinstance(raw, bool):
        raise bad
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise bad from None
    if not (0 < value <= 1):  # also false for NaN
        raise bad
    return value


def _duration(field: str, raw: Any, key: str) -> float:
    try:
        return parse_duration(raw, key)
    except InvalidInput as e:
        raise InvalidInput(field, f"{key} {e.message}") from None


def _duration_text(seconds: float) -> str:
    for unit, size in (("h", 3600.0), ("m", 60.0)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"
