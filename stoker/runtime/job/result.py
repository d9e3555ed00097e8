"""How a job's run ended, as ``stoker.run`` returns it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stoker.types import JobId, JobState


@dataclass(frozen=True)
class JobResult:
    """How a run ended."""

    job_id: JobId
    state: JobState
    attempt: int
    epochs: int  # epochs committed by this attempt
    rows: int  # rows written by this attempt
    last_epoch: int | None
    state_dir: Path
    store_url: str
    outputs: tuple[str, ...] = ()  # each sink, described (no credentials)
    # A second signal stopped it without waiting for the epoch in flight (it runs again).
    stopped_at_once: bool = False


def describe(result: JobResult) -> dict[str, Any]:
    return {
        "job_id": result.job_id,
        "state": str(result.state),
        "attempt": result.attempt,
        "epochs": result.epochs,
        "rows": result.rows,
        "last_epoch": result.last_epoch,
    }
