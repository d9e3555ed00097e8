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
import asyncio
import gc
import json
import os
import signal
import tempfile
import threading
import time
from pathlib import Path

import httpx
from _common import start_manager

REPO = Path(__file__).resolve().parent.parent


def burst(urls: list[str], clients: int, make_call) -> list[float]:
    """``clients`` threads, each with its own httpx connection, released at once."""
    gate = threading.Barrier(clients)
    out: list[float] = []
    lock = threading.Lock()

    def one(i: int) -> None:
        with httpx.Client(base_url=urls[i % len(urls)], timeout=30) as c:
            c.get("/healthz")  # connect before the gate: measure requests, not TCP set-up
            gate.wait()
            t0 = time.perf_counter()
            method, path, body = make_call(i)
            resp = c.request(method, path, json=body)
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


def _request_bytes(host: str, method: str, path: str, body: dict | None) -> bytes:
    data = b"" if body is None else json.dumps(body).encode()
    head = f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {len(data)}\r\n"
    if body is not None:
        head += "Content-Type: application/json\r\n"
    return head.encode() + b"\r\n" + data


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return status, await reader.readexactly(length)


async def _burst_raw(urls: list[str], clients: int, make_call) -> list[float]:
    conns = []
    for i in range(clients):
        u = httpx.URL(urls[i % len(urls)])
        reader, writer = await asyncio.open_connection(u.host, u.port)
        writer.write(_request_bytes(u.host, "GET", "/healthz", None))  # warm the connection
        await writer.drain()
        await _read_response(reader)
        conns.append((reader, writer, _request_bytes(u.host, *make_call(i))))

    async def one(reader, writer, data: bytes) -> float:
        t0 = time.perf_counter()
        writer.write(data)
        status, body = await _read_response(reader)
        dt = time.perf_counter() - t0
        assert status in (200, 201), body
        writer.close()
        return dt

    return list(await asyncio.gather(*(one(*c) for c in conns)))


def burst_raw(urls: list[str], clients: int, make_call) -> list[float]:
    """``clients`` keep-alive connections in one event loop, requests pre-encoded, sent at
    once: the client's own cost per request is a few microseconds, so the figure is the
    servers' (a thread per client in Python adds its own queueing for the GIL)."""
    gc.collect()
    gc.disable()  # a collection in the client would be charged to the servers
    try:
        return asyncio.run(_burst_raw(urls, clients, make_call))
    finally:
        gc.enable()


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(p / 100 * (len(xs) - 1)))]


def measure(store: str, label: str, rounds: int, clients: int, work: Path, shoot) -> list[dict]:
    allow = work / "apps"
    allow.mkdir(parents=True, exist_ok=True)
    app = allow / "app.py"
    app.write_text("from stoker import Pipeline\n")
    servers = [start_manager(store, work / f"m{i}", allow, "--api-only") for i in range(2)]
    urls = [u for _, u in servers]
    kinds = ("healthz", "same id", "distinct ids")
    lat: dict[str, list[float]] = {k: [] for k in kinds}
    round_p99: dict[str, list[float]] = {k: [] for k in kinds}
    try:
        # Round -1 warms each server up (first request through every code path) and is not
        # counted; the kinds alternate within each round, so drift hits them alike.
        for r in range(-1, rounds):
            for kind in kinds:
                if kind == "healthz":
                    make = lambda i: ("GET", "/healthz", None)  # noqa: E731
                elif kind == "same id":
                    body = {"job_id": f"same-{label}-{r + 1}", "entrypoint": str(app)}
                    make = lambda i, body=body: ("POST", "/v1/jobs", body)  # noqa: E731
                else:
                    make = lambda i, r=r: (  # noqa: E731
                        "POST",
                        "/v1/jobs",
                        {"job_id": f"d-{label}-{r + 1}-{i}", "entrypoint": str(app)},
                    )
                calls = shoot(urls, clients, make)
                if r >= 0:
                    lat[kind] += calls
                    round_p99[kind].append(pct(calls, 99) * 1000)
        rows = [
            {
                "store": label,
                "call": kind,
                "n": len(lat[kind]),
                "p50_ms": pct(lat[kind], 50) * 1000,
                "p99_ms": pct(lat[kind], 99) * 1000,
                "max_ms": max(lat[kind]) * 1000,
                "round_p99_ms": round_p99[kind],
            }
            for kind in kinds
        ]
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
    ap.add_argument(
        "--client",
        choices=("raw", "httpx"),
        default="raw",
        help="raw: one asyncio loop, pre-encoded requests (default); httpx: a thread per client",
    )
    ap.add_argument("--store", choices=("sqlite", "postgres", "both"), default="both")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    shoot = burst_raw if args.client == "raw" else burst
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if args.store in ("sqlite", "both"):
            rows += measure(
                f"sqlite:///{work / 'store.db'}",
                "sqlite",
                args.rounds,
                args.clients,
                work / "sqlite",
                shoot,
            )
        if args.store in ("postgres", "both"):
            from tests.pg import ThrowawayPostgres

            with ThrowawayPostgres() as pg:
                rows += measure(pg.dsn, "postgres", args.rounds, args.clients, work / "pg", shoot)
    print(
        f"\n{args.clients} concurrent clients ({args.client}), 2 managers per store, "
        f"{args.rounds} rounds"
    )
    print(
        f"{'store':<9} {'call':<13} {'n':>5} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} "
        f"{'p99/healthz':>12}  p99 by round"
    )
    for r in rows:
        by_round = " ".join(f"{x:.0f}" for x in r["round_p99_ms"])
        print(
            f"{r['store']:<9} {r['call']:<13} {r['n']:>5} {r['p50_ms']:>8.1f} "
            f"{r['p99_ms']:>8.1f} {r['max_ms']:>8.1f} {r['p99_vs_healthz']:>12.2f}  {by_round}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
