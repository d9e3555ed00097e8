"""Settings handed from a launcher (the ``stoker`` CLI, a job manager's driver) to the
``stoker.run`` call inside the user's file.

In *collect* mode (a job manager's cleanup process) ``stoker.run(p)`` runs nothing: it raises
:class:`Collected`, which hands ``p`` back to the launcher and stops the file's main there.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any


@dataclass
class Launch:
    """What the launcher decided: settings, job id, restart, and (driver mode) the attempt."""

    overrides: dict[str, str] = field(default_factory=dict)
    job_id: str | None = None
    restart: bool = False
    attempt: int | None = None  # set when a job manager made the attempt for this driver
    collect: bool = False  # stoker.run hands its pipeline back instead of running it


class Collected(BaseException):  # not an error: a way out of the user's main
    """Raised by ``stoker.run`` in collect mode, carrying the pipeline it was given.

    A BaseException, so that an application's ``except Exception`` does not swallow it.
    """

    def __init__(self, pipeline: Any) -> None:
        super().__init__("stoker.run in collect mode")
        self.pipeline = pipeline


class AppEnding(BaseException):  # not an error: a way out of the program's main
    """Raised by ``stoker.submit`` and ``JobHandle.wait`` in an application whose driver is
    ending (canceled, stopped by a signal, fenced off by a newer attempt): no job may start,
    and the program's ``main`` is not to go on. A BaseException, so that an application's
    ``except Exception`` does not swallow it.
    """


_current = Launch()
_listeners: list[Callable[[Any], None]] = []


def set_launch(
    overrides: dict[str, str],
    job_id: str | None,
    restart: bool,
    attempt: int | None = None,
    collect: bool = False,
) -> None:
    global _current
    _current = Launch(dict(overrides), job_id, restart, attempt, collect)


def current() -> Launch:
    """What the launcher decided (a copy)."""
    return replace(_current, overrides=dict(_current.overrides))


def overrides() -> dict[str, str]:
    return dict(_current.overrides)


def job_id() -> str | None:
    return _current.job_id


def restart() -> bool:
    return _current.restart


def attempt() -> int | None:
    return _current.attempt


def collecting() -> bool:
    """Whether ``stoker.run`` is to hand its pipeline back (:class:`Collected`), not run it."""
    return _current.collect


_config: dict[str, Any] = {}


def set_config(values: dict[str, Any]) -> None:
    """Pipeline config values given from outside (``stoker run --config key=value``)."""
    global _config
    _config = dict(values)


def config() -> dict[str, Any]:
    """The pipeline config values the launcher was given (a copy; empty if none)."""
    return dict(_config)


_wanted: str | None = None


def set_wanted_pipeline(name: str | None) -> None:
    """``stoker run --pipeline NAME``: ``stoker.run`` refuses any other pipeline."""
    global _wanted
    _wanted = name


def wanted_pipeline() -> str | None:
    return _wanted


# A job manager's driver (or any launcher in another process) passes the savepoint folder in
# this environment variable; the CLI and in-process launchers call set_from_savepoint.
FROM_SAVEPOINT_ENV = "STOKER_FROM_SAVEPOINT"
_from_savepoint: str | None = None


def set_from_savepoint(folder: str | None) -> None:
    """``stoker run --from-savepoint DIR``: ``stoker.run`` starts the job from that savepoint."""
    global _from_savepoint
    _from_savepoint = str(folder) if folder else None


def from_savepoint() -> str | None:
    """The savepoint folder the launcher asked the job to start from (``--from-savepoint``,
    or ``STOKER_FROM_SAVEPOINT`` in the environment); None for none. A job already restored
    from it resumes as it is, so every attempt of a job may be given the same folder."""
    return _from_savepoint or os.environ.get(FROM_SAVEPOINT_ENV) or None


def on_result(fn: Callable[[Any], None]) -> None:
    """Have ``fn`` called with the result of every ``stoker.run`` in this process."""
    _listeners.append(fn)


def report(result: Any) -> None:
    for fn in _listeners:
        fn(result)
