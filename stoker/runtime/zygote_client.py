"""Run by the shell script a stoker driver gives Spark as its Python, for a source runner or a
data source planner (``stoker/runtime/zygote.py``), with ``python -S -E``: nothing but the
standard library, imported in milliseconds. Not a module of the stoker package.

``zygote_client.py SOCKET PYTHON -m MODULE [ARGS...]``: hand this process's standard streams,
environment, folder and arguments to the zygote listening on SOCKET, which forks a warm child
that runs MODULE; relay SIGTERM, SIGINT and SIGHUP to that child and exit with its exit
code. Spark sees this process as its worker (it waits for it, destroys it); the child talks
to Spark over the socket Spark told it of in the environment. When the zygote cannot be
reached, run ``PYTHON -m MODULE ...`` here instead, as Spark would have.
"""

import array
import contextlib
import json
import os
import signal
import socket
import struct
import sys


def _exec_real(python: str, argv: list[str]) -> None:
    os.execv(python, [python, *argv])


def _read(conn: socket.socket, tag: bytes) -> int | None:
    """A message of the zygote's child: ``tag`` and a 4-byte number; None at the end."""
    data = b""
    while len(data) < 5:
        try:
            more = conn.recv(5 - len(data))
        except InterruptedError:
            continue
        if not more:
            return None
        data += more
    if data[:1] != tag:
        return None
    return int(struct.unpack("!i", data[1:])[0])


def main() -> None:
    sock_path, python, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
    # The signals are taken before the child exists: the child may run (and Spark, having read
    # its first words, destroy this process) before the zygote's pid message is read here. A
    # signal until then waits for the child's pid; without one it ends this process as the
    # signal's default would have. (Taken after, a SIGTERM in that window ended this process
    # and left the forked child running: CI, test_zygote.)
    child = 0
    pending: list[int] = []

    def relay(signum: int, _frame: object) -> None:
        if child > 1:
            with contextlib.suppress(OSError):
                os.kill(child, signum)
        else:
            pending.append(signum)

    signals = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    for sig in signals:
        signal.signal(sig, relay)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(sock_path)
        body = json.dumps({"argv": argv, "env": dict(os.environ), "cwd": os.getcwd()}).encode()
        fds = array.array("i", [0, 1, 2])
        conn.sendmsg([struct.pack("!I", len(body))], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
        conn.sendall(body)
        pid = _read(conn, b"P")  # the child's pid, once it runs
    except OSError:
        pid = None
    if pid is None or pid <= 1:  # no zygote (gone, not warm yet): the real interpreter
        conn.close()
        for sig in signals:
            signal.signal(sig, signal.SIG_DFL)
        if pending:
            os.kill(os.getpid(), pending[0])  # ends here, as it would have
        _exec_real(python, argv)
        return
    child = pid
    for signum in pending:
        with contextlib.suppress(OSError):
            os.kill(child, signum)
    code = _read(conn, b"X")
    sys.exit(143 if code is None else code & 0xFF)


if __name__ == "__main__":
    main()
