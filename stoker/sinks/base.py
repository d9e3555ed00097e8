"""The two-phase sink protocol. Commit and abort are idempotent; recovery follows the store."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from stoker.types import AttemptNo, Epoch, JobId

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

# For an epoch, the attempt whose prepared parts form it, or None while it is undecided.
Decision = Callable[[Epoch], AttemptNo | None]


@dataclass
class Prepared:
    """What ``prepare`` leaves behind: rows written and what commit/abort need."""

    rows: int
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class Recovered:
    """What ``recover`` did with leftovers of earlier attempts."""

    committed: list[tuple[Epoch, AttemptNo]] = field(default_factory=list)
    aborted: list[tuple[Epoch, AttemptNo]] = field(default_factory=list)


class TwoPhaseSink(Protocol):
    """An output that can hold an epoch's part prepared, then commit or abort it.

    Parts are named by (job id, epoch, attempt), so that leftovers of a dead or fenced attempt
    are never confused with the parts of the attempt that decided the epoch.
    """

    name: str

    def describe(self) -> str: ...

    def validate(self) -> None:
        """Raise :class:`~stoker.errors.SinkError` now if the sink cannot work."""
        ...

    def open(self, job_id: JobId, state_dir: Path) -> None:
        """Bind the sink to its job before the first epoch (on the driver)."""
        ...

    def prepare(self, df: DataFrame, epoch: Epoch, attempt: AttemptNo) -> Prepared:
        """Write ``df`` as this epoch's part, durable but invisible to readers."""
        ...

    def commit(self, epoch: Epoch, attempt: AttemptNo) -> None:
        """Make the part of (epoch, attempt) visible; a no-op if it already is."""
        ...

    def abort(self, epoch: Epoch, attempt: AttemptNo) -> None:
        """Discard the part of (epoch, attempt); a no-op if there is none."""
        ...

    def recover(self, decision: Decision) -> Recovered:
        """Commit the leftover parts the store decided, abort every other leftover."""
        ...
