"""Long REST calls as operations: a session cluster's start, a worker added
or removed, a stopped job's state repartitioned. Each took from seconds to an hour on the
request's thread; now the call checks what it can at once (a 4xx then, nothing started),
records an operation RUNNING and answers 202 with it; the slow part runs on a small pool of
this manager's threads and ends the operation SUCCEEDED with the answer the call used to give,
or FAILED with the error it used to raise. A client polls ``GET /v1/operations/{id}``, as
Flink's savepoint trigger ids are polled.

- **Retry-safe.** A call sent with an ``Idempotency-Key`` header (the CLI sends one per
  command) gets, when repeated with that key, the operation the key made, for as long as
  the operation is kept (a day after it ended), and starts nothing; the same key with another
  request is refused (422). A call without a key that repeats the request of an operation
  still RUNNING gets that operation: two identical starts at once are never meant. An
  identical call after the first ended is a new operation (a second worker, say).
- **Bounded.** At most ``max_running`` operations of this manager run or wait at once; past
  that a call is refused 429 and nothing is recorded.
- **Never left RUNNING.** The operation names the process that runs it (host, pid and the
  pid's start). A manager that reads a RUNNING operation whose process is provably gone (it
  was killed mid-call) ends it FAILED saying so; what the call left behind is the resource's
  to say (a cluster left STARTING is cleaned up by the leader's cluster keeper). A manager
  that stops cleanly ends its own unfinished operations FAILED.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import re
import secrets
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from stoker.errors import InvalidInput, InvalidTransition, StokerError, StoreError, TooManyRequests
from stoker.procs import owner_is_dead, this_owner
from stoker.store import Store
from stoker.store.fleet_records import OperationRecord
from stoker.store.records import Owner
from stoker.store.sql_operations import request_key
from stoker.types import OperationState

log = logging.getLogger("stoker.manager.operations")

KEY_MAX = 200  # characters of an Idempotency-Key
MAX_RUNNING = 8  # operations one manager runs or queues at once
WORKERS = 2  # threads that run them (a cluster start is mostly waiting for JVMs)
ENDED_KEPT = 86_400.0  # s an ended operation stays readable (then retention drops it)

Work = Callable[[], dict[str, Any]]


KEY_PATTERN = r"^[\x21-\x7e]+$"  # printable ASCII, no spaces (the schema says it too)
_KEY = re.compile(KEY_PATTERN)


def check_key(key: str) -> None:
    """An Idempotency-Key is 1-200 printable ASCII characters without spaces."""
    if len(key) > KEY_MAX or not _KEY.fullmatch(key):
        raise InvalidInput(
            "Idempotency-Key", f"must be 1-{KEY_MAX} printable ASCII characters, no spaces"
        )


def holder_text(owner: Owner) -> str:
    """How an operation names the process that runs it."""
    return json.dumps([owner.host, owner.pid, owner.pid_started])


def holder_owner(text: str) -> Owner | None:
    try:
        host, pid, started = json.loads(text)
        return Owner(str(host), int(pid), str(started))
    except (ValueError, TypeError):
        return None


def settle(store: Store, op: OperationRecord) -> OperationRecord:
    """``op`` as it is, or ended FAILED when it RUNs under a process that is provably gone
    (killed mid-call: its thread will never end it)."""
    if op.state != OperationState.RUNNING:
        return op
    owner = holder_owner(op.holder)
    if owner is None or not owner_is_dead(owner):
        return op
    try:
        return _abandoned(store, op.op_id, f"the manager that ran it (pid {owner.pid})")
    except InvalidTransition:
        return store.get_operation(op.op_id)


def _abandoned(store: Store, op_id: str, who: str) -> OperationRecord:
    """End ``op_id`` FAILED: ``who`` stopped before it ended."""
    return store.end_operation(
        op_id,
        OperationState.FAILED,
        error=f"{who} stopped before it ended; what it changed is shown by the resource itself",
        error_type="ManagerUnavailable",
    )


def sweep(store: Store) -> int:
    """End every RUNNING operation whose manager is gone, and drop the ones that ended more
    than ``ENDED_KEPT`` ago (the leader does it now and then); how many were ended."""
    n = sum(
        1 for op in store.running_operations() if settle(store, op).state != OperationState.RUNNING
    )
    store.delete_ended_operations(store.clock.now() - ENDED_KEPT)
    return n


class Operations:
    """This manager's long calls, over the store (see the module's docstring)."""

    def __init__(
        self,
        store: Store,
        *,
        max_running: int = MAX_RUNNING,
        workers: int = WORKERS,
        owner: Owner | None = None,
    ) -> None:
        self.store = store
        self.max_running = max_running
        self.holder = holder_text(owner or this_owner())
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="stoker-op")
        self._lock = threading.Lock()  # one start at a time: the retry check and the bound
        self._mine: set[str] = set()
        self._closed = False

    def start(
        self,
        kind: str,
        target: str,
        request: dict[str, Any],
        prepare: Callable[[], Work],
        idem_key: str | None = None,
    ) -> tuple[OperationRecord, bool]:
        """The operation of this request: the one a retry finds (and False), or a new one
        (and True). ``prepare`` checks the call at once (its error is the call's answer,
        nothing is recorded) and returns the slow part, run in the background."""
        if idem_key is not None:
            check_key(idem_key)
        with self._lock:
            found = self._retried(kind, target, request, idem_key)
            if found is not None:
                return self.settle(found), False
            if self._closed:
                raise StokerError("the manager is stopping: retry on the next one")
            if len(self._mine) >= self.max_running:
                raise TooManyRequests("", 5.0, "").with_message(
                    f"{len(self._mine)} long operations run on this manager already (at most "
                    f"{self.max_running}): retry once one has ended"
                )
            work = prepare()
            op_id = f"op-{secrets.token_hex(8)}"
            try:
                op = self.store.create_operation(
                    op_id, kind, target, request, self.holder, idem_key
                )
            except StoreError:
                # Another manager made the key's operation between the look and the insert.
                found = self._retried(kind, target, request, idem_key)
                if found is None:
                    raise
                return self.settle(found), False
            self._mine.add(op_id)
        self._pool.submit(self._run, op_id, work)
        log.info("operation %s (%s %s) started", op_id, kind, target)
        return op, True

    def _retried(
        self, kind: str, target: str, request: dict[str, Any], idem_key: str | None
    ) -> OperationRecord | None:
        """The operation a repeat of this call gets, if there is one (the module's rules)."""
        if idem_key is None:
            return self.store.find_operation(kind, target, request, since=math.inf)
        found = self.store.keyed_operation(idem_key)
        if found is None:
            return None
        if (found.kind, found.target, found.request) != (kind, target, request_key(request)):
            raise InvalidInput(
                "Idempotency-Key",
                f"{idem_key!r} was sent with another request ({found.kind} {found.target}, "
                f"operation {found.op_id}): a new request needs a new key",
            )
        return found

    def _run(self, op_id: str, work: Work) -> None:
        try:
            result = work()
        except StokerError as e:
            self._end(op_id, OperationState.FAILED, error=str(e), error_type=type(e).__name__)
        except Exception as e:  # an unexpected error is the operation's answer, as a 500
            log.exception("operation %s failed", op_id)
            self._end(op_id, OperationState.FAILED, error=f"{type(e).__name__}: {e}")
        else:
            self._end(op_id, OperationState.SUCCEEDED, result=result)

    def _end(self, op_id: str, state: OperationState, **fields: Any) -> None:
        try:
            self.store.end_operation(op_id, state, **fields)
            log.info("operation %s %s", op_id, state.value)
        except InvalidTransition:
            pass  # ended already (this manager's close, or a manager that thought it dead)
        except StokerError:
            log.exception("operation %s: its end could not be recorded", op_id)
        finally:
            with self._lock:
                self._mine.discard(op_id)

    def get(self, op_id: str) -> OperationRecord:
        """The operation (:class:`OperationNotFound`), ended FAILED first when it is RUNNING
        and the process that ran it is provably gone."""
        return self.settle(self.store.get_operation(op_id))

    def settle(self, op: OperationRecord) -> OperationRecord:
        """``op`` as it is, or ended FAILED when it RUNs under a process that is gone."""
        if op.holder == self.holder:
            return op
        return settle(self.store, op)

    def sweep(self) -> int:
        """:func:`sweep` over this manager's store."""
        return sweep(self.store)

    def close(self) -> None:
        """Stop taking operations and end this manager's unfinished ones FAILED (a thread
        that ends one later finds it ended and leaves it)."""
        with self._lock:
            self._closed = True
            mine = list(self._mine)
        for op_id in mine:
            with contextlib.suppress(StokerError):
                _abandoned(self.store, op_id, "the manager")
        self._pool.shutdown(wait=False, cancel_futures=True)


__all__ = [
    "KEY_MAX",
    "KEY_PATTERN",
    "Operations",
    "check_key",
    "holder_owner",
    "holder_text",
    "settle",
    "sweep",
]
