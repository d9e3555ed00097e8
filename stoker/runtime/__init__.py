"""The driver side: epoch protocol, recovery, attempts, and running a job."""

from __future__ import annotations

from stoker.runtime.context import EpochContext
from stoker.runtime.runner import JobResult, run

__all__ = ["EpochContext", "JobResult", "run"]
