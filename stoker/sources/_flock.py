"""An exclusive ``flock`` of a source's log, waited for up to a bound: the file log and the
socket source's log each append under one, after checking that their driver still owns the
job."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

from stoker.errors import SourceError


@contextlib.contextmanager
def exclusive(path: Path, field: str, timeout_s: float, mode: int = 0o600) -> Iterator[None]:
    """Hold an exclusive lock of ``path`` (made with ``mode`` when missing) for the block; a
    :class:`SourceError` on ``field`` when another process holds it for ``timeout_s``."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, mode)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as e:
                if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise
                if time.monotonic() > deadline:
                    raise SourceError(
                        field,
                        f"{path} held by another process for {timeout_s:.0f} s (a stopped "
                        "driver of this job?)",
                    ) from e
                time.sleep(0.005)
        yield
    finally:
        os.close(fd)  # releases the lock
