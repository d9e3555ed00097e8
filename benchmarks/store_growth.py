"""Store growth: per-epoch latency, metrics scrape time and store size over millions of epochs,
with retention off and on.

One job's store is filled to 10k, 100k, 1M (and ``--max``) epochs. Most epochs are bulk-inserted
with plain SQL in big transactions (the rows the store itself writes for a committed epoch of
a one-sink job: an epoch row and a sink transaction row with the files sink's detail); at each
checkpoint the last ``--sample`` epochs are driven through the store's own calls, as the epoch
protocol makes them (pin, record PREPARED, decide, record COMMITTED, mark committed), and timed:

* **epoch ms**: those five store calls for one epoch (median and p99 of the sample);
* **counts() ms**: what a ``/metrics`` scrape costs the store (median of 200 calls), and the
  query it replaced, ``COUNT(*)`` of committed epochs, for comparison;
* **size**: the database on disk (SQLite: file + WAL after a checkpoint; PostgreSQL: the two
  tables with their indexes and TOAST), and bytes per epoch kept.

With retention on (``--keep`` epochs), the store is pruned with ``prune_epochs`` every
``--prune-every`` epochs written, as the driver's pruning thread would; the time of the
longest single batch (how long one prune transaction holds SQLite's write lock) is reported.
On PostgreSQL each prune is followed by a plain ``VACUUM`` of the two tables, which is what
autovacuum does after that many deletes: the space of deleted rows is reused, not returned.

Run: ``python benchmarks/store_growth.py [--max 2000000] [--pg] [--json out.json]``.
"""

from __future__ import annotations

import json
import os
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _common as C

from stoker.store import Owner, RetentionPolicy, Store, open_store
from stoker.types import AttemptNo, ControlVersion, Epoch, JobId, TxnState, job_id

JOB: JobId = job_id("growth")
SINK = "files:/srv/stoker/out/orders"
T0 = 1.7e9  # epochs are stamped 500 ms apart from here (a 500 ms trigger)
CHECKPOINTS = (10_000, 100_000, 1_000_000, 2_000_000)


def _detail(epoch: int) -> str:
    return json.dumps(
        {"staged": f"/srv/stoker/out/orders/_staging/epoch={epoch}.attempt=1"}, sort_keys=True
    )


# bulk fill --------------------------------------------------------------------------------------
class Backend:
    """Bulk inserts and size of one backend's store database, around the store."""

    name = ""

    def __init__(self, url: str) -> None:
        self.url = url

    def bulk(self, lo: int, hi: int) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def size(self) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    def count_committed(self) -> float:  # pragma: no cover - abstract
        raise NotImplementedError

    def close(self) -> None:
        pass


def _rows(lo: int, hi: int) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    epochs, txns = [], []
    for e in range(lo, hi):
        t = T0 + e * 0.5
        epochs.append((JOB, e, 0, "COMMITTED", 1, 1, 1000, 0, t, t + 0.2, t + 0.3))
        txns.append((JOB, e, SINK, 1, "COMMITTED", _detail(e), t + 0.3))
    return epochs, txns


class SqliteBackend(Backend):
    name = "sqlite"

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.path = url[len("sqlite:///") :]
        self.conn = sqlite3.connect(self.path, isolation_level=None)
        self.conn.execute("PRAGMA synchronous=OFF")  # the fill only; the store keeps FULL

    def bulk(self, lo: int, hi: int) -> None:
        epochs, txns = _rows(lo, hi)
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        c.executemany("INSERT INTO epochs VALUES (?,?,?,?,?,?,?,?,?,?,?)", epochs)
        c.executemany(
            "INSERT INTO sink_txns (job_id, epoch, sink, attempt, state, detail, updated_at) "
            "VALUES (?,?,?,?,?,?,?)",
            txns,
        )
        c.execute(
            "UPDATE counters SET value = value + ? WHERE name = 'epochs_committed'", (hi - lo,)
        )
        c.execute("COMMIT")

    def size(self) -> int:
        self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        wal = Path(self.path + "-wal")
        return os.path.getsize(self.path) + (wal.stat().st_size if wal.exists() else 0)

    def count_committed(self) -> float:
        t = time.perf_counter()
        self.conn.execute("SELECT COUNT(*) FROM epochs WHERE state = 'COMMITTED'").fetchone()
        return time.perf_counter() - t

    def close(self) -> None:
        self.conn.close()


class PostgresBackend(Backend):
    name = "postgres"

    def __init__(self, url: str) -> None:
        import psycopg

        super().__init__(url)
        self.conn = psycopg.connect(url, autocommit=True)

    def bulk(self, lo: int, hi: int) -> None:
        epochs, txns = _rows(lo, hi)
        with self.conn.transaction(), self.conn.cursor() as cur:
            with cur.copy(
                "COPY epochs (job_id, epoch, control_version, state, pinned_by, decided_by, "
                "rows_in, final, pinned_at, decided_at, committed_at) FROM STDIN"
            ) as cp:
                for r in epochs:
                    cp.write_row(r)
            with cur.copy(
                "COPY sink_txns (job_id, epoch, sink, attempt, state, detail, updated_at) "
                "FROM STDIN"
            ) as cp:
                for r in txns:
                    cp.write_row(r)
            cur.execute(
                "UPDATE counters SET value = value + %s WHERE name = 'epochs_committed'",
                (hi - lo,),
            )

    def vacuum(self) -> None:
        # What autovacuum does in the background after the deletes: the space is reused.
        self.conn.execute("VACUUM (ANALYZE) epochs")
        self.conn.execute("VACUUM (ANALYZE) sink_txns")

    def size(self) -> int:
        row = self.conn.execute(
            "SELECT pg_total_relation_size('epochs') + pg_total_relation_size('sink_txns')"
        ).fetchone()
        return int(row[0]) if row else 0

    def count_committed(self) -> float:
        t = time.perf_counter()
        self.conn.execute("SELECT COUNT(*) FROM epochs WHERE state = 'COMMITTED'").fetchone()
        return time.perf_counter() - t

    def close(self) -> None:
        self.conn.close()


# the measured parts -----------------------------------------------------------------------------
def drive(store: Store, epochs: range) -> list[float]:
    """Each epoch of ``epochs`` through the store's own calls, as the epoch protocol makes them."""
    took = []
    a = AttemptNo(1)
    for n in epochs:
        e = Epoch(n)
        t = time.perf_counter()
        store.pin_epoch(JOB, e, a, ControlVersion(0))
        store.record_txn(JOB, e, SINK, a, TxnState.PREPARED, json.loads(_detail(n)))
        store.decide_epoch(JOB, e, a, rows_in=1000, final=False)
        store.record_txn(JOB, e, SINK, a, TxnState.COMMITTED, {})
        store.mark_epoch_committed(JOB, e)
        took.append(time.perf_counter() - t)
    return took


def timed(fn: Callable[[], Any], n: int) -> float:
    """Median seconds of ``n`` calls of ``fn``."""
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def prune(store: Store, policy: RetentionPolicy) -> tuple[int, float, float]:
    """Prune as the driver's thread does, one batch per call: (epochs deleted, total s, the
    longest batch's s)."""
    deleted, total, longest = 0, 0.0, 0.0
    while True:
        t = time.perf_counter()
        done = store.prune_epochs(JOB, policy, 1000, max_batches=1)
        dt = time.perf_counter() - t
        deleted += done.epochs
        total += dt
        if done.epochs:
            longest = max(longest, dt)
        if not done.more:
            return deleted, total, longest


def p99(xs: list[float]) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(len(s) * 0.99))]


def run_one(
    backend: str, url: str, keep: int | None, checkpoints: list[int], args: Any
) -> list[dict[str, Any]]:
    store = open_store(url)
    store.create_job(JOB, "growth", {"kind": "bench"}, {})
    store.start_attempt(JOB, Owner("bench", os.getpid(), "x"), 10**9, AttemptNo(0))
    bulk: Backend = SqliteBackend(url) if backend == "sqlite" else PostgresBackend(url)
    policy = RetentionPolicy(epochs=keep)
    written, results = 0, []
    prune_s, prune_longest, pruned = 0.0, 0.0, 0
    try:
        for cp in checkpoints:
            target = cp - args.sample
            fill_t = time.perf_counter()
            while written < target:
                step = min(args.chunk if keep is None else args.prune_every, target - written)
                bulk.bulk(written, written + step)
                written += step
                if keep is not None:
                    d, s, longest = prune(store, policy)
                    pruned, prune_s = pruned + d, prune_s + s
                    prune_longest = max(prune_longest, longest)
                    if isinstance(bulk, PostgresBackend):
                        bulk.vacuum()
            fill_s = time.perf_counter() - fill_t
            lat = drive(store, range(written, cp))
            written = cp
            if keep is not None:
                d, s, longest = prune(store, policy)
                pruned, prune_s = pruned + d, prune_s + s
                prune_longest = max(prune_longest, longest)
                if isinstance(bulk, PostgresBackend):
                    bulk.vacuum()
            counts = store.counts()
            assert counts["epochs_committed"] == cp, counts
            scrape = timed(store.counts, 200)
            old = statistics.median(bulk.count_committed() for _ in range(5))
            size = bulk.size()
            kept = cp - pruned
            row = {
                "backend": backend,
                "retention": "off" if keep is None else f"keep {keep:,}",
                "epochs": cp,
                "kept": kept,
                "epoch_ms_median": statistics.median(lat) * 1000,
                "epoch_ms_p99": p99(lat) * 1000,
                "counts_ms": scrape * 1000,
                "count_star_ms": old * 1000,
                "size_bytes": size,
                "bytes_per_kept_epoch": size / max(kept, 1),
                "prune_s_total": prune_s,
                "prune_longest_batch_ms": prune_longest * 1000,
                "fill_s": fill_s,
            }
            results.append(row)
            print(
                f"  {backend} {row['retention']:>12} {cp:>9,} epochs: "
                f"epoch {row['epoch_ms_median']:.2f} ms (p99 {row['epoch_ms_p99']:.2f}), "
                f"counts() {row['counts_ms']:.3f} ms, COUNT(*) {row['count_star_ms']:.1f} ms, "
                f"{size / 1e6:.1f} MB, {kept:,} kept",
                flush=True,
            )
    finally:
        bulk.close()
        store.close()
    return results


def main() -> None:
    ap = C.arg_parser(__doc__.splitlines()[0])
    ap.add_argument("--max", type=int, default=1_000_000, help="largest checkpoint (epochs)")
    ap.add_argument("--sample", type=int, default=200, help="epochs driven through the store")
    ap.add_argument("--keep", type=int, default=1000, help="retention on: epochs kept")
    ap.add_argument("--prune-every", type=int, default=10_000, help="epochs between prunes")
    ap.add_argument("--chunk", type=int, default=100_000, help="epochs per bulk transaction")
    ap.add_argument("--pg", action="store_true", help="PostgreSQL too (a throwaway server)")
    ap.add_argument("--no-sqlite", action="store_true", help="PostgreSQL only (with --pg)")
    ap.add_argument("--pg-max", type=int, default=1_000_000, help="largest PostgreSQL checkpoint")
    args = ap.parse_args()
    C.quiet_stoker_logs()
    info = {"cpus": os.cpu_count(), "loadavg_at_start": os.getloadavg()}
    print(f"machine: {info['cpus']} cpus, load average at start {info['loadavg_at_start']}")
    checkpoints = [c for c in CHECKPOINTS if c <= args.max]
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for keep in () if args.no_sqlite else (None, args.keep):
            path = Path(tmp) / f"store-{keep}.db"
            results += run_one("sqlite", f"sqlite:///{path}", keep, checkpoints, args)
        if args.pg:
            from tests.pg import ThrowawayPostgres

            with ThrowawayPostgres() as pg:
                for keep in (None, args.keep):
                    dsn = pg.create_database(f"growth_{keep or 'all'}")
                    pg_cps = [c for c in checkpoints if c <= args.pg_max]
                    results += run_one("postgres", dsn, keep, pg_cps, args)
    info["loadavg_at_end"] = os.getloadavg()

    print()
    print(
        C.table(
            [
                "backend",
                "retention",
                "epochs",
                "kept",
                "epoch ms (p50/p99)",
                "counts() ms",
                "COUNT(*) ms",
                "MB",
                "B/kept epoch",
                "longest prune tx ms",
            ],
            [
                [
                    r["backend"],
                    r["retention"],
                    f"{r['epochs']:,}",
                    f"{r['kept']:,}",
                    f"{r['epoch_ms_median']:.2f} / {r['epoch_ms_p99']:.2f}",
                    f"{r['counts_ms']:.3f}",
                    f"{r['count_star_ms']:.1f}",
                    f"{r['size_bytes'] / 1e6:.1f}",
                    f"{r['bytes_per_kept_epoch']:.0f}",
                    "-" if r["retention"] == "off" else f"{r['prune_longest_batch_ms']:.0f}",
                ]
                for r in results
            ],
        )
    )
    print("\nratios, largest checkpoint / 10k epochs (1.0 = flat):")
    for backend in sorted({r["backend"] for r in results}):
        for ret in sorted({r["retention"] for r in results}):
            rs = [r for r in results if r["backend"] == backend and r["retention"] == ret]
            if len(rs) < 2:
                continue
            a, b = rs[0], rs[-1]
            print(
                f"  {backend} retention {ret}: epoch latency "
                f"{b['epoch_ms_median'] / a['epoch_ms_median']:.2f}x, counts() "
                f"{b['counts_ms'] / a['counts_ms']:.2f}x, COUNT(*) "
                f"{b['count_star_ms'] / max(a['count_star_ms'], 1e-6):.1f}x, size "
                f"{b['size_bytes'] / a['size_bytes']:.2f}x ({b['epochs'] // a['epochs']}x epochs)"
            )
    print(f"load average at end {info['loadavg_at_end']}")
    C.write_json(args.json, {"machine": info, "args": vars(args), "results": results})


if __name__ == "__main__":
    main()
