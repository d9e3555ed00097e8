"""Operations in SQL (migration 0015): long REST calls that answer 202 and are polled. A row
is made RUNNING by the manager that runs the call and ended once, SUCCEEDED with the answer
or FAILED with the error (``OPERATIONS``); a retry of the same request finds it."""

from __future__ import annotations

import json
from typing import Any

from stoker.errors import InvalidInput, InvalidTransition, OperationNotFound
from stoker.store._sqlbase import SqlBase
from stoker.store.fleet_records import OperationRecord
from stoker.types import OPERATIONS, OperationState


def request_key(request: dict[str, Any]) -> str:
    """The canonical JSON of a request (keys sorted, no spaces): two equal requests, one key."""
    if not isinstance(request, dict):
        raise InvalidInput("request", f"must be an object, got {type(request).__name__}")
    try:
        return json.dumps(request, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as e:
        raise InvalidInput("request", f"cannot be stored as JSON: {e}") from None


class OperationsMixin(SqlBase):
    """Implements :class:`stoker.store.protocols.fleet.OperationStore`."""

    def create_operation(
        self,
        op_id: str,
        kind: str,
        target: str,
        request: dict[str, Any],
        holder: str,
        idem_key: str | None = None,
    ) -> OperationRecord:
        key = request_key(request)
        with self._tx() as cur:
            self._x(
                cur,
                "insert_operation",
                op_id=op_id,
                kind=kind,
                target=target,
                request=key,
                idem_key=idem_key,
                holder=holder,
                now=self.clock.now(),
            )
            row = self._x(cur, "get_operation", op_id=op_id).fetchone()
        return OperationRecord.from_row(row)

    def get_operation(self, op_id: str) -> OperationRecord:
        with self._tx(write=False) as cur:
            row = self._x(cur, "get_operation", op_id=op_id).fetchone()
        if row is None:
            raise OperationNotFound(op_id)
        return OperationRecord.from_row(row)

    def find_operation(
        self, kind: str, target: str, request: dict[str, Any], since: float
    ) -> OperationRecord | None:
        key = request_key(request)
        with self._tx(write=False) as cur:
            row = self._x(
                cur, "find_operation", kind=kind, target=target, request=key, since=since
            ).fetchone()
        return None if row is None else OperationRecord.from_row(row)

    def keyed_operation(self, idem_key: str) -> OperationRecord | None:
        with self._tx(write=False) as cur:
            row = self._x(cur, "keyed_operation", idem_key=idem_key).fetchone()
        return None if row is None else OperationRecord.from_row(row)

    def running_operations(self) -> list[OperationRecord]:
        with self._tx(write=False) as cur:
            rows = self._x(cur, "running_operations").fetchall()
        return [OperationRecord.from_row(r) for r in rows]

    def end_operation(
        self,
        op_id: str,
        state: OperationState,
        *,
        result: dict[str, Any] | None = None,
        error: str | None = None,
        error_type: str | None = None,
    ) -> OperationRecord:
        OPERATIONS.check(OperationState.RUNNING, state)
        doc = None if result is None else json.dumps(result, sort_keys=True, default=str)
        with self._tx() as cur:
            n = self._x(
                cur,
                "end_operation",
                op_id=op_id,
                state=state.value,
                result=doc,
                error=error,
                error_type=error_type,
                now=self.clock.now(),
            ).rowcount
            row = self._x(cur, "get_operation", op_id=op_id).fetchone()
        if row is None:
            raise OperationNotFound(op_id)
        rec = OperationRecord.from_row(row)
        if n != 1:
            raise InvalidTransition(f"operation {op_id} is {rec.state}: it ended already")
        return rec

    def delete_ended_operations(self, before: float) -> int:
        with self._tx() as cur:
            return int(self._x(cur, "delete_ended_operations", before=before).rowcount)
