"""The Iceberg sink's per-epoch overhead and throughput against a hand-written ``foreachBatch``
that calls pyiceberg's ``table.append`` (issue 43 items 2 and 4).

As ``benchmarks/delta_sink.py`` does for Delta: one process, one SparkSession (``local[2]``),
both sides in the same run, alternated round by round after one unmeasured warm-up of each,
each epoch timed by Spark (``durationMs.triggerExecution``):

* **stoker**: ``generator(total, max_rows_per_epoch) -> sinks.iceberg("sqlite:///...", "db.t")``
  run with ``stoker.run(..., spark=spark, trigger=0)``, a fresh state folder, catalog and
  warehouse each time: Spark tasks write Parquet files (field ids set), fsynced, with their
  intents; the decision in SQLite; one snapshot with the marker in its summary, read back from
  the ancestry first; the clean-up.
* **baseline**: the same ``stoker_generator`` source and options, and in ``foreachBatch``
  ``table.append(df.toArrow())`` on the same kind of catalog (the table made by the first
  batch): no marker, no guarantee (a crash between the append and Spark's commit log appends
  the epoch twice).

    python benchmarks/iceberg_sink.py [--rounds 3] [--total 500000] [--per-epoch 100000]
                                      [--json out.json]
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import _common as C
from delta_sink import _Progress

import stoker
from stoker import sinks, sources
from stoker.sinks._iceberg_catalog import CATALOG_NAME
from stoker.sources.generator import FORMAT


def _catalog(work: Path) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    work.mkdir(parents=True, exist_ok=True)
    return SqlCatalog(
        CATALOG_NAME, uri=f"sqlite:///{work / 'catalog.db'}", warehouse=(work / "wh").as_uri()
    )


def run_stoker(spark: Any, work: Path, tag: str, total: int, per_epoch: int) -> str:
    job = f"ibench-{tag}"
    work.mkdir(parents=True, exist_ok=True)
    p = stoker.Pipeline(job)
    p.source(sources.generator(total=total, max_rows_per_epoch=per_epoch))
    p.sink(sinks.iceberg(f"sqlite:///{work / 'catalog.db'}", "db.t", warehouse=str(work / "wh")))
    res = stoker.run(p, spark=spark, trigger=0, state_dir=work / "state")
    if str(res.state) != "FINISHED":
        raise RuntimeError(f"stoker job ended {res.state}")
    return f"stoker_{job}".replace("-", "_")


def run_baseline(spark: Any, work: Path, tag: str, total: int, per_epoch: int) -> str:
    name = f"baseline_{tag}".replace("-", "_")
    catalog = _catalog(work)
    catalog.create_namespace_if_not_exists("db")

    def batch(df: Any, batch_id: int) -> None:
        rows = df.toArrow()
        table = catalog.create_table_if_not_exists("db.t", schema=rows.schema)
        table.append(rows)

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
    if q.exception() is not None:
        raise RuntimeError(f"baseline failed: {q.exception()}")
    return name


def _rows(work: Path) -> int:
    return int(_catalog(work).load_table("db.t").scan().to_arrow().num_rows)


def main() -> None:
    ap = C.arg_parser(__doc__ or "")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--total", type=int, default=500_000)
    ap.add_argument("--per-epoch", type=int, default=100_000)
    args = ap.parse_args()
    C.quiet_stoker_logs()
    info = C.machine()
    C.print_machine(info)
    from tests.support.spark import local_session

    session = local_session("local[2]", "iceberg-sink-bench")
    spark = next(session)
    spark.sparkContext.setLogLevel("ERROR")
    progress = _Progress()
    spark.streams.addListener(progress)
    epochs = -(-args.total // args.per_epoch)
    runs = {"stoker": run_stoker, "baseline": run_baseline}
    got: dict[str, list[list[tuple[float, float]]]] = {"stoker": [], "baseline": []}
    loads: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for r in range(-1, args.rounds):  # round -1: the unmeasured warm-up
            order = ["stoker", "baseline"] if r % 2 == 0 else ["baseline", "stoker"]
            for side in order:
                d = work / f"{side}{r + 1}"
                loads.append(os.getloadavg()[0])
                name = runs[side](spark, d, f"r{r + 1}", args.total, args.per_epoch)
                if _rows(d) != args.total:
                    raise RuntimeError(f"{side}: {_rows(d)} rows, not {args.total}")
                if r >= 0:
                    got[side].append(progress.take(name, epochs))
                shutil.rmtree(d, ignore_errors=True)
            if r >= 0:
                s = C.median(t for t, _ in got["stoker"][-1])
                b = C.median(t for t, _ in got["baseline"][-1])
                print(f"round {r}: median epoch stoker {s:.0f} ms, baseline {b:.0f} ms")
                C.flush()

    def steady(side: str) -> float:
        return sum(n for run in got[side] for _, n in run) / (
            sum(t for run in got[side] for t, _ in run) / 1000
        )

    med = {side: C.median(t for run in got[side] for t, _ in run) for side in got}
    result = {
        "machine": info,
        "load_1m": [round(x, 2) for x in loads],
        "rounds": args.rounds,
        "rows_per_epoch": args.per_epoch,
        "epochs_per_run": epochs,
        "median_epoch_ms": med,
        "overhead_ms_per_epoch": med["stoker"] - med["baseline"],
        "steady_rows_per_s": {side: steady(side) for side in got},
        "steady_throughput_ratio": steady("stoker") / steady("baseline"),
    }
    print(
        C.table(
            ["", "median epoch (ms)", "steady rows/s"],
            [
                [side, C.fmt(med[side]), C.fmt(result["steady_rows_per_s"][side], 0)]
                for side in ("baseline", "stoker")
            ],
        )
    )
    print(
        f"overhead {result['overhead_ms_per_epoch']:.1f} ms per epoch of {args.per_epoch} rows; "
        f"steady throughput stoker/baseline {result['steady_throughput_ratio']:.3f}; "
        f"load {min(loads):.1f}..{max(loads):.1f}"
    )
    C.write_json(args.json, result)
    session.close()


if __name__ == "__main__":
    main()
