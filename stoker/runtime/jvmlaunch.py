"""How PySpark starts the driver's JVM, changed for stoker: SIGTERM ignored in the JVM (the
driver stops it after a graceful stop) and its stderr copied without Spark 4's start-up noise.

Installed around ``SparkSession.builder.getOrCreate()`` by ``session.get_session``: PySpark's
``launch_gateway`` calls ``pyspark.java_gateway.Popen``, which is wrapped for that call only.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def jvm_launch() -> Iterator[None]:
    """Start the driver's JVM with SIGTERM ignored, its stderr filtered.

    A host shutdown (systemd's default KillMode) or a ``kill`` of the process group sends
    SIGTERM to every process at once. The JVM would run its shutdown hooks and stop the
    SparkContext under the driver, which is at that moment letting the epoch in flight commit
    (a stop signal ends a job SUSPENDED, gracefully). Ignored at exec, SIGTERM stays ignored
    in the JVM (HotSpot installs no handler for a signal the process ignores; bash's
    spark-submit keeps it ignored too). The JVM still ends with the driver: it exits when its
    stdin, a pipe from the driver, closes, and the driver stops it after the graceful stop.
    Only the child is changed (in its preexec function), never this process. Its stderr is a
    pipe this process copies to its own, less the line every JVM start prints
    (:func:`_forward_jvm_stderr`).
    """
    try:
        import pyspark.java_gateway as gateway
    except ImportError:  # pragma: no cover
        yield
        return
    real = getattr(gateway, "Popen", None)
    if real is None:  # another PySpark layout: leave it as it is
        yield
        return

    def popen(*args: Any, **kwargs: Any) -> Any:
        inner = kwargs.get("preexec_fn")

        def preexec() -> None:
            if inner is not None:
                inner()
            signal.signal(signal.SIGTERM, signal.SIG_IGN)

        kwargs["preexec_fn"] = preexec
        if kwargs.get("stderr") is None:
            kwargs["stderr"] = subprocess.PIPE  # forwarded, less one line (_forward_jvm_stderr)
            proc = real(*args, **kwargs)
            threading.Thread(
                target=_forward_jvm_stderr, args=(proc.stderr,), name="stoker-jvm-stderr",
                daemon=True,
            ).start()  # fmt: skip
            return proc
        return real(*args, **kwargs)

    setattr(gateway, "Popen", popen)  # noqa: B010 - the name PySpark's launch_gateway calls
    try:
        yield
    finally:
        setattr(gateway, "Popen", real)  # noqa: B010


# What the JVM prints on every start because Spark 4 adds `--add-modules jdk.incubator.vector`
# to its options: no JVM flag silences it (only stoker's lines on stderr).
_JVM_NOISE = (b"WARNING: Using incubator modules: jdk.incubator.vector",)


def _forward_jvm_stderr(pipe: Any) -> None:
    """Copy the driver JVM's stderr to this process's, line by line, without the line every
    JVM start prints (``_JVM_NOISE``). Ends when the JVM closes its stderr (it exited)."""
    try:
        for line in iter(pipe.readline, b""):
            if line.rstrip(b"\r\n") in _JVM_NOISE:
                continue
            # Our stderr gone: keep draining, so that the JVM never blocks on a full pipe.
            with contextlib.suppress(OSError):
                os.write(2, line)
    except (OSError, ValueError):
        return
