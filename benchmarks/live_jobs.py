"""The leader's tick at 10,000 jobs (issue 21, item 9): what its read of the job rows costs.

A store (SQLite; ``--pg`` for a throwaway PostgreSQL) is filled with ``--jobs`` job records,
``--live`` of them RUNNING and the rest FINISHED, through the store's own calls. Then, in
alternating order so that both see the same machine, the tick's read is timed ``--reads``
times each way:

* **before**: ``list_jobs(kind=None)``, every record the store keeps (what the tick read);
* **after**: ``list_live_jobs()``, the records not ended, through the ``jobs_by_state`` index.

The issue's goal is a leader tick p99 <= 20 ms at 10,000 jobs with 100 live; the read is
most of a tick with nothing to do (the rest is a lease renewal every third of its TTL).

Run: ``python benchmarks/live_jobs.py [--jobs 10000] [--live 100] [--pg] [--json out.json]``.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import _common as C

from stoker.store import NewJob, Store, open_store
from stoker.types import JobState, job_id

SPEC = {"kind": "app", "entrypoint": "/srv/app.py", "args": [], "conf": {"stoker.trigger": "1s"}}


def fill(store: Store, jobs: int, live: int) -> None:
    """``jobs`` records, ``live`` RUNNING (spread through the table), the rest FINISHED."""
    step = max(1, jobs // max(1, live))
    batch: list[NewJob] = []
    for n in range(jobs):
        batch.append((job_id(f"job-{n:05d}"), f"job-{n:05d}", SPEC, {}))
        if len(batch) == 1000:
            store.create_jobs(batch)
            batch = []
    if batch:
        store.create_jobs(batch)
    for n in range(jobs):
        jid = job_id(f"job-{n:05d}")
        store.set_job_state(jid, JobState.RUNNING)
        if n % step or n // step >= live:
            store.set_job_state(jid, JobState.FINISHED)


def p99(xs: list[float]) -> float:
    return statistics.quantiles(xs, n=100)[98]


def main() -> None:
    ap = C.arg_parser(__doc__ or "")
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--live", type=int, default=100)
    ap.add_argument("--reads", type=int, default=300)
    ap.add_argument("--pg", action="store_true")
    args = ap.parse_args()
    info = C.machine()
    C.print_machine(info)
    with tempfile.TemporaryDirectory() as tmp:
        if args.pg:
            from tests.pg import ThrowawayPostgres

            server = ThrowawayPostgres().start()
            url = server.create_database("live_jobs")
        else:
            server = None
            url = f"sqlite:///{Path(tmp) / 'store.db'}"
        store = open_store(url)
        try:
            t0 = time.perf_counter()
            fill(store, args.jobs, args.live)
            print(f"filled {args.jobs} jobs ({args.live} live) in {time.perf_counter() - t0:.1f}s")
            assert len(store.list_live_jobs()) == args.live
            assert len(store.list_jobs(kind=None)) == args.jobs
            before: list[float] = []
            after: list[float] = []

            def every() -> object:
                return store.list_jobs(kind=None)

            order = ((before, every), (after, store.list_live_jobs))
            for i in range(args.reads):
                for times, read in order if i % 2 == 0 else order[::-1]:
                    t = time.perf_counter()
                    read()
                    times.append((time.perf_counter() - t) * 1000)
        finally:
            store.close()
            if server is not None:
                server.stop()
    rows = [
        ["every record (before)", C.fmt(statistics.median(before), 2), C.fmt(p99(before), 2)],
        ["live records (after)", C.fmt(statistics.median(after), 2), C.fmt(p99(after), 2)],
    ]
    print(C.table(["tick's read", "median ms", "p99 ms"], rows))
    ratio = statistics.median(before) / statistics.median(after)
    print(f"before / after (medians): {ratio:.1f}x; goal: tick p99 <= 20 ms")
    C.write_json(
        args.json,
        {
            "machine": info,
            "jobs": args.jobs,
            "live": args.live,
            "before_ms": before,
            "after_ms": after,
        },
    )


if __name__ == "__main__":
    main()
