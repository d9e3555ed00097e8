"""Submit latency of the job manager: 64 concurrent clients, one id and distinct ids,
SQLite and PostgreSQL stores, two manager processes on one store.

Baseline in the same run: GET /healthz under the same concurrency (the HTTP floor of the same
servers), so the ratio shows what a submission adds on top of serving a request.

    python benchmarks/submit_latency.py [--rounds 5] [--clients 64] [--json out.json]

The servers run with --api-only: submissions are stored, no driver is started (a dispatch
would start 64 Spark drivers on a 2-core machine and measure Spark, not the manager).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import tempfile
import threading
import time
from pathlib import Path

import httpx
from _common import start_manager

REPO = Path(__file__).resolve().parent.parent


def burst(urls: list[str], clients: int, make_call) -> list[float]:
    """``clients`` threads, each with its own connection, released at once; their latencies."""
    gate = threading.Barrier(clients)
    out: list[float] = []
    lock = threading.Lock()

    def one(i: int) -> None:
        with httpx.Client(base_url=urls[i % len(urls)], timeout=30) as c:
            c.get("/healthz")  # connect before the gate: measure requests, not TCP set-up
            gate.wait()
            t0 = time.perf_counter()
            resp = make_call(c, i)
            dt = time.perf_counter() - t0
            assert resp.status_code in (200, 201), resp.text
            with lock:
                out.append(dt)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(p / 100 * (len(xs) - 1)))]


def measure(store: str, label: str, rounds: int, clients: int, work: Path) -> list[dict]:
    allow = work / "apps"
    allow.mkdir(parents=True, exist_ok=True)
    app = allow / "app.py"
    app.write_text("from stoker import Pipeline\n")
    servers = [start_manager(store, work / f"m{i}", allow, "--api-only") for i in range(2)]
    urls = [u for _, u in servers]
    rows = []
    try:
        for kind in ("healthz", "same id", "distinct ids"):
            lat: list[float] = []
            for r in range(rounds):
                if kind == "healthz":
                    calls = burst(urls, clients, lambda c, i: c.get("/healthz"))
                elif kind == "same id":
                    jid = f"same-{label}-{r}"
                    calls = burst(
                        urls,
                        clients,
                        lambda c, i, jid=jid: c.post(
                            "/v1/jobs", json={"job_id": jid, "entrypoint": str(app)}
                        ),
                    )
                else:
                    calls = burst(
                        urls,
                        clients,
                        lambda c, i, r=r: c.post(
                            "/v1/jobs",
                            json={"job_id": f"d-{label}-{r}-{i}", "entrypoint": str(app)},
                        ),
                    )
                lat += calls
            rows.append(
                {
                    "store": label,
                    "call": kind,
                    "n": len(lat),
                    "p50_ms": pct(lat, 50) * 1000,
                    "p99_ms": pct(lat, 99) * 1000,
                    "median_ms": statistics.median(lat) * 1000,
                }
            )
    finally:
        for proc, _ in servers:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
    base = next(r for r in rows if r["call"] == "healthz")
    for r in rows:
        r["p99_vs_healthz"] = r["p99_ms"] / base["p99_ms"]
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        rows += measure(
            f"sqlite:///{work / 'store.db'}", "sqlite", args.rounds, args.clients, work / "sqlite"
        )
        from stoker.testing_pg import ThrowawayPostgres

        with ThrowawayPostgres() as pg:
            rows += measure(pg.dsn, "postgres", args.rounds, args.clients, work / "pg")
    print(f"\n{args.clients} concurrent clients, 2 managers per store, {args.rounds} rounds")
    print(f"{'store':<9} {'call':<13} {'n':>5} {'p50 ms':>8} {'p99 ms':>8} {'p99/healthz':>12}")
    for r in rows:
        print(
            f"{r['store']:<9} {r['call']:<13} {r['n']:>5} {r['p50_ms']:>8.1f} "
            f"{r['p99_ms']:>8.1f} {r['p99_vs_healthz']:>12.2f}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
