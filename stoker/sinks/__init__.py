"""Pipeline outputs with exactly-once two-phase commit: :func:`files`, :func:`postgres`,
:func:`kafka`, :func:`delta`, :func:`iceberg`; and :func:`console` for development (at least
once: it prints)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from stoker.errors import InvalidSink
from stoker.sinks._iceberg_catalog import require_pyiceberg
from stoker.sinks._pg_modes import check_key
from stoker.sinks.base import Prepared, Recovered, SinkOwner, TwoPhaseSink
from stoker.sinks.console import ConsoleSink
from stoker.sinks.delta import DeltaSink, require_deltalake
from stoker.sinks.files import FilesSink
from stoker.sinks.iceberg import IcebergSink
from stoker.sinks.kafka import KafkaSink, require_client
from stoker.sinks.postgres import PostgresSink
from stoker.types import Epoch

__all__ = [
    "ConsoleSink",
    "DeltaSink",
    "FilesSink",
    "IcebergSink",
    "KafkaSink",
    "PostgresSink",
    "Prepared",
    "Recovered",
    "TwoPhaseSink",
    "committed_epochs_of",
    "console",
    "delta",
    "descriptor_of",
    "files",
    "from_descriptor",
    "iceberg",
    "kafka",
    "postgres",
]

KINDS = ("files", "postgres", "console", "kafka", "delta", "iceberg")


def files(path: str, format: str = "parquet", options: dict[str, str] | None = None) -> FilesSink:
    """Files of ``format`` (parquet, json, csv, orc) under ``path``, one folder per epoch.

    A committed epoch appears as ``<path>/epoch=<N>`` in one rename; a reader of ``path`` never
    sees a partial or aborted epoch. In a pipeline of ``output_mode='complete'`` every epoch
    is a whole snapshot: ``<path>/current`` (a symbolic link swapped in one rename) names the
    newest, readers read ``<path>/current``, and older snapshots are pruned. Update mode is
    refused (it would pile up changed rows): write it to :func:`postgres` with a ``key``.
    """
    return FilesSink(path=str(path), format=format, options=dict(options or {}))


def postgres(
    dsn: str,
    table: str,
    create_table: bool = True,
    max_writers: int | None = None,
    key: str | Sequence[str] | None = None,
) -> PostgresSink:
    """Rows written to ``table`` exactly once, with PREPARE TRANSACTION per Spark task.

    An epoch is written through at most ``max_writers`` tasks (so prepared transactions);
    None: a quarter of the server's ``max_prepared_transactions``, which must be at least
    twice the writers. With ``create_table`` the table is created from the epoch's schema if
    it does not exist (with ``key`` as its primary key).

    How an epoch is written follows the pipeline's ``output_mode``: ``append`` appends its
    rows; ``update`` upserts them on the ``key`` columns (required; an existing table needs a
    primary key or unique index on them); ``complete`` replaces the table's rows with the
    epoch's. A ``key`` in append mode upserts too.
    """
    return PostgresSink(
        dsn=dsn,
        table=table,
        create_table=create_table,
        max_writers=max_writers,
        key=check_key(key),
    )


def kafka(
    bootstrap_servers: str,
    topic: str,
    key: str | None = "key",
    value: str = "value",
    headers: str | None = None,
    options: Mapping[str, str] | None = None,
) -> KafkaSink:
    """Each epoch's rows appended to Kafka ``topic``, exactly once for consumers that read
    with ``isolation.level=read_committed``.

    ``key``, ``value`` and ``headers`` name the output's columns to write: key and value
    string or binary (no column ``key`` and the default: records without a key; ``key=None``
    too), headers ``array<struct<key:string,value:binary>>`` as Spark's Kafka sink takes
    them. A record's partition comes from its key as Kafka's Java client chooses it (murmur2).
    ``options`` are the Kafka clients' settings (librdkafka's names: ``security.protocol``,
    ``sasl.mechanism``, ``sasl.username``, ``sasl.password``, ...); secrets among them are
    never logged, shown or recorded in the store.

    Each Spark task stages its rows as a file under the job's state folder; once the epoch is
    decided the driver publishes them in Kafka transactions (``transactional.id``
    ``stoker-<uid>-<tag>``), each also committing a marker to the consumer group of that name,
    so that a commit done again after a crash publishes nothing twice. ``read_uncommitted``
    consumers may see rows of transactions that were aborted. Needs ``confluent-kafka``
    (``pip install 'stoker[kafka]'``).
    """
    require_client()
    return KafkaSink(
        bootstrap_servers=bootstrap_servers,
        topic=topic,
        key=key,
        value=value,
        headers=headers,
        options=dict(options or {}),
    )


def delta(
    path: str,
    partition_by: str | Sequence[str] | None = None,
    key: str | Sequence[str] | None = None,
    schema_mode: str | None = None,
) -> DeltaSink:
    """Each epoch committed to the Delta Lake table at ``path`` in one Delta commit, exactly
    once, through ``deltalake`` (delta-rs): no JVM jar. Readers (Spark's ``format("delta")``,
    deltalake, DuckDB, Polars, Trino) see an epoch whole once its commit is in the log, and
    never a file of an aborted attempt.

    The first epoch creates the table (partitioned by ``partition_by``). The commit carries
    ``txn(appId="stoker:<job uid>:<sink name>", version=<epoch>)``, delta-spark's idempotent
    write marker. ``output_mode='update'`` (or a ``key`` in append mode) MERGEs each epoch's
    rows into the table on ``key`` in that commit (two rows of a key in one epoch: the last
    written); ``complete`` replaces the table's files with each epoch's. An output column the
    table lacks is refused (exit 2) unless ``schema_mode='merge'``, which adds it. Needs
    ``deltalake`` (``pip install 'stoker[delta]'``).
    """
    require_deltalake()
    if isinstance(partition_by, str):
        partition_by = [partition_by]
    return DeltaSink(
        path=str(path),
        partition_by=tuple(partition_by or ()),
        key=check_key(key),
        schema_mode=schema_mode,
    )


def iceberg(
    catalog: str,
    table: str,
    warehouse: str | None = None,
    key: str | Sequence[str] | None = None,
    schema_mode: str | None = None,
    keep_snapshots: int | None = None,
) -> IcebergSink:
    """Each epoch committed to the Apache Iceberg table ``table`` (``namespace.name``) as one
    snapshot, exactly once, through ``pyiceberg`` and its SQL catalog: no JVM jar. Readers
    (pyiceberg, Spark or Trino with the same JDBC catalog, DuckDB over pyiceberg) see an
    epoch whole once its snapshot is current, and never a file of an undecided attempt.

    ``catalog`` is the catalog database's URL: ``sqlite:///path/catalog.db`` on one host,
    ``postgresql://user:password@host/db`` for several (its password, as every secret, is
    never logged or shown). ``warehouse`` is the folder (a path or ``file://`` URI, shared by
    every host of the job) where data files go; default: ``warehouse/`` beside an SQLite
    catalog's file, required with PostgreSQL.

    The first epoch makes the table from its output (every column optional). Each snapshot's
    summary carries ``stoker.uid``, ``stoker.sink`` and ``stoker.epoch``: a commit done again
    finds its epoch there and adds nothing. ``output_mode='update'`` (or a ``key`` in append
    mode) upserts each epoch's rows on ``key`` (pyiceberg's copy-on-write upsert; two rows of
    a key in one epoch: the last written); ``complete`` replaces the table's files with each
    epoch's. An output column the table lacks is refused (exit 2) unless
    ``schema_mode='merge'``, which adds it. Unpartitioned tables only. Needs ``pyiceberg``
    (``pip install 'stoker[iceberg]'``).

    ``keep_snapshots=N`` expires the table's older snapshots as the job goes (when the current
    ancestry reaches 2N, all but the newest N), never the newest snapshot of any stoker job's
    marker or one after it: each commit copies the whole metadata, so without expiry it slows
    as snapshots pile up. Default: none expired (expire them from outside).
    """
    require_pyiceberg()
    return IcebergSink(
        catalog=catalog,
        table=table,
        warehouse=warehouse,
        key=check_key(key),
        schema_mode=schema_mode,
        keep_snapshots=keep_snapshots,
    )


def console(
    rows: int = 20, truncate: bool | int = True, allow_under_manager: bool = False
) -> ConsoleSink:
    """Each epoch printed to the driver's stdout, as Spark's console sink prints it: a
    ``Batch: N`` header, then the epoch's first ``rows`` rows as a table (cells cut at 20
    characters, or at ``truncate`` characters; ``truncate=False``: whole).

    For development: it is NOT exactly once. An epoch is printed when it commits, and a
    replay after a crash prints it again. A job run under a job manager (``stoker server``)
    with it is refused, at submission and at the driver's start, unless
    ``allow_under_manager=True`` (its output then goes to the driver's log).
    """
    return ConsoleSink(rows=rows, truncate=truncate, allow_under_manager=allow_under_manager)


def descriptor_of(sink: TwoPhaseSink) -> dict[str, Any]:
    """The sink's :meth:`~stoker.sinks.base.TwoPhaseSink.descriptor`, or for a sink without
    one (a user-defined sink) ``{"kind": None, "name": ..., "class": ...}``: recorded so that
    the cleanup can name what it cannot resolve."""
    describe = getattr(sink, "descriptor", None)
    if callable(describe):
        return dict(describe())
    cls = type(sink)
    return {"kind": None, "name": sink.name, "class": f"{cls.__module__}.{cls.__qualname__}"}


def committed_epochs_of(sink: TwoPhaseSink, owner: SinkOwner) -> list[Epoch] | None:
    """The sink's :meth:`~stoker.sinks.base.TwoPhaseSink.committed_epochs`, or None (cannot
    tell) for a sink without it (a user-defined sink written before it existed)."""
    ask = getattr(sink, "committed_epochs", None)
    if not callable(ask):
        return None
    got = ask(owner)
    return None if got is None else sorted(Epoch(int(e)) for e in got)


def _field(d: Mapping[str, Any], key: str, kind: str) -> str:
    value = d.get(key)
    if not isinstance(value, str) or not value:
        raise InvalidSink(
            f"{kind}.{key}", f"the {kind} sink descriptor has no {key} (got {value!r})"
        )
    return value


def _build(
    d: Mapping[str, Any],
) -> FilesSink | PostgresSink | ConsoleSink | KafkaSink | DeltaSink | IcebergSink | None:
    kind = d.get("kind")
    if kind == "iceberg":
        wh, mode = d.get("warehouse"), d.get("schema_mode")
        return IcebergSink(
            catalog=_field(d, "catalog", kind),
            table=_field(d, "table", kind),
            warehouse=wh if isinstance(wh, str) else None,
            key=check_key(d.get("key")),
            schema_mode=mode if isinstance(mode, str) else None,
            name=_field(d, "name", kind),
            keep_snapshots=d.get("keep_snapshots"),
        )
    if kind == "delta":
        parts, mode = d.get("partition_by"), d.get("schema_mode")
        return DeltaSink(
            path=_field(d, "path", kind),
            partition_by=tuple(str(c) for c in parts) if isinstance(parts, list) else (),
            key=check_key(d.get("key")),
            schema_mode=mode if isinstance(mode, str) else None,
            name=_field(d, "name", kind),
        )
    if kind == "console":
        # Rebuilt away from the driver that printed (a cleanup): nothing to print to.
        rows, truncate = d.get("rows"), d.get("truncate")
        return ConsoleSink(
            rows=rows if isinstance(rows, int) else 20,
            truncate=truncate if isinstance(truncate, bool | int) else True,
            allow_under_manager=bool(d.get("allow_under_manager")),
            name=_field(d, "name", kind),
            echo=False,
        )
    if kind == "files":
        return FilesSink(
            path=_field(d, "path", kind),
            format=_field(d, "format", kind),
            name=_field(d, "name", kind),
        )
    if kind == "kafka":
        options = d.get("options")
        timeout, max_bytes = d.get("commit_timeout"), d.get("max_transaction_bytes")
        return KafkaSink(
            bootstrap_servers=_field(d, "bootstrap_servers", kind),
            topic=_field(d, "topic", kind),
            key=d.get("key") if isinstance(d.get("key"), str) else None,
            value=_field(d, "value", kind),
            headers=d.get("headers") if isinstance(d.get("headers"), str) else None,
            # The secret ones are read back from the staging folder at open().
            options=dict(options) if isinstance(options, dict) else {},
            name=_field(d, "name", kind),
            commit_timeout=float(timeout) if isinstance(timeout, int | float) else 600.0,
            max_transaction_bytes=max_bytes if isinstance(max_bytes, int) else 64 * 1024 * 1024,
            secrets_kept=tuple(str(k) for k in d.get("secret_options") or ()),
        )
    if kind == "postgres":
        writers = d.get("max_writers")
        return PostgresSink(
            dsn=_field(d, "dsn", kind),
            table=_field(d, "table", kind),
            create_table=bool(d.get("create_table", True)),
            name=_field(d, "name", kind),
            max_writers=writers if isinstance(writers, int) else None,
            key=check_key(d.get("key")),
        )
    return None


def from_descriptor(d: Mapping[str, Any]) -> TwoPhaseSink:
    """The sink ``d`` (a :meth:`~stoker.sinks.base.TwoPhaseSink.descriptor`) describes, not
    yet opened. Needs neither the application's code nor Spark. An unknown ``kind`` or a
    missing field: :class:`~stoker.errors.InvalidSink` naming it."""
    sink = _build(d)
    if sink is None:
        raise InvalidSink(
            "sink.kind",
            f"unknown sink kind {d.get('kind')!r} (sink {d.get('name')!r}); known kinds: "
            f"{', '.join(KINDS)}",
        )
    # Commit finishes an epoch as its output mode means (an upsert, a replace, a swap of the
    # current snapshot): the mode is carried for the janitor. A descriptor older than it:
    # append, which is what its job wrote.
    sink.accept_output_mode(str(d.get("output_mode") or "append"))
    return sink
