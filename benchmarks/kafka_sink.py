"""The Kafka sink's throughput against a plain idempotent producer writing the same rows.

One local Spark session (``local[2]``) and one throwaway Kafka broker (tests/kafka.py), both
sides in the same run, alternated round by round, each round on fresh topics of the same
partition count:

- **plain**: the rows collected to the driver as Arrow (``df.toArrow()``), then one
  idempotent producer (``enable.idempotence``, ``linger.ms=5``, the Java partitioner) produces
  them and flushes: what a hand-written driver-side writer does, at least once.
- **sink**: ``sinks.kafka`` as an epoch runs it: ``prepare`` (Spark tasks stage their
  partitions as fsynced Arrow files) then ``commit`` (the driver publishes them in Kafka
  transactions with the marker), exactly once. The store's part is left out (a few ms).

The rows are the same cached frame for both: ``key`` the id as a string, ``value`` ~100
bytes. Reports records/s of each, the ratio sink/plain, and the sink's split between
staging and publishing.

    python benchmarks/kafka_sink.py [--rows 1000000] [--partitions 8] [--rounds 3]
                                    [--json out.json]
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as C

from stoker.sinks import kafka
from stoker.sinks.base import SinkOwner
from stoker.types import AttemptNo, Epoch, JobId
from tests.kafka import ThrowawayKafka

JVM = ("-Xms256m", "-Xmx1g", "-XX:+UseSerialGC", "-Djava.awt.headless=true")


def plain(df: Any, bootstrap: str, topic: str) -> float:
    from confluent_kafka import Producer

    t0 = time.perf_counter()
    table = df.toArrow()
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "linger.ms": 5,
            "partitioner": "murmur2_random",
        }
    )
    for batch in table.to_batches():
        keys = batch.column(0).to_pylist()
        values = batch.column(1).to_pylist()
        for k, v in zip(keys, values, strict=True):
            while True:
                try:
                    p.produce(topic, value=v, key=k)
                    break
                except BufferError:
                    p.poll(0.05)
        p.poll(0)
    left = p.flush(120)
    assert left == 0, f"{left} records not delivered"
    return time.perf_counter() - t0


def sink(df: Any, bootstrap: str, topic: str, state: Path, n: int) -> tuple[float, float]:
    s = kafka(bootstrap, topic)
    owner = SinkOwner(JobId("bench"), f"bench{n}")
    s.open(owner, state)
    t0 = time.perf_counter()
    prepared = s.prepare(df, Epoch(0), AttemptNo(1))
    t1 = time.perf_counter()
    s.commit(Epoch(0), AttemptNo(1), prepared.detail)
    return t1 - t0, time.perf_counter() - t1


def main() -> None:
    ap = C.arg_parser(__doc__ or "")
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    C.quiet_stoker_logs()
    info = C.machine()
    C.print_machine(info)
    from pyspark.sql import functions as F

    spark = C.session("kafka-sink-bench")
    df = (
        spark.range(args.rows, numPartitions=args.partitions)
        .select(
            F.col("id").cast("string").alias("key"),
            F.concat(F.lit("v" * 90), F.lpad(F.col("id").cast("string"), 10, "0")).alias("value"),
        )
        .cache()
    )
    assert df.count() == args.rows
    plain_s: list[float] = []
    stage_s: list[float] = []
    publish_s: list[float] = []
    loads: list[float] = []
    with ThrowawayKafka(jvm_opts=JVM) as broker, tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = ["plain", "sink"] if r % 2 == 0 else ["sink", "plain"]
            for side in order:
                topic = f"{side}{r}"
                broker.create_topic(topic, args.partitions)
                loads.append(os.getloadavg()[0])
                if side == "plain":
                    plain_s.append(plain(df, broker.bootstrap, topic))
                else:
                    a, b = sink(df, broker.bootstrap, topic, Path(tmp) / topic, r)
                    stage_s.append(a)
                    publish_s.append(b)
            print(
                f"round {r}: plain {plain_s[-1]:.2f}s, sink {stage_s[-1]:.2f}s stage + "
                f"{publish_s[-1]:.2f}s publish",
                flush=True,
            )
    sink_s = [a + b for a, b in zip(stage_s, publish_s, strict=True)]
    rate_plain = args.rows / C.median(plain_s)
    rate_sink = args.rows / C.median(sink_s)
    print()
    print(
        C.table(
            ["", "median s", "records/s"],
            [
                ["plain idempotent producer", C.fmt(C.median(plain_s), 2), C.fmt(rate_plain, 0)],
                ["sinks.kafka (stage + publish)", C.fmt(C.median(sink_s), 2), C.fmt(rate_sink, 0)],
                ["  of which stage (prepare)", C.fmt(C.median(stage_s), 2), ""],
                ["  of which publish (commit)", C.fmt(C.median(publish_s), 2), ""],
            ],
        )
    )
    print(f"\nratio sink / plain: {rate_sink / rate_plain:.2f}")
    print(f"load (1 min) during the rounds: {min(loads):.1f}-{max(loads):.1f}")
    C.write_json(
        args.json,
        {
            "machine": info,
            "rows": args.rows,
            "partitions": args.partitions,
            "plain_s": plain_s,
            "stage_s": stage_s,
            "publish_s": publish_s,
            "ratio": rate_sink / rate_plain,
            "load": loads,
        },
    )
    spark.stop()


if __name__ == "__main__":
    main()
