"""Driver mode (issue 10, "Measured"): an application's start, its recovery, its memory.

Everything runs for real: a ``stoker server`` (SQLite store) that this script starts in a
temporary folder, the CLI, the drivers the server starts, their JVMs and Python workers, the
standalone clusters the server starts and stops. The program under test is this file
(``driver_mode.py _app key=value ...``, see ``run_program``): three jobs started at once with
``stoker.submit`` in one driver, each ``generator -> files sink`` (parquet), trigger 500 ms:

* ``backfill``: bounded (100 M ids, 5000 per epoch: it outlasts every measurement);
* ``stream-a``, ``stream-b``: endless, 20 ids per second, at most 200 per epoch.

Parts (each repeated ``--reps`` times, default 3; medians, with min..max):

1. ``start``: ``stoker run --driver driver_mode.py -d`` -> the first committed epoch of each
   job, for ``--cluster local`` and ``standalone:workers=2,cores=1,memory=512m`` (turns
   alternate). The way there is split with the store's timestamps (application record,
   cluster record, attempts, epochs) and the driver's log (attempt claimed, Spark started,
   each query started); the JSON also names each JVM running at the cancel.
   The cluster's start is its record's STARTING -> RUNNING. Then teardown: ``POST
   /v1/applications/ID/cancel`` -> application CANCELED -> cluster STOPPED -> every JVM
   (driver, master, workers, executors) gone -> every process gone (the Python workers too),
   read from /proc for the processes recorded just before the cancel (pid and start time).
2. ``recover``: ``kill -9`` of the application driver's process group (its JVM with it)
   once every job has committed 3 epochs (plus 0-0.5 s, so the kill lands anywhere in an
   epoch) -> every job committing again under the driver that the leader restarts (the
   application's default restart strategy: fixed-delay, 1 s). Baseline, by hand: the same
   program run as ``python driver_mode.py _app ...`` (``stoker.submit`` in-process, no job
   manager, each job's store in its own folder), killed the same way and started again by
   this script at once. A person would also have to notice the death: the baseline is a
   lower bound. Turns alternate stoker / by hand; each turn is a new application or folder.
   The same steps are read from both sides' logs and stores.
3. ``memory``: RSS (and PSS, which splits pages the forked Python workers share) summed over
   each driver's process tree (Python driver, JVM, Python workers), for one application
   running the three jobs vs three jobs submitted alone (``stoker run driver_mode.py
   --server -d``, i.e. ``POST /v1/jobs``: three drivers of their own), once every job has
   committed 10 epochs: the median of 5 samples 1 s apart, by role and by what each Python
   worker runs.

The load average is sampled every 2 s; each part and each turn reports its range.

Run: ``python benchmarks/driver_mode.py [all|start|recover|memory] [--reps 3] [--seed N]
[--json out.json]``. ``BENCH_KEEP=1`` keeps the work folder (server and driver logs, store).
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stoker import procs

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
APP_MODE = "_app"
BACKFILL = "backfill"
STREAMS = ("stream-a", "stream-b")
JOBS = (BACKFILL, *STREAMS)
CLUSTERS = {"local": "local", "standalone": "standalone:workers=2,cores=1,memory=512m"}
START_TIMEOUT = 900.0  # a cold driver (and cluster) on a shared, loaded 2-core machine
STOP_TIMEOUT = 300.0
POLL_S = 0.1
WARM_EPOCHS = 3  # part 2: epochs every job commits before the kill
STEADY_EPOCHS = 10  # part 3: epochs every job commits before memory is sampled
MEM_SAMPLES = 5
AGAIN = "kill -> every job committing again"
SPAWNED = "new driver spawned -> every job committing again"
ONE, THREE = "one application", "three drivers"


# --------------------------------------------------------------------------------------------
# The program under test. ``python driver_mode.py _app key=value ...`` runs it: as an
# application's program (``stoker run --driver``), as one job submitted alone (``jobs=`` one
# name, ``alone=1``), or as a plain Python program (the baseline of part 2: ``state=DIR``).
# Only stoker is imported on this path: a driver runs this file as ``__main__``.


def program_settings(argv: list[str]) -> dict[str, str]:
    """``key=value`` arguments; anything else is a mistake of the benchmark, refused."""
    out: dict[str, str] = {}
    for arg in argv:
        key, eq, value = arg.partition("=")
        if not eq:
            raise SystemExit(f"driver_mode {APP_MODE}: argument {arg!r} is not key=value")
        out[key] = value
    return out


def bench_pipeline(name: str, s: dict[str, str]) -> Any:
    """One job of the program: generated ids into a files sink of its own.

    The backfill is bounded but far longer than any measurement: it must still run when the
    driver is killed and when memory is sampled, so that all three jobs are measured.
    """
    from stoker import Pipeline, sinks, sources

    if name == BACKFILL:
        source = sources.generator(
            total=int(s.get("backfill_total", "100000000")),
            max_rows_per_epoch=int(s.get("backfill_per_epoch", "5000")),
            partitions=1,
        )
    else:
        source = sources.generator(
            rows_per_second=float(s.get("rate", "20")),
            max_rows_per_epoch=int(s.get("per_epoch", "200")),
            partitions=1,
        )
    return Pipeline(name).source(source).sink(sinks.files(f"{s['out']}/{name}"))


def run_program(argv: list[str]) -> None:
    """Start every job of ``jobs=`` at once (``stoker.submit``), then wait for them.

    ``alone=1``: the one job with ``stoker.run`` (a lone job's driver runs it). ``state=DIR``:
    no job manager; each job's folder and store in ``DIR/<name>``, its id the name, and
    stoker's INFO log on stderr (the steps of a restart are read from it).
    """
    import stoker

    s = program_settings(argv)
    names = [n for n in s.get("jobs", ",".join(JOBS)).split(",") if n]
    unknown = sorted(set(names) - set(JOBS))
    if unknown:
        raise SystemExit(f"driver_mode {APP_MODE}: unknown job {unknown[0]!r}")
    trigger = s.get("trigger", "500ms")
    if s.get("alone") == "1":
        (name,) = names
        stoker.run(bench_pipeline(name, s), trigger=trigger)
        return
    if "state" in s:
        import logging

        logging.basicConfig(
            level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s: %(message)s"
        )
    handles = []
    for name in names:
        extra: dict[str, Any] = {}
        if "state" in s:
            extra = {"state_dir": f"{s['state']}/{name}", "job_id": name}
        handles.append(stoker.submit(bench_pipeline(name, s), trigger=trigger, **extra))
    for h in handles:
        h.wait()


# --------------------------------------------------------------------------------------------
# /proc: process trees, their memory, whether a recorded process still runs.


@dataclass(frozen=True)
class Proc:
    """One process; ``start`` (clock ticks since boot) tells a reused pid from the original."""

    pid: int
    ppid: int
    pgid: int
    start: str
    argv: tuple[str, ...]

    @property
    def role(self) -> str:
        """``jvm``, ``python worker`` (started by a JVM: pyspark's daemons, runners) or
        ``python driver``."""
        exe = os.path.basename(self.argv[0]) if self.argv else ""
        if exe == "java":
            return "jvm"
        if any("pyspark" in a for a in self.argv[1:4]):
            return "python worker"
        return "python driver"

    @property
    def kind(self) -> str:
        """What a Python worker runs: ``daemon <module>`` (pyspark's forking daemons and the
        workers they fork) or the module run directly (one source runner per query)."""
        args = list(self.argv[1:])
        mod = args[args.index("-m") + 1] if "-m" in args[:-1] else " ".join(args[:1])
        if mod == "pyspark.daemon" and len(args) > 2:
            return f"daemon {args[2].removeprefix('pyspark.')}"
        return mod.removeprefix("pyspark.")


def read_proc(pid: int) -> Proc | None:
    """``pid`` through stoker's one /proc reader; None once it exited."""
    st = procs.stat(pid)
    argv = procs.cmdline(pid)
    if st is None or argv is None or st.state in ("Z", "X"):
        return None  # gone, or exited and only its parent's wait is missing
    return Proc(pid, st.ppid, st.pgid, st.started, tuple(argv))


def proc_table() -> list[Proc]:
    return [p for p in map(read_proc, procs.pids()) if p is not None]


def tree(roots: Iterable[int], table: list[Proc] | None = None) -> list[Proc]:
    """The processes ``roots`` and every descendant (pyspark's daemons lead groups of their
    own, so the tree is followed by parent, not by group)."""
    table = proc_table() if table is None else table
    want = set(roots)
    found = {p.pid: p for p in table if p.pid in want}
    while True:
        more = {p.pid: p for p in table if p.ppid in found and p.pid not in found}
        if not more:
            return sorted(found.values(), key=lambda p: p.pid)
        found.update(more)


def alive(p: Proc) -> bool:
    now = read_proc(p.pid)
    return now is not None and now.start == p.start


def _proc_kib(path: str, key: str) -> int:
    import _common as C

    return C.proc_kib(path, key)


def memory_of(procs: Iterable[Proc]) -> dict[str, Any]:
    """RSS and PSS (MiB) summed over ``procs``, in all and by role, and the process count."""
    out: dict[str, Any] = {"rss": 0.0, "pss": 0.0, "processes": 0, "by_role": {}, "workers": {}}
    for p in procs:
        rss = _proc_kib(f"/proc/{p.pid}/status", "VmRSS:") / 1024
        pss = _proc_kib(f"/proc/{p.pid}/smaps_rollup", "Pss:") / 1024
        if rss == 0 and not alive(p):
            continue
        out["rss"] += rss
        out["pss"] += pss
        out["processes"] += 1
        role = out["by_role"].setdefault(p.role, {"rss": 0.0, "pss": 0.0, "processes": 0})
        role["rss"] += rss
        role["pss"] += pss
        role["processes"] += 1
        if p.role == "python worker":
            kind = out["workers"].setdefault(p.kind, {"rss": 0.0, "processes": 0})
            kind["rss"] += rss
            kind["processes"] += 1
    return out


def kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


# --------------------------------------------------------------------------------------------
# The harness: one job manager, the store read directly, the load average.


class LoadMonitor(threading.Thread):
    """Samples the 1-minute load average every 2 s, so each part can report its range."""

    def __init__(self) -> None:
        super().__init__(name="load", daemon=True)
        self.samples: list[tuple[float, float]] = []
        self._halt = threading.Event()

    def run(self) -> None:
        while True:
            self.samples.append((time.time(), os.getloadavg()[0]))
            if self._halt.wait(2.0):
                return

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=10)

    def between(self, t0: float, t1: float) -> list[float]:
        return [v for t, v in self.samples if t0 <= t <= t1]


def wait_until(what: Callable[[], str], check: Callable[[], Any], timeout: float) -> Any:
    """:func:`_common.wait_until` at this script's poll interval (:class:`Timeout`)."""
    import _common as C

    return C.wait_until(what, check, timeout, POLL_S)


def log_time(line: str) -> float | None:
    """The time of a log line written by ``%(asctime)s`` (local time, milliseconds)."""
    try:
        stamp = time.mktime(time.strptime(line[:19], "%Y-%m-%d %H:%M:%S"))
        return stamp + int(line[20:23]) / 1000
    except (ValueError, IndexError):
        return None


def log_marks(path: Path, jobs: Iterable[str]) -> dict[str, float]:
    """When a driver claimed its attempt, its Spark was up, and each job's attempt and query
    started, from the driver's log (the first line of each kind)."""
    marks: dict[str, float] = {}
    if not path.exists():
        return marks
    wanted = {
        "attempt claimed": ": attempt ",  # "application A: attempt N claimed"
        "spark started": ": Spark started in ",
    }
    for line in path.read_text(errors="replace").splitlines():
        t = log_time(line)
        if t is None:
            continue
        for key, needle in wanted.items():
            if key in marks or needle not in line:
                continue
            if key != "attempt claimed" or "claimed" in line:
                marks[key] = t
        for j in jobs:
            if f"job {j}: query started" in line:
                marks.setdefault(f"query started {j}", t)
    return marks


def query_step(
    steps: dict[str, float], marks: dict[str, float], jobs: Iterable[str], name: str, t0: float
) -> None:
    """Add ``name``: when the last job's query started (``writeStream.start`` returned),
    if the driver's log has every job's line."""
    queries = [marks.get(f"query started {j}") for j in jobs]
    if queries and all(q is not None for q in queries):
        steps[name] = max(q for q in queries if q is not None) - t0


class Manager:
    """A ``stoker server`` on a SQLite store in ``root``, allowed to run this folder's files."""

    def __init__(self, root: Path) -> None:
        import _common as C
        import httpx

        self.root = root
        self.state = root / "state"
        self.db = root / "store.db"
        self.log = root / "server.log"
        self.proc, self.url = C.start_manager(
            f"sqlite:///{self.db}", self.state, HERE, log=self.log, env=_env()
        )
        self.http = httpx.Client(base_url=self.url, timeout=30.0)
        wait_until(lambda: f"answer from {self.url}", self._up, 120)
        self._store: Any = None

    def _up(self) -> bool:
        import httpx

        if self.proc.poll() is not None:
            raise RuntimeError(f"stoker server exited: {self.log.read_text()[-2000:]}")
        try:
            return self.http.get("/healthz").json().get("leader") is True
        except (httpx.HTTPError, ValueError):
            return False

    @property
    def store(self) -> Any:
        if self._store is None:
            from stoker.store import open_store

            self._store = open_store(str(self.db))
        return self._store

    def cli(self, *args: str) -> str:
        """``stoker ARGS --server URL``; its stdout. A failure raises with its stderr."""
        p = subprocess.run(
            [sys.executable, "-m", "stoker.cli", *args, "--server", self.url],
            capture_output=True,
            text=True,
            cwd=str(REPO),
            env=_env(),
            timeout=300,
        )
        if p.returncode != 0:
            raise RuntimeError(f"stoker {' '.join(args)}: exit {p.returncode}: {p.stderr}")
        return p.stdout

    def submit_app(self, app: str, cluster: str, out: Path) -> None:
        self.cli(
            "run", "--driver", str(HERE / "driver_mode.py"), "--app-id", app, "-d",
            "--cluster", cluster, APP_MODE, f"out={out}",
        )  # fmt: skip

    def submit_alone(self, job: str, name: str, out: Path) -> None:
        self.cli(
            "run", str(HERE / "driver_mode.py"), "--job-id", job, "-d",
            APP_MODE, f"jobs={name}", "alone=1", f"out={out}",
        )  # fmt: skip

    # the store, read directly -------------------------------------------------------------
    def first_commits(self, jobs: Iterable[str], since: Callable[[Any], bool]) -> dict[str, Any]:
        """For each job, the first epoch committed by an attempt that ``since(attempt)``
        accepts, or None."""
        out: dict[str, Any] = {}
        for j in jobs:
            ok = {a.attempt: a for a in self.store.list_attempts(j) if since(a)}
            done = [
                e
                for e in self.store.list_epochs(j, limit=100_000)
                if e.decided_by in ok and e.committed_at is not None
            ]
            out[j] = min(done, key=lambda e: e.epoch) if done else None
        return out

    def committed_since(self, job: str, since: Callable[[Any], bool]) -> int:
        ok = {a.attempt for a in self.store.list_attempts(job) if since(a)}
        return sum(
            1
            for e in self.store.list_epochs(job, limit=100_000)
            if e.decided_by in ok and e.committed_at is not None
        )

    def job_state(self, jid: str) -> str:
        from stoker.errors import JobNotFound

        try:
            return str(self.store.get_job(jid).state)
        except JobNotFound:
            return "-"

    def driver_of(self, jid: str) -> Proc | None:
        """The live driver process of the record's current attempt."""
        rec = self.store.get_job(jid)
        if not rec.current_attempt:
            return None
        att = self.store.get_attempt(jid, rec.current_attempt)
        if att is None or str(att.state) not in ("STARTING", "RUNNING"):
            return None
        p = read_proc(att.owner.pid)
        return p if p is not None and p.start == att.owner.pid_started else None

    # ending things --------------------------------------------------------------------------
    def cancel(self, path: str) -> None:
        r = self.http.post(path)
        if r.status_code not in (200, 202, 409):
            raise RuntimeError(f"POST {path}: {r.status_code} {r.text}")

    def wait_terminal(self, jid: str, timeout: float = STOP_TIMEOUT) -> None:
        wait_until(
            lambda: f"end of {jid} ({self.job_state(jid)})",
            lambda: self.job_state(jid) in ("FINISHED", "CANCELED", "FAILED"),
            timeout,
        )

    def close(self) -> None:
        """Cancel whatever still runs, stop the server, then kill anything of ``root`` left."""
        with contextlib.suppress(Exception):
            for rec in self.store.list_jobs(kind=None):
                if not rec.state.terminal and rec.app_id is None:
                    kind = "applications" if str(rec.kind) == "application" else "jobs"
                    self.cancel(f"/v1/{kind}/{rec.job_id}/cancel")
            for rec in self.store.list_jobs(kind=None):
                if rec.app_id is None:
                    self.wait_terminal(rec.job_id, 120)
            wait_until(
                lambda: "clusters STOPPED",
                lambda: all(
                    str(c.state) == "STOPPED"
                    for c in self.store.list_clusters(include_stopped=True)
                ),
                180,
            )
        if self._store is not None:
            self._store.close()
        self.http.close()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            kill_group(self.proc.pid)
            self.proc.wait()
        sweep(self.root)


def sweep(root: Path) -> None:
    """Kill what is left of this run: processes naming ``root`` or working inside it, and the
    trees under them (none is left when everything went well)."""
    mine = str(root)
    left = []
    for p in proc_table():
        if p.pid == os.getpid():
            continue
        try:
            cwd = os.readlink(f"/proc/{p.pid}/cwd")
        except OSError:
            cwd = ""
        if any(mine in a for a in p.argv) or cwd == mine or cwd.startswith(mine + "/"):
            left.append(p)
    for p in tree([p.pid for p in left]):
        if alive(p):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(p.pid, signal.SIGKILL)
    for p in left:
        print(f"swept a leftover process: {' '.join(p.argv)[:200]}", file=sys.stderr)


def _env() -> dict[str, str]:
    """This environment without a job manager or token of the user's."""
    return {k: v for k, v in os.environ.items() if k not in ("STOKER_SERVER", "STOKER_TOKEN")}


def note(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# --------------------------------------------------------------------------------------------
# Part 1: start and teardown.


def app_jobs(app: str) -> list[str]:
    return [f"{app}.{n}" for n in JOBS]


def start_turn(m: Manager, kind: str, rep: int) -> dict[str, Any]:
    """One application on ``kind``: submit -> first commits, then cancel -> nothing left."""
    app = f"start-{kind}-{rep}"
    jobs = app_jobs(app)
    cname = f"app-{app}"
    sample: dict[str, Any] = {"app": app, "cluster": kind}
    seen_running: dict[str, Any] = {}

    def all_committed() -> dict[str, Any] | None:
        if kind == "standalone" and "at" not in seen_running:
            with contextlib.suppress(Exception):
                c = m.store.get_cluster(cname)
                if str(c.state) == "RUNNING":
                    seen_running.update(at=time.time(), rec=c)
        st = m.job_state(app)
        if st in ("FAILED", "CANCELED", "FINISHED"):
            raise RuntimeError(f"{app} ended {st}: {m.store.get_job(app).last_error}")
        got = m.first_commits(jobs, lambda a: True)
        return got if all(got.values()) else None

    t0 = time.time()
    m.submit_app(app, CLUSTERS[kind], m.root / "out" / app)
    sample["cli returned"] = time.time() - t0
    firsts = wait_until(lambda: f"first commit of every job of {app}", all_committed, START_TIMEOUT)
    rec = m.store.get_job(app)
    (att,) = [a for a in m.store.list_attempts(app) if a.attempt == 1]
    marks = log_marks(Path(att.log_path or ""), jobs)
    steps: dict[str, float] = {
        "submit -> application record": rec.created_at - t0,
    }
    if kind == "standalone":
        c = seen_running["rec"]
        steps["cluster start (STARTING -> RUNNING)"] = c.updated_at - c.created_at
        steps["submit -> cluster RUNNING"] = c.updated_at - t0
    steps["submit -> driver spawned (attempt STARTING)"] = att.started_at - t0
    if "attempt claimed" in marks:
        steps["submit -> driver claimed its attempt"] = marks["attempt claimed"] - t0
    if "spark started" in marks:
        steps["submit -> SparkSession ready"] = marks["spark started"] - t0
    job_atts = [m.store.list_attempts(j)[0] for j in jobs]
    steps["submit -> job attempts started (last)"] = max(a.started_at for a in job_atts) - t0
    query_step(steps, marks, jobs, "submit -> queries started (last)", t0)
    steps["submit -> first epoch pinned (last)"] = max(e.pinned_at for e in firsts.values()) - t0
    for j, e in firsts.items():
        steps[f"submit -> first commit: {j.split('.', 1)[1]}"] = e.committed_at - t0
    steps["submit -> first commit: every job"] = max(e.committed_at for e in firsts.values()) - t0
    sample["steps"] = steps
    every = steps["submit -> first commit: every job"]
    note(f"{app}: every job committed {every:.1f} s after the submit")
    sample["teardown"], sample["jvms"] = teardown(
        m, app, cname if kind == "standalone" else None, att
    )
    gone = sample["teardown"]["cancel -> every process gone"]
    note(f"{app}: torn down, nothing left {gone:.1f} s after the cancel")
    return sample


def teardown(
    m: Manager, app: str, cname: str | None, att: Any
) -> tuple[dict[str, float], list[str]]:
    """Cancel ``app``; the times until it is CANCELED, its cluster STOPPED, its JVMs gone;
    and the main class of each JVM that ran at the cancel."""
    roots = [att.owner.pid]
    if cname is not None:
        roots += [int(p["pid"]) for p in m.store.get_cluster(cname).processes]
    procs = [p for p in tree(roots) if p.pid != m.proc.pid]
    jvms = [p for p in procs if p.role == "jvm"]
    t0 = time.time()
    m.cancel(f"/v1/applications/{app}/cancel")
    out: dict[str, float] = {}
    deadline = time.monotonic() + STOP_TIMEOUT
    while len(out) < (4 if cname else 3):
        now = time.time()
        if "cancel -> application CANCELED" not in out and m.job_state(app) == "CANCELED":
            out["cancel -> application CANCELED"] = m.store.get_job(app).updated_at - t0
        if cname and "cancel -> cluster STOPPED" not in out:
            c = m.store.get_cluster(cname)
            if str(c.state) == "STOPPED":
                out["cancel -> cluster STOPPED"] = c.updated_at - t0
        if "cancel -> every JVM gone" not in out and not any(alive(p) for p in jvms):
            out["cancel -> every JVM gone"] = now - t0
        if "cancel -> every process gone" not in out and not any(alive(p) for p in procs):
            out["cancel -> every process gone"] = now - t0
        if time.monotonic() > deadline:
            import _common as C

            raise C.Timeout(f"{app}: teardown incomplete after {STOP_TIMEOUT:.0f} s: {out}")
        time.sleep(POLL_S)
    out["JVMs"] = float(len(jvms))
    out["processes"] = float(len(procs))
    return out, jvm_names(jvms)


def jvm_names(jvms: list[Proc]) -> list[str]:
    """Each JVM's main class (the first argument after the class path that is not an option)."""
    names = []
    for p in jvms:
        args = list(p.argv[1:])
        rest = args[args.index("-cp") + 2 :] if "-cp" in args[:-1] else args
        names.append(next((a for a in rest if not a.startswith("-")), "?"))
    return names


def with_load(turn: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    """Run one turn; its sample with the 1-minute load average at its start and end."""
    before = os.getloadavg()[0]
    sample = turn(*args)
    sample["load"] = [round(before, 2), round(os.getloadavg()[0], 2)]
    return sample


def part_start(m: Manager, reps: int) -> dict[str, Any]:
    samples: dict[str, list[dict[str, Any]]] = {k: [] for k in CLUSTERS}
    for rep in range(1, reps + 1):
        order = list(CLUSTERS) if rep % 2 else list(reversed(CLUSTERS))
        for kind in order:
            samples[kind].append(with_load(start_turn, m, kind, rep))
    return samples


# --------------------------------------------------------------------------------------------
# Part 2: kill -9 of the driver -> every job committing again.


def warm_then_kill(
    committed: Callable[[], list[int]], pgid: int, rng: random.Random, what: str
) -> float:
    """Wait until every job committed ``WARM_EPOCHS`` epochs, then a random 0-0.5 s, then
    SIGKILL the group; the time of the kill."""
    wait_until(
        lambda: f"{WARM_EPOCHS} commits of every job of {what} (now {committed()})",
        lambda: min(committed()) >= WARM_EPOCHS,
        START_TIMEOUT,
    )
    time.sleep(rng.uniform(0.0, 0.5))
    t = time.time()
    kill_group(pgid)
    return t


def recover_stoker(m: Manager, rep: int, rng: random.Random) -> dict[str, Any]:
    app = f"recover-{rep}"
    jobs = app_jobs(app)
    m.submit_app(app, "local", m.root / "out" / app)
    drv = wait_until(lambda: f"driver of {app}", lambda: m.driver_of(app), START_TIMEOUT)
    first = m.store.get_job(app).current_attempt

    def under(n: int) -> Callable[[Any], bool]:
        return lambda a: a.app_attempt == n

    t_kill = warm_then_kill(
        lambda: [m.committed_since(j, under(first)) for j in jobs], drv.pid, rng, app
    )
    note(f"{app}: driver {drv.pid} (attempt {first}) killed")

    def again() -> dict[str, Any] | None:
        rec = m.store.get_job(app)
        if rec.current_attempt <= first:
            return None
        got = m.first_commits(jobs, under(rec.current_attempt))
        return got if all(got.values()) else None

    firsts = wait_until(lambda: f"{app}'s jobs committing again", again, START_TIMEOUT)
    atts = {a.attempt: a for a in m.store.list_attempts(app)}
    old, new = atts[first], atts[max(atts)]
    marks = log_marks(Path(new.log_path or ""), jobs)
    steps: dict[str, float] = {}
    if old.ended_at is not None:
        steps["kill -> death noticed (attempt FAILED)"] = old.ended_at - t_kill
    steps["kill -> new driver spawned"] = new.started_at - t_kill
    if "attempt claimed" in marks:
        steps["kill -> new driver claimed its attempt"] = marks["attempt claimed"] - t_kill
    if "spark started" in marks:
        steps["kill -> SparkSession ready"] = marks["spark started"] - t_kill
    n = max(atts)
    job_atts = [next(a for a in m.store.list_attempts(j) if a.app_attempt == n) for j in jobs]
    steps["kill -> job attempts started (last)"] = max(a.started_at for a in job_atts) - t_kill
    query_step(steps, marks, jobs, "kill -> queries started (last)", t_kill)
    for j, e in firsts.items():
        steps[f"kill -> committing again: {j.split('.', 1)[1]}"] = e.committed_at - t_kill
    steps[AGAIN] = max(e.committed_at for e in firsts.values()) - t_kill
    steps[SPAWNED] = steps[AGAIN] - steps["kill -> new driver spawned"]
    note(f"{app}: every job commits again {steps[AGAIN]:.1f} s after the kill")
    m.cancel(f"/v1/applications/{app}/cancel")
    m.wait_terminal(app)
    gone = [p for p in tree([new.owner.pid]) if alive(p)]
    wait_until(lambda: f"exit of {app}'s driver", lambda: not any(alive(p) for p in gone), 120)
    return {"app": app, "attempts": n, "steps": steps}


class Plain:
    """The program run by hand: ``python driver_mode.py _app ... state=DIR``, no job manager."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.state = root / "state"
        self.out = root / "out"
        self.proc: subprocess.Popen[bytes] | None = None
        self.logs: list[Path] = []
        self._stores: dict[str, Any] = {}

    def start(self) -> float:
        log = self.root / f"run-{len(self.logs) + 1}.log"
        self.logs.append(log)
        out = open(log, "ab")  # noqa: SIM115 - handed to the child
        t = time.time()
        argv = [
            sys.executable, str(HERE / "driver_mode.py"), APP_MODE,
            f"out={self.out}", f"state={self.state}",
        ]  # fmt: skip
        self.proc = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=str(self.root),
            env=_env(),
        )
        return t

    def store(self, job: str) -> Any:
        if job not in self._stores:
            from stoker.store import open_store

            db = self.state / job / "store.db"
            if not db.exists():
                return None
            self._stores[job] = open_store(str(db))
        return self._stores[job]

    def attempts(self, job: str) -> list[Any]:
        s = self.store(job)
        return s.list_attempts(job) if s is not None else []

    def committed(self, job: str, attempt: int) -> list[Any]:
        s = self.store(job)
        if s is None:
            return []
        eps = s.list_epochs(job, limit=100_000)
        return [e for e in eps if e.decided_by == attempt and e.committed_at is not None]

    def current(self, job: str) -> int:
        atts = self.attempts(job)
        return int(atts[-1].attempt) if atts else 0

    def close(self) -> None:
        if self.proc is not None:
            procs = tree([self.proc.pid])
            kill_group(self.proc.pid)
            self.proc.wait()
            self.proc = None
            # pyspark's daemons lead groups of their own: they go when the JVM has gone.
            import _common as C

            with contextlib.suppress(C.Timeout):
                wait_until(lambda: "exit", lambda: not any(alive(p) for p in procs), 60)
        for s in self._stores.values():
            s.close()
        self._stores.clear()


def recover_plain(root: Path, rep: int, rng: random.Random) -> dict[str, Any]:
    plain = Plain(root / f"plain-{rep}")
    plain.root.mkdir(parents=True)
    try:
        plain.start()
        assert plain.proc is not None

        def before() -> list[int]:
            # Attempts of this first process: every job's attempt 1.
            return [len(plain.committed(j, 1)) for j in JOBS]

        t_kill = warm_then_kill(before, plain.proc.pid, rng, f"plain-{rep}")
        plain.proc.wait()
        t_spawn = plain.start()
        note(f"plain-{rep}: killed, started again")

        def again() -> dict[str, Any] | None:
            out = {}
            for j in JOBS:
                n = plain.current(j)
                done = plain.committed(j, n) if n > 1 else []
                if not done:
                    return None
                out[j] = min(done, key=lambda e: e.epoch)
            return out

        firsts = wait_until(lambda: f"plain-{rep}'s jobs committing again", again, START_TIMEOUT)
        marks = log_marks(plain.logs[-1], JOBS)
        steps: dict[str, float] = {"kill -> new driver spawned": t_spawn - t_kill}
        if "spark started" in marks:
            steps["kill -> SparkSession ready"] = marks["spark started"] - t_kill
        job_atts = [plain.attempts(j)[-1] for j in JOBS]
        steps["kill -> job attempts started (last)"] = max(a.started_at for a in job_atts) - t_kill
        query_step(steps, marks, JOBS, "kill -> queries started (last)", t_kill)
        for j, e in firsts.items():
            steps[f"kill -> committing again: {j}"] = e.committed_at - t_kill
        steps[AGAIN] = max(e.committed_at for e in firsts.values()) - t_kill
        steps[SPAWNED] = steps[AGAIN] - steps["kill -> new driver spawned"]
        note(f"plain-{rep}: every job commits again {steps[AGAIN]:.1f} s after the kill")
        return {"folder": str(plain.root), "steps": steps}
    finally:
        plain.close()


def part_recover(m: Manager, reps: int, rng: random.Random) -> dict[str, Any]:
    samples: dict[str, list[dict[str, Any]]] = {"stoker": [], "by hand": []}
    for rep in range(1, reps + 1):
        sides = ["stoker", "by hand"] if rep % 2 else ["by hand", "stoker"]
        for side in sides:
            if side == "stoker":
                samples[side].append(with_load(recover_stoker, m, rep, rng))
            else:
                samples[side].append(with_load(recover_plain, m.root, rep, rng))
    return samples


# --------------------------------------------------------------------------------------------
# Part 3: memory, one driver of three jobs vs three drivers of one.


def sample_memory(drivers: list[Proc]) -> dict[str, Any]:
    """The median of ``MEM_SAMPLES`` samples (1 s apart) of the drivers' trees, summed."""
    samples = []
    for i in range(MEM_SAMPLES):
        if i:
            time.sleep(1.0)
        samples.append(memory_of(tree([d.pid for d in drivers])))
    samples.sort(key=lambda s: s["rss"])
    mid = samples[len(samples) // 2]
    return {**mid, "rss_samples": [round(s["rss"], 1) for s in samples]}


def memory_app(m: Manager, rep: int) -> dict[str, Any]:
    app = f"mem-app-{rep}"
    jobs = app_jobs(app)
    m.submit_app(app, "local", m.root / "out" / app)
    wait_until(
        lambda: f"{STEADY_EPOCHS} commits of every job of {app}",
        lambda: min(m.committed_since(j, lambda a: True) for j in jobs) >= STEADY_EPOCHS,
        START_TIMEOUT,
    )
    drv = m.driver_of(app)
    if drv is None:
        raise RuntimeError(f"{app}: no live driver")
    mem = sample_memory([drv])
    note(f"{app}: RSS {mem['rss']:.0f} MiB, PSS {mem['pss']:.0f} MiB")
    m.cancel(f"/v1/applications/{app}/cancel")
    m.wait_terminal(app)
    stop = tree([drv.pid])
    wait_until(lambda: f"exit of {app}'s driver", lambda: not any(alive(p) for p in stop), 120)
    return {"app": app, **mem}


def memory_alone(m: Manager, rep: int) -> dict[str, Any]:
    jobs = {f"mem-alone-{rep}-{n}": n for n in JOBS}
    for jid, name in jobs.items():
        m.submit_alone(jid, name, m.root / "out" / jid)
    wait_until(
        lambda: f"{STEADY_EPOCHS} commits of every lone job of rep {rep}",
        lambda: min(m.committed_since(j, lambda a: True) for j in jobs) >= STEADY_EPOCHS,
        START_TIMEOUT,
    )
    drivers = [m.driver_of(j) for j in jobs]
    if any(d is None for d in drivers):
        raise RuntimeError(f"mem-alone-{rep}: a job has no live driver")
    live = [d for d in drivers if d is not None]
    mem = sample_memory(live)
    note(f"mem-alone-{rep}: RSS {mem['rss']:.0f} MiB, PSS {mem['pss']:.0f} MiB")
    stop = tree([d.pid for d in live])
    for jid in jobs:
        m.cancel(f"/v1/jobs/{jid}/cancel")
    for jid in jobs:
        m.wait_terminal(jid)
    wait_until(lambda: "exit of the lone drivers", lambda: not any(alive(p) for p in stop), 120)
    return {"jobs": list(jobs), **mem}


def part_memory(m: Manager, reps: int) -> dict[str, Any]:
    samples: dict[str, list[dict[str, Any]]] = {ONE: [], THREE: []}
    for rep in range(1, reps + 1):
        sides = [ONE, THREE] if rep % 2 else [THREE, ONE]
        for side in sides:
            if side == ONE:
                samples[side].append(with_load(memory_app, m, rep))
            else:
                samples[side].append(with_load(memory_alone, m, rep))
    return samples


# --------------------------------------------------------------------------------------------
# Tables.


def cell(xs: list[float], digits: int = 1) -> str:
    import _common as C

    if not xs:
        return "-"
    if len(xs) == 1:
        return C.fmt(xs[0], digits)
    return f"{C.fmt(C.median(xs), digits)} ({C.spread(xs, digits)})"


def step_names(groups: Iterable[list[dict[str, Any]]], key: str) -> list[str]:
    names: list[str] = []
    for samples in groups:
        for s in samples:
            for k in s[key]:
                if k not in names:
                    names.append(k)
    return names


def ratio(a: list[float], b: list[float]) -> str:
    import _common as C

    if not a or not b or min(C.median(a), C.median(b)) < 0.5:
        return "-"  # a ratio of two blips says nothing
    return f"{C.median(a) / C.median(b):.2f}x"


def load_range(samples: list[dict[str, Any]]) -> str:
    """The 1-minute load average over the turns: lowest..highest of their starts and ends."""
    loads = [x for s in samples for x in s.get("load", [])]
    return f"{min(loads):.1f}..{max(loads):.1f}" if loads else "-"


def print_start(res: dict[str, Any]) -> None:
    import _common as C

    loc, sta = res["local"], res["standalone"]
    rows = []
    for key in ("steps", "teardown"):
        for name in step_names([sta, loc], key):
            if name in ("JVMs", "processes"):
                continue
            a = [s[key][name] for s in loc if name in s[key]]
            b = [s[key][name] for s in sta if name in s[key]]
            rows.append([name, cell(a), cell(b), ratio(b, a)])
    for name in ("JVMs", "processes"):
        a = [s["teardown"][name] for s in loc]
        b = [s["teardown"][name] for s in sta]
        rows.append([f"{name} at the cancel", cell(a, 0), cell(b, 0), ""])
    rows.append(["load average (1 min) in the turns", load_range(loc), load_range(sta), ""])
    print("\n1. start and teardown (s, median (min..max))")
    print(C.table(["", "local", CLUSTERS["standalone"], "standalone / local"], rows))


def print_recover(res: dict[str, Any]) -> None:
    import _common as C

    st, bh = res["stoker"], res["by hand"]
    rows = []
    for name in step_names([st, bh], "steps"):
        a = [s["steps"][name] for s in st if name in s["steps"]]
        b = [s["steps"][name] for s in bh if name in s["steps"]]
        rows.append([name, cell(a), cell(b), ratio(a, b)])
    rows.append(["load average (1 min) in the turns", load_range(st), load_range(bh), ""])
    print("\n2. kill -9 of the driver -> every job committing again (s, median (min..max))")
    heads = ["", "stoker (leader restarts)", "by hand (lower bound)", "stoker / by hand"]
    print(C.table(heads, rows))


def worker_rows(one: list[dict[str, Any]], three: list[dict[str, Any]]) -> list[list[str]]:
    """RSS of the Python workers by what they run, with how many processes each side has."""
    import _common as C

    rows = []
    for kind in sorted({k for s in [*one, *three] for k in s.get("workers", {})}):
        a = [s["workers"].get(kind, {}).get("rss", 0.0) for s in one]
        b = [s["workers"].get(kind, {}).get("rss", 0.0) for s in three]
        na = C.median([s["workers"].get(kind, {}).get("processes", 0) for s in one])
        nb = C.median([s["workers"].get(kind, {}).get("processes", 0) for s in three])
        rows.append(
            [f"    {kind} ({na:.0f} / {nb:.0f} processes)", cell(a, 0), cell(b, 0),
             f"{round(C.median(b) - C.median(a)):,}", ""]
        )  # fmt: skip
    return rows


def print_memory(res: dict[str, Any]) -> None:
    import _common as C

    one, three = res[ONE], res[THREE]
    rows: list[list[str]] = []
    for metric in ("rss", "pss"):
        a = [s[metric] for s in one]
        b = [s[metric] for s in three]
        save = C.median(b) - C.median(a)
        rows.append(
            [f"{metric.upper()} MiB, all", cell(a, 0), cell(b, 0), f"{round(save):,}",
             f"{100 * save / C.median(b):.0f}%"]
        )  # fmt: skip
        for role in ("python driver", "jvm", "python worker"):
            a = [s["by_role"].get(role, {}).get(metric, 0.0) for s in one]
            b = [s["by_role"].get(role, {}).get(metric, 0.0) for s in three]
            save = C.median(b) - C.median(a)
            pct = f"{100 * save / C.median(b):.0f}%" if C.median(b) else "-"
            rows.append([f"  {role}", cell(a, 0), cell(b, 0), f"{round(save):,}", pct])
        if metric == "rss":
            rows += worker_rows(one, three)
    a = [float(s["processes"]) for s in one]
    b = [float(s["processes"]) for s in three]
    rows.append(["processes", cell(a, 0), cell(b, 0), f"{C.median(b) - C.median(a):.0f}", ""])
    rows.append(["load average (1 min)", load_range(one), load_range(three), "", ""])
    print(f"\n3. memory after {STEADY_EPOCHS} epochs of every job (median (min..max))")
    print(C.table(["", "one application, 3 jobs", "3 jobs alone", "saving MiB", "saving"], rows))


# --------------------------------------------------------------------------------------------


def head_commit() -> dict[str, Any]:
    def git(*args: str) -> str:
        p = subprocess.run(["git", *args], capture_output=True, text=True, cwd=str(REPO))
        return p.stdout.strip() if p.returncode == 0 else "?"

    changed = [ln for ln in git("status", "--porcelain").splitlines() if ln.strip()]
    return {"head": git("rev-parse", "--short", "HEAD"), "uncommitted_files": len(changed)}


@contextlib.contextmanager
def work_folder() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="stoker-driver-mode-"))
    try:
        yield root
    finally:
        if os.environ.get("BENCH_KEEP"):
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


def bench_main() -> int:
    import _common as C

    ap = C.arg_parser(__doc__.split("\n\n")[0])
    ap.add_argument("part", nargs="?", default="all", choices=["all", "start", "recover", "memory"])
    ap.add_argument("--reps", type=int, default=3, help="repetitions of each measurement (3)")
    ap.add_argument("--seed", type=int, default=None, help="of the kill moments (default: time)")
    args = ap.parse_args()
    seed = int(time.time()) if args.seed is None else args.seed
    rng = random.Random(seed)
    info = C.machine()
    C.print_machine(info)
    code = head_commit()
    print(f"HEAD {code['head']}, {code['uncommitted_files']} uncommitted file(s); kill seed {seed}")
    payload: dict[str, Any] = {"machine": info, "code": code, "seed": seed, "reps": args.reps}
    parts = ["start", "recover", "memory"] if args.part == "all" else [args.part]
    load = LoadMonitor()
    load.start()
    try:
        with work_folder() as root:
            m = Manager(root)
            try:
                for part in parts:
                    t0 = time.time()
                    note(f"part {part}")
                    if part == "start":
                        res = part_start(m, args.reps)
                    elif part == "recover":
                        res = part_recover(m, args.reps, rng)
                    else:
                        res = part_memory(m, args.reps)
                    loads = load.between(t0, time.time())
                    payload[part] = {
                        "samples": res,
                        "load": [min(loads, default=0.0), max(loads, default=0.0)],
                        "minutes": (time.time() - t0) / 60,
                    }
                    C.flush()
            finally:
                m.close()
    finally:
        load.stop()
    for part in parts:
        p = payload[part]
        {"start": print_start, "recover": print_recover, "memory": print_memory}[part](p["samples"])
        print(f"load average (1 min) during the part: {p['load'][0]:.2f}-{p['load'][1]:.2f}, "
              f"{p['minutes']:.1f} min")  # fmt: skip
    C.write_json(args.json, payload)
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == [APP_MODE]:
        run_program(sys.argv[2:])
    else:
        sys.exit(bench_main())
