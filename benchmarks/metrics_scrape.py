"""``/metrics`` at 10,000 jobs (issue 39 item 2): the scrape's time and size, and the leader's
tick while something scrapes every 5 s.

A SQLite store gets ``--jobs`` jobs, ``--live`` of them RUNNING, each with an attempt and
``--epochs`` committed epochs (the others FINISHED and resolved): two jobs made through the
store's calls, then copied row by row straight into the file (seconds, not minutes). Then:

* **scrape**: ``GET /metrics``'s work (``exposition``, each version's own) with the collector
  of this tree (per-job series of the live jobs, one read of the jobs table) ``--scrapes``
  times, and with the collector of ``--base`` (every job ever kept, ``list_jobs`` three
  times) ``--base-scrapes`` times, on the same store, in one process: p50, p99 and the bytes
  of the text Prometheus gets;
* **tick**: the supervisor's ``step()`` (leading, a launcher whose drivers run nowhere)
  every 0.2 s for ``--tick-seconds``, alone, then with a thread scraping every
  ``--every`` s with this tree's collector, then with ``--base``'s: p50 and p99.

The issue's goal: scrape p99 <= 500 ms and <= 2 MB at 10,000 jobs with 100 live, and the
leader's tick p99 unchanged while Prometheus scrapes every 5 s.

Run: ``python benchmarks/metrics_scrape.py [--jobs 10000] [--live 100] [--scrapes 60]
[--base 3c06911] [--base-scrapes 3] [--tick-seconds 60] [--every 5] [--json F]``.
"""

from __future__ import annotations

import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _common as C
from prometheus_client.registry import CollectorRegistry

from stoker.manager import JobManager, Supervisor, SupervisorConfig
from stoker.manager.rescales import RescaleTally
from stoker.server import metrics as new_metrics
from stoker.store import Store, open_store
from stoker.store.records import Owner
from stoker.types import AttemptNo, AttemptState, ControlVersion, Epoch, JobId, JobState, job_id

ROOT = Path(__file__).resolve().parents[1]


class _Nowhere:
    """Drivers that run nowhere: the leader tends the jobs, starts and kills nothing."""

    def start(self, job_id: JobId, attempt: AttemptNo, *a: Any) -> Owner:
        return Owner("nowhere", 1000 + attempt, f"uid-{job_id}-{attempt}")

    def launched(self, job_id: JobId, attempt: AttemptNo) -> bool:
        return True

    def exit_code(self, job_id: JobId, attempt: AttemptNo) -> int | None:
        return None

    def is_gone(self, owner: Owner) -> bool:
        return False

    def still_running(self, owner: Owner) -> bool:
        return False

    def kill(self, owner: Owner) -> None:
        pass

    def reap(self, watched: Any) -> None:
        pass


def _template(store: Store, name: str, epochs: int, end: bool) -> JobId:
    jid = job_id(name)
    store.create_job(jid, name, {"entrypoint": "/nowhere/app.py"}, {})
    att = store.start_attempt(jid, Owner("nowhere", 1, "x"), 86_400.0, AttemptNo(0)).attempt
    for n in range(epochs):
        cv = ControlVersion(store.get_job(jid).control_version)
        store.pin_epoch(jid, Epoch(n), att, cv)
        store.decide_epoch(jid, Epoch(n), att, 100, False)
        store.mark_epoch_committed(jid, Epoch(n))
        store.set_epoch_metrics(jid, Epoch(n), duration_ms=400.0, backlog=7)
    if end:
        store.finish_attempt(jid, att, AttemptState.FINISHED, JobState.FINISHED)
    return jid


def _clone(path: Path, template: JobId, prefix: str, n: int) -> None:
    """``n`` copies of ``template``'s rows (job, control versions, attempts, epochs)."""
    db = sqlite3.connect(path)
    try:
        for table in ("jobs", "control_versions", "attempts", "epochs"):
            cur = db.execute(f"SELECT * FROM {table} WHERE job_id = ?", (template,))
            cols = [d[0] for d in cur.description]
            rows = cur.fetchall()
            out = []
            for i in range(n):
                new = f"{prefix}-{i:05d}"
                for r in rows:
                    row = dict(zip(cols, r, strict=True))
                    row["job_id"] = new
                    if table == "jobs":
                        row["name"] = new
                        row["uid"] = f"uid-{new}"
                    out.append(tuple(row[c] for c in cols))
            marks = ", ".join("?" for _ in cols)
            db.executemany(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({marks})", out)
        # What the janitor and the counters would hold had these jobs run.
        db.execute("UPDATE jobs SET resolved_at = updated_at WHERE state = 'FINISHED'")
        db.execute(
            "UPDATE counters SET value = (SELECT COUNT(*) FROM attempts) WHERE name = 'attempts'"
        )
        db.execute(
            "UPDATE counters SET value = (SELECT COUNT(*) FROM epochs WHERE state = 'COMMITTED')"
            " WHERE name = 'epochs_committed'"
        )
        db.commit()
    finally:
        db.close()


def fill(path: Path, jobs: int, live: int, epochs: int) -> None:
    store = open_store(path)
    try:
        a = _template(store, "live-tpl", epochs, end=False)
        b = _template(store, "done-tpl", epochs, end=True)
    finally:
        store.close()
    _clone(path, a, "live", live - 1)
    _clone(path, b, "done", jobs - live - 1)


def _base_module(commit: str) -> types.ModuleType:
    """``stoker/server/metrics.py`` as it was at ``commit``, as a module of its own."""
    src = subprocess.run(
        ["git", "show", f"{commit}:stoker/server/metrics.py"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    mod = types.ModuleType("base_metrics")
    sys.modules["base_metrics"] = mod  # dataclasses look their module up
    exec(compile(src, f"{commit}:stoker/server/metrics.py", "exec"), mod.__dict__)
    return mod


def _scraper(mod: types.ModuleType, manager: JobManager) -> Callable[[], bytes]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(mod.StokerCollector(manager, None, mod.Histogram(), RescaleTally()))
    return lambda: bytes(mod.exposition(registry)[0])  # each version's own text writer


def _times(fn: Callable[[], bytes], n: int) -> tuple[list[float], list[float], int]:
    """Wall and CPU (this thread's) milliseconds of ``n`` calls, and the last one's bytes."""
    wall, cpu, size = [], [], 0
    for _ in range(n):
        t, c = time.perf_counter(), time.thread_time()
        size = len(fn())
        cpu.append((time.thread_time() - c) * 1000)
        wall.append((time.perf_counter() - t) * 1000)
    return wall, cpu, size


def p99(xs: list[float]) -> float:
    return statistics.quantiles(xs, n=100, method="inclusive")[98] if len(xs) > 1 else xs[0]


def _ticks(
    sup: Supervisor, seconds: float, scrape: Callable[[], bytes] | None, every: float
) -> list[float]:
    stop = threading.Event()

    def scrape_loop() -> None:
        assert scrape is not None
        while not stop.is_set():
            t = time.monotonic()
            scrape()
            stop.wait(max(0.0, every - (time.monotonic() - t)))

    th = threading.Thread(target=scrape_loop, daemon=True) if scrape else None
    if th:
        th.start()
    out: list[float] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t = time.perf_counter()
        sup.step()
        out.append((time.perf_counter() - t) * 1000)
        time.sleep(0.2)
    stop.set()
    if th:
        th.join()
    return out


def main() -> None:
    ap = C.arg_parser(__doc__ or "")
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--live", type=int, default=100)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--scrapes", type=int, default=60)
    ap.add_argument("--base", default="3c06911")
    ap.add_argument("--base-scrapes", type=int, default=3)
    ap.add_argument("--tick-seconds", type=float, default=60.0)
    ap.add_argument("--every", type=float, default=5.0)
    args = ap.parse_args()
    info = C.machine()
    C.print_machine(info)
    C.quiet_stoker_logs()
    result: dict[str, Any] = {"machine": info, "args": vars(args)}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "store.db"
        t0 = time.perf_counter()
        fill(path, args.jobs, args.live, args.epochs)
        print(f"filled {args.jobs} jobs ({args.live} live) in {time.perf_counter() - t0:.1f}s")
        store = open_store(path)
        manager = JobManager(store, Path(tmp) / "state", [Path(tmp)])
        try:
            assert len(store.list_live_jobs()) == args.live
            new = _scraper(new_metrics, manager)
            base = _scraper(_base_module(args.base), manager)
            rows = []
            for label, fn, n in (
                ("this tree", new, args.scrapes),
                (args.base, base, args.base_scrapes),
            ):
                if n <= 0:
                    continue
                # The first scrape is a manager's start: it folds every live job's epochs
                # and counts the ended owners' rescales once; timed apart.
                first, _cpu, _size = _times(fn, 1)
                times, cpu, size = _times(fn, n)
                print(f"{label}: first scrape {first[0]:,.0f} ms")
                result[label] = {
                    "first_ms": first[0],
                    "p50_ms": statistics.median(times),
                    "p99_ms": p99(times),
                    "cpu_p50_ms": statistics.median(cpu),
                    "cpu_p99_ms": p99(cpu),
                    "bytes": size,
                }
                rows.append(
                    (
                        label,
                        n,
                        C.fmt(statistics.median(times)),
                        C.fmt(p99(times)),
                        C.fmt(statistics.median(cpu)),
                        C.fmt(p99(cpu)),
                        f"{size:,}",
                    )
                )
                print(rows[-1])
            print(C.table(("scrape", "n", "p50 ms", "p99 ms", "CPU p50", "CPU p99", "bytes"), rows))
            if args.tick_seconds > 0:
                cfg = SupervisorConfig(
                    state_dir=Path(tmp) / "state",
                    store_url=f"sqlite:///{path}",
                    launch_grace=1e9,
                    tick=0.2,
                )
                sup = Supervisor(store, cfg, _Nowhere())  # type: ignore[arg-type]
                sup.step()  # take the lease, first sweeps
                ticks = []
                phases: list[tuple[str, Callable[[], bytes] | None]] = [
                    ("no scraper", None),
                    ("this tree", new),
                ]
                if args.base_scrapes > 0:  # 0: this tree alone (the base takes a minute)
                    phases.append((args.base, base))
                for label, scrape in phases:
                    times = _ticks(sup, args.tick_seconds, scrape, args.every)
                    result[f"tick {label}"] = {
                        "n": len(times),
                        "p50_ms": statistics.median(times),
                        "p99_ms": p99(times),
                    }
                    ticks.append(
                        (
                            label,
                            len(times),
                            C.fmt(statistics.median(times), 2),
                            C.fmt(p99(times), 2),
                        )
                    )
                    print(ticks[-1])
                print(
                    C.table(
                        (f"tick, scraping every {args.every:g}s", "n", "p50 ms", "p99 ms"), ticks
                    )
                )
        finally:
            manager.close()
            store.close()
    C.write_json(args.json, result)


if __name__ == "__main__":
    main()
