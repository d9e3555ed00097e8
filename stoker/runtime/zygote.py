"""A warm Python for the source runners Spark starts per query (the pause of a
takeover and of an upgrade).

Every streaming query over a Python data source (stoker's generator and files sources) makes
Spark's driver JVM start a new Python process, ``python -m
pyspark.sql.streaming.python_streaming_source_runner``, which plans the query's batches. It is
not one of the daemon's forked workers: a new interpreter each time, importing PySpark, NumPy
and PyArrow (0.6-2 s on this machine, most of a warm standby's first epoch). A driver started
by a job manager therefore keeps a *zygote*: a child process that has imported those modules
and waits on a Unix socket. Spark's Python (``PYSPARK_PYTHON``) becomes a small shell script:
for the source runner and Spark's data source planners (``pyspark.sql.worker.*``) it runs
``zygote_client.py``, which hands its standard streams, environment, folder and arguments to
the zygote; the zygote forks, and the child runs the module as ``__main__`` with all of that,
already warm; the same for Spark's worker daemons (``pyspark.daemon``, one per kind of work,
whose forked workers are then warm too). Any other Python Spark starts is the real
interpreter, as is everything when the zygote is not there (not started yet, gone): the
client then runs the real interpreter itself. Only for a ``local`` master (the script's path
exists on this host alone) and a ``PYSPARK_PYTHON`` stoker chose; ``STOKER_SOURCE_ZYGOTE=0``
turns it off.

The zygote is single-threaded when it forks (BLAS pools held to one thread), leaves when its
parent (the driver) is gone, and removes its folder; a child it forked ends with its runner
(Spark closes the runner's socket when the query stops).
"""

from __future__ import annotations

import array
import contextlib
import json
import logging
import os
import runpy
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import traceback
from pathlib import Path
from typing import Any

from stoker.procs import remove_orphaned_folders

log = logging.getLogger("stoker.zygote")

PREFIX = "stoker-zygote-"  # then the driver's pid: its folder under the temp dir
SOCKET = "z.sock"
# The modules the zygote runs; anything else Spark starts runs the real interpreter. Spark
# 4.x starts a worker daemon per kind of work (``-m pyspark.daemon pyspark.worker`` for tasks,
# ``-m pyspark.daemon pyspark.sql.worker.plan_data_source_read`` and two more for the data
# source planners), each a new interpreter importing PySpark: four per driver start, on the
# query's start path. The daemon puts itself in a process group of its own and leaves when
# the JVM closes its stdin, forked or not.
WARM_MODULES = ("pyspark.sql.streaming.python_streaming_source_runner", "pyspark.daemon")
WARM_PACKAGES = ("pyspark.sql.worker.",)
# Imported once by the zygote: what those modules, the daemons' forked workers and stoker's
# sources import.
PRELOAD = (
    "pyspark.sql.streaming.python_streaming_source_runner",
    "pyspark.daemon",
    "pyspark.worker",
    "pyspark.sql.worker.lookup_data_sources",
    "pyspark.sql.worker.create_data_source",
    "pyspark.sql.worker.plan_data_source_read",
    "stoker.sources.generator",
    "stoker.sources.files",
)
MAX_REQUEST = 1 << 20  # bytes: a runner's environment and arguments
PARENT_POLL_S = 1.0

_lock = threading.Lock()
_started: dict[str, str] = {}  # "python": the script Spark is to run as Python


def enabled() -> bool:
    return os.environ.get("STOKER_SOURCE_ZYGOTE", "1").strip().lower() not in (
        "0",
        "false",
        "off",
        "no",
    )


def python_for_spark() -> str | None:
    """Start this process's zygote (once) and return the script to give Spark as its Python;
    None when it cannot start (the real interpreter then, as without it)."""
    with _lock:
        if "python" in _started:
            return _started["python"]
        remove_orphaned_folders(PREFIX)  # of drivers killed before removing theirs
        folder = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-"))
        sock = folder / SOCKET
        script = folder / "python"
        client = Path(__file__).resolve().parent / "zygote_client.py"
        script.write_text(_script(sys.executable, str(client), str(sock)))
        script.chmod(0o700)
        try:
            subprocess.Popen(
                [sys.executable, "-m", "stoker.runtime.zygote", str(sock), str(os.getpid())],
                stdin=subprocess.DEVNULL,
                close_fds=True,
            )
        except OSError as e:
            log.warning("the source runners' zygote did not start (%s): Spark's own Python", e)
            shutil.rmtree(folder, ignore_errors=True)
            return None
        _started["python"] = str(script)
        return str(script)


def _script(python: str, client: str, sock: str) -> str:
    py, cl, so = shlex.quote(python), shlex.quote(client), shlex.quote(sock)
    warm = "|".join([*WARM_MODULES, *(p + "*" for p in WARM_PACKAGES)])
    return (
        "#!/bin/sh\n"
        "# Spark's Python for a stoker driver (stoker/runtime/zygote.py): source runners and\n"
        "# data source planners from the warm zygote, anything else the real interpreter.\n"
        f'if [ "$1" = "-m" ] && [ -S {so} ]; then\n'
        f'  case "$2" in {warm}) exec {py} -S -E {cl} {so} {py} "$@";; esac\n'
        "fi\n"
        f'exec {py} "$@"\n'
    )


# The zygote process -----------------------------------------------------------------------
def serve(sock_path: str, parent: int) -> None:
    """Import the runners' modules, then fork a child per request until ``parent`` (the
    driver that started it) is gone."""
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"  # no BLAS thread pool: a fork copies one thread only
    for name in PRELOAD:
        try:
            __import__(name)
        except Exception as e:  # an optional module: the child imports it if it needs it
            print(f"stoker zygote: cannot preload {name}: {e}", file=sys.stderr)
    folder = os.path.dirname(sock_path)
    if os.getppid() != parent:
        shutil.rmtree(folder, ignore_errors=True)
        return  # the driver died while this imported
    tmp = sock_path + ".new"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind(tmp)
        os.chmod(tmp, 0o600)
        server.listen(16)
        os.rename(tmp, sock_path)  # it appears once the zygote is warm
        server.settimeout(PARENT_POLL_S)
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children reaped by the kernel
        while os.getppid() == parent:
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                break
            pid = os.fork()
            if pid == 0:
                server.close()
                _child(conn)  # never returns
            conn.close()
    finally:
        server.close()
        shutil.rmtree(folder, ignore_errors=True)


def _child(conn: socket.socket) -> None:
    code = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        conn.settimeout(30.0)
        req, fds = _receive(conn)
        conn.settimeout(None)
        for target, fd in zip((0, 1, 2), fds, strict=False):
            os.dup2(fd, target)
            os.close(fd)
        os.environ.clear()
        os.environ.update({str(k): str(v) for k, v in req["env"].items()})
        os.chdir(req["cwd"])
        extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        sys.path[:0] = [p for p in extra if p not in sys.path]
        args = list(req["argv"])
        module = args[1]
        sys.argv = [module, *args[2:]]
        conn.sendall(b"P" + struct.pack("!i", os.getpid()))  # the worker Spark waits for
        # Preloaded as a module; run as ``__main__`` afresh (its imports are warm). Without
        # this, runpy warns that the module was imported before it ran.
        sys.modules.pop(module, None)
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        with contextlib.suppress(OSError):
            conn.sendall(b"X" + struct.pack("!i", code))
        os._exit(code)


def _receive(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    """A request: its length (4 bytes), then its JSON; the standard streams come with the
    first bytes."""
    fds = array.array("i")
    data, anc, _flags, _addr = conn.recvmsg(4, socket.CMSG_SPACE(3 * fds.itemsize))
    for level, kind, payload in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - (len(payload) % fds.itemsize)])
    while len(data) < 4:
        more = conn.recv(4 - len(data))
        if not more:
            raise EOFError("the client left")
        data += more
    (size,) = struct.unpack("!I", data)
    if size > MAX_REQUEST:
        raise ValueError(f"a request of {size} bytes")
    body = b""
    while len(body) < size:
        more = conn.recv(min(65536, size - len(body)))
        if not more:
            raise EOFError("the client left")
        body += more
    req = json.loads(body)
    if len(fds) != 3 or not isinstance(req, dict):
        raise ValueError("a request without its three streams")
    return req, list(fds)


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]))
