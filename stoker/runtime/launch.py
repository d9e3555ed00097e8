"""Settings handed from a launcher (the ``stoker`` CLI, a job manager's driver) to the
``stoker.run`` call inside the user's file."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Launch:
    """What the launcher decided: settings, job id, restart, and (driver mode) the attempt."""

    overrides: dict[str, str] = field(default_factory=dict)
    job_id: str | None = None
    restart: bool = False
    attempt: int | None = None  # set when a job manager made the attempt for this driver


_current = Launch()
_listeners: list[Callable[[Any], None]] = []


def set_launch(
    overrides: dict[str, str], job_id: str | None, restart: bool, attempt: int | None = None
) -> None:
    global _current
    _current = Launch(dict(overrides), job_id, restart, attempt)


def overrides() -> dict[str, str]:
    return dict(_current.overrides)


def job_id() -> str | None:
    return _current.job_id


def restart() -> bool:
    return _current.restart


def attempt() -> int | None:
    return _current.attempt


def on_result(fn: Callable[[Any], None]) -> None:
    """Have ``fn`` called with the result of every ``stoker.run`` in this process."""
    _listeners.append(fn)


def report(result: Any) -> None:
    for fn in _listeners:
        fn(result)
