"""SIGTERM and SIGINT while a lone job runs: a graceful stop, the job left SUSPENDED."""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType, TracebackType
from typing import Any

log = logging.getLogger("stoker.runner")


class StopSignals:
    """SIGTERM and SIGINT while a job runs: stop it gracefully, leaving it SUSPENDED.

    A signal is a request to stop (a host shutting down, a container stopped, Ctrl-C), not a
    cancel. While the query runs (``deferred``), the handler only records it and the supervise
    loop stops the query between epochs: raising into the main thread there could land inside
    a py4j call and break the gateway the graceful stop needs. Before that (Spark starting,
    recovery), it raises KeyboardInterrupt, which ends the attempt SUSPENDED. Handlers are
    installed only on the main thread and put back when the run returns.
    """

    def __init__(self) -> None:
        self.received: int | None = None
        self.deferred = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def rearm(self) -> None:
        """Take the signals back from whoever replaced this handler since (PySpark does)."""
        for sig in self._previous:
            if signal.getsignal(sig) != self._handle:
                signal.signal(sig, self._handle)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for sig, handler in self._previous.items():
            # None: a handler not installed from Python; the default is the closest we have.
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        first = self.received is None
        self.received = signum
        log.warning(
            "%s: stopping after the epoch in flight; the job will be SUSPENDED (resumable)",
            signal.Signals(signum).name,
        )
        if first and not self.deferred:
            raise KeyboardInterrupt
