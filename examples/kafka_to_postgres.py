"""Kafka -> PostgreSQL, exactly once: JSON orders from a topic into a table, one row per order.

    pip install 'stoker[kafka]'
    export PG_DSN=postgresql://app@db.example/shop   # a password: in ~/.pgpass or PGPASSWORD
    KAFKA=localhost:9092 TOPIC=orders stoker run examples/kafka_to_postgres.py

Each record's value is JSON like ``{"order_id": 1, "amount": 9.5}``. Every epoch's rows reach
the table once, across any crash: each Spark task writes its rows in a prepared PostgreSQL
transaction, committed once the epoch is decided, and the epoch's Kafka offsets are recorded
with that decision, so a restart reads exactly the records of the epoch it replays. The table
(``orders``, or ``TABLE``) is created from the first epoch's schema, with ``order_id`` as its
primary key: an order sent twice by its producer (a retried send) is upserted, not doubled.
The server needs ``max_prepared_transactions`` of at least twice the writers (the sink says so
at start when it is not). Consumer settings (SASL, SSL) go in ``options=``; they never reach a
log or the job's spec.
"""

import os

import stoker
from stoker import Pipeline, sinks, sources

p = Pipeline("kafka_to_postgres")
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
p.sink(
    sinks.postgres(
        os.environ.get("PG_DSN", "postgresql://localhost/postgres"),
        os.environ.get("TABLE", "orders"),
        key="order_id",
    )
)

if __name__ == "__main__":
    stoker.run(p, trigger="1s")
