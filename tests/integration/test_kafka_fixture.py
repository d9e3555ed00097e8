"""The throwaway Kafka broker of the tests (tests/kafka.py, issue 42 item 1), on a real broker.

One broker is started, given a topic of three partitions, written to in Kafka transactions (one
committed, one aborted) and read back by a ``read_committed`` consumer; then SIGKILLed and
started again on the same folder, where the committed records are still there and the aborted
ones still invisible; then the topic grows by two partitions that take writes. A broker that
cannot start fails these tests naming why: nothing here skips.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

import tests.kafka as kafka_mod
from tests.kafka import KafkaUnavailable, ThrowawayKafka, kafka_classpath, kafka_version

TOPIC = "events"


def _produce(bootstrap: str, records: list[tuple[int, bytes]], *, commit: bool, tid: str) -> None:
    """Write ``(partition, value)`` records in one transaction, committed or aborted."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 0})
    producer.init_transactions(30)
    producer.begin_transaction()
    for partition, value in records:
        producer.produce(TOPIC, value=value, key=value, partition=partition)
    producer.flush(30)
    if commit:
        producer.commit_transaction(30)
    else:
        producer.abort_transaction(30)


def _read_committed(bootstrap: str, partitions: int, expected: int) -> list[tuple[int, bytes]]:
    """Every record a ``read_committed`` consumer sees from the start of each partition: waits
    for ``expected`` of them, then a little longer for any more (there should be none)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "fixture-test",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    try:
        consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(partitions)])
        seen: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + 30
        quiet_until: float | None = None
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None:
                assert msg.error() is None, msg.error()
                partition, value = msg.partition(), msg.value()
                assert partition is not None and value is not None
                seen.append((partition, value))
            if len(seen) >= expected:
                quiet_until = quiet_until or time.monotonic() + 1.0
                if time.monotonic() > quiet_until:
                    break
        return sorted(seen)
    finally:
        consumer.close()


def test_broker_keeps_committed_records_across_a_kill_and_grows_partitions() -> None:
    committed = [(i % 3, f"c{i}".encode()) for i in range(30)]
    aborted = [(i % 3, f"a{i}".encode()) for i in range(9)]
    with ThrowawayKafka() as broker:
        assert broker.start_seconds is not None
        bootstrap = broker.bootstrap
        assert bootstrap.startswith("127.0.0.1:")
        with pytest.raises(KafkaUnavailable, match="running already"):
            broker.start()
        broker.create_topic(TOPIC, 3)
        assert broker.partitions(TOPIC) == 3
        _produce(bootstrap, committed, commit=True, tid="fixture-1")
        _produce(bootstrap, aborted, commit=False, tid="fixture-2")
        assert _read_committed(bootstrap, 3, len(committed)) == sorted(committed)

        broker.stop(kill=True)
        assert not broker.running
        broker.start()
        assert broker.bootstrap == bootstrap  # same folder, same ports
        assert broker.partitions(TOPIC) == 3
        assert _read_committed(bootstrap, 3, len(committed)) == sorted(committed)

        assert broker.add_partitions(TOPIC, 2) == 5
        later = [(3, b"p3"), (4, b"p4")]
        _produce(bootstrap, later, commit=True, tid="fixture-1")
        assert _read_committed(bootstrap, 5, len(committed) + 2) == sorted(committed + later)

        broker.stop()  # a graceful stop, then a start again
        broker.start()
        assert broker.partitions(TOPIC) == 5
        folder = broker.folder
        assert folder is not None and (folder / "data").is_dir()
    assert not folder.exists()  # leaving the block removes it all


def test_present_jars_are_used_without_maven(monkeypatch: pytest.MonkeyPatch) -> None:
    jars = kafka_classpath()  # resolved (by .ci/run, or now)
    assert any(Path(j).name == f"kafka_2.13-{kafka_version()}.jar" for j in jars)
    monkeypatch.setattr(kafka_mod.shutil, "which", lambda name: None)  # no mvn to be had
    assert kafka_classpath() == jars


def test_missing_jars_without_maven_say_why(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))  # no classpath file there
    monkeypatch.setattr(kafka_mod.shutil, "which", lambda name: None)
    with pytest.raises(KafkaUnavailable, match=r"no `mvn` on the PATH"):
        kafka_classpath()
    with pytest.raises(KafkaUnavailable, match=r"no `java` on the PATH"):
        ThrowawayKafka().start()
