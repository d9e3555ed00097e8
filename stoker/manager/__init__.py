"""The job manager: submissions, supervision of driver processes, leadership."""

from __future__ import annotations

from stoker.manager.control import ControlRateLimiter
from stoker.manager.manager import JobManager
from stoker.manager.submissions import SubmitResult
from stoker.manager.supervisor import Supervisor, SupervisorConfig

__all__ = ["ControlRateLimiter", "JobManager", "SubmitResult", "Supervisor", "SupervisorConfig"]
