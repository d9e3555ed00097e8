"""Publishing a decided epoch's staged parts to Kafka, in transactions, exactly once.

Kafka's transactions cannot be prepared in one process and committed by another from Python
(librdkafka has no KIP-939), so the parts are staged as files at prepare
(:mod:`._kafka_stage`) and published here, by the driver, once the store has decided the
epoch. Every transaction of a sink uses one ``transactional.id`` derived from the job's uid
and the sink (:func:`names`): ``init_transactions`` of a new producer fences every older one
(a zombie attempt, a commit that crashed) and finishes or aborts the transaction it left
open, so what the coordinator holds afterwards is settled.

Each transaction publishes the next parts of the epoch (in partition order, up to about
``max_bytes`` of staged files) and commits with them, atomically, a **marker**: an offset of
the sink's consumer group (the same name as the transactional id) on partition 0 of the
topic, whose offset is the epoch and whose metadata says ``{"job", "epoch", "attempt",
"through", "parts"}``: the parts 0..through of that epoch are published. A commit (retried,
after a crash, by recovery, by the janitor) first fences, then reads the marker, and
publishes only the parts after it: a crash between Kafka's commit and the store's record of
it publishes nothing twice. Epochs of one job commit in order, so a marker of a later epoch
of the same job means this one is published whole; a marker of another job id (a restore
from a savepoint that writes again what the old job wrote after it) is not this job's.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stoker.errors import SinkError
from stoker.testing import fault_point

log = logging.getLogger("stoker.sinks.kafka")

# One Kafka call's timeout; the whole publish of an epoch retries until its own deadline.
CALL_TIMEOUT = 30.0
FIELD = "kafka"


def names(uid: str, tag: str) -> str:
    """The transactional id and consumer group of a sink (tag) of job uid ``uid``."""
    return f"stoker-{uid}-{tag}"


@dataclass(frozen=True)
class Marker:
    """What the marker of a sink says: parts 0..``through`` of ``epoch`` (of ``parts``) are
    published, by job ``job``'s decided attempt ``attempt``."""

    job: str
    epoch: int
    attempt: int
    through: int
    parts: int

    @property
    def whole(self) -> bool:
        return self.through + 1 >= self.parts

    def to_metadata(self) -> str:
        return json.dumps(
            {
                "job": self.job,
                "epoch": self.epoch,
                "attempt": self.attempt,
                "through": self.through,
                "parts": self.parts,
            },
            sort_keys=True,
        )

    @classmethod
    def from_metadata(cls, text: str | None) -> Marker | None:
        if not text:
            return None
        try:
            d = json.loads(text)
            return cls(
                str(d["job"]),
                int(d["epoch"]),
                int(d["attempt"]),
                int(d["through"]),
                int(d["parts"]),
            )
        except (ValueError, KeyError, TypeError):
            return None

    def published(self, job: str, epoch: int) -> int:
        """How many parts of ``job``'s ``epoch`` this marker says are published (from part 0);
        -1 for all of them (a later epoch of the job's is marked)."""
        if self.job != job or self.epoch < epoch:
            return 0
        if self.epoch > epoch:
            return -1
        return -1 if self.whole else self.through + 1


def _is_fenced(err: Any) -> bool:
    from confluent_kafka import KafkaError

    return err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED)


class Publisher:
    """A sink's producer and marker reader on the driver, made on first use and kept."""

    def __init__(
        self,
        config: Mapping[str, Any],
        topic: str,
        ident: str,
        timeout: float,
        max_bytes: int,
    ) -> None:
        self._config = dict(config)
        self.topic = topic
        self.ident = ident  # transactional.id and group.id
        self.timeout = timeout
        self.max_bytes = max_bytes
        self._producer: Any = None
        self._consumer: Any = None

    # clients -----------------------------------------------------------------------------------
    def _client_log(self) -> logging.Logger:
        return logging.getLogger("stoker.sinks.kafka.client")

    def consumer(self) -> Any:
        """The marker reader: a consumer of the sink's group that never subscribes. With
        ``read_committed`` its ``committed()`` asks for stable offsets only (a transaction
        still open holds the answer back)."""
        if self._consumer is None:
            from confluent_kafka import Consumer

            conf = {
                k: v for k, v in self._config.items() if not k.startswith(_PRODUCER_ONLY_PREFIXES)
            }
            conf.update(
                {
                    "group.id": self.ident,
                    "enable.auto.commit": False,
                    "isolation.level": "read_committed",
                    "logger": self._client_log(),
                }
            )
            self._consumer = Consumer(conf)
        return self._consumer

    def producer(self) -> Any:
        """The transactional producer, ``init_transactions`` done: older producers of the
        transactional id are fenced and their open transaction settled."""
        if self._producer is None:
            from confluent_kafka import Producer

            p = Producer({**self._config, "logger": self._client_log()})
            p.init_transactions(CALL_TIMEOUT)
            self._producer = p
        return self._producer

    def reset(self) -> None:
        """Drop the clients after a failure: the next attempt fences and reads afresh."""
        self._producer = None
        if self._consumer is not None:
            try:
                self._consumer.close()
            except Exception as e:  # a consumer broken by the failure: it goes anyway
                log.debug("closing the marker reader: %s", e)
            self._consumer = None

    def close(self) -> None:
        self.reset()

    # markers -----------------------------------------------------------------------------------
    def marker(self) -> Marker | None:
        """The sink's marker as committed (None: nothing published yet)."""
        from confluent_kafka import KafkaException, TopicPartition

        got = self.consumer().committed([TopicPartition(self.topic, 0)], timeout=CALL_TIMEOUT)
        if got and got[0].error is not None:
            # Not "nothing published": taken so, the epoch would be published twice.
            raise KafkaException(got[0].error)
        if not got or got[0].offset < 0:
            return None
        text = getattr(got[0], "metadata", None)
        marker = Marker.from_metadata(text)
        if marker is None:
            raise SinkError(
                FIELD,
                f"consumer group {self.ident!r} holds an offset on {self.topic!r} partition 0 "
                f"whose metadata is not this sink's marker ({str(text)[:100]!r}): something "
                "else commits offsets to the sink's group; stoker cannot tell what it "
                "published and publishes nothing",
            )
        return marker

    def read_marker(self, what: str) -> Marker | None:
        """:meth:`marker`, a Kafka failure as a :class:`SinkError` (recovery, a restore's
        check: they read it once, the restart strategy retries them)."""
        from confluent_kafka import KafkaException

        try:
            return self.marker()
        except KafkaException as e:
            self.reset()
            raise SinkError(
                FIELD,
                f"{what}: the marker of consumer group {self.ident!r} could not be read: "
                f"{e.args[0] if e.args else e}",
            ) from e

    # publish -----------------------------------------------------------------------------------
    def publish(
        self, job: str, epoch: int, attempt: int, parts: Sequence[Path | None], what: str
    ) -> None:
        """Publish ``parts`` (the staged file of each partition in order; None: no rows) as
        ``job``'s ``epoch``, skipping what the marker says is published. Retries (a broker
        down, a coordinator moving, a timeout) with a fresh producer until the deadline; a
        producer fenced by another one is not retried: that one is newer."""
        from confluent_kafka import KafkaException

        deadline = time.monotonic() + self.timeout
        pause = 0.2
        while True:
            try:
                self._publish_once(job, epoch, attempt, parts)
                return
            except KafkaException as e:
                err = e.args[0] if e.args else None
                if err is not None and _is_fenced(err):
                    self.reset()
                    raise SinkError(
                        FIELD,
                        f"{what}: epoch {epoch}: the producer of transactional id "
                        f"{self.ident!r} was fenced by a newer one (another run of this job "
                        "took over its commits); this run stops committing",
                    ) from e
                self.reset()
                if time.monotonic() + pause > deadline:
                    raise SinkError(
                        FIELD,
                        f"{what}: epoch {epoch} (decided) could not be published within "
                        f"{self.timeout:.0f}s: {err}; it is published when the job runs again",
                    ) from e
                log.warning(
                    "%s: publishing epoch %d failed (%s); retrying with a new producer",
                    what,
                    epoch,
                    err,
                )
                time.sleep(pause)
                pause = min(pause * 2, 5.0)

    def _publish_once(
        self, job: str, epoch: int, attempt: int, parts: Sequence[Path | None]
    ) -> None:
        from confluent_kafka import TopicPartition

        # 1. Fence: older producers of this transactional id can commit nothing from here on,
        #    and a transaction one left open is settled (committed or aborted).
        producer = self.producer()
        # 2. What is published of this epoch already (a commit that crashed, or that a
        #    concurrent recovery of the same decision finished).
        marker = self.marker()
        done = marker.published(job, epoch) if marker is not None else 0
        n = len(parts)
        if done < 0:
            return
        todo = list(range(done, n))
        lost = [i for i in todo if (path := parts[i]) is not None and not path.exists()]
        if lost:
            raise SinkError(
                FIELD,
                f"epoch {epoch} was decided for attempt {attempt} with {n} parts, but the "
                f"staged files of parts {lost} are gone and were never published: their rows "
                "are lost; nothing more of the epoch was published",
            )
        # 3. One transaction per group of parts (an epoch with no rows: one with the marker
        #    only, so every decided epoch is marked). Crash inside one: it never commits, the
        #    next producer's fence aborts it. Crash after one: the marker says so.
        for group in self._groups(todo, parts) or [[]]:
            producer.begin_transaction()
            for i in group:
                path = parts[i]
                if path is not None:
                    self._produce_file(producer, path)
            fault_point("kafka_in_txn", epoch)
            through = group[-1] if group else n - 1
            mark = Marker(job, epoch, attempt, through, n)
            producer.send_offsets_to_transaction(
                [TopicPartition(self.topic, 0, epoch, mark.to_metadata())],
                self.consumer().consumer_group_metadata(),
                CALL_TIMEOUT,
            )
            producer.commit_transaction(CALL_TIMEOUT)
            fault_point("kafka_after_txn", epoch)

    def _groups(self, todo: list[int], parts: Sequence[Path | None]) -> list[list[int]]:
        groups: list[list[int]] = []
        current: list[int] = []
        size = 0
        for i in todo:
            path = parts[i]
            nbytes = path.stat().st_size if path is not None else 0
            if current and size + nbytes > self.max_bytes:
                groups.append(current)
                current, size = [], 0
            current.append(i)
            size += nbytes
        if current:
            groups.append(current)
        return groups

    def _produce_file(self, producer: Any, path: Path) -> None:
        import pyarrow as pa

        topic = self.topic
        with pa.memory_map(str(path), "r") as source:
            reader = pa.ipc.open_file(source)
            names = reader.schema.names
            has_headers = "headers" in names
            for b in range(reader.num_record_batches):
                batch = reader.get_batch(b)
                keys = batch.column(names.index("key")).to_pylist()
                values = batch.column(names.index("value")).to_pylist()
                if has_headers:
                    heads = [
                        None if h is None else [(e["key"], e["value"]) for e in h]
                        for h in batch.column(names.index("headers")).to_pylist()
                    ]
                else:
                    heads = [None] * len(keys)
                for k, v, h in zip(keys, values, heads, strict=True):
                    while True:
                        try:
                            producer.produce(topic, value=v, key=k, headers=h)
                            break
                        except BufferError:
                            producer.poll(0.05)  # the local queue is full: let it drain
                producer.poll(0)


# Producer settings a consumer refuses (librdkafka warns about each): kept from the marker
# reader's configuration.
_PRODUCER_ONLY_PREFIXES = (
    "transactional.id",
    "transaction.",
    "enable.idempotence",
    "partitioner",
    "linger.ms",
    "queue.buffering.",
    "batch.",
    "compression.",
    "acks",
    "retries",
    "message.timeout.ms",
    "delivery.timeout.ms",
    "max.in.flight",
)
