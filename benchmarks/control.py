"""The control plane (issue 9, "Measured"): apply latency, a change vs a restart, and its cost.

Every job here is a real driver process (``python benchmarks/control.py _stoker-driver``:
``stoker.run`` on its main thread, ``local[2]``), an endless
``sources.generator(max_rows_per_epoch=R)`` -> ``id % 100 >= threshold`` -> files sink
(parquet). Each output row carries the ``threshold`` its epoch was filtered with. The
benchmark process itself starts no Spark: it sends control events through the store, the way
the server does after parsing (``events.validate`` -> ``Store.add_control``), and reads the
store, the output folders and the drivers' progress logs (a StreamingQueryListener in each
driver appends every progress as a JSON line).

1. ``latency``: for each ``--triggers`` value (default 0 and 0.5 s), one job; ``--events``
   config events (send one, wait until COMMITTED, then a random gap of 0 to 200 ms + one
   trigger interval, so the events do not phase-lock with the epochs or the trigger).
   ack = the event's ``created_at`` (it is durable), APPLIED = ``applied_at`` (the pin of
   the epoch that applies it), COMMITTED = ``ended_at``. Each
   event's time is split along the epoch that applied it (N): ack -> batch N starts (the rest
   of the epoch in flight, Spark's commit log, the wait for the trigger), batch N start ->
   pin (latestOffset, offset log, planning), pin -> commit (the epoch itself).
2. ``change``: change the threshold, and the trigger interval, of a running job. stoker: a
   config event and a trigger event to one running driver. Baseline: what a Spark user does
   today. A plain PySpark app (``_baseline-driver``: the same source, filter and conf,
   ``foreachBatch`` appending parquet to one folder, threshold and trigger from argv), its own
   driver process, is stopped (SIGTERM; its handler calls ``query.stop()`` and
   ``spark.stop()``) and a new driver process is started from the same checkpoint with the new
   setting. The change is requested either right after an epoch committed ("between") or
   ~60 ms into an epoch ("mid"), the same points for both sides. Time from the request until
   an epoch with the new setting has committed: for the threshold, until the first output file
   with the new threshold appears; for the trigger, until the first progress (rows > 0) of the
   query run that has the new trigger. Rows processed twice: ids written more than once in the
   output, and the rows of batches whose ``foreachBatch`` started again in a later process or
   query run (read from Spark's offset log).
3. ``cost``: a job that receives no control, before this issue (commit 535cbbc, in a
   temporary ``git worktree``) vs now: the same driver process (``_cost-driver``: one warm-up
   job, then ``--cost-epochs`` epochs of ``generator(total) -> filter -> parquet``, trigger 0)
   with ``PYTHONPATH`` set to one tree or the other, rounds in ABBA order. Per epoch, from a
   StreamingQueryListener: ``triggerExecution``, ``addBatch`` (the foreachBatch body) and
   ``latestOffset`` (where the sources now read the control version). Each side uses its own
   ``DEFAULT_CONF``. Now-side only: the driver's control work per epoch
   (``EpochControl.begin``, timed by a wrapper) and one ``ReaderControl.plan`` (the reader's
   per-trigger store read) timed in a loop.

Run: ``python benchmarks/control.py [all|latency|change|cost] [--events 100]
[--triggers 0,0.5] [--per-epoch 1000] [--reps 2] [--cost-rounds 4] [--cost-epochs 40]
[--cost-per-epoch 2000] [--before-rev 535cbbc] [--json out.json]``. ``BENCH_KEEP=1`` keeps
the work folder (drivers' logs, stores, outputs).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
JOB = "ctl-bench"
MID_DELAY_S = 0.06  # "mid": the change is requested this long after an epoch started
START_TIMEOUT = 300.0  # a cold driver on a shared 2-core machine
STEP_TIMEOUT = 120.0

# --------------------------------------------------------------------------------------------
# Small helpers shared by the drivers and the benchmark. Only the standard library at import
# time: the cost driver must import stoker from the tree PYTHONPATH names, nothing else.


def _append(path: str | Path, record: dict[str, Any]) -> None:
    line = json.dumps({"pid": os.getpid(), "t": time.time(), **record}) + "\n"
    fd = os.open(str(path), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _lines(path: Path) -> list[dict[str, Any]]:
    try:
        text = path.read_text()
    except OSError:
        return []
    out = []
    for ln in text.splitlines():
        try:
            out.append(json.loads(ln))
        except ValueError:  # a line being written
            continue
    return out


def _iso(ts: str) -> float:
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


def pct(xs: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[max(0, math.ceil(q / 100 * len(s)) - 1)]


def _driver_session(name: str) -> Any:
    from pyspark.sql import SparkSession

    from stoker.runtime.session import DEFAULT_CONF, register_sources

    builder = SparkSession.builder.master("local[2]").appName(name)
    for k, v in DEFAULT_CONF.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register_sources(spark)
    return spark


def _progress_listener(path: str) -> Any:
    """A StreamingQueryListener appending each query start and progress to ``path``."""
    from pyspark.sql.streaming import StreamingQueryListener

    class Log(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            _append(path, {"ev": "started", "run": str(event.runId)})

        def onQueryProgress(self, event: Any) -> None:
            p = event.progress
            _append(
                path,
                {
                    "ev": "progress",
                    "run": str(p.runId),
                    "name": p.name,
                    "batch": int(p.batchId),
                    "rows": int(p.numInputRows),
                    "ts": p.timestamp,
                    "d": {k: float(v) for k, v in dict(p.durationMs).items()},
                },
            )

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    return Log()


def _keep(df: Any, threshold: int, batch: int) -> Any:
    from pyspark.sql import functions as F

    return df.where(F.col("id") % 100 >= F.lit(threshold)).select(
        F.col("id"), F.lit(threshold).alias("threshold"), F.lit(batch).alias("ep")
    )


# --------------------------------------------------------------------------------------------
# The drivers (each its own process).


def stoker_driver(a: argparse.Namespace) -> None:
    """A stoker job on the main thread: SIGTERM stops it between epochs (SUSPENDED)."""
    import stoker
    from stoker import sinks, sources

    spark = _driver_session("control-bench-stoker")
    spark.streams.addListener(_progress_listener(a.progress))
    marks = a.marks

    def transform(df: Any, ctx: Any) -> Any:
        _append(marks, {"ev": "start", "batch": int(ctx.epoch)})
        return _keep(df, int(ctx.config["threshold"]), int(ctx.epoch))

    p = stoker.Pipeline(JOB, {"threshold": 0})
    p.source(sources.generator(max_rows_per_epoch=a.per_epoch))
    p.transform(transform)
    p.sink(sinks.files(a.out, "parquet"))
    if not a.paced:
        from stoker.runtime import launch

        launch.set_launch({"stoker.paced_trigger": "false"}, None, restart=False)
    res = stoker.run(p, spark=spark, trigger=a.trigger, state_dir=a.state)
    _append(marks, {"ev": "ended", "state": str(res.state)})


def baseline_driver(a: argparse.Namespace) -> None:
    """A plain Structured Streaming app: setting from argv, stopped by SIGTERM (query.stop())."""
    from stoker.sources.generator import FORMAT

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    spark = _driver_session("control-bench-baseline")
    spark.streams.addListener(_progress_listener(a.progress))
    marks, out, threshold = a.marks, a.out, a.threshold

    def batch(df: Any, batch_id: int) -> None:
        _append(marks, {"ev": "start", "batch": int(batch_id)})
        _keep(df, threshold, int(batch_id)).write.mode("append").parquet(out)
        _append(marks, {"ev": "end", "batch": int(batch_id)})

    stream = (
        spark.readStream.format(FORMAT)
        .options(sid="s0", max_rows_per_epoch=str(a.per_epoch), partitions="2")
        .load()
    )
    q = (
        stream.writeStream.foreachBatch(batch)
        .option("checkpointLocation", a.checkpoint)
        .queryName("control_bench_baseline")
        .trigger(processingTime=f"{int(a.trigger * 1000)} milliseconds")
        .start()
    )
    while not stop.wait(0.05) and q.isActive:
        pass
    _append(marks, {"ev": "stopping"})
    q.stop()
    _append(marks, {"ev": "stopped"})
    spark.stop()


class _EpochSteps:
    """Per epoch, on the epoch's own thread: the foreachBatch body (``EpochProcessor._run``),
    its Spark write (``FilesSink.prepare``), the transform, the store's pin and reads, and
    (now only) ``EpochControl.begin``. Wrapped from outside; ~1 us per wrapper."""

    def __init__(self) -> None:
        self.local = threading.local()
        self.epochs: list[dict[str, float]] = []
        self._saved: list[tuple[Any, str, Any]] = []

    def install(self) -> None:
        from stoker.pipeline import Pipeline
        from stoker.runtime.epoch import EpochProcessor
        from stoker.sinks.files import FilesSink
        from stoker.store._sqlstore import SqlStore

        targets: list[tuple[Any, str, str]] = [
            (FilesSink, "prepare", "prepare"),
            (Pipeline, "apply", "transform"),
            (SqlStore, "pin_epoch", "pin_epoch"),
            (SqlStore, "get_job", "get_job"),
            (SqlStore, "control_snapshot", "control_snapshot"),
            (SqlStore, "applied_controls", "applied_controls"),
        ]
        try:
            from stoker.runtime.control import EpochControl

            targets.append((EpochControl, "begin", "control_begin"))
        except ImportError:  # the tree before control
            pass
        for owner, attr, label in targets:
            if hasattr(owner, attr):
                self._wrap(owner, attr, label)
        orig = EpochProcessor._run
        self._saved.append((EpochProcessor, "_run", orig))
        timer = self

        def run(proc: Any, df: Any, epoch: Any) -> None:
            timer.local.cur = Counter()
            t0 = time.perf_counter()
            try:
                orig(proc, df, epoch)
            finally:
                cur = timer.local.cur
                timer.local.cur = None
                cur["body"] = (time.perf_counter() - t0) * 1000
                cur["own"] = cur["body"] - cur["prepare"] - cur["transform"]
                timer.epochs.append(dict(cur))

        EpochProcessor._run = run  # type: ignore[method-assign,assignment]

    def _wrap(self, owner: Any, attr: str, label: str) -> None:
        orig = getattr(owner, attr)
        self._saved.append((owner, attr, orig))
        timer = self

        def inner(*args: Any, **kw: Any) -> Any:
            cur = getattr(timer.local, "cur", None)
            if cur is None:
                return orig(*args, **kw)
            t0 = time.perf_counter()
            try:
                return orig(*args, **kw)
            finally:
                cur[label] += (time.perf_counter() - t0) * 1000

        setattr(owner, attr, inner)

    def uninstall(self) -> None:
        for owner, attr, orig in reversed(self._saved):
            setattr(owner, attr, orig)
        self._saved.clear()


def cost_driver(a: argparse.Namespace) -> None:
    """One warm-up job and ``jobs`` measured jobs, no control; per-epoch figures to JSON."""
    from pyspark.sql import functions as F

    import stoker
    from stoker import sinks, sources

    spark = _driver_session("control-bench-cost")
    work = Path(a.work)
    progress = work / "progress.jsonl"
    spark.streams.addListener(_progress_listener(str(progress)))
    probe = F.udf(lambda _: __import__("stoker").__file__, "string")
    worker_file = spark.range(1).select(probe("id")).first()[0]

    steps = _EpochSteps()
    steps.install()

    names = []
    for j in range(a.jobs + 1):
        epochs = a.epochs if j else max(5, a.epochs // 4)
        job = f"cost-{j}"
        p = stoker.Pipeline(job)
        p.source(sources.generator(total=epochs * a.per_epoch, max_rows_per_epoch=a.per_epoch))
        p.transform(lambda df, ctx: df.filter(F.col("id") % 3 == 0))
        p.sink(sinks.files(str(work / f"out-{j}"), "parquet"))
        res = stoker.run(p, spark=spark, trigger=0, state_dir=work / f"state-{j}")
        if str(res.state) != "FINISHED":
            raise RuntimeError(f"{job} ended {res.state}")
        names.append((f"stoker_{job}".replace("-", "_"), epochs, j == 0))
    steps.uninstall()
    measured_steps = steps.epochs[-a.epochs * a.jobs :]

    plan_ms: list[float] = []
    try:
        from stoker.sources._control import ReaderControl
    except ImportError:
        ReaderControl = None  # type: ignore[assignment,misc]
    if ReaderControl is not None:
        rc = ReaderControl(f"sqlite:///{work / 'state-1' / 'store.db'}", "cost-1")
        for _ in range(300):
            t0 = time.perf_counter()
            rc.plan({"next": 0, "finished": False})
            plan_ms.append((time.perf_counter() - t0) * 1000)
        rc.close()
        plan_ms = plan_ms[50:]

    deadline = time.monotonic() + 30
    while True:
        got = _lines(progress)
        batches = {}
        for r in got:
            if r["ev"] == "progress" and r["rows"] > 0:
                batches[(r["name"], r["batch"])] = r
        if all(sum(1 for k in batches if k[0] == n) >= e for n, e, _ in names):
            break
        if time.monotonic() > deadline:
            raise RuntimeError("listener: progress missing")
        time.sleep(0.1)
    measured = [
        {
            "trigger": r["d"].get("triggerExecution", 0.0),
            "add_batch": r["d"].get("addBatch", 0.0),
            "latest_offset": r["d"].get("latestOffset", 0.0),
            "job": k[0],
        }
        for k, r in sorted(batches.items())
        if not any(k[0] == n and warm for n, _, warm in names)
    ]
    Path(a.result).write_text(
        json.dumps(
            {
                "stoker": stoker.__file__,
                "worker_stoker": worker_file,
                "epochs": measured,
                "steps": measured_steps,
                "plan_ms": plan_ms,
            }
        )
    )
    spark.stop()


# --------------------------------------------------------------------------------------------
# The benchmark's side: drivers as processes, what they leave behind.


class Driver:
    """One driver process of this file, in its own process group."""

    def __init__(self, mode: str, folder: Path, args: list[str], env: dict[str, str]) -> None:
        self.folder = folder
        log_path = folder / f"{mode.strip('_')}-{int(time.time() * 1000)}.log"
        self._log = log_path.open("wb")
        self.log_path = log_path
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "control.py"), mode, *args],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=str(folder),
            env={**os.environ, "PYTHONUNBUFFERED": "1", **env},
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> None:
        if self.proc.poll() is not None:
            tail = self.log_path.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"driver {self.pid} exited ({self.proc.returncode}):\n{tail}")

    def term(self, timeout: float = 120.0) -> float:
        """SIGTERM to the driver's Python process, as a user or a host would; wall time at
        which it had exited."""
        os.kill(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise RuntimeError(f"driver {self.pid} did not stop within {timeout} s") from None
        ended = time.time()
        self.kill()  # whatever the process left behind (a JVM still exiting)
        return ended

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self._log.close()


def _wait(what: str, check: Any, timeout: float, driver: Driver | None = None) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if driver is not None:
            driver.alive()
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.01)


class Folder:
    """A job's files: output, progress log, marks (foreachBatch starts), checkpoint."""

    def __init__(self, root: Path) -> None:
        root.mkdir(parents=True)
        self.root = root
        self.out = root / "out"
        self.progress = root / "progress.jsonl"
        self.marks = root / "marks.jsonl"
        self.state = root / "state"
        self.checkpoint = root / "checkpoint"
        self._seen: set[Path] = set()

    def data_progress(self, run: str | None = None) -> list[dict[str, Any]]:
        return [
            r
            for r in _lines(self.progress)
            if r["ev"] == "progress" and r["rows"] > 0 and (run is None or r["run"] == run)
        ]

    def runs(self) -> list[str]:
        return [r["run"] for r in _lines(self.progress) if r["ev"] == "started"]

    def wait_steady(self, n: int, driver: Driver) -> None:
        """``n`` data epochs committed by the latest query run."""

        def ok() -> bool:
            runs = self.runs()
            return bool(runs) and len(self.data_progress(runs[-1])) >= n

        _wait(f"{n} epochs of {self.root.name}", ok, START_TIMEOUT, driver)

    def wait_point(self, mode: str, driver: Driver) -> None:
        """ "between": just after an epoch committed (its progress, after Spark's commit
        log); "mid": MID_DELAY_S after an epoch's foreachBatch started."""
        if mode == "between":
            n0 = len(self.data_progress())
            _wait(
                "an epoch to commit", lambda: len(self.data_progress()) > n0, STEP_TIMEOUT, driver
            )
            return
        n0 = len([m for m in _lines(self.marks) if m["ev"] == "start"])
        _wait(
            "an epoch to start",
            lambda: len([m for m in _lines(self.marks) if m["ev"] == "start"]) > n0,
            STEP_TIMEOUT,
            driver,
        )
        time.sleep(MID_DELAY_S)

    def _files(self) -> list[Path]:
        """The output's parquet files, skipping ``_``/``.`` folders (staging, _temporary)."""
        found = []
        for top, dirs, files in os.walk(self.out):  # errors (a folder renamed away) skipped
            dirs[:] = [d for d in dirs if not d.startswith(("_", "."))]
            found += [Path(top, n) for n in files if n.endswith(".parquet") and n[0] not in "_."]
        return found

    def mark_seen(self) -> None:
        self._seen.update(self._files())

    def wait_threshold(self, threshold: int, driver: Driver | None) -> float:
        """Wall time at which the first output file filtered with ``threshold`` was seen."""
        import pyarrow.parquet as pq

        def seen() -> float | None:
            for f in self._files():
                if f in self._seen:
                    continue
                try:
                    col = pq.read_table(f, columns=["threshold"]).column("threshold")
                except (OSError, ValueError):
                    continue  # being renamed away or written: next poll
                self._seen.add(f)
                if threshold in set(col.to_pylist()):
                    return time.time()
            return None

        return float(_wait(f"output with threshold {threshold}", seen, START_TIMEOUT, driver))

    def run_steps(self, before: set[str], t0: float) -> dict[str, float]:
        """Seconds from ``t0`` until the first query run not in ``before`` started, until its
        first epoch with rows started (the progress's trigger timestamp), until that epoch's
        progress (committed)."""
        recs = _lines(self.progress)
        started = [r for r in recs if r["ev"] == "started" and r["run"] not in before]
        if not started:
            return {}
        run = started[0]["run"]
        first = next(
            (r for r in recs if r["ev"] == "progress" and r["run"] == run and r["rows"]), None
        )
        steps = {"query_started": started[0]["t"] - t0}
        if first is not None:
            steps["first_epoch_started"] = _iso(first["ts"]) - t0
            steps["first_epoch_done"] = first["t"] - t0
        return steps

    def wait_trigger_applied(
        self, ctl: Control, ev: Any, before: set[str], driver: Driver | None
    ) -> float:
        """Wall time of the progress of the first epoch with rows under the new interval.

        A job of stoker's sources takes a new interval without a query restart: that is the
        progress of the epoch that applied the event (or a later one with rows); otherwise the
        first epoch with rows of the query run the restart began."""

        def seen() -> float | None:
            e = ctl.store.get_control(ctl.jid, ev.control_id)
            for r in self.data_progress():
                if r["run"] not in before:
                    return float(r["t"])
                if e.applied_epoch is not None and r["batch"] >= int(e.applied_epoch):
                    return float(r["t"])
            return None

        return float(_wait("an epoch under the new interval", seen, START_TIMEOUT, driver))

    def wait_new_run(self, before: set[str], driver: Driver | None) -> float:
        """Wall time at which a query run not in ``before`` reported an epoch with rows
        (progress comes after the epoch's commit log)."""

        def seen() -> float | None:
            for r in self.data_progress():
                if r["run"] not in before:
                    return float(r["t"])
            return None

        return float(_wait("an epoch of a new query run", seen, START_TIMEOUT, driver))

    def duplicates(self) -> int:
        """Rows written more than once (each id is produced once; the filter keeps or drops it)."""
        import pyarrow.parquet as pq

        ids: Counter[int] = Counter()
        for f in self._files():
            ids.update(pq.read_table(f, columns=["id"]).column("id").to_pylist())
        return sum(c - 1 for c in ids.values() if c > 1)

    def reruns(self, checkpoint: Path) -> tuple[list[int], int]:
        """Batches whose foreachBatch started more than once, and their rows (offset log)."""
        starts = Counter(m["batch"] for m in _lines(self.marks) if m["ev"] == "start")
        again = sorted(b for b, c in starts.items() if c > 1)
        rows = sum((c - 1) * _batch_rows(checkpoint, b) for b, c in starts.items() if c > 1)
        return again, rows


def _batch_rows(checkpoint: Path, batch: int) -> int:
    def nxt(n: int) -> int:
        if n < 0:
            return 0
        lines = (checkpoint / "offsets" / str(n)).read_text().splitlines()
        return int(json.loads(lines[2])["next"])

    return nxt(batch) - nxt(batch - 1)


def _stoker_driver(f: Folder, trigger: float, per_epoch: int, paced: bool = True) -> Driver:
    return Driver(
        "_stoker-driver",
        f.root,
        [
            f"--state={f.state}",
            f"--out={f.out}",
            f"--progress={f.progress}",
            f"--marks={f.marks}",
            f"--trigger={trigger}",
            f"--per-epoch={per_epoch}",
            f"--paced={int(paced)}",
        ],
        {},
    )


# --------------------------------------------------------------------------------------------
# 4. What reader pacing costs: CPU of a job between its epochs.


def _group_cpu(pgid: int) -> float:
    """CPU seconds (user + system) of every live process of the process group ``pgid``."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:  # field 5 of stat: the process group
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / tick


def run_pace(work: Path, rounds: int, trigger: float, window: float) -> dict[str, Any]:
    """Driver processes in ABBA order, paced (the query at trigger 0, readers holding between
    slots) and not (Spark's ProcessingTime trigger): CPU seconds of the driver's whole
    process group (Python, JVM, Python workers) over ``window`` seconds of steady epochs."""
    out: list[dict[str, Any]] = []
    order = [True, False, False, True] * max(1, rounds // 2)
    for i, paced in enumerate(order):
        f = Folder(work / f"pace-{i}")
        drv = _stoker_driver(f, trigger, 200, paced=paced)
        try:
            f.wait_steady(5, drv)
            n0, c0, t0 = len(f.data_progress()), _group_cpu(drv.pid), time.monotonic()
            time.sleep(window)
            drv.alive()
            n1, c1, t1 = len(f.data_progress()), _group_cpu(drv.pid), time.monotonic()
        finally:
            drv.term()
        rec = {
            "paced": paced,
            "cpu_s": c1 - c0,
            "seconds": t1 - t0,
            "epochs": n1 - n0,
            "load": os.getloadavg()[0],
        }
        out.append(rec)
        print(
            f"  round {i + 1}/{len(order)} {'paced' if paced else 'spark':5}: "
            f"{rec['cpu_s']:.2f} CPU s in {rec['seconds']:.0f} s, {rec['epochs']} epochs, "
            f"load {rec['load']:.1f}",
            flush=True,
        )
    return {"trigger": trigger, "rounds": out}


def pace_table(res: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    rows = res["rounds"]

    def side(paced: bool) -> dict[str, float]:
        rs = [r for r in rows if r["paced"] == paced]
        return {
            "cpu_per_min": statistics_median([60 * r["cpu_s"] / r["seconds"] for r in rs]),
            "epochs_per_min": statistics_median([60 * r["epochs"] / r["seconds"] for r in rs]),
            "cpu_per_epoch_ms": statistics_median(
                [1000 * r["cpu_s"] / max(1, r["epochs"]) for r in rs]
            ),
        }

    a, b = side(True), side(False)
    lines = [
        f"trigger {res['trigger'] * 1000:.0f} ms, 200 rows per epoch, "
        f"{len(rows) // 2} rounds per side (medians)",
        "side                       CPU s per min  epochs per min  CPU ms per epoch",
        f"paced readers (trigger 0)  {a['cpu_per_min']:13.2f}  {a['epochs_per_min']:14.1f}"
        f"  {a['cpu_per_epoch_ms']:16.1f}",
        f"Spark ProcessingTime       {b['cpu_per_min']:13.2f}  {b['epochs_per_min']:14.1f}"
        f"  {b['cpu_per_epoch_ms']:16.1f}",
        f"paced / Spark CPU: {a['cpu_per_min'] / b['cpu_per_min']:.2f}x",
    ]
    return "\n".join(lines), {"paced": a, "spark": b}


def _baseline_driver(f: Folder, trigger: float, threshold: int, per_epoch: int) -> Driver:
    return Driver(
        "_baseline-driver",
        f.root,
        [
            f"--checkpoint={f.checkpoint}",
            f"--out={f.out}",
            f"--progress={f.progress}",
            f"--marks={f.marks}",
            f"--trigger={trigger}",
            f"--threshold={threshold}",
            f"--per-epoch={per_epoch}",
        ],
        {},
    )


class Control:
    """Sends control events to a job through its store, as the server does after parsing."""

    def __init__(self, f: Folder) -> None:
        from stoker.store import open_store
        from stoker.types import job_id

        self.store = open_store(f"sqlite:///{f.state / 'store.db'}")
        self.jid = job_id(JOB)
        self.spec = self.store.control_snapshot(self.jid).state["pipeline"]

    def send(self, request: dict[str, Any]) -> Any:
        from stoker.control.events import validate

        kind, body = validate(request, self.spec)
        event, _created = self.store.add_control(self.jid, kind, body, sender="bench")
        return event

    def close(self) -> None:
        self.store.close()


# --------------------------------------------------------------------------------------------
# 1. Apply latency.


def run_latency(work: Path, trigger: float, events: int, per_epoch: int) -> dict[str, Any]:
    from stoker.types import ControlStatus, Epoch

    f = Folder(work / f"latency-{trigger:g}")
    drv = _stoker_driver(f, trigger, per_epoch)
    try:
        f.wait_steady(3, drv)
        ctl = Control(f)
        samples: list[dict[str, Any]] = []
        done = (ControlStatus.COMMITTED, ControlStatus.REJECTED)
        for i in range(events):
            ev = ctl.send({"kind": "config", "set": {"threshold": 1 + i % 50}})
            ev = _wait(
                f"event {ev.control_id} to commit",
                lambda ev=ev: (
                    (e := ctl.store.get_control(ctl.jid, ev.control_id)).status in done and e
                ),
                STEP_TIMEOUT,
                drv,
            )
            if ev.status != ControlStatus.COMMITTED:
                raise RuntimeError(f"event {ev.control_id} {ev.status}: {ev.reason}")
            n = int(ev.applied_epoch)
            cur = ctl.store.get_epoch(ctl.jid, Epoch(n))
            prev = ctl.store.get_epoch(ctl.jid, Epoch(n - 1))
            samples.append(
                {
                    "ack": ev.created_at,
                    "applied": ev.applied_at,
                    "committed": ev.ended_at,
                    "epoch": n,
                    "pinned": cur.pinned_at if cur else None,
                    "prev_pinned": prev.pinned_at if prev else None,
                    "prev_committed": prev.committed_at if prev else None,
                    "prev_version": int(prev.control_version) if prev else None,
                    "version": int(ev.version),
                }
            )
            # 0-200 ms, plus up to one trigger interval: the next event lands anywhere in the
            # trigger's cycle, not only in the idle part after a commit.
            time.sleep(random.uniform(0.0, 0.2 + trigger))
        ctl.close()
    finally:
        drv.term()
    progress = {r["batch"]: r for r in f.data_progress()}
    all_epochs = [r["d"].get("triggerExecution", 0.0) for r in progress.values()]
    for s in samples:
        p = progress.get(s["epoch"])
        start = _iso(p["ts"]) if p else float("nan")
        s["start"] = start
        s["latest_offset_ms"] = p["d"].get("latestOffset", float("nan")) if p else float("nan")
        s["epoch_ms"] = p["d"].get("triggerExecution", float("nan")) if p else float("nan")
        s["missed"] = s["prev_pinned"] is not None and s["prev_pinned"] > s["ack"]
    return {"trigger": trigger, "samples": samples, "epoch_ms": all_epochs}


def latency_table(res: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    import _common as C

    s = res["samples"]
    ms = 1000.0

    def row(label: str, xs: list[float]) -> list[str]:
        xs = [x for x in xs if x == x]
        return [label, *(C.fmt(pct(xs, q)) for q in (50, 90, 99)), C.fmt(max(xs) if xs else None)]

    applied = [(e["applied"] - e["ack"]) * ms for e in s]
    committed = [(e["committed"] - e["ack"]) * ms for e in s]
    rows = [
        row("ack -> APPLIED", applied),
        row("ack -> COMMITTED", committed),
        row(
            "  ack -> epoch N starts (epoch in flight, trigger wait)",
            [(e["start"] - e["ack"]) * ms for e in s],
        ),
        row(
            "    of which: rest of the epoch in flight",
            [max(0.0, (e["prev_committed"] or e["ack"]) - e["ack"]) * ms for e in s],
        ),
        row(
            "  epoch N start -> pin (latestOffset, offset log, plan)",
            [(e["applied"] - e["start"]) * ms for e in s],
        ),
        row("    of which: latestOffset", [e["latest_offset_ms"] for e in s]),
        row(
            "  pin -> commit (the epoch N itself)",
            [(e["committed"] - e["applied"]) * ms for e in s],
        ),
        row("epoch duration (triggerExecution, every epoch)", res["epoch_ms"]),
    ]
    goal = res["trigger"] * 1000 + 100
    summary = {
        "trigger_ms": res["trigger"] * 1000,
        "events": len(s),
        "applied_p50": pct(applied, 50),
        "applied_p90": pct(applied, 90),
        "applied_p99": pct(applied, 99),
        "applied_max": max(applied),
        "committed_p50": pct(committed, 50),
        "committed_p90": pct(committed, 90),
        "committed_p99": pct(committed, 99),
        "committed_max": max(committed),
        "goal_ms": goal,
        "missed_planning": sum(1 for e in s if e["missed"]),
        "epoch_median_ms": C.median(res["epoch_ms"]),
    }
    text = (
        f"trigger {res['trigger'] * 1000:.0f} ms, {len(s)} config events "
        f"(goal p99 <= {goal:.0f} ms):\n"
        + C.table(["ms", "p50", "p90", "p99", "max"], rows)
        + f"\n{summary['missed_planning']} of {len(s)} events arrived after the epoch in flight "
        "had planned its offsets (its latestOffset read the version before the event) and "
        "applied one epoch later."
    )
    return text, summary


# --------------------------------------------------------------------------------------------
# 2. A change: stoker control vs stop and start a new driver.

START_TRIGGER = 0.5


def _plan(reps: int) -> list[tuple[str, str]]:
    return [
        (k, m) for _ in range(reps) for k in ("threshold", "trigger") for m in ("between", "mid")
    ]


def _next(threshold: int) -> int:
    return 10 + threshold % 80


def _other(trigger: float) -> float:
    return 1.0 if trigger == START_TRIGGER else START_TRIGGER


def change_stoker(work: Path, reps: int, per_epoch: int) -> dict[str, Any]:
    f = Folder(work / "change-stoker")
    drv = _stoker_driver(f, START_TRIGGER, per_epoch)
    out: list[dict[str, Any]] = []
    try:
        f.wait_steady(3, drv)
        ctl = Control(f)
        f.mark_seen()
        threshold, trigger = 0, START_TRIGGER
        for kind, mode in _plan(reps):
            time.sleep(random.uniform(0.3, 1.0))
            f.wait_point(mode, drv)
            before = set(f.runs())
            if kind == "threshold":
                threshold = _next(threshold)
                t0 = time.time()
                ev = ctl.send({"kind": "config", "set": {"threshold": threshold}})
                t1 = f.wait_threshold(threshold, drv)
            else:
                trigger = _other(trigger)
                t0 = time.time()
                ev = ctl.send({"kind": "trigger", "interval": f"{int(trigger * 1000)}ms"})
                t1 = f.wait_trigger_applied(ctl, ev, before, drv)
            rec: dict[str, Any] = {"kind": kind, "mode": mode, "seconds": t1 - t0}
            if kind == "trigger":
                rec["restarted"] = bool(set(f.runs()) - before)
            ev = _wait(
                "the event to commit",
                lambda ev=ev: (e := ctl.store.get_control(ctl.jid, ev.control_id)).ended_at and e,
                STEP_TIMEOUT,
                drv,
            )
            rec["applied"] = ev.applied_at - t0
            rec["committed"] = ev.ended_at - t0
            out.append(rec)
            print(f"  stoker   {kind:9} {mode:7} {t1 - t0:7.3f} s", flush=True)
            f.wait_steady(2, drv)
            if kind == "trigger" and rec["restarted"]:
                rec.update(f.run_steps(before, t0))
        ctl.close()
    finally:
        drv.term()
    again, rows = f.reruns(f.state / "checkpoint")
    return {
        "changes": out,
        "duplicates": f.duplicates(),
        "rerun_batches": again,
        "rerun_rows": rows,
    }


def change_baseline(work: Path, reps: int, per_epoch: int) -> dict[str, Any]:
    f = Folder(work / "change-baseline")
    threshold, trigger = 0, START_TRIGGER
    drv = _baseline_driver(f, trigger, threshold, per_epoch)
    out: list[dict[str, Any]] = []
    try:
        f.wait_steady(3, drv)
        f.mark_seen()
        for kind, mode in _plan(reps):
            time.sleep(random.uniform(0.3, 1.0))
            f.wait_point(mode, drv)
            before = set(f.runs())
            if kind == "threshold":
                threshold = _next(threshold)
            else:
                trigger = _other(trigger)
            old = drv.pid
            t0 = time.time()
            stopped = drv.term()
            drv = _baseline_driver(f, trigger, threshold, per_epoch)
            if kind == "threshold":
                t1 = f.wait_threshold(threshold, drv)
            else:
                t1 = f.wait_new_run(before, drv)
            marks = [m for m in _lines(f.marks) if m["pid"] == old]
            started = [m["batch"] for m in marks if m["ev"] == "start"]
            ended = {m["batch"] for m in marks if m["ev"] == "end"}
            hit = bool(started) and started[-1] not in ended
            out.append(
                {
                    "kind": kind,
                    "mode": mode,
                    "seconds": t1 - t0,
                    "stop_s": stopped - t0,
                    "stopped_mid_epoch": hit,
                }
            )
            print(
                f"  baseline {kind:9} {mode:7} {t1 - t0:7.3f} s (stop {stopped - t0:.2f} s"
                f"{', an epoch was cut' if hit else ''})",
                flush=True,
            )
            f.wait_steady(2, drv)
            out[-1].update(f.run_steps(before, t0))
    finally:
        drv.term()
    again, rows = f.reruns(f.checkpoint)
    return {
        "changes": out,
        "duplicates": f.duplicates(),
        "rerun_batches": again,
        "rerun_rows": rows,
    }


def change_table(st: dict[str, Any], base: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    import _common as C

    rows: list[list[Any]] = []
    summary: dict[str, Any] = {}
    for kind in ("threshold", "trigger"):
        for mode in ("between", "mid", "all"):

            def pick(
                side: dict[str, Any], key: str = "seconds", kind: str = kind, mode: str = mode
            ) -> list[float]:
                return [
                    c[key]
                    for c in side["changes"]
                    if c["kind"] == kind and (mode == "all" or c["mode"] == mode)
                ]

            a, b = C.median(pick(st)), C.median(pick(base))
            rows.append(
                [
                    f"{kind}, {mode}",
                    len(pick(st)),
                    C.fmt(a, 3),
                    C.spread(pick(st), 2),
                    C.fmt(b, 2),
                    C.spread(pick(base), 1),
                    C.fmt(C.median(pick(base, "stop_s")), 2),
                    C.fmt(b / a, 1) + "x",
                ]
            )
            summary[f"{kind}_{mode}"] = {"stoker_s": a, "baseline_s": b, "ratio": b / a}
    cut = sum(1 for c in base["changes"] if c["stopped_mid_epoch"])
    text = (
        C.table(
            [
                "change, request point",
                "n",
                "stoker s",
                "spread",
                "baseline s",
                "spread",
                "stop s",
                "ratio",
            ],
            rows,
        )
        + "\nrows twice          stoker: "
        f"{st['duplicates']} written twice, {st['rerun_rows']} re-read "
        f"(batches run again: {st['rerun_batches'] or 'none'})" + "\n                  baseline: "
        f"{base['duplicates']} written twice, {base['rerun_rows']} re-read "
        f"(batches run again: {base['rerun_batches'] or 'none'}; "
        f"the stop cut an epoch {cut} of {len(base['changes'])} times)"
    )
    steps = [
        ("stop_s", "old driver process exited"),
        ("query_started", "query (re)started"),
        ("first_epoch_started", "its first epoch started"),
        ("first_epoch_done", "that epoch committed (progress)"),
        ("applied", "event APPLIED (epoch pinned)"),
        ("committed", "event COMMITTED"),
        ("seconds", "measured end (output seen / progress)"),
    ]
    brk = []
    for label, side in (("stoker", st), ("baseline", base)):
        for kind in ("threshold", "trigger"):
            changes = [c for c in side["changes"] if c["kind"] == kind]
            cells = []
            for key, _ in steps:
                xs = [c[key] for c in changes if key in c]
                cells.append(C.fmt(C.median(xs), 2) if xs else "")
            brk.append([f"{label}, {kind}", *cells])
    text += "\n\nwhere the time goes (median s after the request):\n" + C.table(
        ["side, change", *(k for k, _ in steps)], brk
    )
    text += "\n" + "; ".join(f"{k}: {v}" for k, v in steps)
    summary["rows_twice"] = {
        "stoker": {"written": st["duplicates"], "reread": st["rerun_rows"]},
        "baseline": {"written": base["duplicates"], "reread": base["rerun_rows"]},
    }
    return text, summary


# --------------------------------------------------------------------------------------------
# 3. Cost on a job that receives no control: before this issue vs now.


def _worktree(rev: str, path: Path) -> bool:
    """A worktree of ``rev`` at ``path``; True if made here (and to be removed here)."""
    if path.exists():
        return False
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "--detach", str(path), rev],
        check=True,
        capture_output=True,
    )
    return True


def run_cost(work: Path, rounds: int, epochs: int, per_epoch: int, before: Path) -> dict[str, Any]:
    trees = {"before": before, "now": REPO}
    order = [("before", "now", "now", "before")[i % 4] for i in range(rounds)]
    got: dict[str, list[dict[str, Any]]] = {"before": [], "now": []}
    for i, side in enumerate(order):
        folder = work / f"cost-{i}-{side}"
        folder.mkdir(parents=True)
        result = folder / "result.json"
        drv = Driver(
            "_cost-driver",
            folder,
            [
                f"--work={folder}",
                f"--result={result}",
                f"--epochs={epochs}",
                f"--per-epoch={per_epoch}",
                "--jobs=1",
            ],
            {"PYTHONPATH": str(trees[side])},
        )
        rc = drv.proc.wait(timeout=900)
        drv.kill()
        if rc != 0:
            tail = drv.log_path.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"cost driver ({side}) failed ({rc}):\n{tail}")
        r = json.loads(result.read_text())
        for key in ("stoker", "worker_stoker"):
            if not str(r[key]).startswith(str(trees[side])):
                raise RuntimeError(f"{side}: {key} imported from {r[key]}, not {trees[side]}")
        got[side].append(r)
        med = statistics_median([e["trigger"] for e in r["epochs"]])
        print(
            f"  round {i + 1}/{rounds} {side:6}: triggerExecution median {med:.1f} ms", flush=True
        )
    return {"order": order, "rounds": got}


def statistics_median(xs: list[float]) -> float:
    import statistics

    return statistics.median(xs) if xs else float("nan")


def cost_table(res: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    import _common as C

    rows: list[list[Any]] = []
    summary: dict[str, Any] = {}
    # (where, key, label): Spark's progress, or the step timer inside the foreachBatch body.
    measures = [
        ("epochs", "trigger", "triggerExecution (Spark)"),
        ("epochs", "add_batch", "addBatch = foreachBatch (Spark)"),
        ("epochs", "latest_offset", "latestOffset (Spark)"),
        ("steps", "body", "foreachBatch body (EpochProcessor._run)"),
        ("steps", "prepare", "  FilesSink.prepare (the Spark write)"),
        ("steps", "own", "  body - prepare - transform: stoker's own work"),
        ("steps", "get_job", "    store: get_job"),
        ("steps", "pin_epoch", "    store: pin_epoch"),
        ("steps", "control_snapshot", "    store: control_snapshot"),
        ("steps", "applied_controls", "    store: applied_controls"),
        ("steps", "control_begin", "    EpochControl.begin (now only)"),
    ]
    in_order = _in_order(res)
    order = res["order"]
    for where, key, label in measures:

        def med(r: dict[str, Any], where: str = where, key: str = key) -> float:
            return C.median([float(e.get(key, 0.0)) for e in r[where]])

        per_round = {side: [med(r) for r in res["rounds"][side]] for side in ("before", "now")}
        pooled = {
            side: C.median([float(e.get(key, 0.0)) for r in res["rounds"][side] for e in r[where]])
            for side in ("before", "now")
        }
        # ABBA: rounds (0,1), (2,3), ... each hold one run of each side.
        meds = [med(r) for r in in_order]
        paired = [
            (meds[i] - meds[i + 1]) * (1 if order[i] == "now" else -1)
            for i in range(0, len(order) - 1, 2)
        ]
        digits = 1 if where == "epochs" else 2
        rows.append(
            [
                label,
                C.fmt(pooled["before"], digits),
                C.spread(per_round["before"], digits),
                C.fmt(pooled["now"], digits),
                C.spread(per_round["now"], digits),
                f"{pooled['now'] - pooled['before']:+.{digits}f}",
                f"{C.median(paired):+.{digits}f}" if paired else "-",
            ]
        )
        summary[key] = {
            "before": pooled["before"],
            "now": pooled["now"],
            "added": pooled["now"] - pooled["before"],
            "added_paired": C.median(paired) if paired else None,
        }
    plan = [x for r in res["rounds"]["now"] for x in r["plan_ms"]]
    summary["plan_ms"] = C.median(plan)
    n = {side: sum(len(r["epochs"]) for r in res["rounds"][side]) for side in ("before", "now")}
    text = (
        C.table(
            [
                f"ms per epoch, median ({n['before']} / {n['now']} epochs)",
                "before",
                "rounds",
                "now",
                "rounds",
                "added",
                "added, paired",
            ],
            rows,
        )
        + "\nnow only, off the foreachBatch body: ReaderControl.plan (a reader's read of the "
        f"control version, once per trigger, inside latestOffset) {C.fmt(summary['plan_ms'], 3)} "
        f"ms (p90 {C.fmt(pct(plan, 90), 3)})"
    )
    return text, summary


def _in_order(res: dict[str, Any]) -> list[dict[str, Any]]:
    seen = {"before": 0, "now": 0}
    out = []
    for side in res["order"]:
        out.append(res["rounds"][side][seen[side]])
        seen[side] += 1
    return out


# --------------------------------------------------------------------------------------------


def _driver_args(mode: str, argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=f"control.py {mode}")
    for name in ("state", "out", "progress", "marks", "checkpoint", "work", "result"):
        p.add_argument(f"--{name}")
    p.add_argument("--trigger", type=float, default=0.0)
    p.add_argument("--threshold", type=int, default=0)
    p.add_argument("--per-epoch", type=int, default=1000)
    p.add_argument("--epochs", type=int, default=40)
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--paced", type=int, default=1)
    return p.parse_args(argv)


DRIVERS = {
    "_stoker-driver": stoker_driver,
    "_baseline-driver": baseline_driver,
    "_cost-driver": cost_driver,
}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] in DRIVERS:
        DRIVERS[sys.argv[1]](_driver_args(sys.argv[1], sys.argv[2:]))
        return

    import _common as C

    ap = C.arg_parser(__doc__.split("\n\n")[0])
    ap.add_argument(
        "what", nargs="?", default="all", choices=("all", "latency", "change", "cost", "pace")
    )
    ap.add_argument("--pace-rounds", type=int, default=4, help="driver processes, ABBA order")
    ap.add_argument("--pace-window", type=float, default=40.0, help="seconds measured")
    ap.add_argument("--events", type=int, default=100, help="config events per trigger")
    ap.add_argument("--triggers", default="0,0.5", help="trigger intervals in seconds")
    ap.add_argument("--per-epoch", type=int, default=1000, help="rows per epoch (1 and 2)")
    ap.add_argument("--reps", type=int, default=2, help="repetitions of each change")
    ap.add_argument("--cost-rounds", type=int, default=8, help="driver processes, ABBA order")
    ap.add_argument("--cost-epochs", type=int, default=40)
    ap.add_argument("--cost-per-epoch", type=int, default=2000)
    ap.add_argument("--before-rev", default="535cbbc")
    ap.add_argument("--before-dir", default="/tmp/stoker-before")
    ap.add_argument("--keep-before", action="store_true", help="leave the worktree in place")
    args = ap.parse_args()

    info = C.machine()
    C.print_machine(info)
    print(f"commit {_head()}; {args.what}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="stoker-control-bench-"))
    payload: dict[str, Any] = {"machine": info, "commit": _head(), "args": vars(args)}
    loads: list[tuple[float, ...]] = [os.getloadavg()]
    try:
        if args.what in ("all", "latency"):
            payload["latency"] = []
            for trig in (float(x) for x in args.triggers.split(",")):
                print(f"\n== 1. apply latency, trigger {trig * 1000:.0f} ms", flush=True)
                res = run_latency(work, trig, args.events, args.per_epoch)
                text, summary = latency_table(res)
                print(text, flush=True)
                payload["latency"].append({"summary": summary, **res})
                loads.append(os.getloadavg())
        if args.what in ("all", "change"):
            print("\n== 2. a change: stoker control vs stop + new driver", flush=True)
            st = change_stoker(work, args.reps, args.per_epoch)
            loads.append(os.getloadavg())
            base = change_baseline(work, args.reps, args.per_epoch)
            loads.append(os.getloadavg())
            text, summary = change_table(st, base)
            print(text, flush=True)
            payload["change"] = {"summary": summary, "stoker": st, "baseline": base}
        if args.what in ("all", "cost"):
            print(f"\n== 3. cost without control: {args.before_rev} vs now (ABBA)", flush=True)
            before = Path(args.before_dir)
            made = _worktree(args.before_rev, before)
            try:
                res = run_cost(
                    work, args.cost_rounds, args.cost_epochs, args.cost_per_epoch, before
                )
            finally:
                if made and not args.keep_before:
                    subprocess.run(
                        ["git", "-C", str(REPO), "worktree", "remove", "--force", str(before)],
                        check=False,
                    )
            loads.append(os.getloadavg())
            text, summary = cost_table(res)
            print(text, flush=True)
            payload["cost"] = {"summary": summary, **res}
        if args.what in ("all", "pace"):
            print("\n== 4. cost of reader pacing: paced vs Spark's trigger (ABBA)", flush=True)
            res = run_pace(work, args.pace_rounds, 0.5, args.pace_window)
            loads.append(os.getloadavg())
            text, summary = pace_table(res)
            print(text, flush=True)
            payload["pace"] = {"summary": summary, **res}
    finally:
        payload["loadavg"] = loads
        print(
            "\nload average (1 min) during the run: "
            + ", ".join(f"{x[0]:.1f}" for x in loads)
            + f"; finished {time.strftime('%Y-%m-%d %H:%M:%S')}",
            flush=True,
        )
        if os.environ.get("BENCH_KEEP"):
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    C.write_json(args.json, payload)


def _head() -> str:
    try:
        return subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


if __name__ == "__main__":
    main()
