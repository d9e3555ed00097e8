"""Kafka -> Delta Lake, exactly once: JSON orders from a topic into a Delta table, one row per
order, with no JVM jar (the table is written by ``deltalake``, delta-rs).

    pip install 'stoker[kafka,delta]'
    KAFKA=localhost:9092 TOPIC=orders TABLE=/data/orders stoker run examples/kafka_to_delta.py

Each record's value is JSON like ``{"order_id": 1, "amount": 9.5}``. Every epoch is one Delta
commit: the epoch's Parquet files are written by Spark's tasks first, invisible to readers
until the commit names them, and the commit carries ``txn(appId, version=epoch)``, Delta's
idempotent-write marker, so an epoch replayed after a crash finds itself committed and writes
nothing. The epoch's Kafka offsets are recorded with the epoch's decision: a restart reads
exactly the records of the epoch it replays. With ``key="order_id"`` an order sent twice by its
producer (a retried send) is merged into its row, not doubled. Any Delta reader sees whole
epochs: Spark's ``format("delta")``, ``deltalake``, DuckDB's ``delta_scan``, Polars'
``read_delta``. Consumer settings (SASL, SSL) go in ``options=``; they never reach a log or the
job's spec.
"""

import os

import stoker
from stoker import Pipeline, sinks, sources

p = Pipeline("kafka_to_delta")
p.source(
    sources.kafka(
        os.environ.get("KAFKA", "localhost:9092"),
        topics=[os.environ.get("TOPIC", "orders")],
        starting_offsets="earliest",
        max_records_per_epoch=100_000,
    )
)
p.transform(
    lambda df: sources.decode_json(df, "order_id long, amount double", keep=("partition", "offset"))
)
p.sink(sinks.delta(os.environ.get("TABLE", "orders_delta"), key="order_id"))

if __name__ == "__main__":
    stoker.run(p, trigger="1s")
