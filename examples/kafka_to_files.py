"""Kafka -> files, exactly once: JSON orders from a topic into Parquet epochs.

    pip install 'stoker[kafka]'
    KAFKA=localhost:9092 TOPIC=orders stoker run examples/kafka_to_files.py

Each record's value is JSON like ``{"order_id": 1, "amount": 9.5}``; the output keeps the
record's partition and offset beside the decoded columns. A value that is not JSON of the
schema fails the epoch naming it (``strict=False`` would give nulls instead). Consumer
settings (SASL, SSL) go in ``options=``; they never reach a log or the job's spec.
"""

import os

import stoker
from stoker import Pipeline, sinks, sources

p = Pipeline("kafka_to_files")
p.source(
    sources.kafka(
        os.environ.get("KAFKA", "localhost:9092"),
        topics=[os.environ.get("TOPIC", "orders")],
        starting_offsets="earliest",
        max_records_per_epoch=100_000,
    )
)
p.transform(
    lambda df: sources.decode_json(
        df, "order_id long, amount double", keep=("partition", "offset", "timestamp")
    )
)
p.sink(sinks.files(os.environ.get("OUT", "out/kafka_orders")))

if __name__ == "__main__":
    stoker.run(p, trigger="1s")
