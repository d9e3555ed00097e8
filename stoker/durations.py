"""Durations and partition counts as users write them: one grammar for every ``-D stoker.*``
setting, CLI flag, REST field, control event, scaling spec and source option.

A duration is a number of seconds (an int or float, or text of one), or text of a number and a
unit: ``ms``; ``s``, ``sec``, ``second(s)``; ``m``, ``min``, ``minute(s)``; ``h``, ``hour(s)``;
``d``, ``day(s)``; ``w``, ``week(s)`` (any case, spaces allowed around and between). Never
negative, never NaN or infinite; a caller may ask for more than 0 or for a maximum. Every
refusal is an :class:`~stoker.errors.InvalidInput` naming the field it was given for.

A leaf: imports nothing of stoker's but its errors, so the manager, the runtime, the CLI and the
server share it.
"""

from __future__ import annotations

import math
import re

from stoker.errors import InvalidInput

__all__ = ["EXAMPLES", "PATTERN", "parse_duration", "parse_partitions"]

EXAMPLES = "'500ms', '2s', '5m', '1h' or '7d'"
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]+)?\s*$", re.IGNORECASE)
_UNITS: dict[str, float] = {
    "ms": 0.001,
    **dict.fromkeys(("s", "sec", "second", "seconds"), 1.0),
    **dict.fromkeys(("m", "min", "minute", "minutes"), 60.0),
    **dict.fromkeys(("h", "hour", "hours"), 3600.0),
    **dict.fromkeys(("d", "day", "days"), 86400.0),
    **dict.fromkeys(("w", "week", "weeks"), 604800.0),
}

# The text form as a JSON Schema pattern (ECMA regex: no flags, so each letter in both cases),
# for the REST schemas: the same grammar, not a copy of it.
PATTERN = (
    r"^\s*\d+(\.\d+)?\s*("
    + "|".join(
        "".join(f"[{c.lower()}{c.upper()}]" for c in unit)
        for unit in sorted(_UNITS, key=len, reverse=True)
    )
    + r")?\s*$"
)


def parse_duration(
    value: object, field: str, *, positive: bool = False, max_s: float | None = None
) -> float:
    """Seconds from ``value`` (see the module's grammar). ``positive``: 0 is refused too;
    ``max_s``: more than that is refused, naming the bound."""
    seconds: float | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str) and (m := _DURATION.match(value)):
        unit = _UNITS.get((m.group(2) or "s").lower())
        if unit is not None:
            seconds = float(m.group(1)) * unit
    if seconds is None or math.isnan(seconds):
        raise InvalidInput(field, f"{value!r} is not a duration like {EXAMPLES}")
    if seconds < 0 or math.isinf(seconds):
        raise InvalidInput(field, f"must not be negative or infinite, got {value!r}")
    if positive and seconds == 0:
        raise InvalidInput(field, f"must be a positive duration, got {value!r}")
    if max_s is not None and seconds > max_s:
        raise InvalidInput(field, f"must be at most {_text(max_s)}, got {value!r}")
    return seconds


def _text(seconds: float) -> str:
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("m", 60.0)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


def parse_partitions(value: object, field: str = "partitions") -> int:
    """A number of partitions: a whole number >= 1: an int, text of one, or a float that is
    one (JSON's ``211.0`` is the integer 211 to JSON Schema, so to the REST API too)."""
    if isinstance(value, float) and value.is_integer() and 1 <= value <= 2**31:
        value = int(value)
    text = str(value).strip()
    if isinstance(value, bool) or not text.isdigit() or int(text) < 1:
        raise InvalidInput(field, f"must be a whole number of at least 1, got {value!r}")
    return int(text)
