"""Group commit for job creation: the submissions that arrive together share one transaction.

A burst of submissions to one manager would otherwise be a burst of write transactions, each
waiting for the store's write lock in turn (on SQLite, across processes, with the busy
handler's sleeps between tries). One writer thread takes whatever is queued when it is free
and creates all of it in one transaction, so a burst costs a few transactions, not one per
call. Nothing changes for correctness: each job is still inserted under the store's unique
key, and whichever transaction inserts an id first created it.
"""

from __future__ import annotations

import logging
import queue
import threading
from concurrent.futures import Future
from typing import Any

from stoker.store import JobRecord, NewJob, Store
from stoker.types import JobId

log = logging.getLogger(__name__)

_STOP = object()


class CreateBatcher:
    """One thread that runs ``store.create_jobs`` on everything queued, ``max_batch`` at most."""

    def __init__(self, store: Store, max_batch: int = 256) -> None:
        self.store = store
        self.max_batch = max_batch
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="stoker-create", daemon=True)
        self._started = False
        self._lock = threading.Lock()
        self.batches = 0  # batches created in one transaction (a test reads it)

    def create(
        self, job_id: JobId, name: str, spec: dict[str, Any], config: dict[str, Any]
    ) -> Future[tuple[JobRecord, bool]]:
        """Queue one creation; the future holds what :meth:`Store.create_job` would return."""
        with self._lock:
            if not self._started:
                self._thread.start()
                self._started = True
        fut: Future[tuple[JobRecord, bool]] = Future()
        self._queue.put(((job_id, name, spec, config), fut))
        return fut

    def close(self) -> None:
        with self._lock:
            if self._started:
                self._queue.put(_STOP)
                self._thread.join(timeout=10)

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is _STOP:
                return
            batch = [first]
            while len(batch) < self.max_batch:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is _STOP:
                    self._queue.put(_STOP)  # finish this batch, then stop
                    break
                batch.append(nxt)
            self._flush(batch)

    def _flush(self, batch: list[tuple[NewJob, Future[tuple[JobRecord, bool]]]]) -> None:
        live = [(item, fut) for item, fut in batch if fut.set_running_or_notify_cancel()]
        if not live:
            return
        try:
            results = self.store.create_jobs([item for item, _ in live])
            self.batches += 1
        except Exception as e:  # retried one by one, so each caller gets its own error
            log.debug("batch of %d failed (%s); creating one by one", len(live), e)
            for item, fut in live:
                try:
                    fut.set_result(self.store.create_job(*item))
                except Exception as err:  # handed to its caller, not lost
                    fut.set_exception(err)
            return
        for (_, fut), res in zip(live, results, strict=True):
            fut.set_result(res)
