"""Helpers of tests/e2e/test_driver_mode.py: job managers running applications, the CLI, the
store read directly, and the process table searched for what a test left behind.

Every process of these tests works in the test's own folders: the application files are
copies in ``<root>/apps`` (the managers' allowed folder and the drivers' working folder), the
managers' state folders hold the applications' folders and the clusters' logs, work and
local folders. So "nothing is left" is checked on the machine itself: no live process whose
command line names one of those folders (or the master's port) or whose working folder is
inside one, and none of the recorded processes (driver attempts, cluster JVMs, by pid and
kernel start time) and their process groups still alive.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stoker.store import AttemptRecord, EpochRecord, Store, open_store
from stoker.types import EpochState, JobId, JobKind
from tests.support import APPS, JVM_OPTS, REPO, file_sink_ids, stoker_cmd, wait_for
from tests.support.manager import Manager, stop_all
from tests.support.procs import Proc, forks_left_out, kill_all, processes

APP_FILES = ("app_driver_trio.py", "app_driver_raises.py", "app_driver_misuse.py")

SPARK = 420.0  # a cold Spark driver (and executors) on 2 cores that other suites share
QUICK = 120.0  # a CLI call or a REST answer that starts no JVM
LIVE_ATTEMPT = ("STARTING", "RUNNING")
# Spark gives a Python worker a fixed 10 s to connect back to the JVM; on an overloaded machine
# that fails now and then, and the job's attempt ends FAILED (its restart strategy goes on).
# Such attempts are told apart by their error where attempts are counted (as in test_ha.py).
SPARK_STARTUP_FLAKES = ("Python worker failed to connect back",)
# Light JVMs: C1 only and one GC thread cost less CPU on a loaded 2-core machine.
TUNING = [
    "-D", f"spark.driver.extraJavaOptions={JVM_OPTS}",
    "-D", f"spark.executor.extraJavaOptions={JVM_OPTS}",
]  # fmt: skip


def copy_apps(dest: Path, names: Iterable[str] = APP_FILES) -> Path:
    """The test applications, copied where the managers allow entrypoints."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copy(APPS / name, dest / name)
    return dest


def cli(*args: str, timeout: float = QUICK) -> subprocess.CompletedProcess[str]:
    """``stoker ARGS`` as a user runs it (no server or token from this environment)."""
    env = {k: v for k, v in os.environ.items() if k not in ("STOKER_SERVER", "STOKER_TOKEN")}
    return subprocess.run(
        stoker_cmd(*args), cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )


# the store, read directly ----------------------------------------------------------------------
class StoreView:
    """Reads of the managers' store (the same records the REST answers are made from)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._store: Store | None = None

    @property
    def store(self) -> Store:
        if self._store is None:
            self._store = open_store(self.url)
        return self._store

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

    def attempts(self, jid: str) -> list[AttemptRecord]:
        return self.store.list_attempts(JobId(jid))

    def epochs(self, jid: str) -> list[EpochRecord]:
        return sorted(self.store.list_epochs(JobId(jid), limit=100_000), key=lambda e: e.epoch)

    def committed(self, jid: str) -> int:
        return sum(e.state == EpochState.COMMITTED for e in self.epochs(jid))

    def app_jobs(self, app: str) -> list[str]:
        return sorted(j.job_id for j in self.store.list_jobs(kind=JobKind.JOB, app_id=JobId(app)))

    def live_attempts(self) -> dict[str, list[int]]:
        """Every record's STARTING / RUNNING attempts (jobs and applications), by id."""
        out: dict[str, list[int]] = {}
        for rec in self.store.list_jobs(kind=None):
            live = [int(a.attempt) for a in self.attempts(rec.job_id) if a.state in LIVE_ATTEMPT]
            if live:
                out[rec.job_id] = live
        return out


# the process table -----------------------------------------------------------------------------
def _cwd(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return ""


def naming(needles: Iterable[str], spare: Iterable[int] = ()) -> list[Proc]:
    """Live processes whose command line contains one of ``needles`` or whose working folder
    is inside one (a needle that is a folder); never this process or those in ``spare``."""
    words = [n for n in needles if n]
    skip = {os.getpid(), *spare}
    out = []
    for p in processes():
        if p.pid in skip:
            continue
        text = " ".join(p.argv)
        cwd = _cwd(p.pid)
        if any(w in text for w in words) or any(
            cwd == w or cwd.startswith(w.rstrip("/") + "/") for w in words
        ):
            out.append(p)
    return out


def recorded_alive(records: Iterable[tuple[int, str]]) -> list[Proc]:
    """The recorded processes (pid, kernel start marker) still alive, and every member of
    their process groups that started after them (a driver's JVM, an executor)."""
    table = processes()
    out = []
    for pid, started in records:
        if pid <= 1 or not str(started).isdigit():
            continue
        out += [
            p
            for p in table
            if (p.pid == pid and p.start == str(started))
            or (p.pgid == pid and int(p.start) >= int(started))
        ]
    return out


def describe(procs: Iterable[Proc]) -> str:
    return "; ".join(f"{p.pid} (pgid {p.pgid}): {' '.join(p.argv)[:160]}" for p in procs)


def app_drivers(app: str, root: Path) -> list[Proc]:
    """The application driver processes (``stoker.runtime.appdriver --app APP``) of this test.

    A child a driver forked carries the driver's argv until it execs (the JVM's launch): it
    is not a second driver, so processes whose parent matches too are left out.
    """
    found = []
    for p in processes():
        argv = p.argv
        if "stoker.runtime.appdriver" not in argv or "--app" not in argv:
            continue
        i = argv.index("--app")
        state = argv[argv.index("--state-dir") + 1] if "--state-dir" in argv else ""
        if i + 1 < len(argv) and argv[i + 1] == app and state.startswith(str(root)):
            found.append(p)
    return forks_left_out(found)


def kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def sweep(root: Path, spare: Iterable[int] = ()) -> None:
    """Kill whatever of this test still runs (drivers, their JVMs, cluster JVMs): every
    process naming ``root`` or working in it, and their groups."""
    left = naming([str(root)], spare)
    for p in left:
        if p.pgid == p.pid:
            kill_group(p.pgid)
    kill_all(left)


# one job manager (SQLite) ----------------------------------------------------------------------
@dataclass
class World:
    """One ``stoker server`` on a SQLite store, its folders and the application files."""

    root: Path
    apps: Path
    out: Path
    state: Path
    manager: Manager
    view: StoreView
    seen: dict[str, Any] = field(default_factory=dict)  # what one test leaves another

    @property
    def url(self) -> str:
        return self.manager.url

    def stoker(self, *args: str, timeout: float = QUICK) -> subprocess.CompletedProcess[str]:
        return cli(*args, "--server", self.url, timeout=timeout)

    def app(self, app: str) -> dict[str, Any]:
        r = self.manager.http.get(f"/v1/applications/{app}")
        assert r.status_code == 200, r.text
        return dict(r.json())

    def cluster(self, name: str) -> dict[str, Any] | None:
        r = self.manager.http.get(f"/v1/clusters/{name}")
        if r.status_code == 404:
            return None
        assert r.status_code == 200, r.text
        return dict(r.json())

    def app_folder(self, app: str) -> Path:
        return self.state / "apps" / app

    def cluster_folder(self, name: str) -> Path:
        return self.state / "clusters" / name

    def logs(self, app: str, n: int = 3000) -> str:
        """The tail of every driver log of the application, and of the manager's."""
        parts = [
            f"--- {p}\n{p.read_text(errors='replace')[-n:]}"
            for p in sorted((self.state / "logs" / app).glob("attempt-*.log"))
        ]
        parts.append(f"--- manager\n{self.manager.log_tail(n)}")
        return "\n".join(parts)


@contextlib.contextmanager
def one_manager(
    root: Path,
    extra_args: list[str] | None = None,
    app_files: Iterable[str] = APP_FILES,
    env: dict[str, str] | None = None,
) -> Iterator[World]:
    """A job manager on a SQLite store in ``root`` (``extra_args`` on its command line, ``env``
    added to its environment and so its drivers'), the application files ``app_files`` in its
    allowed folder; on exit it is stopped with every process it or its drivers started."""
    apps = copy_apps(root / "apps", app_files)
    state = root / "state"
    store = f"sqlite:///{root / 'store.db'}"
    m = Manager(
        "driver-mode", store, state, [apps], root / "manager.log", env=env, extra_args=extra_args
    )
    world = World(root, apps, root / "out", state, m, StoreView(str(root / "store.db")))
    try:
        m.wait_up()
        yield world
    finally:
        world.view.close()
        stop_all([m])
        sweep(root)


# two job managers (PostgreSQL) -----------------------------------------------------------------
@dataclass
class Pair:
    """Two ``stoker server``s on one PostgreSQL store: whichever holds the lease leads."""

    root: Path
    apps: Path
    out: Path
    managers: list[Manager]
    view: StoreView

    def health(self, i: int) -> dict[str, Any] | None:
        try:
            r = self.managers[i].http.get("/healthz", timeout=2.0)
        except Exception:
            return None
        return dict(r.json()) if r.status_code == 200 else None

    def leader(self, timeout: float = 60.0) -> int:
        """The slot of the manager that says it leads (exactly one may)."""

        def one() -> int | None:
            says = [i for i in range(2) if (self.health(i) or {}).get("leader") is True]
            assert len(says) <= 1, f"managers {says} all say they lead"
            return says[0] + 1 if says else None  # +1: slot 0 is truthy too

        return int(wait_for("a leader", one, timeout, every=0.1)) - 1

    def kill(self, i: int) -> None:
        """SIGKILL the manager of slot ``i`` (alone in its process group: drivers and cluster
        JVMs lead groups of their own)."""
        proc = self.managers[i].proc
        kill_group(proc.pid)
        proc.wait(timeout=30)


@contextlib.contextmanager
def two_managers(root: Path, store: str) -> Iterator[Pair]:
    apps = copy_apps(root / "apps")
    managers = [
        Manager(f"m{i}", store, root / f"m{i}", [apps], root / f"m{i}.log") for i in range(2)
    ]
    pair = Pair(root, apps, root / "out", managers, StoreView(store))
    try:
        for m in managers:
            m.wait_up()
        yield pair
    finally:
        pair.view.close()
        stop_all(managers)
        sweep(root)


# watching an application ----------------------------------------------------------------------
class Watch(threading.Thread):
    """Samples, about every 0.2 s, the application's driver processes on the machine and the
    live (STARTING / RUNNING) attempts of every record in the store."""

    def __init__(self, view_url: str, app: str, root: Path) -> None:
        super().__init__(name=f"watch-{app}", daemon=True)
        self.view = StoreView(view_url)
        self.app = app
        self.root = root
        self.samples = 0
        self.driver_pids: set[int] = set()
        self.max_drivers = 0
        self.max_live: dict[str, int] = {}
        self.too_many: list[str] = []
        self.crashed: str | None = None
        self._halt = threading.Event()

    def run(self) -> None:
        try:
            while not self._halt.wait(0.2):
                self.sample()
        except Exception as e:
            self.crashed = repr(e)
        finally:
            self.view.close()

    def sample(self) -> None:
        drivers = app_drivers(self.app, self.root)
        live = self.view.live_attempts()
        self.samples += 1
        self.driver_pids.update(p.pid for p in drivers)
        self.max_drivers = max(self.max_drivers, len(drivers))
        for jid, attempts in live.items():
            self.max_live[jid] = max(self.max_live.get(jid, 0), len(attempts))
        doubled = {j: a for j, a in live.items() if len(a) > 1}
        if len(drivers) > 1 or doubled:
            self.too_many.append(
                f"{time.strftime('%H:%M:%S')} drivers {[p.pid for p in drivers]} "
                f"live attempts {doubled}"
            )

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=30)


def ids_once(folder: Path, total: int | None = None) -> int:
    """Every id of a files sink's committed epochs once: 0..total-1 (or 0..max); how many."""
    from tests.support import exactly_once

    ids = file_sink_ids(folder)
    assert ids, f"{folder} holds no committed epoch"
    exactly_once(ids, max(ids) + 1 if total is None else total)
    return len(ids)


def note(t0: float, msg: str) -> None:
    """A progress line with the seconds since the test began (shown with ``pytest -s``)."""
    print(f"[{time.monotonic() - t0:6.1f}s] {msg}", flush=True)


__all__ = [
    "JVM_OPTS",
    "QUICK",
    "SPARK",
    "SPARK_STARTUP_FLAKES",
    "TUNING",
    "Pair",
    "StoreView",
    "Watch",
    "World",
    "app_drivers",
    "cli",
    "describe",
    "ids_once",
    "kill_group",
    "naming",
    "note",
    "one_manager",
    "recorded_alive",
    "sweep",
    "two_managers",
    "wait_for",
]
