"""A Kafka source's task: the records of one topic-partition from one offset to another, as
Arrow batches with Spark's Kafka columns.

The task reads by position, not by a count of records: it stops once the consumer's position
reaches the end offset the epoch logged. Offsets without a record to give (transaction
markers, records of aborted transactions under read_committed, offsets compacted away) are
passed over by the consumer, which moves its position past them. The end never lies beyond
the last stable offset planned, so every offset before it is decided and the task never
waits for a transaction.

A start that retention has deleted meanwhile is data loss: the task fails naming the topic,
partition and offsets (``fail_on_data_loss``), or goes on from the earliest offset left with
a warning. A broker that gives nothing for :data:`STALL_S` fails the task as a transient
failure (Spark's task retry, then the job's restart strategy).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from stoker.errors import InvalidSource, SourceError
from stoker.sources._kafka_client import client_settings

if TYPE_CHECKING:
    import pyarrow as pa

_log = logging.getLogger("stoker.sources.kafka")
STALL_S = 120.0  # no record and no move of the position this long: the brokers are away
BATCH = 20_000  # records per Arrow batch
# librdkafka's timestamp types -> Spark's (Kafka's TimestampType ids).
_TS_TYPES = {0: -1, 1: 0, 2: 1}


def arrow_schema() -> pa.Schema:
    import pyarrow as pa

    header = pa.struct([("key", pa.string()), ("value", pa.binary())])
    return pa.schema(
        [
            ("key", pa.binary()),
            ("value", pa.binary()),
            ("topic", pa.string()),
            ("partition", pa.int32()),
            ("offset", pa.int64()),
            ("timestamp", pa.timestamp("us", tz="UTC")),
            ("timestampType", pa.int32()),
            ("headers", pa.list_(header)),
        ]
    )


class _Rows:
    """Columns of one batch being gathered."""

    def __init__(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.offsets: list[int] = []
        self.ts: list[int | None] = []
        self.ts_types: list[int] = []
        self.h_offsets: list[int] = [0]
        self.h_keys: list[str] = []
        self.h_values: list[bytes | None] = []

    def add(self, m: Any) -> None:
        self.keys.append(m.key())
        self.values.append(m.value())
        self.offsets.append(m.offset())
        kind, ms = m.timestamp()
        self.ts.append(ms * 1000 if kind else None)
        self.ts_types.append(_TS_TYPES.get(kind, -1))
        headers = m.headers()
        if headers:
            for k, v in headers:
                self.h_keys.append(k)
                self.h_values.append(v)
        self.h_offsets.append(len(self.h_keys))

    def __len__(self) -> int:
        return len(self.offsets)

    def batch(self, topic: str, partition: int) -> pa.RecordBatch:
        import pyarrow as pa

        schema = arrow_schema()
        n = len(self.offsets)
        header_t = schema.field("headers").type
        headers = pa.ListArray.from_arrays(
            pa.array(self.h_offsets, pa.int32()),
            pa.StructArray.from_arrays(
                [pa.array(self.h_keys, pa.string()), pa.array(self.h_values, pa.binary())],
                fields=list(header_t.value_type),
            ),
            type=header_t,
        )
        return pa.RecordBatch.from_arrays(
            [
                pa.array(self.keys, pa.binary()),
                pa.array(self.values, pa.binary()),
                pa.array([topic] * n, pa.string()),
                pa.array([partition] * n, pa.int32()),
                pa.array(self.offsets, pa.int64()),
                pa.array(self.ts, pa.timestamp("us", tz="UTC")),
                pa.array(self.ts_types, pa.int32()),
                headers,
            ],
            schema=schema,
        )


def read_range(
    bootstrap: str,
    options: dict[str, str],
    isolation: str,
    topic: str,
    partition: int,
    start: int,
    end: int,
    fail_on_data_loss: bool,
    stall_s: float = STALL_S,
) -> Iterator[pa.RecordBatch]:
    """The records of ``topic``/``partition`` at offsets ``start..end-1``, as batches."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    out_of_range = (KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET)
    consumer = Consumer(client_settings(bootstrap, options, isolation))
    where = f"topic {topic!r} partition {partition}"
    try:
        consumer.assign([TopicPartition(topic, partition, start)])
        pos = start
        rows = _Rows()
        moved = time.monotonic()
        while pos < end:
            msgs = consumer.consume(num_messages=min(BATCH, max(1, end - pos)), timeout=0.5)
            before = pos
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() in out_of_range:
                        pos = _lost(consumer, topic, partition, pos, end, fail_on_data_loss)
                        break
                    if err.code() in (
                        KafkaError.UNKNOWN_TOPIC_OR_PART,
                        KafkaError._UNKNOWN_TOPIC,
                        KafkaError._UNKNOWN_PARTITION,
                    ):
                        raise InvalidSource("kafka.topics", f"{where} does not exist (deleted?)")
                    if err.fatal():
                        raise SourceError("kafka", f"{where}: {err.str()}")
                    _log.warning("source kafka %s: %s (retrying)", where, err.str())
                    continue
                off = int(m.offset() or 0)
                if off >= end:
                    pos = end
                    break
                if off >= pos:
                    rows.add(m)
                    pos = off + 1
            if pos < end and not msgs:
                # Nothing to give: markers, aborted records or compaction's gaps are passed
                # over by the consumer's position.
                got = consumer.position([TopicPartition(topic, partition)])[0].offset
                if got >= 0:
                    pos = max(pos, min(got, end))
            if len(rows) >= BATCH:
                yield rows.batch(topic, partition)
                rows = _Rows()
            now = time.monotonic()
            if pos > before:
                moved = now
            elif now - moved > stall_s:
                raise SourceError(
                    "kafka.bootstrap_servers",
                    f"{where}: nothing read at offset {pos} (of {start}..{end}) for "
                    f"{stall_s:.0f} s from {bootstrap!r}: the brokers are unreachable or the "
                    "partition has no leader",
                )
        if len(rows):
            yield rows.batch(topic, partition)
    finally:
        consumer.close()


def loss_message(topic: str, partition: int, start: int, earliest: int, fail: bool = True) -> str:
    """What a job says when retention deleted records it had not read yet."""
    what = (
        f"topic {topic!r} partition {partition}: offsets {start}..{earliest - 1} were "
        f"deleted (retention) before the job read them; the earliest offset left is {earliest}"
    )
    if not fail:
        return f"{what}: skipped (fail_on_data_loss=False)"
    return (
        f"{what}. Set fail_on_data_loss=False to skip ahead (counted and warned), or restore "
        "from a savepoint"
    )


def _lost(consumer: Any, topic: str, partition: int, pos: int, end: int, fail: bool) -> int:
    """Where to go on after the consumer found ``pos`` deleted."""
    from confluent_kafka import TopicPartition

    low, _high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
    if low <= pos:
        raise SourceError(
            "kafka", f"topic {topic!r} partition {partition}: offset {pos} out of range"
        )
    if fail:
        raise InvalidSource("kafka.fail_on_data_loss", loss_message(topic, partition, pos, low))
    _log.warning("source kafka: %s", loss_message(topic, partition, pos, low, fail=False))
    nxt = min(low, end)
    if nxt < end:
        consumer.assign([TopicPartition(topic, partition, nxt)])
    return nxt
