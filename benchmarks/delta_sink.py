"""The Delta sink's per-epoch overhead and throughput against a hand-written ``foreachBatch``
that calls ``write_deltalake``, and the time to open a table's log with and without its
checkpoints (issue 43 items 1 and 4).

One process, one SparkSession (``local[2]``), both sides in the same run, alternated round by
round (A B, B A, ...: each goes first half the time) after one unmeasured warm-up of each:

* **stoker**: ``generator(total, max_rows_per_epoch) -> sinks.delta(out)`` run with
  ``stoker.run(..., spark=spark, trigger=0)``, a fresh state folder, table and job id each
  time: fence, pin, prepare (Spark tasks write Parquet files, fsynced, with their intents),
  decide, one Delta commit with the txn marker, the clean-up; SQLite store writes per epoch.
* **baseline**: the same ``stoker_generator`` source and options, and in ``foreachBatch``
  ``write_deltalake(out, df.toArrow(), mode="append")``: no marker, no guarantee (a crash
  between the write and Spark's commit log writes the epoch twice).

Each epoch is timed by Spark (``durationMs.triggerExecution`` from a StreamingQueryListener):
overhead = the median epoch of stoker minus the baseline's; steady throughput = rows / sum of
the epochs' triggerExecution, stoker's over the baseline's.

Then the log: ``--log-epochs`` one-row epochs committed through the sink's commit (no Spark),
and ``DeltaTable(path)`` opened (median of 5) on the table as delta-rs left it (a checkpoint
every 100 commits) and on a copy whose checkpoints were removed (every JSON entry replayed).

    python benchmarks/delta_sink.py [--rounds 3] [--total 1000000] [--per-epoch 100000]
                                    [--log-epochs 2000] [--json out.json]
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as C
from _sink_bench import compare, foreach_batch, report, spark_session

import stoker
from stoker import sinks, sources


def run_stoker(spark: Any, work: Path, tag: str, total: int, per_epoch: int) -> str:
    job = f"dbench-{tag}"
    p = stoker.Pipeline(job)
    p.source(sources.generator(total=total, max_rows_per_epoch=per_epoch))
    p.sink(sinks.delta(str(work / "out")))
    res = stoker.run(p, spark=spark, trigger=0, state_dir=work / "state")
    if str(res.state) != "FINISHED":
        raise RuntimeError(f"stoker job ended {res.state}")
    return f"stoker_{job}".replace("-", "_")


def run_baseline(spark: Any, work: Path, tag: str, total: int, per_epoch: int) -> str:
    from deltalake import write_deltalake

    name = f"baseline_{tag}".replace("-", "_")
    out = str(work / "out")

    def batch(df: Any, batch_id: int) -> None:
        write_deltalake(out, df.toArrow(), mode="append")

    return foreach_batch(spark, work, name, total, per_epoch, batch)


def _rows(out: Path) -> int:
    from deltalake import DeltaTable

    return int(DeltaTable(str(out)).count())


def log_open(work: Path, epochs: int) -> dict[str, Any]:
    """Open times of a table of ``epochs`` one-row commits, with and without checkpoints."""
    import pyarrow as pa
    from deltalake import DeltaTable

    from stoker.sinks._delta_schema import schema_json
    from stoker.sinks._delta_task import DeltaTask, write_files
    from stoker.sinks.base import SinkOwner
    from stoker.types import AttemptNo, Epoch, JobId

    root = work / "log"
    owner = SinkOwner(JobId("logbench"), "u1")
    sink = sinks.delta(str(root))
    sink.validate(owner)
    sink.open(owner, work)
    schema = schema_json(pa.schema([pa.field("id", pa.int64(), False)]))
    t0 = time.perf_counter()
    for e in range(epochs):
        t = DeltaTask(str(root), owner.uid, e, 1, ("id",), ())
        adds = write_files(t, 0, e, pa.table({"id": pa.array([e], pa.int64())}))
        sink.commit(Epoch(e), AttemptNo(1), {"adds": adds, "schema": schema})
    commit_ms = (time.perf_counter() - t0) * 1000 / epochs
    bare = work / "bare"
    shutil.copytree(root, bare)
    for f in (bare / "_delta_log").iterdir():
        if "checkpoint" in f.name:
            f.unlink()

    def open_ms(path: Path) -> float:
        times = []
        for _ in range(5):
            t = time.perf_counter()
            DeltaTable(str(path)).transaction_version(sink.app_id(owner.uid))
            times.append((time.perf_counter() - t) * 1000)
        return C.median(times)

    with_cp, without_cp = open_ms(root), open_ms(bare)
    return {
        "epochs": epochs,
        "commit_ms_per_tiny_epoch": commit_ms,
        "open_ms_with_checkpoints": with_cp,
        "open_ms_without_checkpoints": without_cp,
        "checkpoints": len(list((root / "_delta_log").glob("*.checkpoint.parquet"))),
    }


def main() -> None:
    ap = C.arg_parser(__doc__ or "")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--total", type=int, default=1_000_000)
    ap.add_argument("--per-epoch", type=int, default=100_000)
    ap.add_argument("--log-epochs", type=int, default=2000)
    args = ap.parse_args()
    C.quiet_stoker_logs()
    info = C.machine()
    C.print_machine(info)
    with spark_session("delta-sink-bench") as spark:
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            result = compare(
                spark,
                {"stoker": run_stoker, "baseline": run_baseline},
                lambda d: _rows(d / "out"),
                work,
                args.total,
                args.per_epoch,
                args.rounds,
            )
            log = log_open(work, args.log_epochs) if args.log_epochs else {}
        result = {"machine": info, **result, "log": log}
        report(result)
        if log:
            print(
                f"log of {log['epochs']} epochs ({log['checkpoints']} checkpoints, "
                f"{log['commit_ms_per_tiny_epoch']:.1f} ms per one-row commit): open "
                f"{log['open_ms_with_checkpoints']:.1f} ms with checkpoints, "
                f"{log['open_ms_without_checkpoints']:.1f} ms without"
            )
        C.write_json(args.json, result)


if __name__ == "__main__":
    main()
