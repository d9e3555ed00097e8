"""A second ``stoker run`` of a job refused before it starts Spark, while the first runs.

The store refuses a second live instance of a job (its attempt's lease), but only once the
second run has started Spark and opened the store: 10-40 s and a JVM of a gigabyte, for an
answer that was known at once. A run of a job from a state folder therefore holds a mark for
as long as it runs: an exclusive ``flock`` of a file named after the folder (in a folder of
this user's under the temp dir, so that a refused run leaves nothing in the state folder),
holding its pid, touched every 2 s by a thread, until the run's attempt is in the store.
Another run that finds the lock held by a process that is alive, not stopped, still starting
and touched the file in the last 15 s is refused at once, naming it.

Anything else goes on to the store's own checks, which stay the authority: once the first
run's attempt exists, the CLI's check of the store refuses a second run before Spark, by the
attempt's lease (a lapsed lease lets a new run take the job over, the old one fenced); a
holder that is frozen (SIGSTOP, Ctrl-Z) or hung is not refused here either; a lock whose
holder died is gone with it (the kernel drops a dead process's locks).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import tempfile
import threading
import time
from pathlib import Path

from stoker import procs
from stoker.errors import DuplicateJob

TOUCH_EVERY_S = 2.0
FRESH_S = 15.0
_STARTED = "attempt"


def marks_dir() -> Path:
    return Path(tempfile.gettempdir()) / f"stoker-{os.getuid()}" / "runs"


def mark_path(root: Path) -> Path:
    digest = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:32]
    return marks_dir() / f"{digest}.lock"


class RunMark:
    """Held while this process runs the job of state folder ``root``."""

    def __init__(self, root: Path, job: str) -> None:
        self.root, self.job = root, job
        self.path = mark_path(root)
        self._fd: int | None = None
        self._stop = threading.Event()

    def take(self) -> None:
        """Hold the mark, or raise :class:`DuplicateJob` if a live, running process holds
        it; a mark this process cannot hold for any other reason is let go (the store
        decides)."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = self._holder(fd)
            os.close(fd)
            if holder is not None:
                raise DuplicateJob(
                    self.job,
                    f"another stoker run ({holder}) runs it from {self.root}; stop that one "
                    "first (SIGTERM suspends it), or wait until it ends",
                ) from None
            return
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        threading.Thread(target=self._touch, name="stoker-runmark", daemon=True).start()

    def _holder(self, fd: int) -> str | None:
        """Who holds the lock ("pid N") when it is alive, not stopped, and touched the file
        in the last FRESH_S seconds; else None."""
        try:
            text = os.pread(fd, 64, 0).decode(errors="replace").strip()
            age = time.time() - os.fstat(fd).st_mtime
        except OSError:
            return None
        if age > FRESH_S:
            return None
        if text == _STARTED:
            return None  # its attempt is in the store: the store's lease decides
        if not text.isdigit():
            return "starting now"  # it took the lock and has yet to write its pid
        pid = int(text)
        st = procs.stat(pid)
        if pid == os.getpid() or st is None or st.exiting or st.state in ("T", "t"):
            return None
        return f"pid {pid}"

    def _touch(self) -> None:
        while not self._stop.wait(TOUCH_EVERY_S):
            fd = self._fd
            if fd is None:
                return
            with contextlib.suppress(OSError):
                os.utime(self.path)

    def started(self) -> None:
        """The run's attempt is in the store: from now on the store's lease answers a second
        run (before Spark too), so that a lapsed lease can be taken over."""
        self._stop.set()
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, 0)
                os.pwrite(self._fd, _STARTED.encode(), 0)

    def release(self) -> None:
        """Let the mark go: its file removed (marks do not pile up under the temp dir), then
        the lock. A run that opened the file just before the removal may then hold a lock of
        a file no one else sees: it only misses an early refusal; the store still decides."""
        self._stop.set()
        fd, self._fd = self._fd, None
        if fd is None:
            return
        with contextlib.suppress(OSError):
            if os.stat(self.path).st_ino == os.fstat(fd).st_ino:
                os.unlink(self.path)
        with contextlib.suppress(OSError):
            os.close(fd)
