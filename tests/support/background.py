"""``stoker.run`` on a thread of the test's own process: the job runs while the test acts on it."""

from __future__ import annotations

import threading
from typing import Any

import stoker


class BackgroundRun:
    """``stoker.run(**kwargs)`` started on a daemon thread; ``result`` or ``error`` once it ends."""

    def __init__(self, **kwargs: Any) -> None:
        self.result: stoker.JobResult | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, kwargs=kwargs, daemon=True)
        self._thread.start()

    def _run(self, **kwargs: Any) -> None:
        try:
            self.result = stoker.run(**kwargs)
        except BaseException as e:  # handed to the test
            self.error = e

    def ended(self) -> bool:
        """Whether ``stoker.run`` has returned (or raised) already."""
        return not self._thread.is_alive()

    def wait(self, timeout: float = 240.0) -> None:
        """Until ``stoker.run`` returns (or raises); the test reads ``result`` and ``error``."""
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "stoker.run did not return"

    def join(self, timeout: float = 240.0) -> stoker.JobResult:
        """Until ``stoker.run`` returns: its result, or what it raised, raised here."""
        self.wait(timeout)
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result
