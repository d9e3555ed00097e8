"""Warm standby drivers (issue 24, "Measured"): a driver's ``kill -9`` -> the first epoch
committed by the job's next attempt, with a warm standby and without one, in the same run.

Everything is real: a ``stoker server`` (SQLite store) this script starts in a temporary
folder, the drivers and standbys it starts, their JVMs and Python workers. Two jobs run side
by side the whole time, each ``generator -> files sink`` (parquet; endless, 50 ids a second,
at most 50 an epoch, one partition), ``local[1]``, trigger 200 ms, the default restart
strategy's delay (fixed-delay, 1 s; 100 attempts, so that every kill is restarted):

* ``warm``: submitted with ``"standby": true``;
* ``cold``: the same without (what every job did before: a new driver process, JVM and
  SparkSession, the app imported, the query started from its checkpoint).

Turns alternate warm / cold (``--kills`` each, default 5). Before each kill the job has
committed under its current attempt and, for ``warm``, its standby is READY; both jobs have
run 3 s since the last takeover; then a random 0-0.5 s so the kill lands anywhere in an
epoch. The kill is SIGKILL of the driver's process group (the Python driver and its JVM). The
figure is from the kill to the commit time of the first epoch decided by a later attempt,
read from the store; split into: death noticed (the attempt's end), next attempt recorded
(handed to the standby, or a driver spawned), and the first commit.

Then the standby's cost, once it is READY again: RSS and PSS (MiB) summed over its process
tree (Python, JVM, Python workers), and its CPU over ``--idle`` seconds (default 30) of
waiting. At the end both jobs are canceled and each files sink must hold every id the store
says was read, once.

``--application [--rate N] [--trigger T] [--master M]``: the same for two applications of
three jobs each (``tests/apps/app_driver_trio.py``: streams ``a``, ``b``, ``c``, each
``--rate`` ids a second (default 50) at most as many an epoch, every ``--trigger`` (default
200ms), one partition), ``warm`` submitted to ``POST /v1/applications`` with ``"standby":
true``, ``cold`` without, both on cluster ``local`` with ``--master`` (default ``local[1]``:
the three jobs share the driver's one task slot, FAIR; ``local[3]``: a slot each).
The kill is SIGKILL of the application driver's process group; the figure is from the kill to
the commit of the first epoch decided by a later attempt of *every* job of the application
(and of the first of them), the next application attempt's driver running ``main`` on.

``--one-side-at-a-time``: the warm side's kills, then (its job canceled) the cold side's, so
that no side's restarts load the machine during the other's takeovers.

Run: ``python benchmarks/standby_takeover.py [--application [--rate N] [--trigger T]]
[--one-side-at-a-time] [--kills 5] [--idle 30] [--seed N] [--json out.json]``.
``BENCH_KEEP=1`` keeps the work folder.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import _common as C

HERE = Path(__file__).resolve().parent
SPARK = 600.0
APP = """\
from stoker import Pipeline, sinks, sources

pipeline = (
    Pipeline({name!r})
    .source(sources.generator(total=None, rows_per_second=50, max_rows_per_epoch=50, partitions=1))
    .sink(sinks.files({out!r}))
)
"""
CONF = {"stoker.master": "local[1]", "stoker.trigger": "200ms"}
# The default strategy's delay (1 s), with room for every kill (the default gives up after 3).
RESTARTS = {"strategy": "fixed-delay", "attempts": 100, "delay": 1}


def note(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Loads:
    """The load average every 2 s, in the background."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while not self._stop.wait(2.0):
            self.samples.append(os.getloadavg()[0])

    def range(self) -> str:
        s = self.samples or [os.getloadavg()[0]]
        return f"{min(s):.1f}-{max(s):.1f}"


def tree(root: int) -> list[int]:
    """``root`` and every process below it (by parent pid)."""
    from stoker.procs import all_stats

    stats = list(all_stats())
    out, frontier = [root], [root]
    while frontier:
        nxt = [s.pid for s in stats if s.ppid in frontier]
        out += nxt
        frontier = nxt
    return out


def cpu_ticks(pids: list[int]) -> dict[int, int]:
    """CPU ticks (user + system) of each of ``pids`` still running."""
    out = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            out[pid] = int(fields[11]) + int(fields[12])  # utime, stime
        except (OSError, IndexError, ValueError):
            pass
    return out


class Bench:
    def __init__(self, root: Path, conf: dict[str, str] | None = None) -> None:
        import httpx

        self.root = root
        self.conf = conf or CONF
        (root / "apps").mkdir(parents=True)
        self.proc, self.url = C.start_manager(
            f"sqlite:///{root / 'store.db'}",
            root / "state",
            root / "apps",
            log=root / "server.log",
        )
        self.http = httpx.Client(base_url=self.url, timeout=30.0)
        from stoker.store import open_store

        self.store = open_store(str(root / "store.db"))

    def submit(self, name: str, standby: bool) -> Path:
        out = self.root / "out" / name
        app = self.root / "apps" / f"{name}.py"
        app.write_text(APP.format(name=name, out=str(out)))
        body = {
            "entrypoint": str(app),
            "conf": self.conf,
            "standby": standby,
            "restart_strategy": RESTARTS,
        }
        r = self.http.post("/v1/jobs", json=body)
        assert r.status_code == 201, r.text
        return out

    def job(self, name: str) -> dict[str, Any]:
        return dict(self.http.get(f"/v1/jobs/{name}").json())

    def settled(self, name: str, standby: bool) -> dict[str, Any] | None:
        """The job if it has committed under its current attempt (and its standby is READY)."""
        j = self.job(name)
        att, last = j.get("attempt") or {}, j.get("last_epoch") or {}
        if att.get("state") != "RUNNING" or not last.get("committed_at"):
            return None
        if last.get("decided_by") != att.get("attempt"):
            return None
        if standby and (j.get("standby") or {}).get("state") != "READY":
            return None
        return j

    def kill(self, name: str, standby: bool, rng: random.Random) -> dict[str, float]:
        j = C.wait_until(f"{name} settled", lambda: self.settled(name, standby), SPARK)
        time.sleep(3.0 + rng.uniform(0, 0.5))
        j = C.wait_until(f"{name} settled", lambda: self.settled(name, standby), SPARK)
        att = j["attempt"]
        n = int(att["attempt"])
        t0 = time.time()
        os.killpg(int(att["pid"]), signal.SIGKILL)

        def first() -> Any:
            done = [
                e
                for e in self.store.list_epochs(name, limit=20)
                if e.decided_by is not None and e.decided_by > n and e.committed_at
            ]
            return min(done, key=lambda e: e.epoch) if done else None

        e = C.wait_until(f"{name}: a commit after the kill", first, SPARK, every=0.02)
        old = self.store.get_attempt(name, n)
        new = self.store.get_attempt(name, e.decided_by)
        return {
            "noticed": (old.ended_at or t0) - t0,
            "next_attempt": new.started_at - t0,
            "committed": e.committed_at - t0,
            "handed": float(new.owner.pid == (j.get("standby") or {}).get("pid")),
        }

    def standby_cost(self, name: str, idle: float) -> dict[str, float]:
        j = C.wait_until("a READY standby", lambda: self.settled(name, True), SPARK)
        pid = int(j["standby"]["pid"])
        pids = tree(pid)
        rss = sum(C.proc_kib(f"/proc/{p}/status", "VmRSS:") for p in pids) / 1024
        pss = sum(C.proc_kib(f"/proc/{p}/smaps_rollup", "Pss:") for p in pids) / 1024
        hz = os.sysconf("SC_CLK_TCK")
        c0, t0 = cpu_ticks(pids), time.monotonic()
        time.sleep(idle)
        c1, t1 = cpu_ticks(tree(pid)), time.monotonic()
        # Processes there at both reads (one that ended meanwhile takes its ticks with it);
        # one that started meanwhile counts from 0.
        used = sum(c1[p] - c0.get(p, 0) for p in c1)
        return {
            "processes": len(pids),
            "rss_mib": rss,
            "pss_mib": pss,
            "idle_cpu_percent": 100.0 * used / hz / (t1 - t0),
        }

    def finish(self, names: list[str], outs: dict[str, Path]) -> dict[str, Any]:
        from tests.support.sinks import file_sink_ids

        for n in names:
            self.http.post(f"/v1/jobs/{n}/cancel")
        out: dict[str, Any] = {}
        for n in names:
            C.wait_until(f"{n} canceled", lambda n=n: self.job(n)["state"] == "CANCELED", SPARK)
            epochs = self.store.list_epochs(n, limit=1_000_000)
            rows = sum(e.rows_in or 0 for e in epochs)
            ids = file_sink_ids(outs[n])
            twice = sum(1 for v in ids.values() if v > 1)
            missing = len(set(range(rows)) - set(ids))
            out[n] = {"rows": rows, "twice": twice, "missing": missing}
        return out

    def close(self) -> None:
        self.store.close()
        stop_bench(self.root, self.proc.pid)


TRIO = HERE.parent / "tests" / "apps" / "app_driver_trio.py"
STREAMS = ("a", "b", "c")


class AppBench(Bench):
    """The same turns for applications of three jobs (``--application``): each job
    ``rate`` ids a second at most ``rate`` an epoch, every ``trigger``."""

    def __init__(self, root: Path, rate: int, trigger: str, master: str) -> None:
        super().__init__(root)
        self.rate, self.trigger, self.master = rate, trigger, master

    def submit(self, name: str, standby: bool) -> Path:
        out = self.root / "out" / name
        app = self.root / "apps" / f"{name}.py"
        shutil.copy(TRIO, app)
        args = [f"out={out}", "backfill=0", f"streams={','.join(STREAMS)}"]
        args += [f"rate={self.rate}", f"per_epoch={self.rate}", f"trigger={self.trigger}"]
        body = {
            "app_id": name,
            "entrypoint": str(app),
            "args": args,
            "conf": {"spark.master": self.master},
            "standby": standby,
            "restart_strategy": RESTARTS,
        }
        r = self.http.post("/v1/applications", json=body)
        assert r.status_code == 201, r.text
        return out

    def app(self, name: str) -> dict[str, Any]:
        return dict(self.http.get(f"/v1/applications/{name}").json())

    def settled(self, name: str, standby: bool) -> dict[str, Any] | None:
        """The application if every job of it has committed under the job attempt its
        current driver made (and its standby is READY), with ``job_attempts``."""
        view = self.app(name)
        att = next((a for a in view["attempts"] if a["attempt"] == view["attempt"]), None)
        if att is None or att["state"] != "RUNNING":
            return None
        if standby and (view.get("standby") or {}).get("state") != "READY":
            return None
        jobs = {}
        for s in STREAMS:
            j = self.job(f"{name}.{s}")
            ja, last = j.get("attempt") or {}, j.get("last_epoch") or {}
            if ja.get("app_attempt") != att["attempt"] or ja.get("state") != "RUNNING":
                return None
            if not last.get("committed_at") or last.get("decided_by") != ja.get("attempt"):
                return None
            jobs[s] = int(ja["attempt"])
        return {**view, "driver": att, "job_attempts": jobs}

    def kill(self, name: str, standby: bool, rng: random.Random) -> dict[str, float]:
        C.wait_until(f"{name} settled", lambda: self.settled(name, standby), SPARK)
        time.sleep(3.0 + rng.uniform(0, 0.5))
        v = C.wait_until(f"{name} settled", lambda: self.settled(name, standby), SPARK)
        n = int(v["driver"]["attempt"])
        t0 = time.time()
        os.killpg(int(v["driver"]["pid"]), signal.SIGKILL)

        def first(jid: str, before: int) -> Any:
            done = [
                e
                for e in self.store.list_epochs(jid, limit=20)
                if e.decided_by is not None and e.decided_by > before and e.committed_at
            ]
            return min(done, key=lambda e: e.epoch) if done else None

        commits = []
        for s, before in v["job_attempts"].items():
            jid = f"{name}.{s}"
            e = C.wait_until(
                f"{jid}: a commit after the kill",
                lambda jid=jid, before=before: first(jid, before),
                SPARK,
            )
            commits.append(e.committed_at - t0)
        old = self.store.get_attempt(name, n)
        new = C.wait_until("the next attempt", lambda: self.store.get_attempt(name, n + 1), SPARK)
        return {
            "noticed": (old.ended_at or t0) - t0,
            "next_attempt": new.started_at - t0,
            "first_job": min(commits),
            "committed": max(commits),
            "handed": float(new.owner.pid == (v.get("standby") or {}).get("pid")),
        }

    def finish(self, names: list[str], outs: dict[str, Path]) -> dict[str, Any]:
        from tests.support.sinks import file_sink_ids

        for n in names:
            self.http.post(f"/v1/applications/{n}/cancel")
        out: dict[str, Any] = {}
        for n in names:
            C.wait_until(f"{n} canceled", lambda n=n: self.app(n)["state"] == "CANCELED", SPARK)
            for s in STREAMS:
                epochs = self.store.list_epochs(f"{n}.{s}", limit=1_000_000)
                rows = sum(e.rows_in or 0 for e in epochs)
                ids = file_sink_ids(outs[n] / s)
                twice = sum(1 for v in ids.values() if v > 1)
                missing = len(set(range(rows)) - set(ids))
                out[f"{n}.{s}"] = {"rows": rows, "twice": twice, "missing": missing}
        return out


def cluster_conf(master: str) -> dict[str, str]:
    """A job on the cluster: one core (its standby another), a small executor."""
    return {
        "stoker.master": master,
        "spark.cores.max": "1",
        "spark.executor.memory": "512m",
        "spark.driver.host": "127.0.0.1",  # the workers are on loopback addresses
    }


def executors() -> dict[str, float]:
    """The executor JVMs of the machine now: how many, and their RSS (MiB, median)."""
    from stoker.procs import all_stats, cmdline

    rss = [
        C.proc_kib(f"/proc/{s.pid}/status", "VmRSS:") / 1024
        for s in all_stats()
        if any("CoarseGrainedExecutorBackend" in a for a in (cmdline(s.pid) or []))
    ]
    return {"count": len(rss), "rss_mib_median": C.median(rss) if rss else 0.0}


def stop_bench(root: Path, manager_pid: int) -> None:
    """Kill every process group led by a process of the bench's store (drivers, standbys),
    then the manager's."""
    from stoker.procs import all_stats, cmdline

    with_store = str(root / "store.db")
    for s in all_stats():
        argv = cmdline(s.pid) or []
        if any(with_store in a for a in argv) and s.pgid == s.pid:
            kill_group(s.pgid)
    kill_group(manager_pid)


def kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def main() -> None:
    p = C.arg_parser(__doc__.splitlines()[0])
    p.add_argument("--kills", type=int, default=5)
    p.add_argument("--idle", type=float, default=30.0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument(
        "--application", action="store_true", help="applications of three jobs, not lone jobs"
    )
    p.add_argument("--rate", type=int, default=50, help="--application: ids a second per job")
    p.add_argument("--trigger", default="200ms", help="--application: every job's trigger")
    p.add_argument(
        "--master",
        default="local[1]",
        help="--application: the driver's Spark master (local[N]: N task slots for the 3 jobs)",
    )
    p.add_argument(
        "--cluster",
        type=int,
        default=0,
        help="lone jobs on a standalone cluster of N one-core workers (spark.cores.max 1 each)",
    )
    p.add_argument(
        "--one-side-at-a-time",
        dest="side_by_side",
        action="store_false",
        help="the warm side's kills, then the cold side's, each alone on the machine",
    )
    a = p.parse_args()
    seed = a.seed if a.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    info = C.machine()
    C.print_machine(info)
    print(f"seed {seed}")
    root = Path(tempfile.mkdtemp(prefix="stoker-standby-bench-"))
    loads = Loads()
    cluster = None
    if a.cluster:  # stoker's own cluster code, as the tests start one
        from tests.cluster import StandaloneCluster

        cluster = StandaloneCluster(root / "cluster", size=a.cluster)
        cluster.start(timeout=300.0)
        note(f"cluster {cluster.url}: {a.cluster} one-core workers")
    if a.application:
        bench: Bench = AppBench(root, a.rate, a.trigger, a.master)
    elif cluster is not None:
        bench = Bench(root, {**CONF, **cluster_conf(cluster.url)})
    else:
        bench = Bench(root)
    print(
        f"applications of three jobs ({a.rate} ids/s each, trigger {a.trigger}, {a.master})"
        if a.application
        else "jobs submitted alone"
        + (f", on a standalone cluster of {a.cluster} one-core workers" if cluster else "")
    )
    results: dict[str, list[dict[str, float]]] = {"warm": [], "cold": []}

    def turn(name: str, k: int) -> None:
        r = bench.kill(name, name == "warm", rng)
        results[name].append(r)
        note(
            f"{name} kill {k + 1}: noticed {r['noticed']:.2f} s, next attempt "
            f"{r['next_attempt']:.2f} s, committed {r['committed']:.2f} s"
            + (" (standby)" if r["handed"] else "")
        )

    try:
        if a.side_by_side:
            outs = {"warm": bench.submit("warm", True), "cold": bench.submit("cold", False)}
            for k in range(a.kills):
                for name in ("warm", "cold") if k % 2 == 0 else ("cold", "warm"):
                    turn(name, k)
            cost = bench.standby_cost("warm", a.idle)
            if cluster is not None:  # the running drivers' and the standby's, both jobs'
                note(f"executors with the standby READY: {executors()}")
            ends = bench.finish(["warm", "cold"], outs)
        else:
            # One side after the other: the machine carries one driver (and a standby) at
            # a time, not the other side's restarts beside each takeover.
            outs = {"warm": bench.submit("warm", True)}
            for k in range(a.kills):
                turn("warm", k)
            cost = bench.standby_cost("warm", a.idle)
            if cluster is not None:  # the running driver's and the standby's
                note(f"executors with the standby READY: {executors()}")
            ends = bench.finish(["warm"], outs)
            outs["cold"] = bench.submit("cold", False)
            for k in range(a.kills):
                turn("cold", k)
            ends.update(bench.finish(["cold"], outs))
        note(f"standby: {cost}")
        note(f"ends: {ends}")
    finally:
        bench.close()
        if cluster is not None:
            cluster.stop()
        if os.environ.get("BENCH_KEEP") != "1":
            shutil.rmtree(root, ignore_errors=True)
        else:
            print(f"kept {root}")
    rows = []
    steps = ("noticed", "next_attempt", "first_job", "committed") if a.application else None
    for step in steps or ("noticed", "next_attempt", "committed"):
        w = [r[step] for r in results["warm"]]
        c = [r[step] for r in results["cold"]]
        rows.append(
            [
                step,
                f"{C.median(w):.2f} ({C.spread(w, 2)})",
                f"{C.median(c):.2f} ({C.spread(c, 2)})",
                f"{C.median(c) / C.median(w):.1f}x" if C.median(w) > 0 else "-",
            ]
        )
    print()
    print(
        C.table(["s after kill -9 (median, min..max)", "warm standby", "cold", "cold/warm"], rows)
    )
    handed = sum(int(r["handed"]) for r in results["warm"])
    print(f"\nwarm kills handed to a standby: {handed}/{len(results['warm'])}")
    print(
        f"standby cost: {cost['processes']} processes, RSS {cost['rss_mib']:.0f} MiB, "
        f"PSS {cost['pss_mib']:.0f} MiB, idle CPU {cost['idle_cpu_percent']:.2f} % of a core"
    )
    print(f"exactly once: {ends}")
    print(f"load average during the run: {loads.range()} (2 cpus)")
    C.write_json(
        a.json,
        {"machine": info, "seed": seed, "results": results, "standby": cost, "ends": ends,
         "load": loads.samples},
    )  # fmt: skip
    sys.exit(0 if all(v["twice"] == 0 and v["missing"] == 0 for v in ends.values()) else 1)


if __name__ == "__main__":
    main()
