"""``GET /v1/jobs`` at 10,000 jobs (issue 21, item 9): a page of 100 against the whole list.

A SQLite store is filled with ``--jobs`` job records (``--live`` RUNNING, the rest FINISHED)
through the store's own calls; a real ``stoker server`` (leading: its supervisor ticks beside
the API) serves it on loopback; once its janitor has resolved the ended jobs it found (a new
leader's first minute), in alternating order so that both see the same machine,
``--reads`` times each:

* **page**: ``GET /v1/jobs?limit=100``, the first page (what a UI or a script pages through);
* **whole list**: every job, following ``X-Next-Cursor`` through pages of 1,000 (what the
  unpaginated ``GET /v1/jobs`` answered in one go before).

Then ``--page-reads`` first pages one after the other, alone: a whole-list read leaves
megabytes of objects behind, and the garbage collection it triggers lands in the next read,
which is the alternating phase's page read; the goal is about a page read on a manager that
serves pages.

The issue's goal is ``GET /v1/jobs?limit=100`` p99 <= 50 ms at 10,000 jobs.

Run: ``python benchmarks/list_jobs.py [--jobs 10000] [--live 100] [--reads 200]
[--page-reads 300] [--json F]``.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common as C
import httpx
from live_jobs import fill, p99

from stoker.store import open_store


def _unresolved(db: Path) -> int:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        (n,) = conn.execute(
            "SELECT count(*) FROM jobs WHERE state = 'FINISHED' AND resolved_at IS NULL"
        ).fetchone()
        return int(n)
    finally:
        conn.close()


def main() -> None:
    ap = C.arg_parser(__doc__ or "")
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--live", type=int, default=100)
    ap.add_argument("--reads", type=int, default=200)
    ap.add_argument("--page-reads", type=int, default=300)
    args = ap.parse_args()
    info = C.machine()
    C.print_machine(info)
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "store.db"
        store = open_store(f"sqlite:///{db}")
        t0 = time.perf_counter()
        fill(store, args.jobs, args.live)
        store.close()
        print(f"filled {args.jobs} jobs ({args.live} live) in {time.perf_counter() - t0:.1f}s")
        port = C.free_port()
        server = subprocess.Popen(
            [sys.executable, "-m", "stoker.cli", "server", "--port", str(port),
             "--state-dir", str(Path(tmp) / "state"), "--store", f"sqlite:///{db}",
             "--insecure-no-token"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
            cwd=tmp,
        )  # fmt: skip
        page: list[float] = []
        whole: list[float] = []
        alone: list[float] = []
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as http:
                deadline = time.monotonic() + 120
                while True:
                    try:
                        if http.get("/healthz").status_code == 200:
                            break
                    except httpx.HTTPError:
                        pass
                    if time.monotonic() > deadline:
                        raise SystemExit("the server did not come up")
                    time.sleep(0.2)

                def first_page() -> int:
                    r = http.get("/v1/jobs", params={"limit": 100})
                    assert r.status_code == 200, r.text
                    return len(r.json())

                def every_job() -> int:
                    n, params = 0, {"limit": 1000}
                    while True:
                        r = http.get("/v1/jobs", params=params)
                        assert r.status_code == 200, r.text
                        n += len(r.json())
                        cursor = r.headers.get("X-Next-Cursor")
                        if not cursor:
                            return n
                        params = {"limit": 1000, "after": cursor}

                # Steady state: a new leader's janitor first resolves every ended job it has
                # never seen (10,000 store writes here, about a minute); measured after that.
                t_settle = time.perf_counter()
                deadline = time.monotonic() + 600
                while _unresolved(db) and time.monotonic() < deadline:
                    time.sleep(1.0)
                print(f"janitor settled in {time.perf_counter() - t_settle:.0f}s")
                assert first_page() == 100 and every_job() == args.jobs
                order = ((page, first_page), (whole, every_job))
                for i in range(args.reads):
                    for times, read in order if i % 2 == 0 else order[::-1]:
                        t = time.perf_counter()
                        read()
                        times.append((time.perf_counter() - t) * 1000)
                for _ in range(args.page_reads):
                    t = time.perf_counter()
                    first_page()
                    alone.append((time.perf_counter() - t) * 1000)
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=30)
    rows = [
        ["GET /v1/jobs?limit=100", C.fmt(statistics.median(page), 2), C.fmt(p99(page), 2)],
        ["every job (pages of 1,000)", C.fmt(statistics.median(whole), 2), C.fmt(p99(whole), 2)],
    ]
    if len(alone) >= 2:
        med, tail = C.fmt(statistics.median(alone), 2), C.fmt(p99(alone), 2)
        rows.append(["GET /v1/jobs?limit=100, alone", med, tail])
    print(C.table(["read", "median ms", "p99 ms"], rows))
    ratio = statistics.median(whole) / statistics.median(page)
    print(f"whole list / one page (medians): {ratio:.1f}x; goal: page p99 <= 50 ms")
    C.write_json(
        args.json,
        {
            "machine": info,
            "jobs": args.jobs,
            "live": args.live,
            "page_ms": page,
            "all_ms": whole,
            "page_alone_ms": alone,
        },
    )


if __name__ == "__main__":
    main()
