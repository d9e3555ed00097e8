"""Overhead of stoker's exactly-once epoch protocol against a hand-written foreachBatch job.

The same pipeline, twice, in one process and one SparkSession (local[2]):

* **stoker**: ``generator(total, max_rows_per_epoch) -> filter(id % 3 == 0) -> files(parquet)``
  run with ``stoker.run(..., spark=spark, trigger=0)``, a fresh state folder and job id each
  time: fence, pin, prepare into a staging folder (rows counted from the parquet footers),
  decide, commit (manifest + fsync + rename), five SQLite transactions per epoch.
* **baseline**: what a careful user writes by hand without exactly-once bookkeeping: the same
  ``stoker_generator`` source and options, the same filter, and in ``foreachBatch``
  ``df.write.parquet(out/batch=N)``; ``processAllAvailable()`` then ``stop()``.

The two alternate over ``--rounds`` rounds (A B, B A, A B, ...: each goes first half the time)
after one unmeasured warm-up run of each. Every epoch of both is timed the same way, by Spark:
``durationMs.triggerExecution`` (the whole micro-batch: offsets, foreachBatch, commit log) and
``durationMs.addBatch`` (foreachBatch alone) from a StreamingQueryListener. Throughput is given
twice: end to end (rows / wall time of the whole job, start and stop included) and steady state
(rows / sum of the epochs' triggerExecution). For stoker the epoch is also broken down into the
protocol's steps (timers wrapped around stoker's functions from the outside; each costs ~1 us).

Last, a paired comparison that the noise of a shared machine cannot hide as easily: inside each
epoch of one query, the same rows are written by the baseline's ``df.write.parquet``, by the
same write into a staging folder, by stoker's ``FilesSink.prepare`` (footer row count) and by
the former prepare (an ``Observation`` counting rows), in rotating order; then
``FilesSink.commit`` is timed.

Two more comparisons (issue 7):

* **PostgreSQL sink** (``--pg-rounds``, on a throwaway server from ``tests/pg.py`` with fsync,
  synchronous_commit and full_page_writes on): the same pipeline into ``sinks.postgres``
  (COPY and PREPARE TRANSACTION per Spark task, the parts recorded, COMMIT PREPARED after the
  decision) against a ``foreachBatch`` that collects the epoch to the driver (``toArrow``) and
  COPYs it in one plain transaction. Alternating rounds as above; every run checks that each
  kept id is in its table once.
* **The SQLite store, synchronous=FULL vs NORMAL** (``--store-epochs``): the store calls of one
  epoch (get_job, pin, record_txn PREPARED, decide, record_txn COMMITTED, mark committed) on
  two store files that differ only in the pragma, blocks of 25 epochs alternating, each call
  timed; run first, before any Spark job.

Run: ``python benchmarks/overhead.py [--rounds 6] [--total 200000] [--per-epoch 10000]
[--paired-epochs 43] [--paired-per-epoch 2000] [--pg-rounds 4] [--store-epochs 400]
[--store-dir DIR] [--json out.json]`` (``--rounds 0`` etc. skips a part).
"""

from __future__ import annotations

import functools
import importlib
import os
import shutil
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _common as C
from pyspark.sql import DataFrameWriter, Observation
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQueryListener

import stoker
from stoker import sinks, sources
from stoker.runtime import epoch as _epoch
from stoker.runtime.attempt import LeaseKeeper
from stoker.sinks.files import FilesSink
from stoker.sinks.postgres import PostgresSink
from stoker.sources.generator import FORMAT
from stoker.store._sqlstore import SqlStore

_files = importlib.import_module("stoker.sinks.files")  # `stoker.sinks.files` is also a function

# --------------------------------------------------------------------------------------------
# Per-epoch timing by Spark, the same for both sides.


class _Progress(StreamingQueryListener):
    """Keeps the progress of every micro-batch that read rows, by query name and batch id."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.batches: dict[str, dict[int, dict[str, float]]] = defaultdict(dict)

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        p = event.progress
        if not p.numInputRows:
            return
        d = p.durationMs
        with self.lock:
            self.batches[p.name][p.batchId] = {
                "trigger_ms": float(d.get("triggerExecution", 0)),
                "add_batch_ms": float(d.get("addBatch", 0)),
                "rows": float(p.numInputRows),
            }

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass

    def wait_for(self, name: str, n: int, timeout: float = 30.0) -> list[dict[str, float]]:
        """The ``n`` batches of query ``name``; listener events arrive asynchronously."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                got = dict(self.batches.get(name, {}))
            if len(got) >= n:
                return [got[k] for k in sorted(got)]
            time.sleep(0.05)
        raise RuntimeError(f"query {name}: progress for {len(got)} of {n} batches only")


# --------------------------------------------------------------------------------------------
# The protocol's steps, timed from outside stoker (stoker's code is not changed).

_STEPS: list[tuple[Any, str, str]] = [
    (_epoch, "all_sources_finished", "offset log read (final?)"),
    (LeaseKeeper, "check", "fence (lease.check)"),
    (SqlStore, "get_job", "store: get_job (control version)"),
    (SqlStore, "pin_epoch", "store: pin_epoch"),
    (SqlStore, "control_snapshot", "store: control_snapshot"),
    (stoker.Pipeline, "apply", "transform (pipeline.apply)"),
    (FilesSink, "prepare", "sink.prepare (write staging, count rows)"),
    (SqlStore, "record_txn", "store: record_txn x2"),
    (SqlStore, "decide_epoch", "store: decide_epoch"),
    (FilesSink, "commit", "sink.commit (manifest, fsync, rename)"),
    (SqlStore, "mark_epoch_committed", "store: mark_epoch_committed"),
]
_TOTAL = "epoch total (foreachBatch body)"
# Parts of the steps above (not added to the total again), as (owner, attr, label, parent).
_SUBSTEPS: list[tuple[Any, str, str, str]] = [
    (DataFrameWriter, "save", "  DataFrameWriter.save (the Spark job)", _STEPS[6][2]),
    (_files, "_footer_rows", "  row count from the parquet footers", _STEPS[6][2]),
    (os, "fsync", "  os.fsync, all (manifest file + output folder)", _STEPS[9][2]),
    (os, "rename", "  os.rename staging -> final", _STEPS[9][2]),
    (_files, "fsync_dir", "    of which: fsync of the output folder", _STEPS[9][2]),
]
# The PostgreSQL sink's own steps (runs with the PostgreSQL sink only).
_PG_STEPS: list[tuple[Any, str, str]] = [
    (PostgresSink, "prepare", "sink.prepare (COPY + PREPARE TRANSACTION per task)"),
    (PostgresSink, "commit", "sink.commit (COMMIT PREPARED)"),
]


class _StepTimer:
    """Sums the time of each step per epoch, counting only calls made inside an epoch."""

    def __init__(self) -> None:
        self.local = threading.local()
        self.epochs: list[dict[str, float]] = []
        self._saved: list[tuple[Any, str, Any]] = []

    def install(self) -> None:
        for owner, attr, label, *_ in [*_STEPS, *_SUBSTEPS, *_PG_STEPS]:
            orig = getattr(owner, attr, None)
            if orig is None:  # the code measured no longer has it: not timed
                continue
            self._saved.append((owner, attr, orig))
            setattr(owner, attr, self._wrap(orig, label))
        orig_run = _epoch.EpochProcessor._run
        self._saved.append((_epoch.EpochProcessor, "_run", orig_run))
        timer = self

        @functools.wraps(orig_run)
        def run(proc: Any, df: Any, epoch: int) -> None:
            timer.local.cur = defaultdict(float)
            t0 = time.perf_counter()
            try:
                orig_run(proc, df, epoch)
            finally:
                cur = timer.local.cur
                timer.local.cur = None
                cur[_TOTAL] = (time.perf_counter() - t0) * 1000
                timer.epochs.append(dict(cur))

        _epoch.EpochProcessor._run = run  # type: ignore[method-assign]

    def uninstall(self) -> None:
        for owner, attr, orig in reversed(self._saved):
            setattr(owner, attr, orig)
        self._saved.clear()

    def _wrap(self, fn: Callable[..., Any], label: str) -> Callable[..., Any]:
        timer = self

        @functools.wraps(fn)
        def inner(*args: Any, **kwargs: Any) -> Any:
            cur = getattr(timer.local, "cur", None)
            if cur is None:
                return fn(*args, **kwargs)
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                cur[label] += (time.perf_counter() - t0) * 1000

        return inner

    def take(self) -> list[dict[str, float]]:
        """The epochs timed since the last call: stoker's steps, or the baseline's."""
        out, self.epochs = self.epochs + _BASELINE_EPOCHS, []
        _BASELINE_EPOCHS.clear()
        return out


# --------------------------------------------------------------------------------------------
# The two sides.


def _keep(df: Any) -> Any:
    return df.filter(F.col("id") % 3 == 0)


def run_stoker(spark: Any, work: Path, tag: str, total: int, per_epoch: int) -> tuple[str, float]:
    job = f"bench-{tag}"
    p = stoker.Pipeline(job)
    p.source(sources.generator(total=total, max_rows_per_epoch=per_epoch))
    p.transform(lambda df, ctx: _keep(df))
    p.sink(sinks.files(str(work / "out"), "parquet"))
    t0 = time.perf_counter()
    res = stoker.run(p, spark=spark, trigger=0, state_dir=work / "state")
    wall = time.perf_counter() - t0
    if str(res.state) != "FINISHED":
        raise RuntimeError(f"stoker job ended {res.state}")
    return f"stoker_{job}".replace("-", "_"), wall


_BASELINE_EPOCHS: list[dict[str, float]] = []


def run_baseline(spark: Any, work: Path, tag: str, total: int, per_epoch: int) -> tuple[str, float]:
    name = f"baseline_{tag}".replace("-", "_")
    out = work / "out"

    def batch(df: Any, batch_id: int) -> None:
        t0 = time.perf_counter()
        kept = _keep(df)
        t1 = time.perf_counter()
        kept.write.mode("overwrite").parquet(str(out / f"batch={batch_id}"))
        t2 = time.perf_counter()
        _BASELINE_EPOCHS.append(
            {
                "transform (df.filter)": (t1 - t0) * 1000,
                "the Spark write job": (t2 - t1) * 1000,
                _TOTAL: (t2 - t0) * 1000,
            }
        )

    t0 = time.perf_counter()
    stream = (
        spark.readStream.format(FORMAT)
        .options(sid="s0", total=str(total), max_rows_per_epoch=str(per_epoch), partitions="2")
        .load()
    )
    q = (
        stream.writeStream.foreachBatch(batch)
        .option("checkpointLocation", str(work / "checkpoint"))
        .queryName(name)
        .trigger(processingTime="0 milliseconds")
        .start()
    )
    q.processAllAvailable()
    q.stop()
    wall = time.perf_counter() - t0
    if q.exception() is not None:
        raise RuntimeError(f"baseline failed: {q.exception()}")
    return name, wall


# --------------------------------------------------------------------------------------------
# The PostgreSQL sink path: stoker's exactly-once sink against one plain transaction per epoch.


def _pg_table(side: str, tag: str) -> str:
    return f"bench_{side}_{tag}".replace("-", "_")


def _pg_expect(dsn: str, table: str, total: int) -> None:
    """Every kept id once: a run that lost or doubled rows measured nothing."""
    import psycopg

    with psycopg.connect(dsn) as conn:
        row = conn.execute(f"SELECT count(*), count(DISTINCT id) FROM {table}").fetchone()
    want = len(range(0, total, 3))
    if row is None or tuple(row) != (want, want):
        raise RuntimeError(f"{table}: {row} rows (all, distinct), expected {want}")


def run_pg_stoker(
    spark: Any, work: Path, tag: str, total: int, per_epoch: int, dsn: str
) -> tuple[str, float]:
    job = f"bench-pg-{tag}"
    table = _pg_table("stoker", tag)
    p = stoker.Pipeline(job)
    p.source(sources.generator(total=total, max_rows_per_epoch=per_epoch))
    p.transform(lambda df, ctx: _keep(df))
    p.sink(sinks.postgres(dsn, table=table))
    t0 = time.perf_counter()
    res = stoker.run(p, spark=spark, trigger=0, state_dir=work / "state")
    wall = time.perf_counter() - t0
    if str(res.state) != "FINISHED":
        raise RuntimeError(f"stoker job ended {res.state}")
    _pg_expect(dsn, table, total)
    return f"stoker_{job}".replace("-", "_"), wall


def run_pg_baseline(
    spark: Any, work: Path, tag: str, total: int, per_epoch: int, dsn: str
) -> tuple[str, float]:
    """What a user writes by hand: each epoch's rows COPYed in one plain transaction, from the
    driver (no exactly-once: a crash between the COMMIT and Spark's commit log duplicates)."""
    import psycopg

    name = f"pgbaseline_{tag}".replace("-", "_")
    table = _pg_table("base", tag)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id bigint)")

    def batch(df: Any, batch_id: int) -> None:
        t0 = time.perf_counter()
        kept = _keep(df)
        t1 = time.perf_counter()
        ids = kept.toArrow().column("id").to_pylist()
        t2 = time.perf_counter()
        # One transaction, committed when the connection's block ends.
        with (
            psycopg.connect(dsn) as conn,
            conn.cursor() as cur,
            cur.copy(f"COPY {table} (id) FROM STDIN") as cp,
        ):
            for v in ids:
                cp.write_row((v,))
        t3 = time.perf_counter()
        _BASELINE_EPOCHS.append(
            {
                "transform (df.filter)": (t1 - t0) * 1000,
                "the Spark job (toArrow to the driver)": (t2 - t1) * 1000,
                "COPY + COMMIT (one transaction)": (t3 - t2) * 1000,
                _TOTAL: (t3 - t0) * 1000,
            }
        )

    t0 = time.perf_counter()
    stream = (
        spark.readStream.format(FORMAT)
        .options(sid="s0", total=str(total), max_rows_per_epoch=str(per_epoch), partitions="2")
        .load()
    )
    q = (
        stream.writeStream.foreachBatch(batch)
        .option("checkpointLocation", str(work / "checkpoint"))
        .queryName(name)
        .trigger(processingTime="0 milliseconds")
        .start()
    )
    q.processAllAvailable()
    q.stop()
    wall = time.perf_counter() - t0
    if q.exception() is not None:
        raise RuntimeError(f"baseline failed: {q.exception()}")
    _pg_expect(dsn, table, total)
    return name, wall


# --------------------------------------------------------------------------------------------
# The SQLite store's cost per epoch, synchronous=FULL against NORMAL (issue 7 item 5).

_STORE_CALLS = (
    "get_job",
    "pin_epoch",
    "record_txn PREPARED",
    "decide_epoch",
    "record_txn COMMITTED",
    "mark_epoch_committed",
)


def _store_epoch(st: Any, jid: Any, e: Any, att: Any) -> dict[str, float]:
    """The store calls of one epoch of the protocol, each timed (ms)."""
    from stoker.types import TxnState

    took: dict[str, float] = {}
    t_all = time.perf_counter()

    def timed(label: str, fn: Callable[[], Any]) -> Any:
        t0 = time.perf_counter()
        try:
            return fn()
        finally:
            took[label] = (time.perf_counter() - t0) * 1000

    job = timed("get_job", lambda: st.get_job(jid))
    timed("pin_epoch", lambda: st.pin_epoch(jid, e, att, job.control_version))
    detail = {"staged": "x"}
    timed(
        "record_txn PREPARED",
        lambda: st.record_txn(jid, e, "files:x", att, TxnState.PREPARED, detail),
    )
    timed("decide_epoch", lambda: st.decide_epoch(jid, e, att, 100, False))
    timed(
        "record_txn COMMITTED",
        lambda: st.record_txn(jid, e, "files:x", att, TxnState.COMMITTED, {}),
    )
    timed("mark_epoch_committed", lambda: st.mark_epoch_committed(jid, e))
    took["epoch: all store calls"] = (time.perf_counter() - t_all) * 1000
    return took


def run_store_sync(root: Path, epochs: int, block: int = 25) -> dict[str, Any]:
    """The store calls of one epoch, in the epoch protocol's order, on two SQLite stores that
    differ only in ``PRAGMA synchronous``; blocks of ``block`` epochs alternate (A B, B A, ...).

    The files live in ``root`` (ext4 here, not tmpfs, so an fsync is real)."""
    from stoker.procs import this_owner
    from stoker.store.sqlite import SqliteStore
    from stoker.types import AttemptNo, Epoch, JobId

    def with_sync(mode: str) -> type[SqliteStore]:
        class _Store(SqliteStore):
            seen: Any = None

            def _connect(self) -> Any:
                conn = super()._connect()
                conn.execute(f"PRAGMA synchronous={mode}")
                self.seen = conn.execute("PRAGMA synchronous").fetchone()[0]
                return conn

        return _Store

    jid = JobId("bench-store")
    stores = {m: with_sync(m)(root / f"{m.lower()}.db") for m in ("FULL", "NORMAL")}
    attempts = {}
    for m, st in stores.items():
        st.create_job(jid, "bench-store", {}, {})
        attempts[m] = st.start_attempt(jid, this_owner(), 3600.0, AttemptNo(0)).attempt
    times: dict[str, dict[str, list[float]]] = {m: defaultdict(list) for m in stores}
    next_epoch = dict.fromkeys(stores, 0)
    order = list(stores)
    for b in range(-(-epochs // block) + 1):  # block 0: warm-up, not kept
        for m in order if b % 2 == 0 else order[::-1]:
            st, att = stores[m], attempts[m]
            for _ in range(block):
                e = Epoch(next_epoch[m])
                next_epoch[m] += 1
                took = _store_epoch(st, jid, e, att)
                if b:
                    for label, ms in took.items():
                        times[m][label].append(ms)
    out: dict[str, Any] = {
        "epochs_per_setting": len(times["FULL"]["epoch: all store calls"]),
        "pragma_synchronous_seen": {
            m: getattr(st, "seen", None) for m, st in stores.items()
        },  # 2 FULL, 1 NORMAL
        "loadavg_1m": os.getloadavg()[0],
        "calls": {},
    }
    for label in (*_STORE_CALLS, "epoch: all store calls"):
        f, n = times["FULL"][label], times["NORMAL"][label]
        out["calls"][label] = {
            "full_median_ms": C.median(f),
            "normal_median_ms": C.median(n),
            "full_p90_ms": _quantile(f, 0.9),
            "normal_p90_ms": _quantile(n, 0.9),
        }
    for st in stores.values():
        st.close()
    return out


def _print_store_sync(r: dict[str, Any]) -> None:
    print()
    print(
        f"SQLite store, the store calls of one epoch, synchronous=FULL vs NORMAL "
        f"({r['epochs_per_setting']} epochs each, alternating blocks; PRAGMA read back: "
        f"{r['pragma_synchronous_seen']}; load {r['loadavg_1m']:.1f}):"
    )
    rows = [
        [
            label,
            C.fmt(d["normal_median_ms"], 2),
            C.fmt(d["full_median_ms"], 2),
            f"{d['full_median_ms'] - d['normal_median_ms']:+.2f}",
            C.fmt(d["normal_p90_ms"], 2),
            C.fmt(d["full_p90_ms"], 2),
        ]
        for label, d in r["calls"].items()
    ]
    print(
        C.table(["call", "NORMAL med", "FULL med", "FULL - NORMAL", "NORMAL p90", "FULL p90"], rows)
    )


# --------------------------------------------------------------------------------------------
# Paired, inside one epoch: the baseline's write against stoker's sink on the same DataFrame.

_SINK_VARIANTS = (
    "baseline: df.write.parquet(dir)",
    "same write to staging, no Observation",
    "FilesSink.prepare (write staging, rows from the footers)",
    "former prepare: Observation + write staging",
)
_COMMIT = "FilesSink.commit (manifest, fsync, rename)"


def run_paired_sink(spark: Any, work: Path, epochs: int, per_epoch: int) -> dict[str, Any]:
    """Each epoch writes its rows four ways, in rotating order, then commits stoker's part.

    The writes see the same data at the same moment, so the noise of the machine largely
    cancels in the per-epoch differences. The last variant is how ``FilesSink.prepare``
    counted rows before it read them from the parquet footers: an ``Observation`` on the write.
    """
    from stoker.sinks.base import SinkOwner
    from stoker.types import AttemptNo, Epoch, JobId

    sink = FilesSink(path=str(work / "stoker"))
    sink.open(SinkOwner(JobId("paired"), "bench"), work)
    times: dict[str, list[float]] = defaultdict(list)

    def batch(df: Any, batch_id: int) -> None:
        kept = _keep(df)
        k = batch_id % len(_SINK_VARIANTS)
        for v in _SINK_VARIANTS[k:] + _SINK_VARIANTS[:k]:
            t0 = time.perf_counter()
            if v == _SINK_VARIANTS[0]:
                kept.write.mode("overwrite").parquet(str(work / "plain" / f"batch={batch_id}"))
            elif v == _SINK_VARIANTS[1]:
                target = work / "v1" / f"epoch={batch_id}.attempt=1"
                kept.write.format("parquet").mode("overwrite").save(str(target))
            elif v == _SINK_VARIANTS[3]:
                target = work / "v3" / f"epoch={batch_id}.attempt=1"
                obs = Observation(f"rows_{batch_id}")
                observed = kept.observe(obs, F.count(F.lit(1)).alias("rows"))
                observed.write.format("parquet").mode("overwrite").save(str(target))
                obs.get["rows"]
            else:
                sink.prepare(kept, Epoch(batch_id), AttemptNo(1))
            times[v].append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        sink.commit(Epoch(batch_id), AttemptNo(1))
        times[_COMMIT].append((time.perf_counter() - t0) * 1000)

    stream = (
        spark.readStream.format(FORMAT)
        .options(
            sid="s0",
            total=str(epochs * per_epoch),
            max_rows_per_epoch=str(per_epoch),
            partitions="2",
        )
        .load()
    )
    q = (
        stream.writeStream.foreachBatch(batch)
        .option("checkpointLocation", str(work / "checkpoint"))
        .trigger(processingTime="0 milliseconds")
        .start()
    )
    q.processAllAvailable()
    q.stop()
    skip = 3  # warm-up epochs
    base = times[_SINK_VARIANTS[0]][skip:]
    out: dict[str, Any] = {"epochs": len(base), "rows_per_epoch": per_epoch, "variants": {}}
    for v, ts in times.items():
        ts = ts[skip:]
        paired = v not in (_SINK_VARIANTS[0], _COMMIT)
        diffs = [t - b for t, b in zip(ts, base, strict=True)] if paired else []
        out["variants"][v] = {
            "median_ms": C.median(ts),
            "p10_ms": _quantile(ts, 0.1),
            "paired_minus_baseline_median_ms": C.median(diffs) if paired else None,
            "paired_minus_baseline_p10_ms": _quantile(ts, 0.1) - _quantile(base, 0.1)
            if paired
            else None,
        }
    return out


def _quantile(xs: list[float], q: float) -> float:
    data = sorted(xs)
    return data[min(len(data) - 1, int(q * len(data)))] if data else float("nan")


def main() -> int:
    ap = C.arg_parser(__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=6, help="measured rounds (default 6)")
    ap.add_argument("--total", type=int, default=200_000, help="rows per job (default 200000)")
    ap.add_argument("--per-epoch", type=int, default=10_000, help="rows per epoch (default 10000)")
    ap.add_argument(
        "--paired-epochs",
        type=int,
        default=43,
        help="epochs of the paired sink comparison, 0 to skip (default 43, 3 of them warm-up)",
    )
    ap.add_argument(
        "--paired-per-epoch",
        type=int,
        default=2_000,
        help="rows per epoch of the paired sink comparison (default 2000)",
    )
    ap.add_argument(
        "--pg-rounds",
        type=int,
        default=4,
        help="rounds of the PostgreSQL sink comparison, 0 to skip (default 4)",
    )
    ap.add_argument(
        "--store-epochs",
        type=int,
        default=400,
        help="epochs per setting of the SQLite synchronous=FULL/NORMAL comparison, 0 to skip "
        "(default 400)",
    )
    ap.add_argument(
        "--store-dir",
        default=None,
        help="where the SQLite comparison's files go (default: the temp folder; not tmpfs!)",
    )
    args = ap.parse_args()
    epochs = -(-args.total // args.per_epoch)

    info = C.machine()
    C.print_machine(info)
    print(
        f"pipeline: generator(total={args.total:,}, max_rows_per_epoch={args.per_epoch:,}) -> "
        f"filter(id % 3 == 0) -> parquet; {epochs} epochs per job, trigger 0 ms, local[2]; "
        f"{args.rounds} rounds + 1 warm-up"
    )
    C.quiet_stoker_logs()
    spark = C.session("stoker-bench-overhead")
    listener = _Progress()
    spark.streams.addListener(listener)
    timer = _StepTimer()
    timer.install()
    root = Path(tempfile.mkdtemp(prefix="stoker-bench-overhead-"))
    sides: dict[str, Callable[..., tuple[str, float]]] = {
        "baseline": run_baseline,
        "stoker": run_stoker,
    }
    store_sync: dict[str, Any] = {}
    pg: dict[str, Any] = {}
    try:
        if args.store_epochs > 0:
            # First, while no Spark job runs in this process: no Spark thread competes.
            sync_dir = Path(tempfile.mkdtemp(prefix="stoker-bench-sync-", dir=args.store_dir))
            try:
                store_sync = run_store_sync(sync_dir, args.store_epochs)
            finally:
                shutil.rmtree(sync_dir, ignore_errors=True)
            _print_store_sync(store_sync)
            C.flush()
        results, steps, baseline_steps = (
            _alternate(
                sides, spark, root, listener, timer, args.rounds, args.total, args.per_epoch, epochs
            )
            if args.rounds > 0
            else ({}, [], [])
        )
        if args.pg_rounds > 0:
            pg = _run_pg(spark, root, listener, timer, args, epochs)
    finally:
        timer.uninstall()
        spark.streams.removeListener(listener)
        shutil.rmtree(root, ignore_errors=True)

    summary: dict[str, Any] = {}
    breakdown: dict[str, float] = {}
    base_breakdown: dict[str, float] = {}
    if results:
        summary = _summarize(results, args.total, epochs)
        breakdown = _breakdown(steps)
        base_breakdown = {
            k: C.median(e[k] for e in baseline_steps) for k in (baseline_steps or [{}])[0]
        }
        _print(summary, breakdown, base_breakdown, args.rounds, epochs)
    if pg:
        _print(pg["summary"], {}, {}, args.pg_rounds, epochs, "PostgreSQL sink")
        _print_pg_steps(pg)
    if store_sync:
        _print_store_sync(store_sync)  # again, beside the rest
    paired: dict[str, Any] = {}
    if args.paired_epochs > 0:
        work = Path(tempfile.mkdtemp(prefix="stoker-bench-paired-"))
        try:
            paired = run_paired_sink(spark, work, args.paired_epochs, args.paired_per_epoch)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        _print_paired(paired)
    C.write_json(
        args.json,
        {
            "benchmark": "overhead",
            "machine": info,
            "params": {
                "total": args.total,
                "per_epoch": args.per_epoch,
                "epochs": epochs,
                "rounds": args.rounds,
                "trigger_ms": 0,
                "master": "local[2]",
            },
            "summary": summary,
            "stoker_epoch_breakdown_ms": breakdown,
            "baseline_epoch_breakdown_ms": base_breakdown,
            "paired_sink_ms": paired,
            "runs": results,
            "postgres": pg,
            "sqlite_synchronous_full_vs_normal": store_sync,
        },
    )
    spark.stop()
    return 0


def _alternate(
    sides: dict[str, Callable[..., tuple[str, float]]],
    spark: Any,
    root: Path,
    listener: _Progress,
    timer: _StepTimer,
    rounds: int,
    total: int,
    per_epoch: int,
    epochs: int,
) -> tuple[dict[str, list[dict[str, Any]]], list[dict[str, float]], list[dict[str, float]]]:
    """One warm-up run per side, then ``rounds`` rounds A B / B A / ...: per-run results and
    the step timings of every measured epoch (stoker's, the baseline's)."""
    results: dict[str, list[dict[str, Any]]] = {"baseline": [], "stoker": []}
    steps: list[dict[str, float]] = []
    baseline_steps: list[dict[str, float]] = []
    for rnd in range(rounds + 1):
        order = ["baseline", "stoker"] if rnd % 2 == 0 else ["stoker", "baseline"]
        for side in order:
            wall, batches, epoch_steps = _attempts(
                lambda tag, side=side: sides[side](
                    spark, root / f"{side}-{tag}", f"{side}-{tag}", total, per_epoch
                ),
                listener,
                timer,
                rnd,
                epochs,
            )
            for d in root.glob(f"{side}-*"):
                shutil.rmtree(d, ignore_errors=True)
            if rnd == 0:
                print(f"  warm-up {side}: {wall:.2f} s")
                continue
            trig = [b["trigger_ms"] for b in batches]
            add = [b["add_batch_ms"] for b in batches]
            results[side].append(
                {
                    "round": rnd,
                    "wall_s": wall,
                    "rows": int(sum(b["rows"] for b in batches)),
                    "trigger_ms": trig,
                    "add_batch_ms": add,
                    "loadavg_1m": os.getloadavg()[0],
                }
            )
            (steps if side == "stoker" else baseline_steps).extend(epoch_steps)
            print(
                f"  round {rnd} {side:<8}: {wall:6.2f} s wall, epoch median "
                f"{C.median(trig):6.1f} ms (foreachBatch {C.median(add):6.1f} ms), "
                f"load {os.getloadavg()[0]:.1f}"
            )
            C.flush()
    return results, steps, baseline_steps


def _run_pg(
    spark: Any, root: Path, listener: _Progress, timer: _StepTimer, args: Any, epochs: int
) -> dict[str, Any]:
    """The PostgreSQL sink path on a throwaway server with durable settings (fsync on)."""
    from tests.pg import ThrowawayPostgres

    durable = {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}
    print()
    print(
        f"PostgreSQL sink: stoker's exactly-once sink vs one plain COPY transaction per epoch "
        f"(from the driver); {args.pg_rounds} rounds + 1 warm-up; a throwaway server with "
        "fsync, synchronous_commit and full_page_writes on"
    )
    with ThrowawayPostgres(settings=durable) as server:
        dsn = server.dsn

        def stoker_side(spark: Any, work: Path, tag: str, total: int, n: int) -> tuple[str, float]:
            return run_pg_stoker(spark, work, tag.replace("stoker-", ""), total, n, dsn)

        def base_side(spark: Any, work: Path, tag: str, total: int, n: int) -> tuple[str, float]:
            return run_pg_baseline(spark, work, tag.replace("baseline-", ""), total, n, dsn)

        results, steps, baseline_steps = _alternate(
            {"baseline": base_side, "stoker": stoker_side},
            spark,
            root / "pg",
            listener,
            timer,
            args.pg_rounds,
            args.total,
            args.per_epoch,
            epochs,
        )
    summary = _summarize(results, args.total, epochs)
    return {
        "summary": summary,
        "stoker_epoch_breakdown_ms": _medians(steps),
        "baseline_epoch_breakdown_ms": _medians(baseline_steps),
        "runs": results,
    }


def _medians(epochs: list[dict[str, float]]) -> dict[str, float]:
    """Median per label over the epochs that have it (labels in first-seen order)."""
    labels: list[str] = []
    for e in epochs:
        labels += [k for k in e if k not in labels]
    return {k: C.median(e[k] for e in epochs if k in e) for k in labels}


def _attempts(
    run: Callable[[str], tuple[str, float]],
    listener: _Progress,
    timer: _StepTimer,
    rnd: int,
    epochs: int,
    tries: int = 3,
) -> tuple[float, list[dict[str, float]], list[dict[str, float]]]:
    """Run one job, again (with a new id) if Spark failed under load; its timings."""
    for i in range(tries):
        tag = f"{rnd}" if i == 0 else f"{rnd}-retry{i}"
        try:
            name, wall = run(tag)
            batches = listener.wait_for(name, epochs)
            return wall, batches, timer.take()
        except Exception as e:  # a Python worker timing out on a loaded machine, mostly
            timer.take()
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            print(f"  round {rnd}: run failed ({first[:120]}); retrying")
            if i == tries - 1:
                raise
    raise AssertionError("unreachable")


def _summarize(results: dict[str, list[dict[str, Any]]], total: int, epochs: int) -> dict[str, Any]:
    s: dict[str, Any] = {}
    for side, runs in results.items():
        trig = [x for r in runs for x in r["trigger_ms"]]
        add = [x for r in runs for x in r["add_batch_ms"]]
        s[side] = {
            "runs": len(runs),
            "epochs_timed": len(trig),
            "wall_s_median": C.median(r["wall_s"] for r in runs),
            "throughput_e2e_rows_s": C.median(total / r["wall_s"] for r in runs),
            "throughput_steady_rows_s": C.median(
                r["rows"] / (sum(r["trigger_ms"]) / 1000) for r in runs
            ),
            "epoch_ms_median": C.median(trig),
            "foreach_batch_ms_median": C.median(add),
            "epoch_ms_per_round": [C.median(r["trigger_ms"]) for r in runs],
        }
    b, st = s["baseline"], s["stoker"]
    s["ratio_throughput_e2e"] = st["throughput_e2e_rows_s"] / b["throughput_e2e_rows_s"]
    s["ratio_throughput_steady"] = st["throughput_steady_rows_s"] / b["throughput_steady_rows_s"]
    s["added_ms_per_epoch"] = st["epoch_ms_median"] - b["epoch_ms_median"]
    s["added_ms_per_epoch_foreach_batch"] = (
        st["foreach_batch_ms_median"] - b["foreach_batch_ms_median"]
    )
    # Same pairing per round (the two runs of one round ran back to back).
    pairs = list(zip(results["baseline"], results["stoker"], strict=True))
    s["added_ms_per_epoch_paired_median"] = C.median(
        C.median(st_["trigger_ms"]) - C.median(b_["trigger_ms"]) for b_, st_ in pairs
    )
    s["added_wall_s_paired_median"] = C.median(st_["wall_s"] - b_["wall_s"] for b_, st_ in pairs)
    loads = [r["loadavg_1m"] for runs in results.values() for r in runs]
    s["loadavg_1m_range"] = [min(loads), max(loads)]
    s["goals"] = {
        "throughput_ratio>=0.95": s["ratio_throughput_steady"] >= 0.95,
        "added_ms_per_epoch<=15": s["added_ms_per_epoch"] <= 15,
    }
    return s


def _breakdown(steps: list[dict[str, float]]) -> dict[str, float]:
    if not steps:
        return {}
    labels = []
    for _, _, label in _STEPS:
        labels.append(label)
        labels += [sub for *_, sub, parent in _SUBSTEPS if parent == label]
    labels.append(_TOTAL)
    # What the wrapped calls inside prepare and commit leave over (py4j calls building the
    # writer; the manifest's JSON and the listing of the staged files).
    rests = {
        _STEPS[6][2]: ("  rest: writer setup (py4j)", _SUBSTEPS[0:2]),
        _STEPS[9][2]: ("  rest: manifest JSON, listing, open/close", _SUBSTEPS[2:4]),
    }
    for e in steps:
        for parent, (label, subs) in rests.items():
            if parent in e:
                e[label] = e[parent] - sum(e.get(sub[2], 0.0) for sub in subs)
    for parent, (label, _subs) in rests.items():
        last = [sub for *_, sub, par in _SUBSTEPS if par == parent][-1]
        labels.insert(labels.index(last) + 1, label)
    out = {label: C.median(e.get(label, 0.0) for e in steps) for label in labels}
    known = [label for _, _, label in _STEPS]
    out["other (unattributed)"] = C.median(
        e[_TOTAL] - sum(e.get(k, 0.0) for k in known) for e in steps
    )
    return out


def _print(
    s: dict[str, Any],
    breakdown: dict[str, float],
    base: dict[str, float],
    rounds: int,
    epochs: int,
    title: str = "files sink (parquet)",
) -> None:
    b, st = s["baseline"], s["stoker"]
    print()
    print(f"Overhead, {title}: {rounds} rounds, {epochs} epochs per job, medians")
    rows = [
        [
            "wall time per job (s)",
            C.fmt(b["wall_s_median"], 2),
            C.fmt(st["wall_s_median"], 2),
            C.fmt(st["wall_s_median"] / b["wall_s_median"], 3),
        ],
        [
            "throughput end to end (rows/s)",
            C.fmt(b["throughput_e2e_rows_s"]),
            C.fmt(st["throughput_e2e_rows_s"]),
            C.fmt(s["ratio_throughput_e2e"], 3),
        ],
        [
            "throughput steady state (rows/s)",
            C.fmt(b["throughput_steady_rows_s"]),
            C.fmt(st["throughput_steady_rows_s"]),
            C.fmt(s["ratio_throughput_steady"], 3),
        ],
        [
            "epoch time, triggerExecution (ms)",
            C.fmt(b["epoch_ms_median"]),
            C.fmt(st["epoch_ms_median"]),
            C.fmt(st["epoch_ms_median"] / b["epoch_ms_median"], 3),
        ],
        [
            "  per-round medians (ms)",
            C.spread(b["epoch_ms_per_round"]),
            C.spread(st["epoch_ms_per_round"]),
            "",
        ],
        [
            "foreachBatch time, addBatch (ms)",
            C.fmt(b["foreach_batch_ms_median"]),
            C.fmt(st["foreach_batch_ms_median"]),
            C.fmt(st["foreach_batch_ms_median"] / b["foreach_batch_ms_median"], 3),
        ],
    ]
    print(C.table(["measure", "baseline", "stoker", "stoker/baseline"], rows))
    print()
    print(
        f"added per epoch (median stoker - median baseline): {s['added_ms_per_epoch']:+.1f} ms "
        f"[goal <= 15 ms: {'met' if s['goals']['added_ms_per_epoch<=15'] else 'NOT met'}]; "
        f"paired per round: {s['added_ms_per_epoch_paired_median']:+.1f} ms; "
        f"in foreachBatch: {s['added_ms_per_epoch_foreach_batch']:+.1f} ms"
    )
    print(
        f"throughput ratio stoker/baseline, steady state: {s['ratio_throughput_steady']:.3f} "
        f"[goal >= 0.95: {'met' if s['goals']['throughput_ratio>=0.95'] else 'NOT met'}]; "
        f"end to end: {s['ratio_throughput_e2e']:.3f} "
        f"(per-job fixed cost, paired: {s['added_wall_s_paired_median'] * 1000:+.0f} ms)"
    )
    lo, hi = s["loadavg_1m_range"]
    print(f"1-minute load average during the rounds: {lo:.1f}..{hi:.1f} (2 cpus)")
    if breakdown:
        print()
        print("stoker epoch, step by step (median ms per epoch over all measured epochs):")
        total = breakdown[_TOTAL]
        rows = [
            [k, C.fmt(v, 2), f"{100 * v / total:.0f}%" if total else "-"]
            for k, v in breakdown.items()
        ]
        print(C.table(["step", "ms", "share"], rows))
    if breakdown and base:
        print()
        print("foreachBatch body, timed the same way on both sides (median ms per epoch):")
        pairs = [
            ("transform / filter", "transform (pipeline.apply)", "transform (df.filter)"),
            (
                "the Spark write job",
                "  DataFrameWriter.save (the Spark job)",
                "the Spark write job",
            ),
            ("whole body", _TOTAL, _TOTAL),
        ]
        rows = [
            [label, C.fmt(base[b], 1), C.fmt(breakdown[st], 1), f"{breakdown[st] - base[b]:+.1f}"]
            for label, st, b in pairs
            if st in breakdown and b in base
        ]
        print(C.table(["part", "baseline", "stoker", "stoker - baseline"], rows))


def _print_pg_steps(pg: dict[str, Any]) -> None:
    print()
    print("PostgreSQL sink, foreachBatch body step by step (median ms per epoch):")
    for side in ("stoker", "baseline"):
        d = pg[f"{side}_epoch_breakdown_ms"]
        print(C.table([f"{side} step", "ms"], [[k, C.fmt(v, 2)] for k, v in d.items() if v]))


def _print_paired(p: dict[str, Any]) -> None:
    print()
    print(
        f"Sink writes paired inside each epoch ({p['epochs']} epochs of "
        f"{p['rows_per_epoch']:,} rows, rotating order): median and 10th percentile (ms), "
        "and the difference to the baseline write (median of per-epoch differences; "
        "difference of the 10th percentiles)"
    )

    def diff(x: float | None) -> str:
        return "-" if x is None else f"{x:+.1f}"

    rows = [
        [
            v,
            C.fmt(d["median_ms"]),
            C.fmt(d["p10_ms"]),
            diff(d["paired_minus_baseline_median_ms"]),
            diff(d["paired_minus_baseline_p10_ms"]),
        ]
        for v, d in p["variants"].items()
    ]
    print(C.table(["write", "median", "p10", "diff median", "diff p10"], rows))


if __name__ == "__main__":
    sys.exit(main())
