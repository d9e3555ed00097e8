"""A test driver: generated ids (+ a bucket column) -> Iceberg sink (an SQLite catalog).

Environment: IIDS_CATALOG (the catalog's URL, required), IIDS_TABLE (default "db.ids"),
IIDS_WAREHOUSE, IIDS_TOTAL (default 2000), IIDS_PER_EPOCH (default 200), IIDS_PARTITIONS (the
frame's Spark partitions per epoch, default 2), IIDS_EXTRA (add a column "extra": a pipeline
whose output grew), IIDS_JOB (job id, default "iids").
Run it with ``stoker run tests/apps/iceberg_ids_app.py -D stoker.state_dir=...``.
"""

import os

from pyspark.sql import functions as F

import stoker
from stoker import Pipeline, sinks, sources

p = Pipeline(os.environ.get("IIDS_JOB", "iids"))
p.source(
    sources.generator(
        total=int(os.environ.get("IIDS_TOTAL", "2000")),
        max_rows_per_epoch=int(os.environ.get("IIDS_PER_EPOCH", "200")),
    )
)
parts = int(os.environ.get("IIDS_PARTITIONS", "2"))


def shape(df):  # type: ignore[no-untyped-def]
    out = df.repartition(parts).select("id", (F.col("id") % 3).cast("int").alias("bucket"))
    if os.environ.get("IIDS_EXTRA"):
        out = out.withColumn("extra", F.lit("x"))
    return out


p.transform(shape)
p.sink(
    sinks.iceberg(
        os.environ["IIDS_CATALOG"],
        os.environ.get("IIDS_TABLE", "db.ids"),
        warehouse=os.environ.get("IIDS_WAREHOUSE") or None,
    )
)

if __name__ == "__main__":
    stoker.run(p, trigger=os.environ.get("IIDS_TRIGGER", "100ms"))
