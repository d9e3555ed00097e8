"""The Kafka source's task read (``stoker.sources._kafka_read.read_range``) against a plain
confluent-kafka consumer draining the same partition into Arrow batches, in one process, no
Spark: what the source's own Python costs per record before Spark sees a row.

A throwaway broker (tests/kafka.py), one topic of ``--records`` records of ~100 bytes in
``--partitions`` partitions; each round reads every partition with both readers (alternating
which goes first) and prints records/s and the ratio. The whole job (Spark's planning and
tasks, the sink) is measured separately (issue 42 item 5).

    .venv/bin/python -m benchmarks.kafka_source_read --records 400000 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from confluent_kafka import Consumer, Producer, TopicPartition

from stoker.sources._kafka_read import arrow_schema, read_range
from tests.kafka import ThrowawayKafka


def plain(boot: str, topic: str, partition: int, end: int) -> int:
    """Drain offsets 0..end-1 into Arrow batches of key, value, offset: the baseline."""
    import pyarrow as pa

    c = Consumer({"bootstrap.servers": boot, "group.id": "bench", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, partition, 0)])
    n, pos = 0, 0
    while pos < end:
        msgs = c.consume(20_000, 0.5)
        keys = [m.key() for m in msgs]
        values = [m.value() for m in msgs]
        offsets = [m.offset() for m in msgs]
        if msgs:
            pa.RecordBatch.from_arrays(
                [pa.array(keys, pa.binary()), pa.array(values, pa.binary()), pa.array(offsets)],
                names=["key", "value", "offset"],
            )
            n += len(msgs)
            pos = offsets[-1] + 1
    c.close()
    return n


def ours(boot: str, topic: str, partition: int, end: int) -> int:
    return sum(
        b.num_rows for b in read_range(boot, {}, "read_committed", topic, partition, 0, end, True)
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=400_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    assert arrow_schema().names[0] == "key"
    with ThrowawayKafka(jvm_opts=("-Xmx1g",)) as k:
        k.create_topic("bench", a.partitions)
        p = Producer({"bootstrap.servers": k.bootstrap, "linger.ms": 50})
        payload = b"x" * 90
        for i in range(a.records):
            while True:
                try:
                    p.produce("bench", payload, key=b"%08d" % i, partition=i % a.partitions)
                    break
                except BufferError:  # the local queue is full: let deliveries drain it
                    p.poll(0.1)
        p.flush(120)
        per = a.records // a.partitions
        rates: dict[str, list[float]] = {"plain": [], "stoker": []}
        for r in range(a.rounds):
            order = [("plain", plain), ("stoker", ours)]
            for name, fn in order if r % 2 == 0 else order[::-1]:
                t = time.perf_counter()
                n = sum(fn(k.bootstrap, "bench", q, per) for q in range(a.partitions))
                rates[name].append(n / (time.perf_counter() - t))
                assert n == per * a.partitions, (name, n)
        pl, st = statistics.median(rates["plain"]), statistics.median(rates["stoker"])
        print(f"load {os.getloadavg()[0]:.1f}; records {a.records}, partitions {a.partitions}")
        print(f"plain consumer -> Arrow: {pl:,.0f} records/s (median of {a.rounds})")
        print(f"stoker read_range:       {st:,.0f} records/s; ratio {st / pl:.2f}")


if __name__ == "__main__":
    main()
