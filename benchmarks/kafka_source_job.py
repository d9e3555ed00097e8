"""A whole stoker job reading Kafka, against a plain consumer, and the latency through a job from
Kafka to Kafka (issue 42 item 5).

**Throughput.** A throwaway broker (tests/kafka.py), one topic of ``--records`` records of ~100
bytes in ``--partitions`` partitions. Each round, alternating which side goes first:

* **plain**: one confluent-kafka consumer in this process draining every partition into Arrow
  batches of key, value, offset (``benchmarks/kafka_source_read.plain``), one partition after
  the other: records / wall seconds.
* **stoker**: ``sources.kafka(topic, max_records_per_epoch=--per-epoch) -> sinks.files(out)``
  run by ``stoker.run(..., spark=spark, trigger=0)`` on ``local[2]`` (a fresh job, state and
  output each round) until every record is committed, then canceled through its store: records
  / the sum of its epochs' ``triggerExecution`` (Spark's time for each epoch: planning, the
  tasks reading Kafka and writing Parquet, the decision, the commit), and records / the wall
  time from ``stoker.run`` to the last commit (the driver's start included).

**Latency.** A job ``sources.kafka(lat_in) -> sinks.kafka(lat_out)`` at a 500 ms trigger; a
producer sends a record every ``--every`` seconds for ``--seconds`` seconds carrying the time
it was produced; a ``read_committed`` consumer of ``lat_out`` takes the time it sees each one:
p50 and p99 of that difference, produce to visible.

    python benchmarks/kafka_source_job.py [--records 2000000] [--partitions 8] [--rounds 2]
                                          [--per-epoch 500000] [--seconds 60] [--json F]
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import _common as C
from _sink_bench import Progress, spark_session
from kafka_source_read import plain

import stoker
from stoker import sinks, sources
from stoker.store import open_store
from stoker.types import job_id
from tests.kafka import ThrowawayKafka


def produce(boot: str, topic: str, records: int, partitions: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": boot, "linger.ms": 50})
    payload = b"x" * 90
    for i in range(records):
        while True:
            try:
                p.produce(topic, payload, key=b"%08d" % i, partition=i % partitions)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                p.poll(0.1)
    p.flush(300)


class Background:
    """``stoker.run`` of a pipeline on a thread of its own, canceled through its store."""

    def __init__(self, pipeline: Any, spark: Any, state: Path, trigger: Any) -> None:
        self.job, self.state = pipeline.name, state
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(pipeline, spark, trigger))
        self.started = time.perf_counter()
        self.thread.start()

    def _run(self, pipeline: Any, spark: Any, trigger: Any) -> None:
        try:
            stoker.run(pipeline, spark=spark, trigger=trigger, state_dir=self.state)
        except BaseException as e:  # a canceled job may end the call with its error
            self.error = e

    def cancel(self) -> None:
        st = open_store(self.state / "store.db")
        try:
            st.request_cancel(job_id(self.job))
        finally:
            st.close()
        self.thread.join(timeout=300)


def run_stoker(
    spark: Any, progress: Progress, boot: str, topic: str, work: Path, a: Any
) -> dict[str, float]:
    name = f"ksrc-{work.name}"
    p = stoker.Pipeline(name)
    p.source(sources.kafka(boot, topics=[topic], max_records_per_epoch=a.per_epoch))
    p.transform(lambda df: df.select("key", "value", "partition", "offset"))
    p.sink(sinks.files(str(work / "out")))
    job = Background(p, spark, work / "state", 0)
    query = f"stoker_{name}".replace("-", "_")
    deadline = time.monotonic() + 1800
    while True:
        with progress.lock:
            got = dict(progress.batches.get(query, {}))
        rows = sum(n for _, n in got.values())
        if rows >= a.records:
            break
        if not job.thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"stoker job stopped at {rows} records: {job.error}")
        time.sleep(0.05)
    wall = time.perf_counter() - job.started
    job.cancel()
    epochs = sum(t for t, _ in got.values()) / 1000
    return {"records": rows, "epochs_s": epochs, "wall_s": wall, "epochs": len(got)}


def latency(spark: Any, k: ThrowawayKafka, work: Path, seconds: float, every: float) -> list[float]:
    from confluent_kafka import Consumer, Producer

    k.create_topic("lat_in", 2)
    k.create_topic("lat_out", 1)
    p = stoker.Pipeline("klat")
    p.source(sources.kafka(k.bootstrap, topics=["lat_in"]))
    p.transform(lambda df: df.select("key", "value"))
    p.sink(sinks.kafka(k.bootstrap, "lat_out"))
    job = Background(p, spark, work / "lat-state", "500ms")
    c = Consumer(
        {
            "bootstrap.servers": k.bootstrap,
            "group.id": "lat",
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    c.subscribe(["lat_out"])
    seen: list[float] = []
    sent = 0

    def send() -> None:
        nonlocal sent
        prod = Producer({"bootstrap.servers": k.bootstrap, "linger.ms": 0})
        time.sleep(15)  # the job's first epoch (the driver's start) is not what is measured
        end = time.time() + seconds
        while time.time() < end:
            prod.produce("lat_in", repr(time.time()).encode(), key=b"%d" % sent)
            prod.poll(0)
            sent += 1
            time.sleep(every)
        prod.flush(30)

    sender = threading.Thread(target=send)
    sender.start()
    deadline = time.monotonic() + seconds + 300
    while time.monotonic() < deadline and (sender.is_alive() or len(seen) < sent):
        for m in c.consume(1000, 0.1):
            if m.error() is None:
                seen.append(time.time() - float(m.value()))
    c.close()
    job.cancel()
    if len(seen) != sent:
        raise RuntimeError(f"latency: {len(seen)} of {sent} records seen")
    return seen


def main() -> None:
    ap = C.arg_parser(__doc__ or "")
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--per-epoch", type=int, default=500_000)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--every", type=float, default=0.02)
    a = ap.parse_args()
    C.quiet_stoker_logs()
    info = C.machine()
    C.print_machine(info)
    with spark_session("kafka-source-job-bench") as spark:
        progress = Progress()
        spark.streams.addListener(progress)
        rates: dict[str, list[float]] = {"plain": [], "stoker": [], "stoker_wall": []}
        loads: list[float] = []
        with tempfile.TemporaryDirectory() as tmp, ThrowawayKafka(jvm_opts=("-Xmx1g",)) as k:
            work = Path(tmp)
            k.create_topic("bench", a.partitions)
            t = time.perf_counter()
            produce(k.bootstrap, "bench", a.records, a.partitions)
            print(f"produced {a.records} records in {time.perf_counter() - t:.1f}s")
            per = a.records // a.partitions
            for r in range(a.rounds):
                for side in ["plain", "stoker"] if r % 2 == 0 else ["stoker", "plain"]:
                    loads.append(os.getloadavg()[0])
                    if side == "plain":
                        t = time.perf_counter()
                        n = sum(plain(k.bootstrap, "bench", q, per) for q in range(a.partitions))
                        assert n == a.records, n
                        rates["plain"].append(n / (time.perf_counter() - t))
                    else:
                        d = work / f"r{r}"
                        got = run_stoker(spark, progress, k.bootstrap, "bench", d, a)
                        rates["stoker"].append(got["records"] / got["epochs_s"])
                        rates["stoker_wall"].append(got["records"] / got["wall_s"])
                        shutil.rmtree(d, ignore_errors=True)
                print(
                    f"round {r}: plain {rates['plain'][-1]:,.0f}/s, stoker "
                    f"{rates['stoker'][-1]:,.0f}/s (epochs), "
                    f"{rates['stoker_wall'][-1]:,.0f}/s (wall)"
                )
                C.flush()
            lat = latency(spark, k, work, a.seconds, a.every) if a.seconds else []
        med = {side: C.median(v) for side, v in rates.items()}
        result = {
            "machine": info,
            "load_1m": [round(x, 2) for x in loads],
            "records": a.records,
            "partitions": a.partitions,
            "per_epoch": a.per_epoch,
            "records_per_s": med,
            "ratio_epochs": med["stoker"] / med["plain"],
            "ratio_wall": med["stoker_wall"] / med["plain"],
        }
        if lat:
            lat.sort()
            result["latency_ms"] = {
                "n": len(lat),
                "p50": 1000 * lat[len(lat) // 2],
                "p99": 1000 * lat[min(len(lat) - 1, int(len(lat) * 0.99))],
                "max": 1000 * lat[-1],
            }
        print(
            f"plain {med['plain']:,.0f} records/s; stoker {med['stoker']:,.0f} (epochs, ratio "
            f"{result['ratio_epochs']:.2f}), {med['stoker_wall']:,.0f} (wall, ratio "
            f"{result['ratio_wall']:.2f}); load {min(loads):.1f}..{max(loads):.1f}"
        )
        if lat:
            m = result["latency_ms"]
            print(
                f"latency produce -> visible: p50 {m['p50']:.0f} ms, p99 {m['p99']:.0f} ms "
                f"(n {m['n']})"
            )
        C.write_json(a.json, result)


if __name__ == "__main__":
    main()
