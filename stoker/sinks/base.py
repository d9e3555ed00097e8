"""The two-phase sink protocol. Commit and abort are idempotent; recovery follows the store."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NewType, Protocol

from stoker.types import AttemptNo, Epoch, JobId

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

# For an epoch, the attempt whose prepared parts form it, or None while it is undecided.
Decision = Callable[[Epoch], AttemptNo | None]


@dataclass(frozen=True)
class SinkOwner:
    """The job a sink writes for: its id, and the uid of its record in the store.

    The uid tells this job from an earlier job of the same id whose state folder (and store)
    is gone: an output folder must not be mistaken for its own by either.
    """

    job_id: JobId
    uid: str


# Spark's ids of the task that wrote a part: the partition, and the task attempt (unique within
# one SparkContext; a retried or speculative copy of a task gets a new one).
PartitionId = NewType("PartitionId", int)
TaskAttemptId = NewType("TaskAttemptId", int)


@dataclass(frozen=True)
class PreparedPart:
    """One prepared part of an epoch as a Spark task made it (a sink transaction id, a gid)."""

    id: str
    partition: PartitionId
    task_attempt: TaskAttemptId
    task_attempt_number: int  # Spark's attemptNumber: 0 first, >0 a retry or speculative copy
    rows: int

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "partition": self.partition,
            "task_attempt": self.task_attempt,
            "task_attempt_number": self.task_attempt_number,
            "rows": self.rows,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> PreparedPart:
        return cls(
            id=str(d["id"]),
            partition=PartitionId(int(d["partition"])),
            task_attempt=TaskAttemptId(int(d["task_attempt"])),
            task_attempt_number=int(d.get("task_attempt_number", 0)),
            rows=int(d.get("rows", 0)),
        )


@dataclass
class Prepared:
    """What ``prepare`` leaves behind: rows written and what commit/abort need.

    ``detail`` is recorded with the PREPARED sink transaction before the epoch is decided, and
    handed back to ``commit`` from that record: commit acts on exactly what was recorded.
    ``parts`` are the task-made parts it names (empty for a sink whose part is one unit).
    """

    rows: int
    detail: dict[str, Any] = field(default_factory=dict)
    parts: tuple[PreparedPart, ...] = ()


@dataclass
class Recovered:
    """What ``recover`` did with leftovers of earlier attempts.

    ``committed`` and ``aborted`` name sink transactions (epoch, attempt) whose record follows;
    ``strays`` are parts rolled back that belong to no recorded transaction (a retried or
    speculative task's copy, a zombie task's late part): the record of their (epoch, attempt),
    if any, is not theirs to change.
    """

    committed: list[tuple[Epoch, AttemptNo]] = field(default_factory=list)
    aborted: list[tuple[Epoch, AttemptNo]] = field(default_factory=list)
    strays: list[str] = field(default_factory=list)


class TwoPhaseSink(Protocol):
    """An output that can hold an epoch's part prepared, then commit or abort it.

    Parts are named by (job id, epoch, attempt), so that leftovers of a dead or fenced attempt
    are never confused with the parts of the attempt that decided the epoch.
    """

    name: str

    def describe(self) -> str: ...

    def descriptor(self) -> dict[str, Any]:
        """What rebuilds this sink without the application's code and without Spark
        (:func:`stoker.sinks.from_descriptor`): JSON-able, with its ``kind`` and ``name`` and
        whatever commit, abort and recover need. Called after ``open``; the runner records it
        in the store for the job manager's cleanup. A sink without it (a user-defined one) is
        left to its job's next recovery by that cleanup."""
        ...

    def accept_output_mode(self, mode: str) -> None:
        """Write the pipeline's Spark output mode ``mode`` (``append``, ``update``,
        ``complete``) as it means, or raise :class:`~stoker.errors.InvalidSink` naming what
        to use instead. Called by :meth:`stoker.pipeline.Pipeline.validate` before
        ``validate``; the mode belongs in the ``descriptor`` when commit depends on it.
        Optional: a sink without it is taken to append, and is refused any other mode."""
        ...

    def validate(self, owner: SinkOwner) -> None:
        """Raise now if the sink cannot work for ``owner``: :class:`~stoker.errors.InvalidSink`
        for what the user can fix (bad settings, an output that belongs to another job),
        :class:`~stoker.errors.SinkError` for the external system failing (an unreachable
        server). Runs before anything of the job is recorded; writes nothing."""
        ...

    def open(self, owner: SinkOwner, state_dir: Path) -> None:
        """Bind the sink to its job before the first epoch (on the driver)."""
        ...

    def committed_epochs(self, owner: SinkOwner) -> list[Epoch] | None:
        """The epochs of job uid ``owner.uid`` whose output this sink holds committed, in
        order; None when the sink cannot tell (a user-defined sink without this method is
        taken as None: :func:`stoker.sinks.committed_epochs_of`).

        Needs no ``open`` and writes nothing. A restore from a savepoint asks it, so that a
        new job does not write again what the savepoint's job wrote after the savepoint.
        Epochs commit in order, so the newest one reported is what matters: a sink may
        forget older ones (the PostgreSQL sink keeps the last two per job)."""
        ...

    def prepare(self, df: DataFrame, epoch: Epoch, attempt: AttemptNo) -> Prepared:
        """Write ``df`` as this epoch's part, durable but invisible to readers."""
        ...

    def commit(self, epoch: Epoch, attempt: AttemptNo, detail: Mapping[str, Any]) -> None:
        """Make the part of (epoch, attempt) visible; a no-op if it already is.

        ``detail`` is what ``prepare`` returned, as recorded in the store with the PREPARED
        transaction: commit makes exactly that visible and raises
        :class:`~stoker.errors.SinkError` when a part of it is gone without having been made
        visible (lost). Only ever called for an epoch the store decided for ``attempt``."""
        ...

    def abort(self, epoch: Epoch, attempt: AttemptNo) -> None:
        """Discard the part of (epoch, attempt); a no-op if there is none."""
        ...

    def recover(self, decision: Decision, up_to: AttemptNo | None = None) -> Recovered:
        """Abort every leftover part that is not the decided attempt's part of an epoch.

        Called by :func:`stoker.runtime.recovery.recover` after it has committed every
        decided epoch's recorded parts (through ``commit``). A sink whose parts are named by
        (epoch, attempt) alone may still commit the part of a decided (epoch, attempt) here
        (idempotent).

        ``up_to``: touch parts of that attempt and earlier ones only, never a later attempt's
        (None: every attempt's). Recovery resolves what attempts up to a given one left; a
        later attempt may already be preparing its own parts when a recovery that stalled
        (a frozen process, a partition) goes on, and those are not leftovers."""
        ...
