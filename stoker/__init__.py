"""stoker: a job manager and runtime for long-running PySpark pipelines.

Write a :class:`Pipeline` (sources, a per-epoch transform, two-phase sinks) and :func:`run` it:
every epoch is committed exactly once to every sink, across crashes, and a job whose inputs
are all bounded ends FINISHED after its final epoch. :func:`submit` starts a job and returns
its :class:`JobHandle` (``wait()``, ``state``, ``cancel()``), so one program runs several jobs
at once; run under a job manager (``stoker run --driver``), such a program is an application.

The names that need Spark (``Pipeline``, ``run``, ``submit``, ``JobHandle``, ``EpochContext``,
``JobResult``, ``sinks``, ``sources``) are imported on first use, so ``import stoker.store``
(or ``manager``, ``server``, ``cli``, ``client``) does not load pyspark.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from stoker.errors import (
    DuplicateJob,
    InvalidInput,
    InvalidPipeline,
    InvalidSink,
    InvalidSource,
    JobFailed,
    JobNotFound,
    JobTerminal,
    SinkError,
    SourceError,
    StaleAttempt,
    StokerError,
)
from stoker.types import JobState

if TYPE_CHECKING:
    from stoker import sinks, sources
    from stoker.pipeline import Pipeline
    from stoker.runtime import EpochContext, JobResult, run
    from stoker.runtime.application import JobHandle
    from stoker.runtime.submission import submit

# Public name -> (module, attribute or None for the module itself), loaded on first access.
_LAZY: dict[str, tuple[str, str | None]] = {
    "Pipeline": ("stoker.pipeline", "Pipeline"),
    "EpochContext": ("stoker.runtime", "EpochContext"),
    "JobResult": ("stoker.runtime", "JobResult"),
    "run": ("stoker.runtime", "run"),
    "submit": ("stoker.runtime.submission", "submit"),
    "JobHandle": ("stoker.runtime.application", "JobHandle"),
    "sinks": ("stoker.sinks", None),
    "sources": ("stoker.sources", None),
}


def __getattr__(name: str) -> Any:
    try:
        module, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'stoker' has no attribute {name!r}") from None
    value = importlib.import_module(module)
    if attr is not None:
        value = getattr(value, attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "DuplicateJob",
    "EpochContext",
    "InvalidInput",
    "InvalidPipeline",
    "InvalidSink",
    "InvalidSource",
    "JobFailed",
    "JobHandle",
    "JobNotFound",
    "JobResult",
    "JobState",
    "JobTerminal",
    "Pipeline",
    "SinkError",
    "SourceError",
    "StaleAttempt",
    "StokerError",
    "run",
    "sinks",
    "sources",
    "submit",
]

from stoker.version import __version__ as __version__  # noqa: E402 (the store reads it too)
