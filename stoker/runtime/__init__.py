"""The driver side: epoch protocol, recovery, attempts, and running a job."""

from __future__ import annotations

from stoker.runtime.context import EpochContext
from stoker.runtime.job.api import run
from stoker.runtime.job.result import JobResult

__all__ = ["EpochContext", "JobResult", "run"]
