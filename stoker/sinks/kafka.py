"""A Kafka sink, exactly once for ``read_committed`` consumers.

Prepare (Spark tasks): each task stages its partition's rows as an fsynced Arrow IPC file in
the sink's staging folder under the job's state folder, ``<state>/kafka/<tag>/``
(:mod:`._kafka_stage`); the parts Spark kept (one per partition) are recorded with the
PREPARED sink transaction. Nothing has reached Kafka yet.

Commit (the driver, once the store decided the epoch): the recorded parts are published in
Kafka transactions under one ``transactional.id`` per job uid and sink, each transaction
committing a marker of what it published to the sink's consumer group; a retried or recovered
commit fences the older producers, reads the marker and publishes only what is left
(:mod:`._kafka_publish`). The staged files of the epoch (and any stray copies) are removed
once it is published. Abort and recovery remove staged files; they never touch Kafka.

A row's partition is chosen from its key as Kafka's Java client does by default
(``partitioner=murmur2_random``: murmur2 of the key; rows without a key spread). A consumer
with ``isolation.level=read_committed`` sees each row once; a ``read_uncommitted`` one may
also see rows of transactions that were aborted (a commit cut short and done again).

Secrets in ``options`` (``sasl.password``, ...) go to the Kafka clients on the driver only:
never to Spark's tasks, a log line, the store's descriptor (they are kept in a 0600 file in
the staging folder for the janitor's cleanup) or an answer.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stoker.errors import InvalidSink, SinkError
from stoker.redact import is_secret_entry
from stoker.sinks._arrow import collect_parts
from stoker.sinks._kafka_publish import Publisher, names
from stoker.sinks._kafka_stage import (
    RESULT,
    StageTask,
    fsync_path,
    stage_partition,
    staged_files,
)
from stoker.sinks.base import (
    Decision,
    PartitionId,
    Prepared,
    PreparedPart,
    Recovered,
    SinkOwner,
    TaskAttemptId,
)
from stoker.types import AttemptNo, Epoch

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame

log = logging.getLogger("stoker.sinks.kafka")

FIELD = "kafka"
SECRETS = "client.secrets.json"
# Client settings the sink sets itself: the protocol depends on them.
RESERVED = (
    "bootstrap.servers",
    "transactional.id",
    "enable.idempotence",
    "group.id",
    "isolation.level",
    "enable.auto.commit",
)
_UID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
HEADERS_TYPE = "array<struct<key:string,value:binary>>"


def require_client() -> None:
    """InvalidSink naming the missing package when confluent-kafka is not installed."""
    try:
        import confluent_kafka  # noqa: F401
    except ImportError as e:
        raise InvalidSink(
            "sinks.kafka",
            "the Kafka sink needs the confluent-kafka package, which is not installed: "
            "pip install 'stoker[kafka]'",
        ) from e


def _tag(name: str, topic: str) -> str:
    return hashlib.sha1(f"{name}\n{topic}".encode()).hexdigest()[:12]


@dataclass
class KafkaSink:
    """Rows of an epoch written to ``topic`` in Kafka transactions, exactly once for
    ``read_committed`` consumers. ``key``, ``value`` and ``headers`` name the columns written
    (string or binary; ``headers`` an array of (key string, value binary) structs, as Spark's
    Kafka sink takes them); ``options`` are the Kafka clients' settings (librdkafka names)."""

    bootstrap_servers: str
    topic: str
    key: str | None = "key"
    value: str = "value"
    headers: str | None = None
    options: dict[str, str] = field(default_factory=dict, repr=False)
    name: str = ""
    commit_timeout: float = 600.0
    max_transaction_bytes: int = 64 * 1024 * 1024
    # The secret options a descriptor names (not their values): read back at open().
    secrets_kept: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.name:
            self.name = f"kafka:{self.topic}"
        self.options = {str(k): str(v) for k, v in dict(self.options or {}).items()}
        self._owner: SinkOwner | None = None
        self._folder: Path | None = None
        self._publisher: Publisher | None = None
        self._secrets_file: str | None = None

    # description -------------------------------------------------------------------------------
    def describe(self) -> str:
        cols = f"key={self.key!r}, value={self.value!r}"
        if self.headers:
            cols += f", headers={self.headers!r}"
        return f"kafka({self.bootstrap_servers!r}, topic={self.topic!r}, {cols})"

    def _public_options(self) -> dict[str, str]:
        return {k: v for k, v in self.options.items() if not is_secret_entry(k, v)}

    def _secret_options(self) -> dict[str, str]:
        return {k: v for k, v in self.options.items() if is_secret_entry(k, v)}

    def descriptor(self) -> dict[str, Any]:
        # Secret options are left out: open() keeps them in a 0600 file of the staging folder,
        # which the janitor's sink (rebuilt from this) reads back at its own open().
        return {
            "kind": "kafka",
            "name": self.name,
            "bootstrap_servers": self.bootstrap_servers,
            "topic": self.topic,
            "key": self.key,
            "value": self.value,
            "headers": self.headers,
            "options": self._public_options(),
            "secret_options": sorted(self._secret_options()),
            "commit_timeout": self.commit_timeout,
            "max_transaction_bytes": self.max_transaction_bytes,
        }

    def accept_output_mode(self, mode: str) -> None:
        """``append`` only: a topic is a log, each epoch's rows are appended to it."""
        if mode != "append":
            what = "changed rows" if mode == "update" else "whole results"
            raise InvalidSink(
                "kafka.output_mode",
                f"sinks.kafka appends each epoch's rows to topic {self.topic!r}; "
                f"output_mode={mode!r} would append {what} again every epoch. Use "
                "output_mode='append', or write the result to sinks.postgres(dsn, table, "
                "key=[...])",
            )

    def target(self) -> str:
        return f"Kafka topic {self.topic!r} at {self.bootstrap_servers}"

    # checks ------------------------------------------------------------------------------------
    def _check_settings(self) -> None:
        require_client()
        if not isinstance(self.bootstrap_servers, str) or not self.bootstrap_servers.strip():
            raise InvalidSink("kafka.bootstrap_servers", "give the brokers as 'host:port[,...]'")
        if not isinstance(self.topic, str) or not re.fullmatch(
            r"[A-Za-z0-9._-]{1,249}", self.topic
        ):
            raise InvalidSink(
                "kafka.topic",
                f"{self.topic!r} is not a Kafka topic name (1-249 of letters, digits, '.', "
                "'_', '-')",
            )
        if not self.value:
            raise InvalidSink("kafka.value", "name the column of the records' values")
        taken = sorted(k for k in self.options if k in RESERVED)
        if taken:
            raise InvalidSink(
                "kafka.options",
                f"{', '.join(taken)} cannot be set: "
                + (
                    "bootstrap_servers is an argument of its own; "
                    if "bootstrap.servers" in taken
                    else ""
                )
                + "the sink sets the transactional id, idempotence and its marker group itself",
            )
        if self.commit_timeout <= 0 or self.max_transaction_bytes <= 0:
            raise InvalidSink("kafka", "commit_timeout and max_transaction_bytes must be positive")

    def validate(self, owner: SinkOwner) -> None:
        """Check the settings, that the brokers answer and that the topic exists."""
        self._check_settings()
        _check_uid(owner)
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        admin = AdminClient(self._client_config(with_producer=False))
        try:
            meta = admin.list_topics(topic=self.topic, timeout=15)
        except KafkaException as e:
            raise SinkError(
                "kafka.bootstrap_servers",
                f"no Kafka broker answered at {self.bootstrap_servers!r} within 15s: "
                f"{e.args[0] if e.args else e}",
            ) from e
        found = meta.topics.get(self.topic)
        if found is None or found.error is not None:
            raise InvalidSink(
                "kafka.topic",
                f"topic {self.topic!r} does not exist at {self.bootstrap_servers!r} "
                f"({getattr(found, 'error', None) or 'not listed'}); create it first",
            )

    def check_output(self, df: DataFrame) -> None:
        """Refuse, before the job is recorded, an output without the named columns or with
        columns of a type the sink cannot write."""
        self._columns(df)

    def _columns(self, df: DataFrame) -> list[Column]:
        """The key, value (and headers) columns as binary, named as the staged files are."""
        from pyspark.sql import functions as F
        from pyspark.sql.types import ArrayType, BinaryType, StringType, StructType

        types = {f.name: f.dataType for f in df.schema.fields}
        have = ", ".join(types) or "none"

        def binary(col: str, what: str) -> Column:
            if col not in types:
                raise InvalidSink(
                    f"kafka.{what}",
                    f"the output has no column {col!r} for the records' {what}s (columns: {have})",
                )
            if not isinstance(types[col], StringType | BinaryType):
                raise InvalidSink(
                    f"kafka.{what}",
                    f"column {col!r} is {types[col].simpleString()}; the {what} must be string "
                    f"or binary (cast it, or encode it, e.g. to_json(struct(...)))",
                )
            return F.col(col).cast("binary").alias(what)

        cols = []
        if self.key is None or (self.key == "key" and "key" not in types):
            cols.append(F.lit(None).cast("binary").alias("key"))
        else:
            cols.append(binary(self.key, "key"))
        cols.append(binary(self.value, "value"))
        if self.headers:
            h = types.get(self.headers)
            ok = (
                isinstance(h, ArrayType)
                and isinstance(h.elementType, StructType)
                and [f.name for f in h.elementType.fields] == ["key", "value"]
                and isinstance(h.elementType.fields[0].dataType, StringType)
                and isinstance(h.elementType.fields[1].dataType, StringType | BinaryType)
            )
            if not ok:
                raise InvalidSink(
                    "kafka.headers",
                    f"column {self.headers!r} is "
                    + (h.simpleString() if h is not None else f"missing (columns: {have})")
                    + "; headers must be array<struct<key:string,value:binary or string>>",
                )
            cols.append(F.col(self.headers).cast(HEADERS_TYPE).alias("headers"))
        return cols

    # open --------------------------------------------------------------------------------------
    def open(self, owner: SinkOwner, state_dir: Path) -> None:
        """Bind to ``owner``: the staging folder ``<state_dir>/kafka/<tag>``; the secret
        options kept in it for the cleanup (or, rebuilt from a descriptor, read back)."""
        self._check_settings()
        _check_uid(owner)
        folder = Path(state_dir).resolve() / "kafka" / _tag(self.name, self.topic)
        folder.mkdir(parents=True, exist_ok=True)
        secrets = folder / SECRETS
        mine = self._secret_options()
        if self.secrets_kept:
            # Rebuilt from a descriptor (the janitor's cleanup, a removed sink's recovery):
            # the secrets it names come back from the file the job's own open() wrote.
            self.options = {**_read_kept(secrets, self.secrets_kept), **self.options}
        elif mine:
            _write_private(secrets, mine)
        else:
            secrets.unlink(missing_ok=True)  # none now: no secret of an earlier run is kept
        self._owner = owner
        self._folder = folder
        self._publisher = None

    def _bound(self) -> tuple[SinkOwner, Path]:
        if self._owner is None or self._folder is None:
            raise SinkError(FIELD, f"sink {self.name!r} is used before open()")
        return self._owner, self._folder

    def _client_config(self, with_producer: bool = True) -> dict[str, Any]:
        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers}
        if with_producer:
            conf.update(
                {
                    "partitioner": "murmur2_random",  # the Java client's default
                    "linger.ms": 5,
                    "transaction.timeout.ms": 120000,
                }
            )
        conf.update(self.options)
        return conf

    def _ident(self, owner: SinkOwner) -> str:
        return names(owner.uid, _tag(self.name, self.topic))

    @property
    def transactional_id(self) -> str:
        """The producers' ``transactional.id`` (also the marker group's id), once opened."""
        owner, _ = self._bound()
        return self._ident(owner)

    def _pub(self) -> Publisher:
        owner, _ = self._bound()
        if self._publisher is None:
            ident = self._ident(owner)
            self._publisher = Publisher(
                {**self._client_config(), "transactional.id": ident},
                self.topic,
                ident,
                self.commit_timeout,
                self.max_transaction_bytes,
            )
        return self._publisher

    # protocol ----------------------------------------------------------------------------------
    def prepare(self, df: DataFrame, epoch: Epoch, attempt: AttemptNo) -> Prepared:
        owner, folder = self._bound()
        t = StageTask(str(folder), owner.uid, int(epoch), int(attempt))

        def stage(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            return stage_partition(t, batches)

        out = df.select(*self._columns(df)).mapInArrow(stage, RESULT)
        results, n = collect_parts(out)  # planned once (out.rdd would plan it again)
        parts = sorted(
            (
                PreparedPart(
                    id=str(r["file"] or ""),
                    partition=PartitionId(int(r["part"])),
                    task_attempt=TaskAttemptId(int(r["task"])),
                    task_attempt_number=int(r["task_attempt"]),
                    rows=int(r["rows"]),
                )
                for r in results
            ),
            key=lambda p: p.partition,
        )
        got = [p.partition for p in parts]
        if got != list(range(n)):
            raise SinkError(
                FIELD,
                f"epoch {epoch}: expected one staged part per partition 0..{n - 1}, Spark "
                f"returned parts for partitions {got}",
            )
        return Prepared(
            rows=sum(p.rows for p in parts),
            detail={"parts": [p.to_json() for p in parts]},
            parts=tuple(parts),
        )

    def commit(self, epoch: Epoch, attempt: AttemptNo, detail: Mapping[str, Any]) -> None:
        """Publish the recorded parts of (epoch, attempt) not yet published; then remove the
        epoch's staged files (and strays of it and earlier epochs)."""
        owner, folder = self._bound()
        raw = detail.get("parts")
        if not isinstance(raw, list):
            raise SinkError(
                FIELD,
                f"epoch {epoch} of attempt {attempt}: the recorded sink transaction names no "
                f"staged parts (detail {dict(detail)!r}); nothing can be published exactly",
            )
        parts = sorted((PreparedPart.from_json(p) for p in raw), key=lambda p: p.partition)
        files = [folder / p.id if p.id and p.rows > 0 else None for p in parts]
        self._pub().publish(owner.job_id, int(epoch), int(attempt), files, self.name)
        # Published: every staged file of this epoch and earlier ones goes (strays included).
        for s in staged_files(folder, owner.uid):
            if s.epoch <= epoch:
                (folder / s.name).unlink(missing_ok=True)

    def abort(self, epoch: Epoch, attempt: AttemptNo) -> None:
        owner, folder = self._bound()
        for s in staged_files(folder, owner.uid):
            if (s.epoch, s.attempt) == (epoch, attempt):
                (folder / s.name).unlink(missing_ok=True)

    def recover(self, decision: Decision, up_to: AttemptNo | None = None) -> Recovered:
        """Remove the staged files of attempts up to ``up_to`` that will never be published:
        of undecided epochs, of attempts that did not decide, and strays. A decided epoch's
        files stay until its marker says it is published whole (recovery commits decided
        epochs before this runs; one left so is committed by the next)."""
        done = Recovered()
        owner, folder = self._bound()
        marker_read = False
        marker = None
        for s in staged_files(folder, owner.uid):
            if up_to is not None and s.attempt > up_to:
                continue
            epoch, attempt = Epoch(s.epoch), AttemptNo(s.attempt)
            if decision(epoch) == attempt:
                if not marker_read:
                    marker, marker_read = self._pub().read_marker(self.name), True
                if marker is None or marker.published(owner.job_id, s.epoch) != -1:
                    continue  # decided, not all published: its commit needs it
                (folder / s.name).unlink(missing_ok=True)
                done.strays.append(s.name)
                continue
            (folder / s.name).unlink(missing_ok=True)
            if (epoch, attempt) not in done.aborted:
                done.aborted.append((epoch, attempt))
        return done

    def committed_epochs(self, owner: SinkOwner) -> list[Epoch] | None:
        """The newest epoch of job uid ``owner.uid`` this sink published (any part of it),
        from its marker: epochs are published in order, so the older ones are too."""
        require_client()
        ident = self._ident(owner)
        pub = Publisher(
            {**self._client_config(), "transactional.id": ident}, self.topic, ident, 30.0, 1
        )
        try:
            marker = pub.read_marker(self.name)
        finally:
            pub.close()
        if marker is None or (marker.through < 0 and marker.parts > 0):
            return []
        return [Epoch(marker.epoch)]


def _check_uid(owner: SinkOwner) -> None:
    if not _UID.match(owner.uid):
        raise InvalidSink("kafka.owner", f"job uid {owner.uid!r} is not 1-64 of [A-Za-z0-9_-]")


def _read_kept(path: Path, keys: tuple[str, ...]) -> dict[str, str]:
    """The secret options ``keys`` from the 0600 file ``path``; SinkError naming what is
    missing (never a value)."""
    try:
        kept = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise SinkError(
            "kafka.options",
            f"the sink's secret options ({', '.join(keys)}) cannot be read from {str(path)!r}: "
            f"{type(e).__name__}; its job's next run writes them again",
        ) from None
    missing = [k for k in keys if k not in kept]
    if missing:
        raise SinkError(
            "kafka.options", f"{str(path)!r} does not hold the secret options {missing}"
        )
    return {k: str(kept[k]) for k in keys}


def _write_private(path: Path, data: dict[str, str]) -> None:
    """``data`` as JSON in ``path``, readable by its owner only, replaced atomically."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, json.dumps(data, sort_keys=True).encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_path(path.parent)
