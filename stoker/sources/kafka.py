"""Kafka topics as a stoker source, on PySpark's Python data source API over confluent-kafka:
no JVM jar.

Rows are Spark's Kafka source's: ``key`` and ``value`` (binary), ``topic``, ``partition``,
``offset``, ``timestamp``, ``timestampType`` and ``headers`` (``array<struct<key string,
value binary>>``); :func:`decode_json` and :func:`decode_strings` turn the bytes into columns.

Exactly once: each epoch's offsets (per topic-partition) are in Spark's offset log before it
runs, and a replay reads the same records by position; under ``read_committed`` (the default)
an epoch ends at the last stable offset, so no record of an undecided or aborted transaction
is ever read. Partitions added to a topic and topics that start to match ``pattern`` are read
from their beginning at the next epoch. Records deleted by retention before the job read them
fail the job (exit 2, naming topic, partition and offsets), or with
``fail_on_data_loss=False`` are skipped with a warning and counted (``skipped`` in the offset).

Consumer settings (SASL, SSL) go in ``options``: they reach the reader and the tasks as data
source options under ``kafka.``-prefixed keys, which Spark redacts in plans when they look
secret, and never the job's spec, its description or a command line.

Here: the source's arguments, their checks and the Spark data source. Beside it: the broker
talk (``_kafka_client.py``), the planning reader (``_kafka_reader.py``) and the task that reads
a range (``_kafka_read.py``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader

from stoker.errors import InvalidSource
from stoker.sources._kafka_client import (
    OPTION_PREFIX,
    OWN_SETTINGS,
    Brokers,
    encode_starting,
    parse_starting,
    require_client,
)
from stoker.sources._kafka_reader import _KafkaReader
from stoker.sources.base import SourceContext

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import StructType

FORMAT = "stoker_kafka"
SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int, headers array<struct<key: string, value: binary>>"
)
ISOLATIONS = ("read_committed", "read_uncommitted")
_INVALID = "stoker.errors.InvalidSource: "  # what sources.base.invalid_source_in finds


class KafkaDataSource(DataSource):
    """Spark data source behind :func:`stoker.sources.kafka`."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return _KafkaReader(dict(self.options))


@dataclass(frozen=True)
class KafkaSource:
    """Records of Kafka topics (``topics`` named, or every topic matching ``pattern``)."""

    bootstrap_servers: str
    topics: tuple[str, ...] | None = None
    pattern: str | None = None
    starting_offsets: Any = "earliest"
    max_records_per_epoch: int | None = None
    isolation: str = "read_committed"
    fail_on_data_loss: bool = True
    # Consumer settings (librdkafka's names): never shown, described or logged.
    options: dict[str, str] = field(default_factory=dict, repr=False, compare=False)

    bounded = False

    def describe(self) -> str:
        what = f"topics={list(self.topics)!r}" if self.topics else f"pattern={self.pattern!r}"
        return f"kafka({self.bootstrap_servers!r}, {what}, isolation={self.isolation!r})"

    def validate(self) -> None:
        if not isinstance(self.bootstrap_servers, str) or not re.fullmatch(
            r"[^\s,]+:\d+(,[^\s,]+:\d+)*", self.bootstrap_servers
        ):
            raise InvalidSource(
                "kafka.bootstrap_servers",
                "expects 'host:port' (comma-separated for several), got "
                f"{self.bootstrap_servers!r}",
            )
        if (self.topics is None) == (self.pattern is None):
            raise InvalidSource("kafka.topics", "give either topics=[...] or pattern=..., not both")
        if self.topics is not None and (
            not self.topics or not all(isinstance(t, str) and t for t in self.topics)
        ):
            raise InvalidSource("kafka.topics", f"expects topic names, got {self.topics!r}")
        if self.pattern is not None:
            try:
                re.compile(self.pattern)
            except (re.error, TypeError) as e:
                raise InvalidSource("kafka.pattern", f"{self.pattern!r} is no regex: {e}") from e
        parse_starting(self.starting_offsets)
        if self.max_records_per_epoch is not None and (
            not isinstance(self.max_records_per_epoch, int)
            or isinstance(self.max_records_per_epoch, bool)
            or self.max_records_per_epoch < 1
        ):
            raise InvalidSource(
                "kafka.max_records_per_epoch",
                f"must be an integer >= 1 (or None), got {self.max_records_per_epoch!r}",
            )
        if self.isolation not in ISOLATIONS:
            raise InvalidSource(
                "kafka.isolation", f"must be one of {', '.join(ISOLATIONS)}, got {self.isolation!r}"
            )
        if not isinstance(self.fail_on_data_loss, bool):
            raise InvalidSource(
                "kafka.fail_on_data_loss", f"must be True or False, got {self.fail_on_data_loss!r}"
            )
        if not isinstance(self.options, dict):
            raise InvalidSource("kafka.options", "expects a dict of consumer settings")
        for key, value in self.options.items():
            if key in OWN_SETTINGS:
                raise InvalidSource(
                    f"kafka.options[{key!r}]",
                    "is set by the source itself (use the source's own argument)",
                )
            if not isinstance(value, str | int | float | bool):
                # The key alone: a value may be a secret.
                raise InvalidSource(f"kafka.options[{key!r}]", "expects a string or number")
        require_client()

    def check_topics(self) -> None:
        """Ask the brokers for the topics: a named topic missing is bad input (exit 2), the
        brokers out of reach a transient failure (exit 16)."""
        Brokers(self.bootstrap_servers, _strings(self.options), self.isolation).assigned(
            list(self.topics) if self.topics else None, self.pattern
        )

    def open(
        self,
        spark: SparkSession,
        sid: str,
        state_dir: Path,
        context: SourceContext | None = None,
    ) -> DataFrame:
        self.check_topics()
        opts = {
            "sid": sid,
            "bootstrap_servers": self.bootstrap_servers,
            "topics": json.dumps(list(self.topics)) if self.topics else "",
            "pattern": self.pattern or "",
            "starting_offsets": encode_starting(parse_starting(self.starting_offsets)),
            "max_records_per_epoch": str(self.max_records_per_epoch or ""),
            "isolation": self.isolation,
            "fail_on_data_loss": "true" if self.fail_on_data_loss else "false",
            "start_path": str((state_dir / "sources" / f"{sid}.kafka.json").resolve()),
        }
        for key, value in _strings(self.options).items():
            opts[OPTION_PREFIX + key] = value
        if context is not None:
            opts["job_id"] = context.job_id
            opts["store_url"] = context.store_url
            if context.pace_s is not None:
                opts["pace_s"] = repr(float(context.pace_s))
        return spark.readStream.format(FORMAT).options(**opts).load()


def _strings(options: dict[str, Any]) -> dict[str, str]:
    return {
        k: ("true" if v else "false") if isinstance(v, bool) else str(v) for k, v in options.items()
    }


# decoding ------------------------------------------------------------------------------------
def decode_strings(df: DataFrame, *columns: str) -> DataFrame:
    """``df`` with the binary ``columns`` (default ``key`` and ``value``) as UTF-8 strings."""
    from pyspark.sql import functions as F

    for name in columns or ("key", "value"):
        df = df.withColumn(name, F.col(name).cast("string"))
    return df


def decode_json(
    df: DataFrame,
    schema: StructType | str,
    column: str = "value",
    keep: tuple[str, ...] | list[str] = (),
    strict: bool = True,
) -> DataFrame:
    """The JSON in ``column`` (binary or string) as the columns of ``schema``, beside the
    columns named in ``keep`` (``"key"``, ``"offset"``, ``"timestamp"``...).

    ``strict`` (the default): a value that is not JSON fails the job as bad input (exit 2),
    naming its topic, partition and offset (on the source's own columns); JSON that does not
    fit the schema fails the epoch with Spark's message (from_json's FAILFAST mode).
    ``strict=False``: such a value gives nulls."""
    from pyspark.sql import functions as F

    if isinstance(schema, str) and not schema.strip():
        raise InvalidSource("decode_json.schema", "give a StructType or a DDL string")
    mode = {"mode": "FAILFAST"} if strict else {"mode": "PERMISSIVE"}
    text = F.col(column).cast("string")
    if strict and {"topic", "partition", "offset"} <= set(df.columns):
        # Name the record: bad input, so the job ends with exit 2 (sources.base).
        where = F.format_string(
            f"{_INVALID}kafka.{column}: topic '%s' partition %d offset %d holds no JSON: %s",
            F.col("topic"),
            F.col("partition"),
            F.col("offset"),
            F.substring(text, 1, 100),
        )
        bad = text.isNotNull() & F.try_parse_json(text).isNull()
        text = F.when(bad, F.raise_error(where)).otherwise(text)
    parsed: Column = F.from_json(text, schema, mode)
    return df.select(*[F.col(k) for k in keep], parsed.alias("_stoker_json")).select(
        *keep, "_stoker_json.*"
    )


__all__ = [
    "FORMAT",
    "SCHEMA",
    "KafkaDataSource",
    "KafkaSource",
    "decode_json",
    "decode_strings",
]
