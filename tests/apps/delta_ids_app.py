"""A test driver: generated ids (+ a bucket column) -> Delta sink.

Environment: DIDS_OUT (the table's folder, required), DIDS_TOTAL (default 2000), DIDS_PER_EPOCH
(default 200), DIDS_PARTITIONS (the frame's Spark partitions per epoch, default 2),
DIDS_PARTITION_BY (a column of the table to partition by: "bucket"), DIDS_EXTRA (add a column
"extra": a pipeline whose output grew), DIDS_SCHEMA_MODE, DIDS_JOB (job id, default "dids").
Run it with ``stoker run tests/apps/delta_ids_app.py -D stoker.state_dir=...``.
"""

import os

from pyspark.sql import functions as F

import stoker
from stoker import Pipeline, sinks, sources

p = Pipeline(os.environ.get("DIDS_JOB", "dids"))
p.source(
    sources.generator(
        total=int(os.environ.get("DIDS_TOTAL", "2000")),
        max_rows_per_epoch=int(os.environ.get("DIDS_PER_EPOCH", "200")),
    )
)
parts = int(os.environ.get("DIDS_PARTITIONS", "2"))


def shape(df):  # type: ignore[no-untyped-def]
    out = df.repartition(parts).select("id", (F.col("id") % 3).cast("int").alias("bucket"))
    if os.environ.get("DIDS_EXTRA"):
        out = out.withColumn("extra", F.lit("x"))
    return out


p.transform(shape)
p.sink(
    sinks.delta(
        os.environ["DIDS_OUT"],
        partition_by=os.environ.get("DIDS_PARTITION_BY") or None,
        schema_mode=os.environ.get("DIDS_SCHEMA_MODE") or None,
    )
)

if __name__ == "__main__":
    stoker.run(p, trigger=os.environ.get("DIDS_TRIGGER", "100ms"))
