"""The epoch in flight: what it pinned, what each sink prepared for it, and how far it got.

As Flink's ``PendingCheckpoint`` is the one object a checkpoint in flight is, a
:class:`PendingEpoch` is the one object an epoch between its pin and its commit is. Its status
moves only along :data:`PENDING_MOVES`, and every method checks it: a commit without a
decision (so without a prepare) raises, a second prepare of one sink raises. Commit works from
what the pending epoch holds, which is what the store recorded at prepare time (the sinks'
parts, typed, each with the Spark task attempt that made it), never from what a sink happens to
hold at commit time. Recovery builds the pending epochs of decided epochs from the store's
records and commits them the same way.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from stoker.errors import InvalidTransition, SinkError
from stoker.sinks.base import PreparedPart, TwoPhaseSink
from stoker.types import AttemptNo, ControlVersion, Epoch, EpochState, JobId, TxnState

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from stoker.store import Store
    from stoker.store.records import EpochRecord


class PendingStatus(enum.StrEnum):
    """PINNED -> PREPARED -> DECIDED -> COMMITTED; PINNED | PREPARED -> ABORTED."""

    PINNED = "PINNED"  # pinned; sinks preparing
    PREPARED = "PREPARED"  # every sink prepared and recorded
    DECIDED = "DECIDED"  # the store decided the epoch for this attempt: commit it
    COMMITTED = "COMMITTED"  # every sink committed, the store says so
    ABORTED = "ABORTED"  # given up before the decision (recovery aborts its parts)


PENDING_MOVES: dict[PendingStatus, frozenset[PendingStatus]] = {
    PendingStatus.PINNED: frozenset({PendingStatus.PREPARED, PendingStatus.ABORTED}),
    PendingStatus.PREPARED: frozenset({PendingStatus.DECIDED, PendingStatus.ABORTED}),
    PendingStatus.DECIDED: frozenset({PendingStatus.COMMITTED}),
    PendingStatus.COMMITTED: frozenset(),
    PendingStatus.ABORTED: frozenset(),
}


@dataclass(frozen=True)
class SinkPart:
    """One sink's prepared part of the epoch, as recorded in the store."""

    sink: str
    rows: int
    detail: dict[str, Any]
    parts: tuple[PreparedPart, ...] = ()
    committed: bool = False


@dataclass
class PendingEpoch:
    """An epoch of one attempt from its pin to its commit."""

    store: Store
    job: JobId
    epoch: Epoch
    attempt: AttemptNo
    control_version: ControlVersion
    status: PendingStatus = PendingStatus.PINNED
    parts: dict[str, SinkPart] = field(default_factory=dict)
    # Sinks with no part in this epoch: added to the pipeline after it was decided (rebuilt
    # from the store only). They take part from the next epoch on; commit passes them by.
    absent: frozenset[str] = frozenset()

    def __repr__(self) -> str:
        return (
            f"PendingEpoch({self.job}:{self.epoch} attempt {self.attempt}, {self.status}, "
            f"sinks {sorted(self.parts)})"
        )

    def _move(self, target: PendingStatus) -> None:
        if target not in PENDING_MOVES[self.status]:
            raise InvalidTransition(
                f"epoch {self.epoch} of job {self.job!r} (attempt {self.attempt}) is "
                f"{self.status}: it cannot become {target}"
            )
        self.status = target

    def _require(self, *allowed: PendingStatus, doing: str) -> None:
        if self.status not in allowed:
            raise InvalidTransition(
                f"cannot {doing} epoch {self.epoch} of job {self.job!r} (attempt "
                f"{self.attempt}): it is {self.status}, not {' or '.join(allowed)}"
            )

    @property
    def rows(self) -> int:
        """Rows of the epoch (every sink writes the same frame: the first one's count)."""
        return next(iter(self.parts.values())).rows if self.parts else 0

    # the epoch protocol ------------------------------------------------------------------------
    def prepare(self, sink: TwoPhaseSink, df: DataFrame) -> SinkPart:
        """Prepare ``sink``'s part and record it PREPARED, with what commit will need."""
        self._require(PendingStatus.PINNED, doing=f"prepare sink {sink.name!r} of")
        if sink.name in self.parts:
            raise InvalidTransition(f"sink {sink.name!r} prepared epoch {self.epoch} twice")
        p = sink.prepare(df, self.epoch, self.attempt)
        detail = dict(p.detail)
        # The record is what commit and recovery act on: it must be in the store before the
        # decision. A crash before it: the part is in the sink only, recovery rolls it back.
        self.store.record_txn(
            self.job, self.epoch, sink.name, self.attempt, TxnState.PREPARED, detail
        )
        part = SinkPart(sink.name, p.rows, detail, p.parts)
        self.parts[sink.name] = part
        return part

    def all_prepared(self, sinks: Iterable[TwoPhaseSink]) -> None:
        """Every sink has prepared and recorded its part: ready for the decision."""
        missing = [s.name for s in sinks if s.name not in self.parts]
        if missing:
            raise InvalidTransition(f"epoch {self.epoch}: sinks {missing} have not prepared")
        self._move(PendingStatus.PREPARED)

    def decide(self, final: bool) -> EpochRecord:
        """The commit point: the store decides the epoch for this attempt (fenced)."""
        self._require(PendingStatus.PREPARED, doing="decide")
        rec = self.store.decide_epoch(self.job, self.epoch, self.attempt, self.rows, final)
        self._move(PendingStatus.DECIDED)
        return rec

    def commit(self, sinks: Iterable[TwoPhaseSink]) -> None:
        """Commit each sink's recorded part, then record its transaction COMMITTED.

        Only a decided epoch commits: a pending epoch that was never prepared and decided
        raises :class:`InvalidTransition`. Idempotent (a sink already committed is done again:
        each sink's commit is idempotent, the record may repeat COMMITTED).
        """
        self._require(PendingStatus.DECIDED, doing="commit")
        for sink in sinks:
            part = self.parts.get(sink.name)
            if part is None and sink.name in self.absent:
                continue
            if part is None:
                raise SinkError(
                    "sinks",
                    f"epoch {self.epoch} was decided for attempt {self.attempt} but sink "
                    f"{sink.name!r} has no recorded part of it (was the sink added since?)",
                )
            sink.commit(self.epoch, self.attempt, part.detail)
            self.store.record_txn(
                self.job, self.epoch, sink.name, self.attempt, TxnState.COMMITTED, {}
            )
            self.parts[sink.name] = SinkPart(
                part.sink, part.rows, part.detail, part.parts, committed=True
            )

    def mark_committed(self) -> None:
        """Every sink committed: the store marks the epoch COMMITTED."""
        self._require(PendingStatus.DECIDED, doing="mark committed")
        not_yet = [name for name, p in self.parts.items() if not p.committed]
        if not_yet:
            raise InvalidTransition(f"epoch {self.epoch}: sinks {not_yet} have not committed")
        self.store.mark_epoch_committed(self.job, self.epoch)
        self._move(PendingStatus.COMMITTED)

    def abort(self) -> None:
        """Give the epoch up before its decision (its parts are left to recovery)."""
        self._move(PendingStatus.ABORTED)

    # from the store ----------------------------------------------------------------------------
    @classmethod
    def decided(cls, store: Store, rec: EpochRecord, sinks: Iterable[TwoPhaseSink]) -> PendingEpoch:
        """The pending epoch of a DECIDED epoch record, rebuilt from the store's sink records
        (recovery, or the replay of an epoch decided before a crash)."""
        if rec.state != EpochState.DECIDED or rec.decided_by is None:
            raise InvalidTransition(
                f"epoch {rec.epoch} of job {rec.job_id!r} is {rec.state}: only a DECIDED epoch "
                "is committed from its record"
            )
        pending = cls(
            store,
            rec.job_id,
            rec.epoch,
            rec.decided_by,
            rec.control_version,
            status=PendingStatus.DECIDED,
        )
        absent = []
        for sink in sinks:
            txn = store.get_txn(rec.job_id, rec.epoch, sink.name, rec.decided_by)
            if txn is None:
                # Every sink of the deciding attempt recorded its part before the decision
                # (all_prepared): a sink without a record was not in that attempt's pipeline.
                absent.append(sink.name)
                continue
            if txn.state == TxnState.ABORTED:
                raise SinkError(
                    "sinks",
                    f"epoch {rec.epoch} of job {rec.job_id!r} was decided for attempt "
                    f"{rec.decided_by}, but its part of sink {sink.name!r} is recorded "
                    "ABORTED: it cannot be committed",
                )
            raw = txn.detail.get("parts") or []
            parts = tuple(PreparedPart.from_json(p) for p in raw if isinstance(p, dict))
            pending.parts[sink.name] = SinkPart(
                sink.name, rec.rows_in or 0, dict(txn.detail), parts
            )
        pending.absent = frozenset(absent)
        return pending
