"""Pipeline outputs with exactly-once two-phase commit: :func:`files`, :func:`postgres`."""

from __future__ import annotations

from stoker.sinks.base import Prepared, Recovered, TwoPhaseSink
from stoker.sinks.files import FilesSink
from stoker.sinks.postgres import PostgresSink

__all__ = [
    "FilesSink",
    "PostgresSink",
    "Prepared",
    "Recovered",
    "TwoPhaseSink",
    "files",
    "postgres",
]


def files(path: str, format: str = "parquet", options: dict[str, str] | None = None) -> FilesSink:
    """Files of ``format`` (parquet, json, csv, orc) under ``path``, one folder per epoch.

    A committed epoch appears as ``<path>/epoch=<N>`` in one rename; a reader of ``path`` never
    sees a partial or aborted epoch.
    """
    return FilesSink(path=str(path), format=format, options=dict(options or {}))


def postgres(dsn: str, table: str, create_table: bool = True) -> PostgresSink:
    """Rows appended to ``table`` exactly once, with PREPARE TRANSACTION per Spark task.

    The server needs ``max_prepared_transactions`` > 0. With ``create_table`` the table is
    created from the epoch's schema if it does not exist.
    """
    return PostgresSink(dsn=dsn, table=table, create_table=create_table)
