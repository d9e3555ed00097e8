"""The start watchdog: a job manager's driver whose start never ends fails, naming where it hung.

A driver holds its STARTING attempt from its first second and renews the lease while the app
imports and Spark starts (runtime/attempt.py's ``hold_start``), so a driver hung in the app's
import or in the code its ``main`` runs before ``stoker.run`` would hold the attempt, and a
``--max-starting`` slot, for ever (four such drivers kept a fifth job
CREATED). This watch bounds the start: from the hold until the job's query is about to run,
the phases the driver goes through are timed, and once the time spent in counted phases passes
``stoker.startup_timeout`` the driver ends its attempt FAILED with the phase, the file and line
of the main thread and a short stack of it, and exits (:class:`~stoker.errors.StartupTimedOut`,
exit 18). The attempt is no longer STARTING, so its slot is free at once; the job manager's
restart strategy decides what comes next.

Phases: the app's code (told apart from the main thread's stack: the app file at module
level is "the app's import", in a function "the app's main"), starting Spark (not counted: a
cold JVM on a loaded host is not a hang, and its own start has its bounds), preparing the job,
opening, recovering. The bound is the setting when given (it may be lower: tests use
seconds). Not given, it adapts as the progress watchdog's does: never below 5 minutes, and
never below ADAPT_FACTOR times the longest of this job's last RECENT_STARTS starts that got to
their query (their counted time is kept in the job's state folder, in START_TIMES), so an app
whose import takes two minutes on this host is not stopped by a bound made for the usual case.

The decision (:meth:`StartWatch.overdue`) runs on an injected clock; the thread only acts on it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from types import FrameType

from stoker.errors import EXIT_CODES, StartupTimedOut

log = logging.getLogger("stoker.startwatch")

APP = "app"  # the app's own code: named from the main thread's stack
SPARK = "starting Spark"
STACK_LINES = 8  # frames of the main thread's stack kept in the failure
# The adaptive bound: this many times the longest counted time of the last RECENT_STARTS
# starts of the job that reached their query, recorded in the job's state folder.
ADAPT_FACTOR = 3.0
RECENT_STARTS = 8
START_TIMES = "start-times.json"

_current: StartWatch | None = None


def enter(phase: str, counted: bool = True) -> None:
    """The driver's start is now in ``phase`` (no-op outside a job manager's driver)."""
    watch = _current
    if watch is not None:
        watch.enter(phase, counted)


def done(reached_query: bool = False) -> None:
    """The start is over: the watch stops. ``reached_query``: the query is about to run (the
    start's counted time joins the job's history for the adaptive bound); otherwise the
    attempt ended before that."""
    watch = _current
    if watch is not None:
        if reached_query:
            watch.record()
        watch.stop()


def recent_starts(history: Path) -> list[float]:
    """The counted seconds of the job's last starts that reached their query (none when the
    file is missing or unreadable: the floor then applies)."""
    try:
        values = json.loads(history.read_text())
    except (OSError, ValueError):
        return []
    if not isinstance(values, list):
        return []
    return [float(v) for v in values if isinstance(v, (int, float)) and v >= 0][-RECENT_STARTS:]


def adaptive_budget(floor_s: float, history: Path) -> float:
    """The bound of a start when ``stoker.startup_timeout`` is not given: the floor, or
    ADAPT_FACTOR times the longest recent start when that is longer."""
    recent = recent_starts(history)
    return max(floor_s, ADAPT_FACTOR * max(recent)) if recent else floor_s


def remember_start(history: Path, seconds: float) -> None:
    """Add a start's counted seconds to the job's history (the last RECENT_STARTS kept),
    replaced in one rename. A history that cannot be written is left as it was: the bound
    then stays where it was."""
    values = [*recent_starts(history), round(seconds, 3)][-RECENT_STARTS:]
    tmp = history.with_name(f".{history.name}.{os.getpid()}")
    try:
        tmp.write_text(json.dumps(values))
        os.replace(tmp, history)
    except OSError as e:
        log.debug("start history %s not written: %s", history, e)
        with contextlib.suppress(OSError):
            tmp.unlink()


def _fmt(seconds: float) -> str:
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:.0f}m"
    return f"{seconds:g}s"


class StartWatch:
    """How long the start has spent in counted phases, and where it is."""

    def __init__(
        self,
        budget_s: float,
        app: Path | None,
        *,
        clock: Callable[[], float] = time.monotonic,
        main_thread: int | None = None,
        history: Path | None = None,
    ) -> None:
        self.budget_s = budget_s
        self.history = history
        self.app = str(app.resolve()) if app is not None else None
        self.clock = clock
        self.main_thread = main_thread if main_thread is not None else threading.main_thread().ident
        self._lock = threading.Lock()
        self._phase = APP
        self._counted = True
        self._spent = 0.0  # counted time before the current phase began
        self._since = clock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def enter(self, phase: str, counted: bool = True) -> None:
        with self._lock:
            now = self.clock()
            if self._counted:
                self._spent += now - self._since
            self._phase, self._counted, self._since = phase, counted, now

    def record(self) -> None:
        """Add this start's counted time to the job's history (once; not after a stop)."""
        if self.history is not None and not self._stop.is_set():
            remember_start(self.history, self.spent())

    def spent(self) -> float:
        with self._lock:
            extra = self.clock() - self._since if self._counted else 0.0
            return self._spent + extra

    def overdue(self) -> str | None:
        """The failure to record once the counted time passed the budget, else None."""
        if self.budget_s <= 0 or self._stop.is_set() or self.spent() < self.budget_s:
            return None
        frame = sys._current_frames().get(self.main_thread) if self.main_thread else None
        with self._lock:
            phase = self._phase
        where, stack = self._where(phase, frame)
        return f"no query after {_fmt(self.budget_s)}: {where}\n{stack}".rstrip()

    def _where(self, phase: str, frame: FrameType | None) -> tuple[str, str]:
        if frame is None:
            return f"{phase} is still running", ""
        frames = traceback.extract_stack(frame)
        stack = "".join(traceback.format_list(frames[-STACK_LINES:]))
        if phase == APP:
            mine = [f for f in frames if self.app is not None and _same(f.filename, self.app)]
            if mine:
                f = mine[-1]
                name = "import" if f.name == "<module>" else f"main ({f.name})"
                return (
                    f"the app's {name} is still running at {Path(f.filename).name}:{f.lineno}",
                    stack,
                )
            phase = "the app's code"
        last = frames[-1]
        return f"{phase} is still running at {Path(last.filename).name}:{last.lineno}", stack

    # the thread ----------------------------------------------------------------------------
    def start(self, on_overdue: Callable[[str], None], every: float = 0.5) -> None:
        """Look every ``every`` seconds; call ``on_overdue`` once with the failure."""
        global _current
        _current = self

        def run() -> None:
            while not self._stop.wait(every):
                why = self.overdue()
                if why is not None:
                    on_overdue(why)
                    return

        self._thread = threading.Thread(target=run, name="stoker-startwatch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        global _current
        self._stop.set()
        if _current is self:
            _current = None


def _same(a: str, b: str) -> bool:
    try:
        return os.path.realpath(a) == b
    except OSError:
        return False


EXIT_STARTUP = EXIT_CODES[StartupTimedOut]


def fail_start(store_url: str, job: str, attempt: int) -> Callable[[str], None]:
    """What a driver does once its start is overdue: the attempt ends FAILED with ``why``
    (the job is left to the job manager's restart strategy), and the process exits at once
    (the main thread is hung: nothing else would end it)."""

    def act(why: str) -> None:
        from stoker.redact import redact_text
        from stoker.store import open_store
        from stoker.types import AttemptNo, AttemptState, JobId

        text = redact_text(why)
        print(f"stoker driver: {text}", file=sys.stderr, flush=True)
        try:
            st = open_store(store_url)
            try:
                rec = st.get_attempt(JobId(job), AttemptNo(attempt))
                if rec is not None and rec.state in (AttemptState.STARTING, AttemptState.RUNNING):
                    st.finish_attempt(
                        JobId(job), AttemptNo(attempt), AttemptState.FAILED, None, text[:4000]
                    )
            finally:
                st.close()
        except Exception as e:  # the exit below still frees the slot (the manager sees it)
            print(f"stoker driver: could not record the failure: {e}", file=sys.stderr)
        sys.stderr.flush()
        os._exit(EXIT_STARTUP)

    return act
