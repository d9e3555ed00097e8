"""Sink transactions in SQL, their states checked against ``TXN_TRANSITIONS``."""

from __future__ import annotations

import json
from typing import Any

from stoker.store._sqlbase import SqlBase
from stoker.store.records import SinkTxn
from stoker.types import TXNS, AttemptNo, Epoch, JobId, TxnState


class TxnsMixin(SqlBase):
    """Implements :class:`stoker.store.protocols.runs.TxnStore`."""

    def record_txn(
        self,
        job_id: JobId,
        epoch: Epoch,
        sink: str,
        attempt: AttemptNo,
        state: TxnState,
        detail: dict[str, Any],
    ) -> SinkTxn:
        """Move the sink transaction to ``state`` (checked against the table in types.py).

        ``detail`` is merged into what is recorded: a commit keeps the parts its prepare listed.
        """
        with self._tx() as cur:
            row = self._x(
                cur, "get_txn", job_id=job_id, epoch=epoch, sink=sink, attempt=attempt
            ).fetchone()
            old = None if row is None else SinkTxn.from_row(row)
            TXNS.check(None if old is None else old.state, state)
            merged = {**(old.detail if old is not None else {}), **detail}
            self._x(
                cur,
                "upsert_txn",
                job_id=job_id,
                epoch=epoch,
                sink=sink,
                attempt=attempt,
                state=str(state),
                detail=json.dumps(merged, sort_keys=True),
                now=self.clock.now(),
            )
            row = self._x(
                cur, "get_txn", job_id=job_id, epoch=epoch, sink=sink, attempt=attempt
            ).fetchone()
        return SinkTxn.from_row(row)

    def get_txn(self, job_id: JobId, epoch: Epoch, sink: str, attempt: AttemptNo) -> SinkTxn | None:
        with self._tx(write=False) as cur:
            row = self._x(
                cur, "get_txn", job_id=job_id, epoch=epoch, sink=sink, attempt=attempt
            ).fetchone()
        return None if row is None else SinkTxn.from_row(row)

    def list_txns(self, job_id: JobId, state: TxnState | None = None) -> list[SinkTxn]:
        with self._tx(write=False) as cur:
            if state is None:
                rows = self._x(cur, "list_txns", job_id=job_id).fetchall()
            else:
                rows = self._x(
                    cur, "list_txns_in_state", job_id=job_id, state=str(state)
                ).fetchall()
        return [SinkTxn.from_row(r) for r in rows]
