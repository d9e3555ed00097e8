"""The driver side: epoch protocol, recovery, attempts, and running a job.

``run``, ``EpochContext`` and ``JobResult`` are imported on first use (as in ``stoker``), so
that a process importing one light module of the package (a job manager's driver holding its
attempt before anything else, ``stoker.runtime.launch``) does not load pyspark first.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stoker.runtime.context import EpochContext
    from stoker.runtime.job.api import run
    from stoker.runtime.job.result import JobResult

_LAZY = {
    "EpochContext": "stoker.runtime.context",
    "run": "stoker.runtime.job.api",
    "JobResult": "stoker.runtime.job.result",
}

__all__ = ["EpochContext", "JobResult", "run"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'stoker.runtime' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
