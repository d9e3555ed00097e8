"""The scaler: decides owners' executor targets from their epochs and acts on them through a
resource provider (see docs/architecture.md, "Scaling"). Spark-free: it runs in the job
manager, beside the supervisor, while that manager leads."""

from __future__ import annotations

from stoker.scaling.policy import (
    Decision,
    DefaultPolicy,
    EpochSample,
    PolicyMemory,
    ScalingPolicy,
    Signals,
)

__all__ = [
    "Decision",
    "DefaultPolicy",
    "EpochSample",
    "PolicyMemory",
    "ScalingPolicy",
    "Signals",
]
