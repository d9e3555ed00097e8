"""Settings handed from the ``stoker`` CLI to a ``stoker.run`` call inside the user's file."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_global: dict[str, object] = {"overrides": {}, "job_id": None, "restart": False}


def set_launch(overrides: dict[str, str], job_id: str | None, restart: bool) -> None:
    _global.update(overrides=dict(overrides), job_id=job_id, restart=restart)


def overrides() -> dict[str, str]:
    value = _global["overrides"]
    assert isinstance(value, dict)
    return dict(value)


def job_id() -> str | None:
    value = _global["job_id"]
    return value if isinstance(value, str) else None


def restart() -> bool:
    return bool(_global["restart"])


_listeners: list[Callable[[Any], None]] = []


def on_result(fn: Callable[[Any], None]) -> None:
    """Have ``fn`` called with the result of every ``stoker.run`` in this process."""
    _listeners.append(fn)


def report(result: Any) -> None:
    for fn in _listeners:
        fn(result)
