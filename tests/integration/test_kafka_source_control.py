"""The Kafka source's reader under the job's control state (a real broker, a real SQLite store,
no Spark): a rate limit shares an epoch among partitions by backlog, a pause plans one empty
epoch and then holds, a resume goes on; the backlog is the last stable offsets minus the end;
the tasks of the planned slices read exactly the planned records. Also what the reader says
when the brokers are out of reach: a transient failure, not bad input, and no hang."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from stoker.errors import InvalidSource, SourceError, exit_code
from stoker.sources import kafka
from stoker.sources._kafka_client import encode_starting
from stoker.sources._kafka_reader import backlog, partition_backlog
from stoker.sources.kafka import KafkaDataSource
from stoker.store import open_store
from stoker.types import ControlKind, job_id
from tests.kafka import ThrowawayKafka
from tests.support import free_port

JOB = job_id("kcontrol")


def _reader(boot: str, topic: str, tmp_path: Path, url: str | None) -> Any:
    opts = {
        "sid": "s0",
        "bootstrap_servers": boot,
        "topics": json.dumps([topic]),
        "starting_offsets": encode_starting("earliest"),
        "start_path": str(tmp_path / "s0.kafka.json"),
    }
    if url is not None:
        opts.update(job_id=JOB, store_url=url)
    return KafkaDataSource(opts).streamReader(None)


def _sum(offset: dict[str, Any]) -> int:
    return sum(sum(p.values()) for p in offset["kafka"].values())


def test_rate_limit_pause_and_resume_plan_the_offsets(
    kafka_server: ThrowawayKafka, kafka_topic: Any, tmp_path: Path
) -> None:
    boot = kafka_server.bootstrap
    topic = kafka_topic(partitions=2)
    prod = Producer({"bootstrap.servers": boot})
    for n in range(100):  # 70 into partition 0, 30 into partition 1
        prod.produce(topic, json.dumps({"id": n}).encode(), partition=0 if n < 70 else 1)
    assert prod.flush(30) == 0
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = open_store(tmp_path / "store.db")
    try:
        store.create_job(JOB, "p", {}, {})
        reader = _reader(boot, topic, tmp_path, url)
        start = reader.initialOffset()
        assert start["kafka"] == {topic: {"0": 0, "1": 0}}
        limit = reader.getDefaultReadLimit()

        store.add_control(JOB, ControlKind.RATE_LIMIT, {"max_rows_per_epoch": 10}, sender="t")
        first = reader.latestOffset(start, limit)
        assert first["kafka"] == {topic: {"0": 7, "1": 3}}  # by backlog, 70:30
        latest = reader.reportLatestOffset()
        assert backlog(first, latest) == 90
        assert partition_backlog(first, latest) == {f"{topic}/0": 63, f"{topic}/1": 27}

        store.add_control(JOB, ControlKind.PAUSE, {}, sender="t")
        paused = reader.latestOffset(first, limit)
        assert paused["kafka"] == first["kafka"] and paused["cv"] != first["cv"]
        assert reader.latestOffset(paused, limit) is paused  # held: no epoch

        store.add_control(JOB, ControlKind.RESUME, {}, sender="t")
        store.add_control(JOB, ControlKind.RATE_LIMIT, {"max_rows_per_epoch": None}, sender="t")
        rest = reader.latestOffset(paused, limit)
        assert rest["kafka"] == {topic: {"0": 70, "1": 30}}
        assert reader.latestOffset(rest, limit) is rest  # nothing new

        # The slices of the epochs read exactly what was planned, once.
        ids: list[int] = []
        for a, b in ((start, first), (paused, rest)):
            for part in reader.partitions(a, b):
                for batch in reader.read(part):
                    ids += [json.loads(v)["id"] for v in batch.column("value").to_pylist()]
        assert sorted(ids) == list(range(100))
    finally:
        store.close()


def test_unreachable_brokers_are_a_transient_failure_not_bad_input(tmp_path: Path) -> None:
    src = kafka(f"127.0.0.1:{free_port()}", topics=["t"])
    src.validate()  # the arguments are fine
    with pytest.raises(SourceError) as e:
        from stoker.sources._kafka_client import Brokers

        Brokers(src.bootstrap_servers, {}, "read_committed", timeout=3).topics()
    assert not isinstance(e.value, InvalidSource) and exit_code(e.value) == 16
    assert src.bootstrap_servers in str(e.value)


def test_secrets_in_options_stay_out_of_the_description_and_spec() -> None:
    from stoker import Pipeline, sinks

    src = kafka("b:9092", topics="t", options={"sasl.password": "hunter2-secret"})
    assert "hunter2" not in src.describe() and "hunter2" not in repr(src)
    p = Pipeline("k").source(src).sink(sinks.files("/tmp/k-out"))
    assert "hunter2" not in json.dumps(p.spec(), default=str)


def test_a_topic_that_starts_to_match_the_pattern_is_read_from_its_beginning(
    kafka_server: ThrowawayKafka, kafka_topic: Any, tmp_path: Path
) -> None:
    boot = kafka_server.bootstrap
    first = kafka_topic(partitions=1, prefix="pat")
    prefix = first.rsplit("_", 1)[0]
    opts = {
        "sid": "s0",
        "bootstrap_servers": boot,
        "pattern": f"{prefix}_.*",
        "starting_offsets": encode_starting("latest"),
        "start_path": str(tmp_path / "s0.kafka.json"),
    }
    reader = KafkaDataSource(opts).streamReader(None)
    prod = Producer({"bootstrap.servers": boot})
    prod.produce(first, b'{"id": 0}')
    assert prod.flush(30) == 0
    start = reader.initialOffset()  # "latest": after the record already there
    assert start["kafka"] == {first: {"0": 1}}
    limit = reader.getDefaultReadLimit()
    assert reader.latestOffset(start, limit) is start

    second = kafka_topic(partitions=2, prefix="pat")
    for p in (0, 1):
        prod.produce(second, b'{"id": 1}', partition=p)
    assert prod.flush(30) == 0
    end = reader.latestOffset(start, limit)
    # Matched since the start: read from its beginning, whatever starting_offsets said.
    assert end["kafka"] == {first: {"0": 1}, second: {"0": 1, "1": 1}}
    assert end["from"] == {second: {"0": 0, "1": 0}}
    slices = sorted((s.topic, s.partition, s.start, s.end) for s in reader.partitions(start, end))
    assert slices == [(second, 0, 0, 1), (second, 1, 0, 1)]
