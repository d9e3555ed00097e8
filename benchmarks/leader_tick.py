"""The leader's tick, whole, at 10,000 jobs (issue 39 item 3), and ``GET /v1/jobs?limit=100``.

A SQLite store gets ``--jobs`` jobs. ``--live`` of them are managed jobs (spec kind ``app``)
RUNNING with real attempts: each is started and held by a small Python process of its own
(``--renew`` mode of this script) that makes its attempt through the store, as ``stoker run``
does, and renews its lease every third of ``--lease-ttl`` the way a driver's lease keeper
does; no Spark. The others ended: managed jobs FINISHED, resolved and settled (what the
janitor leaves behind), and a share ``--run-share`` of ``stoker run`` jobs (no spec kind:
their runner resolved them, the janitor does not clean them), each with an attempt and
``--epochs`` committed epochs, copied row by row into the file from a template made through
the store's calls.

Then, in this process as ``stoker server`` runs them: a :class:`Supervisor` on its own thread
and store connection (the real launcher: it re-adopts the running drivers, as after a manager's
restart), and the REST API served by uvicorn on another thread. Each call of the supervisor's
``step()`` (the whole tick: lease, retention, operations, janitor, the live jobs, standbys,
upgrades, clusters) is timed by a wrapper on the instance, for ``--seconds``:

* **alone**: the tick with nothing else asking;
* **listing**: the same while a client process calls ``GET /v1/jobs?limit=100`` back to back
  (a pause of ``--list-every`` s between calls); the client times each call.

The issue's goal: tick p99 <= 20 ms and list p99 <= 50 ms on a quiet machine. The load average
is printed at the start and end of each phase.

``--upgrade N``: instead, the first ticks after an upgrade over ``N`` unsettled ended jobs (as
a store migrated from before settling has them: half a manager's, no driver ever ran, owed a
resolution; half ``stoker run``'s, resolved by their runners): the supervisor stepped by hand
every 0.2 s until every one of the manager's is resolved: the first tick, the longest, and
how many ticks it took.

Run: ``python benchmarks/leader_tick.py [--jobs 10000] [--live 100] [--run-share 0.5]
[--seconds 60] [--json F]``. To measure an older tree, copy this file into a checkout of it
and run it there (it uses only calls that older trees have).
"""

from __future__ import annotations

import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import _common as C

from stoker.store import NewJob, Store, open_store
from stoker.store.records import Owner
from stoker.types import AttemptNo, AttemptState, ControlVersion, Epoch, JobId, JobState, job_id

MANAGED = {"kind": "app", "entrypoint": "/nowhere/app.py", "args": [], "config": {}}
RUN = {"entrypoint": "/srv/pipeline.py", "sources": [], "sinks": []}  # `stoker run`: no kind


# filling ----------------------------------------------------------------------------------
def _template(store: Store, name: str, spec: dict[str, Any], epochs: int) -> JobId:
    """An ended job with one attempt (its process long gone) and ``epochs`` committed epochs."""
    jid = job_id(name)
    store.create_job(jid, name, spec, {})
    gone = Owner("nowhere", 4_000_000, "0")
    att = store.start_attempt(jid, gone, 86_400.0, AttemptNo(0)).attempt
    for n in range(epochs):
        cv = ControlVersion(store.get_job(jid).control_version)
        store.pin_epoch(jid, Epoch(n), att, cv)
        store.decide_epoch(jid, Epoch(n), att, 100, False)
        store.mark_epoch_committed(jid, Epoch(n))
    store.finish_attempt(jid, att, AttemptState.FINISHED, JobState.FINISHED)
    store.set_resolved(jid)
    return jid


def _clone(path: Path, template: JobId, prefix: str, n: int, settled: int) -> None:
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
                        row["settled"] = settled
                    out.append(tuple(row[c] for c in cols))
            marks = ", ".join("?" for _ in cols)
            db.executemany(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({marks})", out)
        db.execute(f"DELETE FROM jobs WHERE job_id = '{template}'")
        for table in ("control_versions", "attempts", "epochs"):
            db.execute(f"DELETE FROM {table} WHERE job_id = ?", (template,))
        db.commit()
    finally:
        db.close()


def fill(path: Path, jobs: int, live: int, run_share: float, epochs: int) -> list[JobId]:
    """The ended jobs, and the live ones made CREATED (their holders start their attempts)."""
    store = open_store(path)
    try:
        done = _template(store, "done-tpl", MANAGED, epochs)
        run = _template(store, "run-tpl", RUN, epochs)
        ids = [job_id(f"live-{i:05d}") for i in range(live)]
        batch: list[NewJob] = [(j, j, MANAGED, {}) for j in ids]
        store.create_jobs(batch)
    finally:
        store.close()
    ended = jobs - live
    runs = int(ended * run_share)
    _clone(path, done, "done", ended - runs, settled=1)
    _clone(path, run, "run", runs, settled=0)
    return ids


# the drivers' stand-ins -------------------------------------------------------------------
def renew(url: str, ttl: float, jids: list[str]) -> None:
    """``--renew``: make each job's attempt RUNNING, owned by this process, and renew its
    lease every ``ttl / 3`` (a driver's lease keeper) until killed."""
    from stoker.procs import this_owner

    C.quiet_stoker_logs()
    store = open_store(url)
    me = this_owner()
    held = [
        (job_id(j), store.start_attempt(job_id(j), me, ttl, AttemptNo(0)).attempt) for j in jids
    ]
    print("ready", flush=True)
    while True:
        time.sleep(ttl / 3)
        for jid, att in held:
            if not store.renew_lease(jid, att, ttl):
                print(f"{jid}: attempt {att} lost its lease", file=sys.stderr, flush=True)


def client(url: str, seconds: float, every: float, out: str) -> None:
    """``--client``: ``GET /v1/jobs?limit=100`` for ``seconds``; each call's ms to ``out``."""
    import httpx

    times: list[float] = []
    with httpx.Client(base_url=url, timeout=30) as http:
        http.get("/v1/jobs", params={"limit": 100}).raise_for_status()  # warm-up
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            t = time.perf_counter()
            r = http.get("/v1/jobs", params={"limit": 100})
            times.append((time.perf_counter() - t) * 1000)
            r.raise_for_status()
            assert len(r.json()) == 100, len(r.json())
            time.sleep(every)
    Path(out).write_text(json.dumps(times))


def upgrade(n: int) -> dict[str, Any]:
    """``--upgrade``: the ticks after an upgrade over ``n`` unsettled ended jobs."""
    from stoker.manager import Supervisor, SupervisorConfig

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "store.db"
        store = open_store(path)
        try:
            batch: list[NewJob] = [(job_id(f"m-{i:05d}"), "m", MANAGED, {}) for i in range(n // 2)]
            batch += [(job_id(f"r-{i:05d}"), "r", RUN, {}) for i in range(n - n // 2)]
            store.create_jobs(batch)
            db = sqlite3.connect(path)
            db.execute("UPDATE jobs SET state = 'FINISHED', settled = 0, resolved_at = NULL")
            db.execute("UPDATE jobs SET resolved_at = updated_at WHERE job_id LIKE 'r-%'")
            db.commit()
            owed = "SELECT count(*) FROM jobs WHERE job_id LIKE 'm-%' AND resolved_at IS NULL"
            cfg = SupervisorConfig(state_dir=Path(tmp) / "state", store_url=f"sqlite:///{path}")
            sup = Supervisor(store, cfg)
            ticks: list[float] = []
            while db.execute(owed).fetchone()[0] and len(ticks) < 10_000:
                t = time.perf_counter()
                sup.step()
                ticks.append((time.perf_counter() - t) * 1000)
                time.sleep(0.2)
            db.close()
        finally:
            store.close()
    out = {"jobs": n, "ticks": len(ticks), "first_ms": ticks[0], "max_ms": max(ticks)}
    out |= {
        "p50_ms": statistics.median(ticks),
        "p99_ms": p99(ticks),
        "still_leading": sup.is_leader,
    }
    return out


# measuring --------------------------------------------------------------------------------
def p99(xs: list[float]) -> float:
    return statistics.quantiles(xs, n=100, method="inclusive")[98] if len(xs) > 1 else xs[0]


def _load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def _serve(app: Any) -> tuple[Any, str]:
    import uvicorn

    port = C.free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)
    )
    threading.Thread(target=server.run, name="uvicorn", daemon=True).start()
    url = f"http://127.0.0.1:{port}"
    C.wait_until("API", lambda: server.started, 60)
    return server, url


def _holders(url: str, ids: list[JobId], per: int, ttl: float) -> list[subprocess.Popen[str]]:
    procs = []
    for i in range(0, len(ids), per):
        procs.append(
            subprocess.Popen(
                [sys.executable, __file__, "--renew", url, str(ttl), *ids[i : i + per]],
                stdout=subprocess.PIPE,
                text=True,
                cwd=C.REPO,
            )
        )
    for p in procs:
        assert p.stdout is not None
        line = p.stdout.readline().strip()
        if line != "ready":
            raise RuntimeError(f"a lease holder did not start (pid {p.pid}): {line!r}")
    return procs


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--renew":
        renew(sys.argv[2], float(sys.argv[3]), sys.argv[4:])
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--client":
        client(sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), sys.argv[5])
        return
    ap = C.arg_parser(__doc__ or "")
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--live", type=int, default=100)
    ap.add_argument("--run-share", type=float, default=0.5)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--per-holder", type=int, default=1, help="live jobs per holder process")
    ap.add_argument("--lease-ttl", type=float, default=10.0)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--list-every", type=float, default=0.1)
    ap.add_argument("--upgrade", type=int, default=0, metavar="N")
    args = ap.parse_args()
    if args.upgrade:
        C.quiet_stoker_logs()
        load0 = _load()
        got = upgrade(args.upgrade)
        print(got, f"load {load0} -> {_load()}")
        C.write_json(args.json, {"machine": C.machine(), "upgrade": got})
        return
    from stoker.manager import JobManager, Supervisor, SupervisorConfig
    from stoker.server.app import create_app

    info = C.machine()
    C.print_machine(info)
    C.quiet_stoker_logs()
    result: dict[str, Any] = {"machine": info, "args": vars(args)}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "store.db"
        url = f"sqlite:///{path}"
        t0 = time.perf_counter()
        ids = fill(path, args.jobs, args.live, args.run_share, args.epochs)
        print(f"filled {args.jobs} jobs in {time.perf_counter() - t0:.1f}s")
        holders = _holders(url, ids, args.per_holder, args.lease_ttl)
        print(f"{len(holders)} lease holders hold {len(ids)} RUNNING attempts")
        state = Path(tmp) / "state"
        sup_store, api_store = open_store(url), open_store(url)
        cfg = SupervisorConfig(state_dir=state, store_url=url, lease_ttl=args.lease_ttl)
        sup = Supervisor(sup_store, cfg)
        ticks: list[float] = []
        cpu: list[float] = []  # the supervisor thread's own CPU time per tick
        step = sup.step

        def timed() -> None:
            t, c = time.perf_counter(), time.thread_time()
            try:
                step()
            finally:
                cpu.append((time.thread_time() - c) * 1000)
                ticks.append((time.perf_counter() - t) * 1000)

        sup.step = timed  # type: ignore[method-assign]  # the loop calls self.step()
        manager = JobManager(api_store, state, [Path(tmp)])
        server, api = _serve(create_app(manager, sup))
        try:
            sup.start()
            C.wait_until("leader", lambda: sup.is_leader, 60)
            time.sleep(2.0)  # the first sweeps (janitor, retention) are not the steady tick
            rows = []
            for label in ("alone", "listing"):
                load0 = _load()
                ticks.clear()
                cpu.clear()
                lists: list[float] = []
                if label == "alone":
                    time.sleep(args.seconds)
                else:
                    out = Path(tmp) / "lists.json"
                    subprocess.run(
                        [
                            sys.executable,
                            __file__,
                            "--client",
                            api,
                            str(args.seconds),
                            str(args.list_every),
                            str(out),
                        ],
                        check=True,
                        cwd=C.REPO,
                    )
                    lists = json.loads(out.read_text())
                seen, seen_cpu = list(ticks), list(cpu)
                load1 = _load()
                live = len(sup_store.list_live_jobs())
                result[label] = {
                    "ticks_ms": seen,
                    "ticks_cpu_ms": seen_cpu,
                    "lists_ms": lists,
                    "load": [load0, load1],
                    "live_after": live,
                }
                row = [
                    label,
                    len(seen),
                    C.fmt(statistics.median(seen), 2),
                    C.fmt(p99(seen), 2),
                    C.fmt(statistics.median(seen_cpu), 2),
                    C.fmt(p99(seen_cpu), 2),
                    len(lists) or "-",
                    C.fmt(statistics.median(lists), 2) if lists else "-",
                    C.fmt(p99(lists), 2) if lists else "-",
                    f"{load0} -> {load1}",
                ]
                rows.append(row)
                print(row, flush=True)
                if live != args.live:
                    print(f"WARNING: {live} live jobs, not {args.live}: a holder died?")
            head = (
                "phase",
                "ticks",
                "p50 ms",
                "p99 ms",
                "CPU p50",
                "CPU p99",
                "lists",
                "p50 ms",
                "p99 ms",
                "load",
            )
            print(C.table(head, rows))
            print(f"still leading: {sup.is_leader}; load now {_load()}")
        finally:
            sup.stop()
            server.should_exit = True
            for p in holders:
                p.kill()
                p.wait()
            manager.close()
            sup_store.close()
            api_store.close()
    C.write_json(args.json, result)


if __name__ == "__main__":
    main()
