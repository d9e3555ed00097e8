"""Reactive scaling and the autoscaler (issue 11, "Measured"): workers that join and leave a
running job, and a load step under ``auto`` against ``fixed`` at the minimum and the maximum.

Everything runs for real: a ``stoker server`` (SQLite store) that this script starts in a
temporary folder, the CLI, the application drivers it starts, their standalone clusters,
executors and Python workers, the worker processes this script kills. The program under test
is this file (``scaling.py _app key=value ...``, see ``run_program``): one application with one
endless job ``load``:

    sources.generator(rows_per_second=R, max_rows_per_epoch=CAP)
      -> mapInPandas that sleeps COST ms per row in the task that holds it (and notes which
         executor ran it) -> sinks.files (parquet), trigger 1 s.

Sleeping is the work on purpose: this machine has 2 cores, so CPU work could not get faster
with more executors; sleeping work does, the way a job waiting on I/O or on a remote service
does. One executor (1 core) does at most 1000 / COST rows per second, less the epoch's fixed
cost.

Parts:

1. ``reactive``: a session cluster of 1 worker (1 core, 512m); the application runs on it
   with ``--scaling reactive``. A worker joins (``stoker cluster add-worker``); the first
   epoch whose tasks ran on it (from the executor each output row names, and the epoch's
   ``cores`` in the store); then it leaves gracefully (``remove-worker --graceful``); another
   joins and its process group is SIGKILLed. For each change: epoch durations (Spark's
   triggerExecution) before, during (epochs committed within ``DURING_S`` after the change
   began) and after; epochs failed; job attempts (a restart would add one). The same on the
   same cluster for plain Structured Streaming without stoker (``scaling.py _plain``: Spark's
   ``rate`` source at the same rate, the same mapInPandas, ``foreachBatch`` writing parquet;
   its progress from a StreamingQueryListener).
2. ``step``: base rate R for ``--base`` s, 5R for ``--step`` s, R again for ``--after`` s, each
   configuration on an application cluster of its own: ``auto`` (min 1, max 4 executors;
   cluster started with 1 worker, the scaler adds and removes workers), ``fixed`` with 1
   worker and ``fixed`` with 4. The rate changes through the control plane (``stoker control
   JOB rate-limit N``). Per epoch from the store: committed_at, duration_ms, backlog,
   executors, cores; every second the application's reported executors. Latency of an epoch
   (its newest rows): ``backlog / rate + duration`` (the rows beyond its end were produced
   after its newest row, at the rate then in force; Spark's triggerExecution covers planning to
   commit). Cost: executor-seconds over the run. The rescale history of the ``auto`` run
   (``GET /v1/jobs/{id}/rescales``). The plot (``--png``, default docs/scaling-load-step.png)
   is made from the saved JSON (``scaling.py plot RESULT.json``).

Run: ``python benchmarks/scaling.py [all|reactive|step] [--json out.json] [--png out.png]
[--base 60 --step 180 --after 120] [--rate 150] [--cost-ms 2]``; ``BENCH_KEEP=1`` keeps the
work folder (server, driver and worker logs, store, output).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
APP_MODE = "_app"
PLAIN_MODE = "_plain"
JOB = "load"
TRIGGER = "1s"
START_TIMEOUT = 900.0
POLL_S = 0.25
WORKER = "cores=1,memory=512m"
DURING_S = 10.0  # part 1: epochs committed this long after a change began are "during" it
USE_TIMEOUT = 300.0  # part 1: how long to wait for a joined worker to be used
DRAIN_S = 300.0  # part 2: longest wait for the start-up backlog to be read
AUTO = "auto:min=1,max=4,target_utilization=0.7,catch_up=1m,stabilization=20s,cooldown=30s"
CONFIGS = {  # name -> (workers at start, scaling)
    "auto": (1, AUTO),
    "fixed min (1)": (1, "fixed"),
    "fixed max (4)": (4, "fixed"),
}
FLINK_REACTIVE_S = 10.0  # resource-stabilization timeout default, then a restart


# --------------------------------------------------------------------------------------------
# The program under test: ``scaling.py _app key=value ...`` (an application's program, run by
# its driver as __main__) and ``scaling.py _plain key=value ...`` (plain PySpark, no stoker).


def settings_of(argv: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for arg in argv:
        key, eq, value = arg.partition("=")
        if not eq:
            raise SystemExit(f"scaling: argument {arg!r} is not key=value")
        out[key] = value
    return out


def executor_name() -> str:
    """``host/executor-id`` of the executor JVM above this Python worker (its command line
    names both), or ``?``."""
    pid = os.getppid()
    for _ in range(8):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return "?"
        if b"--hostname" in argv and b"--executor-id" in argv:
            host = argv[argv.index(b"--hostname") + 1].decode()
            eid = argv[argv.index(b"--executor-id") + 1].decode()
            return f"{host}/{eid}"
        pid = int(stat.rsplit(")", 1)[1].split()[1])
        if pid <= 1:
            break
    return "?"


def slow_rows(cost_ms: float) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The work: sleep ``cost_ms`` per row; each row gets the executor that ran it."""

    def run(frames: Iterator[Any]) -> Iterator[Any]:
        me = executor_name()
        for pdf in frames:
            time.sleep(len(pdf) * cost_ms / 1000.0)
            out = pdf[["id"]].copy()
            out["executor"] = me
            yield out

    return run


def run_program(argv: list[str]) -> None:
    import stoker
    from stoker import Pipeline, sinks, sources

    s = settings_of(argv)
    cost = float(s.get("cost_ms", "2"))
    kw: dict[str, Any] = {}
    if s.get("partitions"):
        kw["partitions"] = int(s["partitions"])
    source = sources.generator(
        rows_per_second=float(s["rate"]), max_rows_per_epoch=int(s["cap"]), **kw
    )

    def transform(df: Any) -> Any:
        return df.mapInPandas(slow_rows(cost), "id long, executor string")

    p = Pipeline(JOB).source(source).transform(transform).sink(sinks.files(s["out"]))
    stoker.submit(p, trigger=TRIGGER).wait()


def run_plain(argv: list[str]) -> None:
    """The baseline: the same load and work as plain Structured Streaming on ``master``."""
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQueryListener

    s = settings_of(argv)
    cost = float(s.get("cost_ms", "2"))
    # The settings a careful user of a standalone cluster gives (the same stoker gives its
    # applications): executors that fit a worker, and decommissioning for graceful removal.
    spark = (
        SparkSession.builder.master(s["master"])
        .appName("plain-structured-streaming")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.executor.memory", s.get("memory", "512m"))
        .config("spark.executor.cores", "1")
        .config("spark.decommission.enabled", "true")
        .config("spark.storage.decommission.enabled", "true")
        .config("spark.storage.decommission.replicationReattemptInterval", "1s")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    log = open(s["log"], "a", buffering=1)  # noqa: SIM115 - for the process's life

    class Progress(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            log.write(json.dumps({"kind": "started", "at": time.time()}) + "\n")

        def onQueryProgress(self, event: Any) -> None:
            pr = event.progress
            log.write(
                json.dumps(
                    {
                        "kind": "progress",
                        "batch": pr.batchId,
                        "at": time.time(),
                        "rows": pr.numInputRows,
                        "duration_ms": pr.durationMs.get("triggerExecution"),
                    }
                )
                + "\n"
            )

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            log.write(
                json.dumps({"kind": "terminated", "at": time.time(), "error": event.exception})
                + "\n"
            )

    spark.streams.addListener(Progress())
    src = (spark.readStream.format("rate").option("rowsPerSecond", s["rate"]).load()).selectExpr(
        "value AS id"
    )
    out = src.mapInPandas(slow_rows(cost), "id long, executor string")

    def batch(df: Any, bid: int) -> None:
        t0 = time.time()
        df.persist()
        df.write.mode("overwrite").parquet(f"{s['out']}/epoch={bid}")
        used = sorted(r.executor for r in df.select("executor").distinct().collect())
        df.unpersist()
        sc = spark.sparkContext._jsc.sc()
        executors = sc.getExecutorMemoryStatus().size() - 1
        log.write(
            json.dumps(
                {
                    "kind": "batch",
                    "batch": bid,
                    "start": t0,
                    "end": time.time(),
                    "executors_used": used,
                    "executors": executors,
                }
            )
            + "\n"
        )

    q = (
        out.writeStream.foreachBatch(batch)
        .trigger(processingTime="1 second")
        .option("checkpointLocation", s["checkpoint"])
        .start()
    )
    q.awaitTermination()


# --------------------------------------------------------------------------------------------
# The harness.


def D() -> Any:
    import driver_mode

    return driver_mode


def note(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def pct(xs: list[float], q: float) -> float | None:
    data = sorted(x for x in xs if x is not None)
    if not data:
        return None
    k = (len(data) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (k - lo)


class Bench:
    """One ``stoker server`` in ``root`` (driver_mode's Manager), the store read directly."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.m = D().Manager(root)

    @property
    def store(self) -> Any:
        return self.m.store

    def cli(self, *args: str) -> str:
        return str(self.m.cli(*args))

    def submit(self, app: str, cluster: str, scaling: str | None, **prog: Any) -> None:
        args = ["run", "--driver", str(HERE / "scaling.py"), "--app-id", app, "-d"]
        args += ["--cluster", cluster]
        if scaling is not None:
            args += ["--scaling", scaling]
        args += [APP_MODE, *(f"{k}={v}" for k, v in prog.items())]
        self.cli(*args)

    def epochs(self, job: str) -> list[Any]:
        try:
            eps = self.store.list_epochs(job, limit=100_000)
        except Exception:
            return []
        return sorted((e for e in eps if e.committed_at is not None), key=lambda e: e.epoch)

    def record(self, jid: str) -> Any:
        from stoker.errors import JobNotFound

        try:
            return self.store.get_job(jid)
        except JobNotFound:
            return None

    def check_alive(self, app: str) -> None:
        rec = self.record(app)
        if rec is not None and rec.state.terminal:
            raise RuntimeError(f"{app} ended {rec.state}: {rec.last_error}")

    def control_rate(self, job: str, rate: float) -> dict[str, Any]:
        out = self.cli("control", job, "rate-limit", f"{rate:g}", "--per", "second", "--json")
        return dict(json.loads(out))

    def control_status(self, job: str, cid: str) -> dict[str, Any]:
        r = self.m.http.get(f"/v1/jobs/{job}/control/{cid}")
        return dict(r.json()) if r.status_code == 200 else {}

    def rescales(self, job: str) -> dict[str, Any]:
        r = self.m.http.get(f"/v1/jobs/{job}/rescales", params={"limit": 1000})
        if r.status_code != 200:
            return {"error": f"GET /v1/jobs/{job}/rescales: {r.status_code} {r.text[:300]}"}
        return dict(r.json())

    def end_app(self, app: str) -> None:
        self.m.cancel(f"/v1/applications/{app}/cancel")
        self.m.wait_terminal(app)

    def close(self) -> None:
        self.m.close()


def sample(b: Bench, app: str, cluster: str | None) -> dict[str, Any]:
    """What the application has now: executors and cores its driver reports, the scaler's
    target, the workers of its cluster."""
    rec = b.record(app)
    res = (rec.resources if rec is not None else None) or {}
    out: dict[str, Any] = {
        "t": time.time(),
        "executors": res.get("executors"),
        "cores": res.get("cores"),
        "target": rec.executor_target if rec is not None else None,
        "load": os.getloadavg()[0],
    }
    if cluster is not None:
        with contextlib.suppress(Exception):
            c = b.store.get_cluster(cluster)
            out["workers"] = sum(1 for p in c.processes if p.get("role") == "worker")
    return out


def hold(
    b: Bench, app: str, cluster: str | None, seconds: float, samples: list[dict[str, Any]]
) -> None:
    """Sample every second for ``seconds``; the application must stay alive."""
    end = time.monotonic() + seconds
    while True:
        samples.append(sample(b, app, cluster))
        b.check_alive(app)
        left = end - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(1.0, left))


def wait_commits(b: Bench, app: str, job: str, n: int) -> None:
    def ok() -> bool:
        b.check_alive(app)
        return len(b.epochs(job)) >= n

    D().wait_until(lambda: f"{n} commits of {job}", ok, START_TIMEOUT)


def epoch_hosts(out: Path, cache: dict[int, list[str]]) -> dict[int, list[str]]:
    """Epoch -> the executors (``host/id``) its rows name, from ``out/epoch=N`` folders."""
    import pyarrow.parquet as pq

    if out.is_dir():
        for d in out.iterdir():
            if not d.name.startswith("epoch=") or not d.is_dir():
                continue
            n = int(d.name.split("=", 1)[1])
            if n in cache:
                continue
            files = [f for f in d.iterdir() if f.suffix == ".parquet" or f.name.startswith("part-")]
            files = [f for f in files if not f.name.startswith((".", "_"))]
            try:
                names = set()
                for f in files:
                    names.update(pq.read_table(f, columns=["executor"]).column(0).to_pylist())
            except Exception:
                continue
            cache[n] = sorted(names)
    return cache


# --------------------------------------------------------------------------------------------
# Part 1: reactive, workers joining and leaving.


class Side:
    """One side of part 1: epochs and the executors each used, for stoker or plain Spark."""

    def __init__(self, name: str, out: Path) -> None:
        self.name = name
        self.out = out
        self.hosts: dict[int, list[str]] = {}

    def rows(self) -> list[dict[str, Any]]:
        """Per epoch: epoch, committed (time), duration_s, executors_used, cores."""
        raise NotImplementedError

    def alive(self) -> None:
        raise NotImplementedError


class StokerSide(Side):
    def __init__(self, b: Bench, app: str, out: Path) -> None:
        super().__init__("stoker (reactive)", out)
        self.b, self.app, self.job = b, app, f"{app}.{JOB}"

    def rows(self) -> list[dict[str, Any]]:
        epoch_hosts(self.out, self.hosts)
        out = []
        for e in self.b.epochs(self.job):
            dur = e.duration_ms / 1000 if e.duration_ms is not None else None
            if dur is None:
                dur = e.committed_at - e.pinned_at
            out.append(
                {
                    "epoch": int(e.epoch),
                    "committed": e.committed_at,
                    "duration_s": dur,
                    "rows": e.rows_in,
                    "executors_used": self.hosts.get(int(e.epoch)),
                    "executors": e.executors,
                    "cores": e.cores,
                }
            )
        return out

    def alive(self) -> None:
        self.b.check_alive(self.app)

    def failures(self) -> dict[str, Any]:
        atts = self.b.store.list_attempts(self.job)
        app_atts = self.b.store.list_attempts(self.app)
        return {
            "job attempts": len(atts),
            "application attempts": len(app_atts),
            "failed attempts": sum(1 for a in [*atts, *app_atts] if str(a.state) == "FAILED"),
        }


class PlainSide(Side):
    def __init__(self, root: Path, master: str) -> None:
        super().__init__("plain Structured Streaming", root / "out")
        self.root = root
        self.log = root / "progress.jsonl"
        self.proc: subprocess.Popen[bytes] | None = None
        self.master = master

    def start(self, rate: float, cost_ms: float) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        argv = [
            sys.executable, str(HERE / "scaling.py"), PLAIN_MODE, f"master={self.master}",
            f"rate={rate:g}", f"cost_ms={cost_ms:g}", f"out={self.out}",
            f"checkpoint={self.root / 'checkpoint'}", f"log={self.log}",
        ]  # fmt: skip
        self.proc = subprocess.Popen(
            argv,
            stdout=open(self.root / "driver.log", "ab"),  # noqa: SIM115 - the child's
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=str(self.root),
            env=D()._env(),
        )

    def events(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        out = []
        for line in self.log.read_text().splitlines():
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
        return out

    def rows(self) -> list[dict[str, Any]]:
        ev = self.events()
        prog = {e["batch"]: e for e in ev if e["kind"] == "progress"}
        out = []
        for e in ev:
            if e["kind"] != "batch":
                continue
            p = prog.get(e["batch"], {})
            dur = p.get("duration_ms")
            out.append(
                {
                    "epoch": int(e["batch"]),
                    "committed": p.get("at", e["end"]),
                    "duration_s": dur / 1000 if dur is not None else e["end"] - e["start"],
                    "rows": p.get("rows"),
                    "executors_used": e["executors_used"],
                    "executors": e["executors"],
                    "cores": None,
                }
            )
        return out

    def alive(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            tail = (self.root / "driver.log").read_text(errors="replace")[-1500:]
            raise RuntimeError(f"the plain Spark driver exited: {tail}")

    def failures(self) -> dict[str, Any]:
        ended = [e for e in self.events() if e["kind"] == "terminated"]
        return {
            "query terminated": len(ended),
            "errors": [e.get("error") for e in ended if e.get("error")],
            "driver alive": self.proc is not None and self.proc.poll() is None,
        }

    def stop(self) -> None:
        if self.proc is not None:
            procs = D().tree([self.proc.pid])
            D().kill_group(self.proc.pid)
            self.proc.wait()
            with contextlib.suppress(D().Timeout):
                D().wait_until(
                    lambda: "exit of the plain driver",
                    lambda: not any(D().alive(p) for p in procs),
                    60,
                )


def workers_of(b: Bench, cluster: str) -> list[dict[str, Any]]:
    c = b.store.get_cluster(cluster)
    return [dict(p) for p in c.processes if p.get("role") == "worker"]


def hold_side(side: Side, seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        side.alive()
        time.sleep(min(1.0, max(0.0, end - time.monotonic())))


def wait_used(side: Side, host: str, since: float) -> dict[str, Any]:
    """The first epoch committed after ``since`` whose rows ran on an executor of ``host``."""

    def used() -> dict[str, Any] | None:
        side.alive()
        for r in side.rows():
            names = r["executors_used"] or []
            if r["committed"] >= since and any(n.split("/")[0] == host for n in names):
                return r
        return None

    return dict(D().wait_until(lambda: f"an epoch of {side.name} on {host}", used, USE_TIMEOUT))


def reactive_side(b: Bench, side: Side, cluster: str, hold_s: float) -> dict[str, Any]:
    """Join, graceful leave, join, SIGKILL: each change's moments; epochs are read after."""
    marks: dict[str, Any] = {}
    hold_side(side, hold_s)
    for n, what in ((1, "join"), (2, "join again")):
        before = {w["id"] for w in workers_of(b, cluster)}
        t0 = time.time()
        added = json.loads(b.cli("cluster", "add-worker", cluster, "--json"))["worker"]
        t_alive = time.time()
        host = str(added["address"])
        note(f"{side.name}: worker {added['id']} ({host}) ALIVE {t_alive - t0:.1f} s after start")
        try:
            first = wait_used(side, host, t0)
            note(f"{side.name}: epoch {first['epoch']} used {host} {first['committed'] - t0:.1f} s")
        except D().Timeout:
            first = None
            note(f"{side.name}: no epoch used {host} within {USE_TIMEOUT:.0f} s")
        marks[what] = {
            "at": t0,
            "worker": added["id"],
            "host": host,
            "alive_at": t_alive,
            "first_epoch_using_it": first,
            "workers_before": sorted(before),
        }
        hold_side(side, hold_s)
        if n == 1:
            t0 = time.time()
            b.cli("cluster", "remove-worker", cluster, added["id"], "--graceful")
            marks["graceful leave"] = {"at": t0, "worker": added["id"], "done_at": time.time()}
            note(f"{side.name}: {added['id']} removed gracefully in {time.time() - t0:.1f} s")
            hold_side(side, hold_s)
        else:
            w = next(w for w in workers_of(b, cluster) if w["id"] == added["id"])
            t0 = time.time()
            D().kill_group(int(w["pid"]))
            marks["SIGKILL"] = {"at": t0, "worker": added["id"], "pid": w["pid"]}
            note(f"{side.name}: {added['id']} (pid {w['pid']}) SIGKILLed")
            hold_side(side, hold_s + 10)
            b.cli("cluster", "remove-worker", cluster, added["id"])  # the record: it is gone
    return marks


def phase_stats(rows: list[dict[str, Any]], t0: float, t_next: float | None) -> dict[str, Any]:
    """Epoch durations before ``t0`` (the last 10 committed before it), during (those that
    ran at some moment of ``t0 .. t0 + DURING_S``) and after (begun later, committed before
    the next change)."""
    end = t_next or float("inf")
    before = [r for r in rows if r["committed"] < t0][-10:]
    during = [
        r for r in rows if r["committed"] >= t0 and r["committed"] - r["duration_s"] < t0 + DURING_S
    ]
    after = [r for r in rows if r["committed"] - r["duration_s"] >= t0 + DURING_S]
    after = [r for r in after if r["committed"] < end]

    def st(rs: list[dict[str, Any]]) -> dict[str, Any]:
        ds = [r["duration_s"] for r in rs]
        return {
            "epochs": len(rs),
            "median_s": pct(ds, 0.5),
            "max_s": max(ds) if ds else None,
            "rows_per_s": (
                sum(r["rows"] or 0 for r in rs) / (rs[-1]["committed"] - rs[0]["committed"])
                if len(rs) > 1 and rs[-1]["committed"] > rs[0]["committed"]
                else None
            ),
        }

    return {"before": st(before), "during": st(during), "after": st(after)}


def analyse_reactive(side: Side, marks: dict[str, Any]) -> dict[str, Any]:
    rows = side.rows()
    order = ["join", "graceful leave", "join again", "SIGKILL"]
    times = [marks[k]["at"] for k in order if k in marks]
    out: dict[str, Any] = {"marks": marks, "epochs": rows, "changes": {}}
    for i, k in enumerate(o for o in order if o in marks):
        nxt = times[i + 1] if i + 1 < len(times) else None
        ch = phase_stats(rows, marks[k]["at"], nxt)
        first = marks[k].get("first_epoch_using_it")
        if "host" in marks[k]:  # again from every epoch: the wait may have given up
            host = marks[k]["host"]
            on = [
                r
                for r in rows
                if r["committed"] >= marks[k]["at"]
                and any(n.split("/")[0] == host for n in r["executors_used"] or [])
            ]
            first = on[0] if on else None
            marks[k]["first_epoch_using_it"] = first
        if first is not None:
            ch["worker start -> ALIVE s"] = marks[k]["alive_at"] - marks[k]["at"]
            ch["worker start -> first epoch using it s"] = first["committed"] - marks[k]["at"]
            ch["first epoch using it"] = first["epoch"]
            ch["first epoch using it: its duration s"] = first["duration_s"]
            before = [r for r in rows if r["committed"] < marks[k]["at"]]
            cores0 = before[-1]["cores"] if before else None
            rise = [
                r
                for r in rows
                if r["committed"] >= marks[k]["at"] and cores0 is not None
                and r["cores"] is not None and r["cores"] > cores0
            ]  # fmt: skip
            if rise:
                ch["worker start -> first epoch with more cores s"] = (
                    rise[0]["committed"] - marks[k]["at"]
                )
        if k == "graceful leave":
            ch["removal s"] = marks[k]["done_at"] - marks[k]["at"]
        out["changes"][k] = ch
    return out


def part_reactive(b: Bench, rate: float, cost: float, hold_s: float) -> dict[str, Any]:
    cluster = "bench-reactive"
    b.cli("cluster", "start", "--name", cluster, "--workers", "1", "--cores", "1",
          "--memory", "512m")  # fmt: skip
    master = str(b.store.get_cluster(cluster).master_url)
    res: dict[str, Any] = {"cluster": cluster, "rate": rate, "cost_ms": cost}
    try:
        app = "reactive"
        out = b.root / "out" / app
        b.submit(app, cluster, "reactive", rate=rate, cap=int(rate * 10), cost_ms=cost, out=out)
        side = StokerSide(b, app, out)
        wait_commits(b, app, side.job, 3)
        note("reactive: stoker's job commits")
        marks = reactive_side(b, side, cluster, hold_s)
        res["stoker"] = analyse_reactive(side, marks)
        res["stoker"]["failures"] = side.failures()
        res["stoker"]["rescales"] = b.rescales(side.job)
        b.end_app(app)
        note("reactive: stoker's application ended; plain Structured Streaming next")
        plain = PlainSide(b.root / "plain", master)
        plain.start(rate, cost)
        try:
            D().wait_until(
                lambda: "3 batches of plain Spark",
                lambda: (plain.alive(), len(plain.rows()) >= 3)[1],
                START_TIMEOUT,
            )
            marks = reactive_side(b, plain, cluster, hold_s)
            res["plain"] = analyse_reactive(plain, marks)
            res["plain"]["failures"] = plain.failures()
        finally:
            plain.stop()
    finally:
        with contextlib.suppress(Exception):
            b.cli("cluster", "stop", cluster)
    return res


# --------------------------------------------------------------------------------------------
# Part 2: the load step.


def step_run(
    b: Bench, name: str, workers: int, scaling: str, args: Any, parts: int | None
) -> dict[str, Any]:
    app = "step-" + "".join(c if c.isalnum() else "-" for c in name).strip("-").replace("--", "-")
    job = f"{app}.{JOB}"
    cluster = f"app-{app}"
    out = b.root / "out" / app
    prog: dict[str, Any] = {"rate": args.rate, "cap": args.cap, "cost_ms": args.cost_ms,
                            "out": out}  # fmt: skip
    if parts:
        prog["partitions"] = parts
    b.submit(app, f"standalone:workers={workers},{WORKER}", scaling, **prog)
    wait_commits(b, app, job, 3)
    samples: list[dict[str, Any]] = []
    drained = wait_drained(b, app, job, args.rate, samples, cluster)
    note(f"{name}: start-up backlog drained: {drained}")
    hold(b, app, cluster, args.warm, samples)
    t0 = time.time()
    note(f"{name}: base rate {args.rate:g}/s")
    hold(b, app, cluster, args.base, samples)
    t_up = time.time()
    up = b.control_rate(job, args.rate * args.factor)
    note(f"{name}: rate {args.rate * args.factor:g}/s")
    hold(b, app, cluster, args.step, samples)
    t_down = time.time()
    down = b.control_rate(job, args.rate)
    note(f"{name}: rate {args.rate:g}/s again")
    hold(b, app, cluster, args.after, samples)
    t_end = time.time()
    events = [b.control_status(job, str(ev.get("control_id", ""))) or ev for ev in (up, down)]
    epochs = [
        {
            "epoch": int(e.epoch),
            "pinned": e.pinned_at,
            "committed": e.committed_at,
            "duration_ms": e.duration_ms,
            "backlog": e.backlog,
            "executors": e.executors,
            "cores": e.cores,
            "rows": e.rows_in,
        }
        for e in b.epochs(job)
    ]
    rec = b.record(app)
    run = {
        "name": name,
        "app": app,
        "job": job,
        "cluster_at_start": f"standalone:workers={workers},{WORKER}",
        "scaling": scaling,
        "scaling_stored": rec.scaling if rec is not None else None,
        "partitions": parts,
        "t0": t0,
        "t_up": t_up,
        "t_down": t_down,
        "t_end": t_end,
        "control": events,
        "epochs": epochs,
        "samples": samples,
        "rescales": b.rescales(job),
        "attempts": len(b.store.list_attempts(job)),
    }
    b.end_app(app)
    D().wait_until(
        lambda: f"cluster {cluster} STOPPED",
        lambda: str(b.store.get_cluster(cluster).state) == "STOPPED",
        180,
    )
    return run


def wait_drained(
    b: Bench, app: str, job: str, rate: float, samples: list[dict[str, Any]], cluster: str
) -> bool:
    """Until the rows that piled up while Spark started are read: the last two epochs left
    at most 2 s of input behind (at most ``DRAIN_S``; False if they never were)."""
    end = time.monotonic() + DRAIN_S
    while time.monotonic() < end:
        eps = b.epochs(job)
        last = eps[-2:]
        if len(last) == 2 and all(e.backlog is not None and e.backlog <= 2 * rate for e in last):
            return True
        if len(eps) >= 5 and all(e.backlog is None for e in eps[-5:]):
            return False  # the driver reports no backlog: nothing to wait for
        hold(b, app, cluster, 1.0, samples)
    return False


def applied_epoch(ev: dict[str, Any]) -> int | None:
    for k in ("applied_epoch", "epoch"):
        if ev.get(k) is not None:
            return int(ev[k])
    return None


def analyse_step(run: dict[str, Any], rate: float, factor: float) -> dict[str, Any]:
    """Per-epoch latency and the phase figures of one configuration."""
    up_ep = applied_epoch(run["control"][0]) if run["control"] else None
    down_ep = applied_epoch(run["control"][1]) if len(run["control"]) > 1 else None
    t0, t_up, t_down, t_end = run["t0"], run["t_up"], run["t_down"], run["t_end"]
    series = []
    for e in run["epochs"]:
        if e["committed"] < t0 - 5:
            continue
        # The rate in force when the epoch was planned: by the control event's applied epoch,
        # else by the time of the request.
        if up_ep is not None and down_ep is not None:
            high = up_ep <= e["epoch"] < down_ep
        else:
            high = t_up <= e["pinned"] < t_down
        r = rate * factor if high else rate
        if high:
            ph = "step"
        elif (up_ep is not None and e["epoch"] < up_ep) or (up_ep is None and e["pinned"] < t_up):
            ph = "base"
        else:
            ph = "after"
        dur = e["duration_ms"] / 1000 if e["duration_ms"] is not None else None
        if dur is None:
            dur = e["committed"] - e["pinned"]
        back = e["backlog"]
        lat = dur + (back / r if back is not None else 0.0)
        series.append({**e, "t": e["committed"] - t0, "rate": r, "phase": ph, "latency_s": lat})
    run["series"] = series
    # The backlog the epoch before each rate change left. Before the generator kept the rows it
    # owed across a rate change, these rows were dropped at the change; now they are worked
    # off after it (the "after" figures show it).
    dropped = []
    for ep in (up_ep, down_ep):
        prev = [e for e in run["epochs"] if ep is not None and e["epoch"] == ep - 1]
        dropped.append(prev[0]["backlog"] if prev else None)
    run["rows_dropped_at_rate_change"] = dropped

    def phase(name: str) -> dict[str, Any]:
        """The epochs planned in phase ``name`` (by the epochs the rate changes applied at)."""
        mine = [s for s in series if s["phase"] == name and s["committed"] >= t0]
        lats = [s["latency_s"] for s in mine]
        backs = [s["backlog"] for s in mine if s["backlog"] is not None]
        return {
            "epochs": len(lats),
            "latency_median_s": pct(lats, 0.5),
            "latency_p90_s": pct(lats, 0.9),
            "latency_max_s": max(lats) if lats else None,
            "backlog_max": max(backs) if backs else None,
        }

    samples = [s for s in run["samples"] if t0 <= s["t"] <= t_end]
    ex_s = wk_s = 0.0
    known = True
    for a, z in itertools.pairwise(samples):
        dt = z["t"] - a["t"]
        if a.get("executors") is None:
            known = False
        ex_s += dt * (a.get("executors") or 0)
        wk_s += dt * (a.get("workers") or 0)
    execs = [s["executors"] for s in samples if s.get("executors") is not None]
    run["figures"] = {
        "base": phase("base"),
        "step": phase("step"),
        "after": phase("after"),
        "rows_dropped_at_step_down": run["rows_dropped_at_rate_change"][1],
        "executor_seconds": ex_s if known else None,
        "worker_seconds": wk_s,
        "executors_max": max(execs) if execs else None,
        "executors_min": min(execs) if execs else None,
        "seconds": t_end - t0,
        "load": [min(s["load"] for s in samples), max(s["load"] for s in samples)]
        if samples
        else None,
    }
    return run


def part_step(b: Bench, args: Any) -> dict[str, Any]:
    parts = None if source_follows_cores() else 4
    runs = {}
    for name, (workers, scaling) in CONFIGS.items():
        if args.only and name.split()[0] not in args.only.split(","):
            continue
        note(f"step: {name} ({scaling}, {workers} worker(s) at start)")
        try:
            runs[name] = analyse_step(
                step_run(b, name, workers, scaling, args, parts), args.rate, args.factor
            )
        except Exception as e:
            note(f"step: {name} failed: {e}")
            runs[name] = {"name": name, "error": str(e)}
    return {
        "rate": args.rate,
        "factor": args.factor,
        "cap": args.cap,
        "cost_ms": args.cost_ms,
        "base_s": args.base,
        "step_s": args.step,
        "after_s": args.after,
        "partitions": parts or "one per core (source default)",
        "runs": runs,
    }


def source_follows_cores() -> bool:
    import inspect

    from stoker import sources

    return inspect.signature(sources.generator).parameters["partitions"].default is None


# --------------------------------------------------------------------------------------------
# Tables and the plot.


def f(x: Any, digits: int = 1) -> str:
    import _common as C

    return C.fmt(x, digits) if x is not None else "-"


def print_reactive(res: dict[str, Any]) -> None:
    import _common as C

    sides = [k for k in ("stoker", "plain") if k in res]
    rows: list[list[str]] = []
    for change in ("join", "graceful leave", "join again", "SIGKILL"):
        for key in (
            "worker start -> ALIVE s",
            "worker start -> first epoch using it s",
            "worker start -> first epoch with more cores s",
            "first epoch using it: its duration s",
            "removal s",
        ):
            vals = [res[s]["changes"].get(change, {}).get(key) for s in sides]
            if any(v is not None for v in vals):
                rows.append([f"{change}: {key}", *(f(v) for v in vals)])
        for ph in ("before", "during", "after"):
            cells = []
            for s in sides:
                st = res[s]["changes"].get(change, {}).get(ph, {})
                cells.append(
                    f"{f(st.get('median_s'))} / {f(st.get('max_s'))} ({st.get('epochs', 0)})"
                )
            rows.append([f"{change}: epoch s {ph}, median / max (n)", *cells])
    print(f"\n1. reactive: workers joining and leaving (rate {res['rate']:g}/s, "
          f"{res['cost_ms']:g} ms per row)")  # fmt: skip
    print(C.table(["", *sides], rows))
    for side in sides:
        print(f"failures, {side}: {json.dumps(res[side]['failures'])}")
    print(
        f"Flink reactive mode (design, not measured here): {FLINK_REACTIVE_S:.0f} s resource "
        "stabilization, then a full restart of the job from its last checkpoint per change."
    )


def print_step(res: dict[str, Any]) -> None:
    import _common as C

    runs = {k: v for k, v in res["runs"].items() if "figures" in v}
    names = list(runs)
    rows = []
    for ph in ("base", "step", "after"):
        for key, label in (
            ("latency_median_s", "latency median s"),
            ("latency_p90_s", "latency p90 s"),
            ("latency_max_s", "latency max s"),
            ("backlog_max", "backlog max rows"),
        ):
            rows.append([f"{ph}: {label}", *(f(runs[n]["figures"][ph][key]) for n in names)])
    for key, label in (
        ("executor_seconds", "executor-seconds"),
        ("worker_seconds", "worker-seconds"),
        ("executors_min", "executors min"),
        ("executors_max", "executors max"),
        ("rows_dropped_at_step_down", "backlog at the step down (rows)"),
    ):
        rows.append([label, *(f(runs[n]["figures"][key], 0) for n in names)])
    ref = "fixed max (4)"
    if ref in runs:
        for key in ("executor_seconds", "worker_seconds"):
            base = runs[ref]["figures"][key]
            rows.append(
                [f"{key.replace('_', '-')} / fixed max",
                 *(f"{runs[n]['figures'][key] / base:.2f}x"
                   if base and runs[n]["figures"][key] is not None else "-" for n in names)]
            )  # fmt: skip
        for ph in ("step", "after"):
            base = runs[ref]["figures"][ph]["latency_median_s"]
            rows.append(
                [f"{ph}: latency median / fixed max",
                 *(f"{runs[n]['figures'][ph]['latency_median_s'] / base:.2f}x"
                   if base and runs[n]["figures"][ph]["latency_median_s"] else "-"
                   for n in names)]
            )  # fmt: skip
    rows.append(["load average (1 min)",
                 *(f"{runs[n]['figures']['load'][0]:.1f}..{runs[n]['figures']['load'][1]:.1f}"
                   if runs[n]["figures"]["load"] else "-" for n in names)])  # fmt: skip
    print(
        f"\n2. load step: {res['rate']:g} rows/s for {res['base_s']:g} s, "
        f"{res['rate'] * res['factor']:g} for {res['step_s']:g} s, {res['rate']:g} for "
        f"{res['after_s']:g} s; {res['cost_ms']:g} ms per row, at most {res['cap']} rows per "
        f"epoch, partitions: {res['partitions']}"
    )
    print(C.table(["", *names], rows))
    for n, r in res["runs"].items():
        if "error" in r:
            print(f"{n}: FAILED: {r['error']}")
    auto = res["runs"].get("auto", {})
    hist = auto.get("rescales", {})
    if hist:
        print("\nrescale history of the auto run (oldest first):")
        t0 = auto.get("t0", 0.0)
        for rs in reversed(hist.get("rescales", [])):
            print(
                f"  t={rs['at'] - t0:+7.1f} s {rs['kind']:<8} {rs['status']:<10} "
                f"{rs.get('from_executors')} -> {rs.get('to_executors')}  "
                f"in use after {f(rs.get('seconds_to_in_use'))} s  {rs.get('reason', '')}"
            )
            print(f"      signals {json.dumps(rs.get('signals'), default=str)[:400]}")
            if rs.get("workers"):
                print(f"      workers {json.dumps(rs.get('workers'))}")


def plot(res: dict[str, Any], png: Path) -> None:
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = {k: v for k, v in res["runs"].items() if "series" in v}
    fig, axes = plt.subplots(3, 1, figsize=(10, 9), sharex=True)
    colors = {"auto": "tab:blue", "fixed min (1)": "tab:red", "fixed max (4)": "tab:green"}
    any_run = None
    for name, r in runs.items():
        any_run = r
        t = [s["t"] for s in r["series"]]
        c = colors.get(name)
        kw = {"label": name, "color": c, "lw": 1.2, "marker": ".", "ms": 3}
        axes[0].plot(t, [s["latency_s"] for s in r["series"]], **kw)
        axes[1].plot(t, [s["backlog"] or 0 for s in r["series"]], **kw)
        st = [s["t"] - r["t0"] for s in r["samples"]]
        ex = [s["executors"] if s.get("executors") is not None else float("nan")
              for s in r["samples"]]  # fmt: skip
        axes[2].step(st, ex, where="post", label=name, color=c, lw=1.2)
    auto = runs.get("auto")
    x_lo = -5.0
    if auto is not None:  # the autoscaler's decisions, on the executors panel
        for rs in auto.get("rescales", {}).get("rescales", []):
            if rs.get("kind") != "decision":
                continue
            x = rs["at"] - auto["t0"]
            x_lo = min(x_lo, x - 5)
            axes[2].axvline(x, color="tab:blue", ls=":", lw=1)
            axes[2].annotate(
                f"{rs.get('from_executors')}->{rs.get('to_executors')}",
                (x, 4.6), color="tab:blue", fontsize=8, ha="left",
            )  # fmt: skip
    if any_run is not None:
        for ax in axes:
            ax.axvspan(any_run["t_up"] - any_run["t0"], any_run["t_down"] - any_run["t0"],
                       color="0.9", zorder=0)  # fmt: skip
            ax.grid(True, alpha=0.3)
        axes[2].set_xlim(x_lo, any_run["t_end"] - any_run["t0"] + 5)
    axes[0].set_ylabel("latency of an epoch's\nnewest rows (s)")
    axes[0].set_yscale("log")
    axes[0].yaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
    axes[0].yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    axes[0].yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    axes[2].set_ylim(0, 5)
    axes[2].yaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    axes[1].set_ylabel("backlog (rows)")
    axes[2].set_ylabel("executors")
    axes[2].set_xlabel(
        f"seconds; shaded: {res['rate'] * res['factor']:g} rows/s, else {res['rate']:g} rows/s"
    )
    axes[0].legend(loc="upper left")
    axes[0].set_title(
        f"Load step, {res['cost_ms']:g} ms per row (sleep), trigger 1 s: auto vs fixed 1 and 4"
    )
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)
    print(f"wrote {png}")


# --------------------------------------------------------------------------------------------


@contextlib.contextmanager
def work_folder() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="stoker-bench-scaling-"))
    try:
        yield root
    finally:
        # The job manager starts a cleanup process after a job ends: let it finish first.
        with contextlib.suppress(D().Timeout):
            D().wait_until(
                lambda: "cleanup processes of the work folder to end",
                lambda: (
                    not [
                        p
                        for p in D().proc_table()
                        if "stoker.runtime.cleanup" in p.argv
                        and any(str(root) in a for a in p.argv)
                    ]
                ),
                120,
            )
        D().sweep(root)
        if os.environ.get("BENCH_KEEP"):
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


def bench_main() -> int:
    import _common as C

    ap = C.arg_parser(__doc__.split("\n\n")[0])
    ap.add_argument("part", nargs="?", default="all", choices=["all", "reactive", "step", "plot"])
    ap.add_argument("input", nargs="?", help="plot: the JSON a run wrote")
    ap.add_argument("--png", default=str(REPO / "docs" / "scaling-load-step.png"))
    ap.add_argument("--rate", type=float, default=150.0, help="base rows per second (150)")
    ap.add_argument("--factor", type=float, default=5.0, help="the step's rate / base (5)")
    ap.add_argument("--cap", type=int, default=10000, help="max rows per epoch (10000)")
    ap.add_argument("--cost-ms", type=float, default=2.0, help="sleep per row (2 ms)")
    ap.add_argument("--warm", type=float, default=20.0, help="s after the first commits (20)")
    ap.add_argument("--base", type=float, default=60.0)
    ap.add_argument("--step", type=float, default=180.0)
    ap.add_argument("--after", type=float, default=120.0)
    ap.add_argument("--hold", type=float, default=25.0, help="reactive: s each state is held")
    ap.add_argument("--only", default="", help="step: configurations, e.g. auto,fixed")
    args = ap.parse_args()
    if args.part == "plot":
        res = json.loads(Path(args.input).read_text())
        step = res["step"]
        for name, run in step["runs"].items():  # again, from the raw records it saved
            if "epochs" in run:
                step["runs"][name] = analyse_step(run, step["rate"], step["factor"])
        print_step(res["step"])
        plot(res["step"], Path(args.png))
        return 0
    info = C.machine()
    C.print_machine(info)
    code = D().head_commit()
    print(f"HEAD {code['head']}, {code['uncommitted_files']} uncommitted file(s)")
    payload: dict[str, Any] = {"machine": info, "code": code}
    parts = ["reactive", "step"] if args.part == "all" else [args.part]
    with work_folder() as root:
        b = Bench(root)
        try:
            for part in parts:
                t0 = time.time()
                note(f"part {part}")
                try:
                    if part == "reactive":
                        payload[part] = part_reactive(b, args.rate, args.cost_ms, args.hold)
                    else:
                        payload[part] = part_step(b, args)
                except Exception as e:
                    note(f"part {part} failed: {e!r}")
                    payload[part] = {"error": repr(e)}
                payload[part]["minutes"] = (time.time() - t0) / 60
                C.write_json(args.json, payload)
        finally:
            b.close()
    if "reactive" in payload and "stoker" in payload["reactive"]:
        print_reactive(payload["reactive"])
    if "step" in payload and "runs" in payload["step"]:
        print_step(payload["step"])
        plot(payload["step"], Path(args.png))
    C.write_json(args.json, payload)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    if sys.argv[1:2] == [APP_MODE]:
        run_program(sys.argv[2:])
    elif sys.argv[1:2] == [PLAIN_MODE]:
        run_plain(sys.argv[2:])
    else:
        sys.exit(bench_main())
