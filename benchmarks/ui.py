"""The web UI's cost: page load of /ui/jobs with 200 jobs, the job manager's CPU with 10
browsers following the live table, and the submit latency (issue 3's burst) with the UI
open vs closed, in one run.

    python benchmarks/ui.py [--jobs 200] [--clients 10] [--runs 5] [--json out.json]

One ``stoker server --api-only`` on a SQLite store (jobs are stored, no driver starts: the
figures are the manager's, not Spark's). The jobs are submitted through ``POST /v1/jobs``.
Browsers: Debian's chromium driven by Playwright, each page a tab of one browser process
polling the table every 2 s as a person's would. CPU is the server process's own (utime +
stime from /proc) over a window; the load average is printed with every figure.

``--pin`` (the default on a machine of 2 or more cores): the browsers run on the last core,
the job manager and the submitting clients on the others, in both phases, as browsers on
their users' own machines would; the submit figures then compare the manager with and without
the UI's requests, not with and without 10 tabs rendering on its cores. ``--no-pin`` shares
every core (both are worth printing: the second is the worst case of a browser beside the
manager).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
from _common import arg_parser, start_manager, write_json
from submit_latency import burst_raw, pct

CLK_TCK = os.sysconf("SC_CLK_TCK")
SUBMIT_CLIENTS = 64


def cpu_seconds(pid: int) -> float:
    """utime + stime of one process, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def cpu_share(pid: int, seconds: float) -> float:
    """The process's CPU use over the next ``seconds``, as a share of one core."""
    c0, t0 = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    return (cpu_seconds(pid) - c0) / (time.monotonic() - t0)


def pin_tree(pid: int, cpus: set[int]) -> None:
    """Every thread of ``pid`` and of its descendants onto ``cpus`` (children forked later
    inherit it from their parent's thread)."""
    todo, seen = [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            for tid in os.listdir(f"/proc/{p}/task"):
                with contextlib.suppress(OSError):  # a thread that ended meanwhile
                    os.sched_setaffinity(int(tid), cpus)
                children = Path(f"/proc/{p}/task/{tid}/children")
                if children.exists():
                    todo.extend(int(c) for c in children.read_text().split())
        except FileNotFoundError:
            pass


def chromium_pids() -> list[int]:
    """The pids of every chromium process on the machine (diffed around a launch)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            comm = Path(f"/proc/{entry}/comm").read_text().strip()
        except OSError:
            continue
        if comm.startswith("chrom"):
            out.append(int(entry))
    return out


def load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def submit_jobs(url: str, app: Path, n: int) -> None:
    with httpx.Client(base_url=url, timeout=60) as c:
        for i in range(n):
            r = c.post("/v1/jobs", json={"job_id": f"ui-bench-{i:04d}", "entrypoint": str(app)})
            assert r.status_code in (200, 201), r.text


def page_load(browser: Any, url: str, jobs: int) -> float:
    """Seconds from navigation to the jobs table showing every job (a fresh context: no
    cache, as a first visit)."""
    ctx = browser.new_context()
    try:
        page = ctx.new_page()
        t0 = time.perf_counter()
        page.goto(f"{url}/ui/jobs", wait_until="commit")
        page.wait_for_function(
            "n => document.querySelectorAll('#jobs-table tbody tr').length >= n",
            arg=jobs,
            timeout=120_000,
        )
        return time.perf_counter() - t0
    finally:
        ctx.close()


def fragment_ms(url: str, n: int = 20) -> float:
    """Median server time of the table fragment alone (its 1 s cache defeated by a pause)."""
    out = []
    with httpx.Client(base_url=url, timeout=60) as c:
        for _ in range(n):
            time.sleep(1.05)
            t0 = time.perf_counter()
            assert c.get("/ui/f/jobs").status_code == 200
            out.append((time.perf_counter() - t0) * 1000)
    return statistics.median(out)


SETTLE_S = 6.0  # three polls of every tab after the last one loaded: a steady state


def followers(
    browser: Any, url: str, n: int, jobs: int, statuses: dict[int, int] | None = None
) -> list[Any]:
    """``n`` pages following the live jobs table, settled; ``statuses`` counts the table
    polls' answers by HTTP status (200: a new table; 204: unchanged, nothing swapped)."""
    ctxs = []
    for _ in range(n):
        ctx = browser.new_context()
        page = ctx.new_page()
        if statuses is not None:

            def count(resp: Any) -> None:
                if "/ui/f/jobs" in resp.url:
                    statuses[resp.status] = statuses.get(resp.status, 0) + 1

            page.on("response", count)
        page.goto(f"{url}/ui/jobs")
        page.wait_for_function(
            "n => document.querySelectorAll('#jobs-table tbody tr').length >= n",
            arg=jobs,
            timeout=120_000,
        )
        ctxs.append(ctx)
    time.sleep(SETTLE_S)
    return ctxs


def _burst(url: str, make: Any) -> list[float]:
    """issue 3's raw burst, in a thread of its own (Playwright's sync API holds an event loop
    in this one)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(burst_raw, [url], SUBMIT_CLIENTS, make).result()


BURSTS = 3  # per kind and round: 192 calls of each kind per round


def submit_round(url: str, app: Path, tag: str) -> dict[str, float]:
    """Bursts of 64 concurrent submissions of one id and of 64 distinct ids, alternating
    (ms; percentiles over the round's calls)."""
    a: list[float] = []
    b: list[float] = []
    for k in range(BURSTS):
        same = {"job_id": f"same-{tag}-{k}", "entrypoint": str(app)}
        a += _burst(url, lambda i, same=same: ("POST", "/v1/jobs", same))
        b += _burst(
            url,
            lambda i, k=k: (
                "POST",
                "/v1/jobs",
                {"job_id": f"d-{tag}-{k}-{i}", "entrypoint": str(app)},
            ),
        )
    return {
        "same_p50": pct(a, 50) * 1000,
        "same_p99": pct(a, 99) * 1000,
        "distinct_p50": pct(b, 50) * 1000,
        "distinct_p99": pct(b, 99) * 1000,
    }


def main() -> None:
    ap = arg_parser(__doc__ or "")
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--window", type=float, default=20.0, help="seconds of each CPU reading")
    ap.add_argument(
        "--pin",
        action=argparse.BooleanOptionalAction,
        default=(os.cpu_count() or 1) >= 2,
        help="browsers on the last core, the manager and the clients on the others",
    )
    args = ap.parse_args()
    chromium = shutil.which("chromium")
    if chromium is None:
        raise SystemExit("needs Debian's chromium (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    ncpu = os.cpu_count() or 1
    browser_cpus, manager_cpus = {ncpu - 1}, set(range(ncpu - 1)) or {0}
    print(
        f"load average at start {load()}, {ncpu} cpus, "
        + (
            f"browsers on cpu {browser_cpus}, manager and clients on {manager_cpus}"
            if args.pin
            else "every process on every cpu"
        )
    )
    out: dict[str, Any] = {
        "jobs": args.jobs,
        "clients": args.clients,
        "runs": args.runs,
        "pinned": args.pin,
    }
    if args.pin:
        pin_tree(os.getpid(), manager_cpus)  # the submitting clients run in this process
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
        work = Path(tmp)
        allow = work / "apps"
        allow.mkdir()
        app = allow / "app.py"
        app.write_text("from stoker import Pipeline\n")
        proc, url = start_manager(f"sqlite:///{work / 'store.db'}", work / "m", allow, "--api-only")
        before = set(chromium_pids())
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        if args.pin:
            pin_tree(proc.pid, manager_cpus)
            for pid in set(chromium_pids()) - before:
                pin_tree(pid, browser_cpus)  # its tabs' renderers fork from these
        try:
            submit_jobs(url, app, args.jobs)
            page_load(browser, url, args.jobs)  # warm-up, not counted
            loads = [page_load(browser, url, args.jobs) for _ in range(args.runs)]
            out["page_load_s"] = loads
            out["fragment_ms"] = fragment_ms(url)
            print(
                f"page load /ui/jobs ({args.jobs} jobs, to the table shown): median "
                f"{statistics.median(loads):.3f} s of {[round(x, 3) for x in loads]}; "
                f"table fragment alone {out['fragment_ms']:.1f} ms; load {load()}"
            )

            idle = [cpu_share(proc.pid, args.window) for _ in range(args.runs)]
            print(f"server CPU, no browser: median {statistics.median(idle):.1%}; load {load()}")
            polls: dict[int, int] = {}
            ctxs = followers(browser, url, args.clients, args.jobs, polls)
            busy = [cpu_share(proc.pid, args.window) for _ in range(args.runs)]
            out["table_polls"] = dict(polls)
            print(f"table polls answered, by status: {polls} (204: unchanged, not swapped)")
            print(
                f"server CPU, {args.clients} browsers following: median "
                f"{statistics.median(busy):.1%} of one core; load {load()}"
            )
            out["cpu_idle"], out["cpu_followed"] = idle, busy

            # Submit latency, UI open and closed alternating in one run (drift hits both).
            rounds: dict[str, list[dict[str, float]]] = {"open": [], "closed": []}
            for r in range(args.runs):
                rounds["open"].append(submit_round(url, app, f"open{r}"))
                for c in ctxs:
                    c.close()
                ctxs = []
                time.sleep(2)
                rounds["closed"].append(submit_round(url, app, f"closed{r}"))
                if r < args.runs - 1:
                    ctxs = followers(browser, url, args.clients, args.jobs)
            out["submit"] = rounds
            print(f"\nsubmit latency, {SUBMIT_CLIENTS} concurrent clients, medians of {args.runs}")
            print("call           UI closed p50/p99 ms   UI open p50/p99 ms   ratio p50 / p99")
            for kind in ("same", "distinct"):
                med = {
                    s: {
                        q: statistics.median(x[f"{kind}_{q}"] for x in rounds[s])
                        for q in ("p50", "p99")
                    }
                    for s in rounds
                }
                out[f"submit_{kind}"] = med
                print(
                    f"{kind + ' id' + ('s' if kind == 'distinct' else ''):14} "
                    f"{med['closed']['p50']:8.1f} / {med['closed']['p99']:6.1f}      "
                    f"{med['open']['p50']:8.1f} / {med['open']['p99']:6.1f}      "
                    f"{med['open']['p50'] / med['closed']['p50']:.2f}x / "
                    f"{med['open']['p99'] / med['closed']['p99']:.2f}x"
                )
            print(f"load average at end {load()}")
        finally:
            browser.close()
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
    write_json(args.json, out)


if __name__ == "__main__":
    main()
