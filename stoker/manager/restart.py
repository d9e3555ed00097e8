"""Restart strategies: the supervisor's names for :mod:`stoker.restart`, where they live.

They moved to a leaf module so that an application's driver applies the same strategies to a
job that fails inside it (the job manager never restarts such a job itself).
"""

from __future__ import annotations

from stoker.restart import (
    DEFAULT_RESET_AFTER,
    Decision,
    ExponentialDelay,
    Failure,
    FailureRate,
    FixedDelay,
    NoRestart,
    RestartStrategy,
    parse_strategy,
)

__all__ = [
    "DEFAULT_RESET_AFTER",
    "Decision",
    "ExponentialDelay",
    "Failure",
    "FailureRate",
    "FixedDelay",
    "NoRestart",
    "RestartStrategy",
    "parse_strategy",
]
