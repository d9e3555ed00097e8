"""Epochs in SQL: pin, decide (the fenced commit point), committed."""

from __future__ import annotations

from stoker.errors import InvalidTransition, StaleAttempt
from stoker.store._sqlbase import SqlBase
from stoker.store.records import EpochRecord
from stoker.types import (
    EPOCHS,
    AttemptNo,
    ControlVersion,
    Epoch,
    EpochState,
    JobId,
)


class EpochsMixin(SqlBase):
    """Implements :class:`stoker.store.protocols.runs.EpochStore`."""

    def pin_epoch(
        self, job_id: JobId, epoch: Epoch, attempt: AttemptNo, control_version: ControlVersion
    ) -> EpochRecord:
        now = self.clock.now()
        with self._tx() as cur:
            self._x(
                cur,
                "pin_epoch",
                job_id=job_id,
                epoch=epoch,
                attempt=attempt,
                control_version=control_version,
                now=now,
            )
            rec = EpochRecord.from_row(
                self._x(cur, "get_epoch", job_id=job_id, epoch=epoch).fetchone()
            )
            # The events up to the version the record holds (the first pin's, on a replay)
            # apply at this epoch. On a replay they did so at the first pin, in its
            # transaction: none is PENDING any more, and the epoch's set stays as it was.
            self._x(
                cur,
                "apply_controls",
                job_id=job_id,
                epoch=epoch,
                version=int(rec.control_version),
                now=now,
            )
        return rec

    def decide_epoch(
        self, job_id: JobId, epoch: Epoch, attempt: AttemptNo, rows_in: int, final: bool
    ) -> EpochRecord:
        with self._tx() as cur:
            row = self._x(cur, "get_epoch", job_id=job_id, epoch=epoch).fetchone()
            rec = None if row is None else EpochRecord.from_row(row)
            if rec is not None and rec.state != EpochState.PINNED and rec.decided_by == attempt:
                return rec  # decided by this very attempt before: idempotent
            n = 0
            refused: InvalidTransition | None = None
            if rec is not None:
                try:
                    EPOCHS.check(rec.state, EpochState.DECIDED)
                except InvalidTransition as e:
                    refused = e  # another attempt decided it: this one is fenced off
                else:
                    n = self._x(
                        cur,
                        "decide_epoch",
                        job_id=job_id,
                        epoch=epoch,
                        attempt=attempt,
                        rows_in=rows_in,
                        final=int(final),
                        now=self.clock.now(),
                        from_state=str(rec.state),
                    ).rowcount
                    row = self._x(cur, "get_epoch", job_id=job_id, epoch=epoch).fetchone()
                    rec = EpochRecord.from_row(row)
        if n == 1 and rec is not None:
            return rec
        raise StaleAttempt(
            f"attempt {attempt} of job {job_id!r} may not decide epoch {epoch}: "
            + ("it is not pinned" if rec is None else f"epoch is {rec.state}, ")
            + "or the attempt is no longer current / its lease lapsed"
        ) from refused

    def mark_epoch_committed(self, job_id: JobId, epoch: Epoch) -> None:
        now = self.clock.now()
        with self._tx() as cur:
            row = self._x(cur, "get_epoch", job_id=job_id, epoch=epoch).fetchone()
            if row is None:
                return  # pruned by retention (it was committed): nothing to mark
            current = EpochRecord.from_row(row).state
            try:
                EPOCHS.check(current, EpochState.COMMITTED)
            except InvalidTransition as e:
                raise InvalidTransition(f"epoch {epoch} of job {job_id!r}: {e}") from None
            if current == EpochState.COMMITTED:
                return  # committed before (recovery repeats it): nothing changes
            n = self._x(
                cur,
                "commit_epoch",
                job_id=job_id,
                epoch=epoch,
                now=now,
                from_state=str(current),
            ).rowcount
            if n:
                # Same transaction as the change: the total is exact and pruning never lowers it.
                self._x(cur, "bump_counter", name="epochs_committed", n=n)
                # The control events applied at this epoch are committed with it.
                self._x(cur, "commit_controls", job_id=job_id, epoch=epoch, now=now)

    def get_epoch(self, job_id: JobId, epoch: Epoch) -> EpochRecord | None:
        with self._tx(write=False) as cur:
            row = self._x(cur, "get_epoch", job_id=job_id, epoch=epoch).fetchone()
        return None if row is None else EpochRecord.from_row(row)

    def list_epochs(
        self, job_id: JobId, limit: int = 100, before: int | None = None
    ) -> list[EpochRecord]:
        with self._tx(write=False) as cur:
            if before is None:
                rows = self._x(cur, "list_epochs", job_id=job_id, limit=limit).fetchall()
            else:
                rows = self._x(
                    cur, "list_epochs_before", job_id=job_id, limit=limit, before=int(before)
                ).fetchall()
        return [EpochRecord.from_row(r) for r in rows]

    def epochs_in_state(self, job_id: JobId, state: str) -> list[EpochRecord]:
        with self._tx(write=False) as cur:
            rows = self._x(
                cur, "list_epochs_in_state", job_id=job_id, state=str(EpochState(state))
            ).fetchall()
        return [EpochRecord.from_row(r) for r in rows]

    def decided_range(self, job_id: JobId) -> tuple[Epoch, Epoch] | None:
        with self._tx(write=False) as cur:
            lo, hi = self._x(cur, "decided_range", job_id=job_id).fetchone()
        return None if hi is None else (Epoch(int(lo)), Epoch(int(hi)))

    def reset_epochs(self, job_id: JobId, attempt: AttemptNo, uid: str) -> int:
        with self._tx() as cur:
            job = self._locked_job(cur, job_id)
            if job.current_attempt != attempt:
                raise StaleAttempt(
                    f"attempt {attempt} of job {job_id!r} may not reset its epochs: attempt "
                    f"{job.current_attempt} is the job's current one"
                )
            self._x(cur, "reset_txns", job_id=job_id)
            n = int(self._x(cur, "reset_epochs", job_id=job_id).rowcount)
            self._x(cur, "set_job_uid", job_id=job_id, uid=uid, now=self.clock.now())
        return n
