"""Helpers for end-to-end tests of ``stoker server``: manager processes, the process table,
polling, and application files written for a test.

Every manager is a real ``stoker server`` process in a session of its own; the drivers it
starts are its children, each leading a process group of its own (the JVM and the Python
workers join it). Stopping a manager here also kills every process it started.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import httpx

from stoker.redact import redact_url
from tests.support import REPO, stoker_cmd, wait_for

MANAGER_START = 90.0  # a `stoker server` importing FastAPI on a loaded machine


# the process table -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Proc:
    """One process as /proc shows it; ``start`` (clock ticks since boot) tells reused pids."""

    pid: int
    ppid: int
    pgid: int
    start: str
    argv: tuple[str, ...]


def _read(pid: int) -> Proc | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] in ("Z", "X"):
        return None  # exited; only its parent's wait is missing
    argv = tuple(raw.rstrip(b"\0").decode(errors="replace").split("\0")) if raw else ()
    return Proc(pid, int(fields[1]), int(fields[2]), fields[19], argv)


def processes() -> list[Proc]:
    """Every live (not zombie) process of the machine."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            p = _read(int(entry))
            if p is not None:
                out.append(p)
    return out


def forks_left_out(procs: Iterable[Proc]) -> list[Proc]:
    """``procs`` less the children forked by one of them and not yet exec'd: such a child
    carries its parent's command line until it execs (a driver launching its JVM, a JVM starting
    a Python worker) and is not a second process of that kind."""
    procs = list(procs)
    argv_of = {p.pid: p.argv for p in procs}
    return [p for p in procs if argv_of.get(p.ppid) != p.argv]


def process_tree(pgid: int | None = None, root: int | None = None) -> set[Proc]:
    """The members of process group ``pgid`` and/or process ``root``, with all descendants."""
    table = processes()
    found = {p for p in table if p.pgid == pgid or p.pid == root}
    while True:
        pids = {p.pid for p in found}
        more = {p for p in table if p.ppid in pids and p not in found}
        if not more:
            return found
        found |= more


def alive(p: Proc) -> bool:
    """Whether this very process (not a later one with its pid) still runs."""
    now = _read(p.pid)
    return now is not None and now.start == p.start


def still_alive(procs: Iterable[Proc]) -> list[Proc]:
    return sorted((p for p in procs if alive(p)), key=lambda p: p.pid)


def kill_all(procs: Iterable[Proc]) -> None:
    """SIGKILL these processes and their groups (never the test's own group)."""
    own = os.getpgrp()
    for p in procs:
        if not alive(p):
            continue
        if p.pgid not in (own, 0, 1):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pgid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p.pid, signal.SIGKILL)


def describe(procs: Iterable[Proc]) -> str:
    return "; ".join(f"{p.pid} (pgid {p.pgid}): {' '.join(p.argv)[:120]}" for p in procs)


# polling ---------------------------------------------------------------------------------------
# managers --------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Manager:
    """One ``stoker server`` process and an HTTP client of it."""

    def __init__(
        self,
        name: str,
        store: str,
        state_dir: Path,
        allow_dirs: list[Path],
        log: Path,
        *,
        token: str | None = None,
        read_token: str | None = None,
        env: dict[str, str] | None = None,
        lease_ttl: float = 5.0,
        leader_ttl: float = 2.0,
        extra_args: list[str] | None = None,
    ) -> None:
        self.name = name
        self.store = store
        self.log = log
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        argv = stoker_cmd(
            "server",
            "--port",
            str(self.port),
            "--state-dir",
            str(state_dir),
            "--store",
            store,
            "--lease-ttl",
            str(lease_ttl),
            "--leader-ttl",
            str(leader_ttl),
        )
        for d in allow_dirs:
            argv += ["--allow-dir", str(d)]
        argv += extra_args or []
        if token is not None:
            argv += ["--token", token]
        if read_token is not None:
            argv += ["--read-token", read_token]
        scrub = ("STOKER_TOKEN", "STOKER_READ_TOKEN", "STOKER_SERVER")
        env = {**{k: v for k, v in os.environ.items() if k not in scrub}, **(env or {})}
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=str(REPO),
                env=env,
                start_new_session=True,  # its own group: nothing of the test shares it
            )
        self.http = httpx.Client(base_url=self.url, timeout=60.0)

    def wait_up(self, timeout: float = MANAGER_START) -> None:
        def up() -> bool:
            assert self.proc.poll() is None, f"{self.name} exited:\n{self.log_tail()}"
            try:
                return self.http.get("/healthz", timeout=5.0).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(f"{self.name} to answer /healthz", up, timeout, every=0.2)

    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.log.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def driver_procs(self) -> set[Proc]:
        """Every process this manager started, found while they are still its descendants."""
        return process_tree(root=self.proc.pid) - {p for p in processes() if p.pid == self.proc.pid}

    def stop(self) -> None:
        """Stop the manager (SIGTERM, then SIGKILL) and kill every process it started."""
        started = self.driver_procs()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        kill_all(started)
        self.http.close()


def stop_all(managers: Iterable[Manager]) -> None:
    """Stop managers, first killing the drivers of their store wherever they are."""
    ms = list(managers)
    for m in ms:
        kill_all(_drivers_of(m.store))
    for m in ms:
        m.stop()
    for m in ms:
        kill_all(_drivers_of(m.store))


def _drivers_of(store: str) -> set[Proc]:
    """Driver processes (and their groups and descendants) started for ``store``.

    A manager's driver shows the store URL on its command line with the password redacted.
    """
    store = redact_url(store)
    out: set[Proc] = set()
    for p in processes():
        argv = p.argv
        if ("stoker.runtime.driver" in argv or "stoker.runtime.appdriver" in argv) and (
            "--store" in argv
        ):
            i = argv.index("--store")
            if i + 1 < len(argv) and argv[i + 1] == store and p.pgid == p.pid:
                out |= process_tree(pgid=p.pgid, root=p.pid)
    return out
