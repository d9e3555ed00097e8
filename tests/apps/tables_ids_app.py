"""A test driver: generated ids (+ a bucket column) -> a Delta table and an Iceberg table, one
job, both sinks in each epoch.

Environment: TIDS_DELTA (the Delta table's folder), TIDS_CATALOG (the Iceberg catalog's URL),
TIDS_WAREHOUSE (optional), TIDS_TOTAL (default 2000), TIDS_PER_EPOCH (default 200),
TIDS_PARTITIONS (the frame's Spark partitions per epoch, default 2), TIDS_JOB (default "tids").
Run it with ``stoker run tests/apps/tables_ids_app.py -D stoker.state_dir=...``.
"""

import os

from pyspark.sql import functions as F

import stoker
from stoker import Pipeline, sinks, sources

p = Pipeline(os.environ.get("TIDS_JOB", "tids"))
p.source(
    sources.generator(
        total=int(os.environ.get("TIDS_TOTAL", "2000")),
        max_rows_per_epoch=int(os.environ.get("TIDS_PER_EPOCH", "200")),
    )
)
parts = int(os.environ.get("TIDS_PARTITIONS", "2"))
p.transform(
    lambda df: df.repartition(parts).select("id", (F.col("id") % 3).cast("int").alias("bucket"))
)
p.sink(sinks.delta(os.environ["TIDS_DELTA"]))
p.sink(
    sinks.iceberg(
        os.environ["TIDS_CATALOG"], "db.t", warehouse=os.environ.get("TIDS_WAREHOUSE") or None
    )
)

if __name__ == "__main__":
    stoker.run(p, trigger=os.environ.get("TIDS_TRIGGER", "100ms"))
