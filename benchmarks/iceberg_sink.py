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

import tempfile
from pathlib import Path
from typing import Any

import _common as C
from _sink_bench import compare, foreach_batch, report, spark_session

import stoker
from stoker import sinks, sources
from stoker.sinks._iceberg_catalog import CATALOG_NAME


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

    return foreach_batch(spark, work, name, total, per_epoch, batch)


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
    with spark_session("iceberg-sink-bench") as spark:
        with tempfile.TemporaryDirectory() as tmp:
            result = compare(
                spark,
                {"stoker": run_stoker, "baseline": run_baseline},
                _rows,
                Path(tmp),
                args.total,
                args.per_epoch,
                args.rounds,
            )
        result = {"machine": info, **result}
        report(result)
        C.write_json(args.json, result)


if __name__ == "__main__":
    main()
