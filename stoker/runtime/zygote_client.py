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
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(sock_path)
        body = json.dumps({"argv": argv, "env": dict(os.environ), "cwd": os.getcwd()}).encode()
        fds = array.array("i", [0, 1, 2])
        conn.sendmsg([struct.pack("!I", len(body))], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
        conn.sendall(body)
        child = _read(conn, b"P")  # the child's pid, once it runs
    except OSError:
        child = None
    if child is None or child <= 1:  # no zygote (gone, not warm yet): the real interpreter
        conn.close()
        _exec_real(python, argv)
        return

    def relay(signum: int, _frame: object) -> None:
        with contextlib.suppress(OSError):
            os.kill(child, signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, relay)
    code = _read(conn, b"X")
    sys.exit(143 if code is None else code & 0xFF)


if __name__ == "__main__":
    main()
