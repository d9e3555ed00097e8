"""Benchmark driver: the same pipeline as recovery_stoker.py as a plain Structured Streaming query.

``python benchmarks/apps/recovery_plain.py``; environment: BENCH_OUT (output folder),
BENCH_CHECKPOINT, BENCH_PER_EPOCH (default 1000), BENCH_TRIGGER_MS (default 100), BENCH_MARKS.
Same source (``stoker_generator``), same filter, same session conf; in ``foreachBatch`` each
batch is written with ``df.write.parquet`` to its own folder. No exactly-once bookkeeping.
"""

import os
import time

from _marks import mark
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from stoker.runtime.session import DEFAULT_CONF, register_sources
from stoker.sources.generator import FORMAT

IMPORTED = time.time()


def main() -> None:
    mark("app_start", t=IMPORTED)
    builder = SparkSession.builder.master("local[2]").appName("plain-recovery-bench")
    for k, v in DEFAULT_CONF.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    register_sources(spark)
    mark("session_ready")
    out = os.environ["BENCH_OUT"]

    def batch(df, batch_id):  # type: ignore[no-untyped-def]
        t0 = time.time()
        df.filter(F.col("id") % 3 == 0).write.mode("overwrite").parquet(f"{out}/batch={batch_id}")
        mark("epoch", start=t0, epoch=int(batch_id))

    stream = (
        spark.readStream.format(FORMAT)
        .options(
            sid="s0", max_rows_per_epoch=os.environ.get("BENCH_PER_EPOCH", "1000"), partitions="2"
        )
        .load()
    )
    mark("sources_opened")
    query = (
        stream.writeStream.foreachBatch(batch)
        .option("checkpointLocation", os.environ["BENCH_CHECKPOINT"])
        .queryName("plain_recovery_bench")
        .trigger(processingTime=f"{int(os.environ.get('BENCH_TRIGGER_MS', '100'))} milliseconds")
        .start()
    )
    mark("query_started")
    query.awaitTermination()


if __name__ == "__main__":
    main()
