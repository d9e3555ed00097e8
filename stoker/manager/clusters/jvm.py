"""One JVM of a cluster: its record, its start as a process group's leader, its signals.

Every JVM is started with pyspark's own ``bin/spark-class`` (it execs java, so the pid we get
is the JVM's) as the leader of a new process group, so its executors and their Python workers
go with it when the group is signalled.

Each process is described by a :class:`~stoker.store.ClusterProcess` (an item of
``ClusterRecord.processes``) that carries its identity: host, pid and the kernel's start marker
of that pid. The caller stores these records; a different process (a new leader after a
failover) can then stop exactly these JVMs and never a process that happens to reuse one of
their pids.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from stoker import procs
from stoker.errors import ClusterError
from stoker.redact import is_secret_key, redact_text
from stoker.store import ClusterProcess

log = logging.getLogger("stoker.clusters")


_BIND_FAILURE = ("BindException", "Address already in use", "Failed to bind", "could not bind")
POLL = 0.25
# JVMs this process started, by pid: kept so that their exit is collected (no zombies) and
# Popen does not warn that it was dropped while its child ran.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}

# Called with each JVM's record as soon as it is started (the caller stores it).
OnProcess = Callable[[ClusterProcess], None]


def spark_home() -> Path:
    """pyspark's folder (its ``bin/spark-class`` starts the JVMs), found without importing
    pyspark: the manager must stay Spark-free, and the cluster must run the driver's Spark."""
    found = importlib.util.find_spec("pyspark")
    locations = list(found.submodule_search_locations or []) if found else []
    for location in locations:
        home = Path(location).resolve()
        if (home / "bin" / "spark-class").is_file():
            return home
    raise ClusterError(
        "pyspark with bin/spark-class is not installed for this Python "
        f"(looked in {locations or 'nowhere: no pyspark package'})"
    )


@dataclass
class Launch:
    """One JVM being started: its Popen (while we are its parent), record and log offset."""

    popen: subprocess.Popen[bytes]
    info: ClusterProcess
    log_from: int
    tries: int = 1

    def exited(self) -> int | None:
        return self.popen.poll()

    def new_log(self) -> str:
        """What this JVM wrote to its log (not what an earlier try wrote)."""
        try:
            with open(self.info.log, "rb") as fh:
                fh.seek(self.log_from)
                return fh.read().decode("utf-8", errors="replace")
        except OSError:
            return ""

    def bind_failed(self) -> bool:
        text = self.new_log()
        return any(marker in text for marker in _BIND_FAILURE)

    def why(self) -> str:
        """The last error line of its log: the reason a user can act on."""
        lines = [ln.strip() for ln in self.new_log().splitlines() if ln.strip()]
        lines = [ln for ln in lines if not ln.startswith(("at ", "..."))]  # no stack frames
        thrown = [ln for ln in lines if re.search(r"(Exception|Error)\b:", ln)]
        logged = [ln for ln in lines if " ERROR " in ln]
        last = (thrown or logged or lines or ["(no output)"])[-1]
        return redact_text(last[:400])


class Recorder:
    """Every process a start launched, by id (a JVM started again after a lost port race
    replaces its earlier record), each passed on to ``on_process`` as soon as it is known."""

    def __init__(self, on_process: OnProcess | None) -> None:
        self._started: dict[str, ClusterProcess] = {}
        self._on_process = on_process

    def __call__(self, info: ClusterProcess) -> None:
        self._started[info.id] = info
        if self._on_process is not None:
            self._on_process(info)

    def processes(self) -> list[ClusterProcess]:
        return list(self._started.values())


def process_info(
    role: str,
    pid_id: str,
    address: str,
    port: int,
    web_port: int,
    folder: Path,
    cores: int,
    memory: str,
) -> ClusterProcess:
    """A JVM's record before it runs (pid and start marker are filled by spawn)."""
    return ClusterProcess(
        role=role,
        id=pid_id,
        host=procs.host_id(),
        address=address,
        pid=0,
        pid_started=procs.UNKNOWN,
        port=port,
        web_port=web_port,
        log=str(folder / f"{pid_id}.log"),
        cores=cores,
        memory=memory,
    )


def daemon_env(
    home: Path, folder: Path, info: ClusterProcess, opts_var: str, conf: dict[str, str]
) -> dict[str, str]:
    """A daemon's environment: ours without stoker's variables and secret-looking ones (the
    executors under a worker run user code: the manager's store password and API tokens are
    not theirs), plus Spark's settings for this daemon."""
    env = {k: v for k, v in os.environ.items() if not _scrubbed(k)}
    local = folder / "local" / info.id
    local.mkdir(parents=True, exist_ok=True)
    env.update(
        {
            "SPARK_HOME": str(home),
            "SPARK_NO_DAEMONIZE": "1",
            # Web UIs bind SPARK_LOCAL_IP (else every interface): loopback only.
            "SPARK_LOCAL_IP": info.address,
            "SPARK_LOCAL_DIRS": str(local),
            opts_var: " ".join(f"-D{k}={v}" for k, v in sorted(conf.items())),
        }
    )
    return env


def _scrubbed(key: str) -> bool:
    return key.startswith("STOKER_") or is_secret_key(key)


def spawn(argv: list[str], info: ClusterProcess, env: dict[str, str]) -> Launch:
    """Start one JVM as a new process group's leader, its output appended to its log."""
    log_path = Path(info.log)
    try:
        with open(log_path, "ab") as out:
            log_from = out.tell()
            popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=str(log_path.parent),
                env=env,
                start_new_session=True,
            )
    except OSError as exc:
        raise ClusterError(f"cannot start {info.id} ({argv[0]}): {exc}") from exc
    _CHILDREN[popen.pid] = popen
    started = replace(info, pid=popen.pid, pid_started=procs.process_start_marker(popen.pid))
    return Launch(popen, started, log_from)


def note(target: ClusterProcess, message: str) -> None:
    """Say it in our log and in the worker's own log (where a user reading it will look)."""
    log.warning("worker %s (%s): %s", target.id, target.address, message)
    path = target.log
    if not path:
        return
    with contextlib.suppress(OSError), open(path, "a", encoding="utf-8") as fh:
        fh.write(f"stoker: {time.strftime('%Y-%m-%d %H:%M:%S')} {message}\n")


def terminate(batch: list[ClusterProcess], timeout: float) -> None:
    """SIGTERM each group, wait up to ``timeout``, SIGKILL what is left, wait until gone."""
    for p in batch:
        signal_group(p, signal.SIGTERM)
    left = wait_gone(batch, timeout)
    for p in left:
        note(p, f"still running {timeout:.0f} s after SIGTERM: SIGKILL")
        signal_group(p, signal.SIGKILL)
    wait_gone(left, 30.0)


def wait_gone(batch: list[ClusterProcess], timeout: float) -> list[ClusterProcess]:
    """Wait until no process of the batch's groups is left; return those still there."""
    deadline = time.monotonic() + timeout
    while True:
        for p in batch:
            _reap(p)
        left = [p for p in batch if group_left(p)]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(POLL)


def check_gone(batch: list[ClusterProcess], what: str) -> None:
    left = [p for p in batch if group_left(p)]
    if left:
        pids = ", ".join(f"{p.id}: {group_left(p)}" for p in left)
        raise ClusterError(f"{what} still running after SIGKILL: {pids}")


def signal_group(p: ClusterProcess, sig: int) -> None:
    """Signal the process's group, only while it is provably the recorded one's."""
    if group_left(p):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(int(p.pid), sig)


def _reap(p: ClusterProcess) -> None:
    """Collect the exit status of a JVM this process started (else it stays a zombie)."""
    pid = int(p.pid or 0)
    popen = _CHILDREN.get(pid)
    if popen is not None and popen.poll() is not None:
        _CHILDREN.pop(pid, None)


def reap_exited() -> None:
    """Collect every JVM of ours that exited by itself (a crashed worker): no zombies pile up
    in a long-lived manager."""
    for pid, popen in list(_CHILDREN.items()):
        if popen.poll() is not None:
            _CHILDREN.pop(pid, None)


def group_left(p: ClusterProcess) -> list[int]:
    """Live (non-zombie) pids of the recorded process's group, on this host.

    The group's id is the leader's pid. A live process at that pid with another start marker
    means the pid was reused, which Linux does only once no process uses it as a group id:
    nothing of ours is left. Otherwise every member started no earlier than our leader is
    ours (the leader itself, its executors, their Python workers).
    """
    if not procs.is_this_host(p.host):
        return []
    pgid = int(p.pid or 0)
    marker = str(p.pid_started)
    if pgid <= 1 or not marker.isdigit():
        return []
    leader = procs.stat(pgid)
    if leader is not None and leader.started != marker:
        return []
    return procs.group_pids(pgid, started_since=int(marker))
