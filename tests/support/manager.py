"""Job managers for the tests: real ``stoker server`` processes and an HTTP client of each.

Every manager runs in a session of its own; the drivers it starts are its children, each
leading a process group of its own (the JVM and the Python workers join it). Stopping a
manager here also kills every process it started; killing it (``kill -9`` of its group)
reaches none of its drivers.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import httpx

from stoker.redact import redact_url
from tests.support.core import REPO, free_port, stoker_cmd, wait_for
from tests.support.procs import Proc, kill_all, process_tree, processes

MANAGER_START = 90.0  # a `stoker server` importing FastAPI on a loaded machine


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
        port: int | None = None,
        wrap: list[str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        """``wrap``: a command the server's argv is appended to (it must exec it). ``cwd``:
        where it runs (this checkout by default, whose ``stoker`` it then imports first)."""
        self.name = name
        self.store = store
        self.log = log
        self.port = port or free_port()
        self.state_dir = state_dir
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
        argv = [*(wrap or []), *argv]
        if token is not None:
            argv += ["--token", token]
        if read_token is not None:
            argv += ["--read-token", read_token]
        if token is None and "STOKER_TOKEN" not in (env or {}):
            # The tests' managers run open unless a test gives a token: the secure default
            # (a token made into the state folder) has tests of its own (test_secure_default).
            argv += ["--insecure-no-token"]
        scrub = ("STOKER_TOKEN", "STOKER_READ_TOKEN", "STOKER_SERVER")
        env = {**{k: v for k, v in os.environ.items() if k not in scrub}, **(env or {})}
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=str(cwd or REPO),
                env=env,
                start_new_session=True,  # its own group: nothing of the test shares it
            )
        self.http = httpx.Client(base_url=self.url, timeout=60.0)

    def health(self, timeout: float = 5.0) -> dict[str, Any] | None:
        """``GET /healthz``'s answer, or None while the manager does not answer 200."""
        try:
            r = self.http.get("/healthz", timeout=timeout)
        except httpx.HTTPError:
            return None
        return r.json() if r.status_code == 200 else None

    def wait_up(self, timeout: float = MANAGER_START, every: float = 0.2) -> None:
        def up() -> bool:
            assert self.proc.poll() is None, f"{self.name} exited:\n{self.log_tail()}"
            return self.health() is not None

        wait_for(f"{self.name} to answer /healthz", up, timeout, every=every)

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

    def kill(self) -> None:
        """``kill -9`` the manager's process group (the manager alone: every driver it started
        leads a group of its own and lives on)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        self.http.close()


@contextlib.contextmanager
def one_manager(root: Path, name: str, **kw: Any) -> Iterator[Manager]:
    """A ``stoker server`` on an SQLite store in ``root`` (``apps/`` its allowed folder, made
    here), up and answering; stopped, with every process it started, at the end."""
    (root / "apps").mkdir(exist_ok=True)
    m = Manager(
        name, f"sqlite:///{root / 'store.db'}", root / "state", [root / "apps"],
        root / "server.log", **kw,
    )  # fmt: skip
    try:
        m.wait_up()
        yield m
    finally:
        m.stop()


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
