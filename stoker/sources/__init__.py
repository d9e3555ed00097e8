"""Pipeline inputs: :func:`files`, :func:`generator`, :func:`kafka`, :func:`socket`, and any
Spark source via :func:`spark`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from stoker.sources.base import Source
from stoker.sources.files import FilesSource
from stoker.sources.generator import GeneratorSource
from stoker.sources.kafka import KafkaSource, decode_json, decode_strings
from stoker.sources.spark import SparkSource
from stoker.sources.textsocket import SocketSource

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

__all__ = [
    "FilesSource",
    "GeneratorSource",
    "KafkaSource",
    "SocketSource",
    "Source",
    "SparkSource",
    "data_sources",
    "decode_json",
    "decode_strings",
    "files",
    "generator",
    "kafka",
    "socket",
    "spark",
]


def data_sources() -> tuple[type, ...]:
    """The Spark data sources behind stoker's own sources, each registered in every session."""
    from stoker.sources.files import FilesDataSource
    from stoker.sources.generator import GeneratorDataSource
    from stoker.sources.kafka import KafkaDataSource
    from stoker.sources.textsocket import SocketDataSource

    return (GeneratorDataSource, FilesDataSource, KafkaDataSource, SocketDataSource)


def files(
    path: str,
    format: str,
    schema: StructType | str | None = None,
    bounded: bool = False,
    max_files_per_epoch: int | None = None,
    header: bool = True,
    suffix: str | None = None,
    max_file_age: str | float | None = "7d",
    clean_source: str | None = None,
    archive_dir: str | None = None,
    partitions: int | None = None,
) -> FilesSource:
    """Files of ``format`` (json lines, csv, parquet, text) in the folder ``path``.

    ``schema`` (a StructType or a DDL string like ``"id long, name string"``) is required,
    except for ``text``: as Spark's ``readStream.text``, one row per line (``\n``, ``\r\n``
    or ``\r``; the line without its end) in one string column, ``value`` unless the schema
    names another.

    ``bounded=True`` reads the files present when the job first starts and then finishes;
    otherwise new files are picked up as they arrive, for as long as the job runs.
    ``max_files_per_epoch`` limits how many files one epoch reads.
    ``max_file_age`` (unbounded): a new file older than the newest file taken minus this
    (``"7d"``, ``"12h"``, seconds; None: no limit) is ignored with a warning, so discovery
    and memory do not grow with the files already taken.
    ``clean_source="archive"`` (into ``archive_dir``) or ``"delete"``: a file is moved or
    removed once the epoch that read it has committed.
    ``partitions``: how many groups one epoch's files are read in (a file is never split);
    None (the default) means one per core the job's executors have at the time (2 while that
    is unknown).
    """
    return FilesSource(
        path=str(path),
        format=format,
        schema=schema,
        bounded=bounded,
        max_files_per_epoch=max_files_per_epoch,
        header=header,
        options={"suffix": suffix} if suffix else {},
        max_file_age=max_file_age,
        clean_source=clean_source,
        archive_dir=None if archive_dir is None else str(archive_dir),
        partitions=partitions,
    )


def generator(
    total: int | None = None,
    rows_per_second: float | None = None,
    max_rows_per_epoch: int | None = None,
    partitions: int | None = None,
) -> GeneratorSource:
    """A column ``id`` with 0..total-1, bounded when ``total`` is given, endless otherwise.

    ``rows_per_second`` paces production (ids become available at that rate);
    ``max_rows_per_epoch`` caps one epoch. Deterministic: a replayed epoch reads the same ids.
    ``partitions``: how many ranges one epoch is split into; None (the default) means one
    per core the job's executors have at the time (2 while that is unknown).
    """
    return GeneratorSource(
        total=total,
        rows_per_second=rows_per_second,
        max_rows_per_epoch=max_rows_per_epoch,
        partitions=partitions,
    )


def socket(
    host: str,
    port: int,
    include_timestamp: bool = False,
    max_lines_per_epoch: int | None = None,
    partitions: int | None = None,
) -> SocketSource:
    """Lines of text from a TCP server at ``host:port`` (Spark's ``socket`` source, made
    replayable): column ``value``, and ``timestamp`` (when the line was received) with
    ``include_timestamp=True``. Unbounded.

    The source connects to the server (as ``nc -lk 9999`` serves) and keeps every line it
    receives in the job's state folder before an epoch names it, so an epoch replayed after a
    crash reads the same lines: exactly once from there on. Lines the server sent that had not
    reached that log when the driver died are lost (a socket has no acknowledgement). A lost
    connection is opened again every second. ``max_lines_per_epoch`` caps an epoch;
    ``partitions``: how many pieces an epoch is split into (None: one per core).
    """
    return SocketSource(
        host=host,
        port=port,
        include_timestamp=include_timestamp,
        max_lines_per_epoch=max_lines_per_epoch,
        partitions=partitions,
    )


def spark(
    format: str,
    options: dict[str, str] | None = None,
    schema: str | None = None,
    at_least_once: bool = False,
) -> SparkSource:
    """One of Spark's own streaming sources (e.g. ``rate-micro-batch``, ``kafka``): unbounded.

    A format that cannot replay an epoch after a crash (any format not known to replay, see
    :data:`stoker.sources.spark.REPLAYABLE`) is refused: exactly once is impossible with it.
    ``at_least_once=True`` runs it anyway, without that guarantee (a crash may lose or repeat
    the rows of the epoch in flight); the job's spec and ``stoker status`` show it. Spark's
    ``socket`` is refused even so (it cannot restart under its own checkpoint): use
    :func:`socket`."""
    return SparkSource(
        format=format, options=dict(options or {}), schema=schema, at_least_once=at_least_once
    )


def kafka(
    bootstrap_servers: str,
    topics: str | list[str] | tuple[str, ...] | None = None,
    pattern: str | None = None,
    starting_offsets: Any = "earliest",
    max_records_per_epoch: int | None = None,
    isolation: str = "read_committed",
    fail_on_data_loss: bool = True,
    options: dict[str, Any] | None = None,
) -> KafkaSource:
    """Records of Kafka ``topics`` (or of every topic matching the regex ``pattern``), with
    Spark's Kafka columns: key, value (binary), topic, partition, offset, timestamp,
    timestampType, headers. Unbounded. Needs ``pip install 'stoker[kafka]'``.

    ``starting_offsets`` (the job's first start only; a restart goes on from its checkpoint):
    ``"earliest"``, ``"latest"``, a timestamp (ms since the epoch, or an aware datetime: the
    first record at or after it) or ``{topic: {partition: offset}}`` (-2 earliest, -1
    latest). ``max_records_per_epoch`` caps an epoch (shared among partitions by backlog).
    ``isolation="read_committed"`` (the default) never reads a record of an open or aborted
    transaction. ``fail_on_data_loss=False``: records deleted by retention before the job read
    them are skipped with a warning instead of failing the job. ``options``: consumer settings
    (librdkafka names, e.g. ``{"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
    "sasl.username": ..., "sasl.password": ...}``), never shown or logged.

    Decode with :func:`decode_json` or :func:`decode_strings` in the pipeline's transform.
    """
    if isinstance(topics, str):
        topics = [topics]
    return KafkaSource(
        bootstrap_servers=bootstrap_servers,
        topics=None if topics is None else tuple(topics),
        pattern=pattern,
        starting_offsets=starting_offsets,
        max_records_per_epoch=max_records_per_epoch,
        isolation=isolation,
        fail_on_data_loss=fail_on_data_loss,
        options=dict(options or {}),
    )
