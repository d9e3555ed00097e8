"""A source runner whose JVM hung up exits without a traceback on the job's stderr.

Spark's Python source runner calls the reader's ``stop()`` as it leaves its command loop, then
reports the exception on the socket; when the JVM has already closed it (the query stopped),
that report fails and Python prints the broken pipe. The processes below have the runner's
shape: the loop's ``finally`` calls stop(), the handler writes to a socket the peer closed.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

RUNNER = textwrap.dedent(
    """
    import socket
    from stoker.sources._control import hush_if_spark_hung_up

    ours, jvm = socket.socketpair()
    jvm.close()  # the query stopped
    outfile = ours.makefile("wb")
    try:
        try:
            raise {error}("from the command loop")
        finally:
            hush_if_spark_hung_up()  # what the reader's stop() does
    except BaseException:
        outfile.write(b"x" * 65536)  # the runner reports the error to the JVM
        outfile.flush()
    """
)


def _run(error: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", RUNNER.format(error=error)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_runner_whose_jvm_closed_the_socket_exits_quietly() -> None:
    proc = _run("EOFError")
    assert proc.returncode != 0  # it still fails, as the runner would
    assert proc.stderr == ""


def test_a_runner_failing_for_another_reason_keeps_its_traceback() -> None:
    proc = _run("ValueError")
    assert proc.returncode != 0
    assert "Traceback" in proc.stderr
    assert "BrokenPipeError" in proc.stderr
