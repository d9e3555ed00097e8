"""The source runners' zygote (``stoker/runtime/zygote.py``) without Spark: a real zygote
process, its client as Spark's Python would run it, a module standing in for a source runner.
What Spark does with it (a query's source runner forked warm) is in
tests/e2e/test_zygote_runner.py."""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from stoker import procs
from stoker.runtime import zygote
from tests.support import wait_for
from tests.support.procs import processes

CLIENT = Path(zygote.__file__).resolve().parent / "zygote_client.py"
RUNNER = """\
import os, sys, time
print("pid", os.getpid(), "ppid", os.getppid(), "cwd", os.getcwd(), flush=True)
print("var", os.environ.get("ZYGOTE_TEST_VAR"), "args", sys.argv[1:], flush=True)
if sys.argv[1:] == ["sleep"]:
    time.sleep(60)
sys.exit(3)
"""


@pytest.fixture
def zyg(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    folder = tmp_path / "z"
    folder.mkdir()
    sock = folder / zygote.SOCKET
    zyg = [sys.executable, "-m", "stoker.runtime.zygote", str(sock), str(os.getpid())]
    proc = subprocess.Popen(zyg)
    wait_for("the zygote warm", lambda: sock.exists() or proc.poll() is not None, 120)
    assert proc.poll() is None
    yield proc, sock
    proc.kill()
    proc.wait()


def _client(sock: Path, tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    (tmp_path / "fake_runner.py").write_text(RUNNER)
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "ZYGOTE_TEST_VAR": "given"}
    cwd = tmp_path / "work"
    cwd.mkdir(exist_ok=True)
    cmd = [sys.executable, "-S", "-E", str(CLIENT), str(sock), sys.executable]
    return subprocess.Popen(
        [*cmd, "-m", "fake_runner", *args], env=env, cwd=cwd, stdout=subprocess.PIPE, text=True
    )


def _said(out: str) -> dict[str, str]:
    words = out.split()
    return {words[i]: words[i + 1] for i in range(0, len(words) - 1, 2) if words[i] != "args"}


def test_the_module_runs_forked_from_the_zygote_with_the_clients_streams_env_and_folder(
    zyg: tuple[subprocess.Popen[bytes], Path], tmp_path: Path
) -> None:
    proc, sock = zyg
    c = _client(sock, tmp_path, "a", "b")
    out, _ = c.communicate(timeout=60)
    assert c.returncode == 3, out  # the module's own exit code
    said = _said(out)
    assert said["ppid"] == str(proc.pid), out  # forked by the zygote, not a new interpreter
    assert said["var"] == "given" and said["cwd"] == str(tmp_path / "work"), out
    assert "args ['a', 'b']" in out, out


def test_a_signal_to_the_client_reaches_the_forked_runner(
    zyg: tuple[subprocess.Popen[bytes], Path], tmp_path: Path
) -> None:
    _proc, sock = zyg
    c = _client(sock, tmp_path, "sleep")
    assert c.stdout is not None
    first = c.stdout.readline()
    runner = int(_said(first)["pid"])
    c.send_signal(signal.SIGTERM)  # as Spark destroys a worker
    assert c.wait(timeout=60) == 143
    wait_for("the runner gone", lambda: not Path(f"/proc/{runner}").exists(), 30)


def _signal_pending(pid: int) -> bool:
    """Whether a signal sent to ``pid`` waits for delivery (ShdPnd: the process's pending set)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("ShdPnd:"):
            return int(line.split()[1], 16) != 0
    return False


def test_a_signal_before_the_childs_pid_is_read_still_reaches_the_child(tmp_path: Path) -> None:
    """The child runs (and Spark may destroy the client) before the client has read the
    zygote's pid message. The client held SIGTERM's default until then: it died, and the child
    it stood for ran on (CI: the test above saw the client's -15 once). Here a zygote of the
    test's own answers only after the signal has reached the client."""
    sock = tmp_path / "z.sock"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(sock))
    srv.listen(1)
    client = subprocess.Popen(
        [sys.executable, "-S", "-E", str(CLIENT), str(sock), sys.executable, "-m", "x"]
    )
    child = None
    try:
        conn, _ = srv.accept()
        head, fds, _flags, _addr = socket.recv_fds(conn, 4, 3)
        for fd in fds:
            os.close(fd)
        size, body = struct.unpack("!I", head)[0], b""
        while len(body) < size:
            body += conn.recv(size - len(body))
        child = subprocess.Popen(["sleep", "60"])  # what the zygote would have forked
        client.send_signal(signal.SIGTERM)
        wait_for(
            "the signal delivered",
            lambda: client.poll() is not None or not _signal_pending(client.pid),
            30,
            0.01,
        )
        assert client.poll() is None, f"the client died of it: rc {client.returncode}"
        conn.sendall(b"P" + struct.pack("!i", child.pid))
        assert child.wait(timeout=30) == -signal.SIGTERM  # relayed once the pid was known
        conn.sendall(b"X" + struct.pack("!i", 143))
        assert client.wait(timeout=30) == 143
        conn.close()
    finally:
        srv.close()
        for p in (client, child):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()


def test_without_the_zygote_the_client_runs_the_real_interpreter(
    zyg: tuple[subprocess.Popen[bytes], Path], tmp_path: Path
) -> None:
    proc, sock = zyg
    proc.kill()
    proc.wait()
    c = _client(sock, tmp_path)
    out, _ = c.communicate(timeout=60)
    assert c.returncode == 3, out
    assert _said(out)["pid"] == str(c.pid)  # the client exec'ed the module itself


def test_the_script_sends_only_runners_daemons_and_planners_to_the_zygote(tmp_path: Path) -> None:
    text = zygote._script("/usr/bin/python3", "/x/zygote_client.py", "/tmp/z dir/z.sock")
    warm = (
        "pyspark.sql.streaming.python_streaming_source_runner|pyspark.daemon|pyspark.sql.worker.*)"
    )
    assert warm in text
    assert "'/tmp/z dir/z.sock'" in text  # quoted
    script = tmp_path / "python"
    script.write_text(zygote._script(sys.executable, str(CLIENT), str(tmp_path / "none.sock")))
    script.chmod(0o700)
    # Anything else, and any module when no zygote listens: the real interpreter.
    out = subprocess.run(
        [str(script), "-c", "import sys; print(sys.executable)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == sys.executable


def test_sparks_worker_daemon_runs_forked_and_forks_its_workers_until_stdin_closes(
    zyg: tuple[subprocess.Popen[bytes], Path],
) -> None:
    """Spark's worker daemon as Spark starts it (``-m pyspark.daemon pyspark.worker``), through
    the client: it says its port on stdout, forks a worker per connection (the worker says its
    pid first), and leaves when the JVM closes its stdin, the client with it."""
    proc, sock = zyg
    cmd = [sys.executable, "-S", "-E", str(CLIENT), str(sock), sys.executable]
    env = {**os.environ, "PYTHON_WORKER_FACTORY_SECRET": "s3cret"}
    c = subprocess.Popen(
        [*cmd, "-m", "pyspark.daemon", "pyspark.worker"],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert c.stdin is not None and c.stdout is not None
    (port,) = struct.unpack("!i", c.stdout.read(4))
    [daemon] = [p.pid for p in processes() if p.ppid == proc.pid]  # the zygote's one child
    with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        (worker,) = struct.unpack("!i", conn.recv(4, socket.MSG_WAITALL))
        assert worker not in (daemon, c.pid)
        st = procs.stat(worker)
        assert st is None or st.ppid == daemon  # forked by the daemon (or gone already)
    c.stdin.close()  # as the JVM does when it stops the daemon
    # The daemon's own exit code: 1 (its `finally` shuts down again after the clean exit).
    assert c.wait(timeout=60) == 1
    wait_for("the daemon gone", lambda: procs.stat(daemon) is None, 30)


def test_the_zygote_leaves_with_its_parent(tmp_path: Path) -> None:
    sock = tmp_path / zygote.SOCKET
    code = (
        "import subprocess, sys, time;"
        "import os;"
        "z = [sys.executable, '-m', 'stoker.runtime.zygote', "
        f"{str(sock)!r}, str(os.getpid())];"
        "p = subprocess.Popen(z, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL);"
        "print(p.pid, flush=True)"
    )
    parent = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    pid = int(parent.stdout.strip())
    # The parent is gone at once: the zygote sees it within a second of being warm.
    wait_for("the orphaned zygote gone", lambda: not Path(f"/proc/{pid}").exists(), 120)
    assert not sock.exists()
