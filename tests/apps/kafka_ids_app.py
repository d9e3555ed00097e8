"""A test driver: generated ids -> key and value strings (and a header) -> Kafka sink.

Environment: KIDS_BOOTSTRAP, KIDS_TOPIC (required), KIDS_TOTAL (default 2000),
KIDS_PER_EPOCH (default 200), KIDS_MAX_TXN_BYTES (optional: the sink's bytes per transaction),
KIDS_TXN_TIMEOUT_MS (optional: the producers' transaction.timeout.ms), KIDS_JOB (job id,
default "kids"). Run it with
``stoker run tests/apps/kafka_ids_app.py -D stoker.state_dir=...``.
"""

import os

from pyspark.sql import functions as F

import stoker
from stoker import Pipeline, sinks, sources

p = Pipeline(os.environ.get("KIDS_JOB", "kids"))
p.source(
    sources.generator(
        total=int(os.environ.get("KIDS_TOTAL", "2000")),
        max_rows_per_epoch=int(os.environ.get("KIDS_PER_EPOCH", "200")),
    )
)
p.transform(
    lambda df: df.select(
        F.col("id").cast("string").alias("key"),
        F.concat(F.lit("v"), F.col("id").cast("string")).alias("value"),
        F.array(F.struct(F.lit("src").alias("key"), F.lit(b"gen").alias("value"))).alias("h"),
    )
)
options = {}
if os.environ.get("KIDS_TXN_TIMEOUT_MS"):
    options["transaction.timeout.ms"] = os.environ["KIDS_TXN_TIMEOUT_MS"]
sink = sinks.kafka(
    os.environ["KIDS_BOOTSTRAP"], os.environ["KIDS_TOPIC"], headers="h", options=options
)
if os.environ.get("KIDS_MAX_TXN_BYTES"):
    sink.max_transaction_bytes = int(os.environ["KIDS_MAX_TXN_BYTES"])
p.sink(sink)

if __name__ == "__main__":
    stoker.run(p, trigger=os.environ.get("KIDS_TRIGGER", "100ms"))
