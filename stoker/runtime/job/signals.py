"""SIGTERM and SIGINT while a lone job runs: a graceful stop, the job left SUSPENDED; a second
signal while that stop waits for the epoch in flight stops at once."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any

log = logging.getLogger("stoker.runner")


def _not_our_interrupt(record: logging.LogRecord) -> bool:
    """py4j logs on the root logger, with a traceback, a KeyboardInterrupt that broke off one
    of its calls; a stop signal before the query runs raises one there on purpose, and the
    warning above already said what it does."""
    exc = record.exc_info[1] if record.exc_info else None
    return not (isinstance(exc, KeyboardInterrupt) and "while sending command" in str(record.msg))


logging.getLogger().addFilter(_not_our_interrupt)


class StopNow(KeyboardInterrupt):
    """A second stop signal came while the graceful stop waited for the epoch in flight.

    A KeyboardInterrupt, so the attempt ends SUSPENDED as after any signal: the epoch in flight
    never reached its commit point (or recovery commits it), and the job resumes from its last
    committed epoch.
    """


class StopSignals:
    """SIGTERM and SIGINT while a job runs: stop it gracefully, leaving it SUSPENDED.

    A signal is a request to stop (a host shutting down, a container stopped, Ctrl-C), not a
    cancel. While the query runs (``deferred``), the handler only records it and the supervise
    loop stops the query between epochs: raising into the main thread there could land inside
    a py4j call and break the gateway the graceful stop needs. Before that (Spark starting,
    recovery), it raises KeyboardInterrupt, which ends the attempt SUSPENDED. Handlers are
    installed only on the main thread and put back when the run returns.

    A second signal while the graceful stop waits (an epoch that hangs, a sink that does not
    answer) is the user insisting: it raises :class:`StopNow` into the main thread, which gives
    up on the epoch in flight (no graceful stop is attempted again). ``in_flight`` names that
    epoch in the message. Once the query is left (``settle``) a signal changes nothing: the
    attempt's end is being recorded and must not be broken off.
    """

    def __init__(self) -> None:
        self.received: int | None = None
        self.deferred = False
        self.forced = False  # a second signal stopped the job without waiting
        self.in_flight: Callable[[], int | None] = lambda: None
        self._settled = False
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

    def settle(self) -> None:
        """The query is left behind: from now on a signal is only noted."""
        self._settled = True

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
        name = signal.Signals(signum).name
        first = self.received is None
        self.received = signum
        if first:
            log.warning(
                "%s: stopping after the epoch in flight; the job will be SUSPENDED (resumable)"
                "; a second signal stops it at once",
                name,
            )
            if not self.deferred:
                raise KeyboardInterrupt
            return
        if not self.deferred or self.forced or self._settled:
            log.warning("%s: the job is stopping already", name)
            return
        self.forced = True
        message = self.now_message(name)
        log.warning("%s", message)
        raise StopNow(message)

    def now_message(self, name: str) -> str:
        """What a second signal does, naming the epoch it does not wait for."""
        try:
            epoch = self.in_flight()
        except Exception:  # a message without the number is better than none
            log.debug("the epoch in flight is unknown", exc_info=True)
            epoch = None
        which = "the epoch in flight" if epoch is None else f"epoch {epoch}"
        return (
            f"second signal ({name}): stopping now without waiting for {which}; the job is "
            "SUSPENDED and resumes from its last committed epoch"
        )
