"""stoker: a job manager and runtime for long-running PySpark pipelines.

Write a :class:`Pipeline` (sources, a per-epoch transform, two-phase sinks) and :func:`run` it:
every epoch is committed exactly once to every sink, across crashes, and a job whose inputs
are all bounded ends FINISHED after its final epoch.
"""

from __future__ import annotations

from stoker import sinks, sources
from stoker.errors import (
    DuplicateJob,
    InvalidInput,
    InvalidPipeline,
    JobFailed,
    JobNotFound,
    JobTerminal,
    SinkError,
    SourceError,
    StaleAttempt,
    StokerError,
)
from stoker.pipeline import Pipeline
from stoker.runtime import EpochContext, JobResult, run
from stoker.types import JobState

__all__ = [
    "DuplicateJob",
    "EpochContext",
    "InvalidInput",
    "InvalidPipeline",
    "JobFailed",
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
]

__version__ = "0.1.0"
