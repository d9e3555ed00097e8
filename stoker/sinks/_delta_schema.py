"""The schema side of the Delta sink: what an epoch's output may bring to a table, the schema
recorded with a prepared part (the first commit creates the table with it), and the
``schema_mode='merge'`` evolution (new nullable columns, in a commit of their own)."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stoker.errors import InvalidSink, SinkError
from stoker.sinks._arrow import output_arrow_schema

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

log = logging.getLogger("stoker.sinks.delta")

# Characters a Delta column name cannot hold without column mapping.
_BAD_NAME = re.compile(r"[ ,;{}()\n\t=]")


def arrow_schema(df: DataFrame) -> pa.Schema:
    """The Arrow schema the writer tasks get for ``df``."""
    return output_arrow_schema(df)


def check_output(
    out: pa.Schema,
    partition_by: tuple[str, ...],
    table: Any,
    root: Path,
    path: str,
    schema_mode: str | None,
    key: tuple[str, ...] | None = None,
) -> None:
    """Refuse (InvalidSink, nothing written) an output ``out`` the table cannot take: names
    Delta cannot hold, partition columns the output or the table lacks, columns the table has
    not (unless ``schema_mode='merge'``) or holds with another type, NOT NULL columns
    missing, key columns the output lacks.
    ``table``: the DeltaTable, or None while there is none (the first epoch creates it)."""
    import pyarrow as pa

    bad = [n for n in out.names if _BAD_NAME.search(n)]
    if bad:
        raise InvalidSink(
            "delta.columns",
            f"column names {bad} hold a character Delta refuses without column mapping "
            "(space , ; { } ( ) = tab newline): rename them in the transform",
        )
    missing = [c for c in partition_by if c not in out.names]
    if missing:
        raise InvalidSink(
            "delta.partition_by",
            f"partition columns {missing} are not columns of the output {out.names}",
        )
    absent = [c for c in key or () if c not in out.names]
    if absent:
        raise InvalidSink(
            "delta.key", f"key columns {absent} are not columns of the output {out.names}"
        )
    if table is None:
        return
    have = pa.schema(table.schema().to_arrow())
    parts = list(table.metadata().partition_columns)
    if parts != list(partition_by):
        raise InvalidSink(
            "delta.partition_by",
            f"the table {str(root)!r} is partitioned by {parts}, the sink says "
            f"{list(partition_by)}: give partition_by={parts!r}",
        )
    new = [f for f in out if f.name not in have.names]
    if new and schema_mode != "merge":
        cols = ", ".join(f"{f.name} {f.type}" for f in new)
        raise InvalidSink(
            "delta.schema",
            f"the output adds column(s) {cols} that the Delta table {str(root)!r} does not "
            "have; nothing was written. To let the job add them to the table (nullable), give "
            f"sinks.delta({path!r}, ..., schema_mode='merge')",
        )
    changed = [
        f"{f.name} ({have.field(f.name).type} in the table, {f.type} in the output)"
        for f in out
        if f.name in have.names and not plain(have.field(f.name).type).equals(plain(f.type))
    ]
    if changed:
        raise InvalidSink(
            "delta.schema",
            f"column type(s) differ: {', '.join(changed)}; cast them in the transform",
        )
    required = [f.name for f in have if f.name not in out.names and not f.nullable]
    if required:
        raise InvalidSink(
            "delta.schema", f"the table's NOT NULL column(s) {required} are not in the output"
        )


def plain(t: pa.DataType) -> pa.DataType:
    """The type a Delta table holds for Arrow type ``t``: string and binary, not their large
    forms; timestamps in microseconds (UTC when they carry a zone)."""
    import pyarrow as pa

    if pa.types.is_large_string(t):
        return pa.string()
    if pa.types.is_large_binary(t):
        return pa.binary()
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", tz="UTC" if t.tz else None)
    return t


def schema_json(schema: pa.Schema | None) -> str | None:
    """The output's Arrow schema as recorded with the part: Arrow's IPC bytes, hex."""
    if schema is None:
        return None
    return bytes(schema.serialize()).hex()


def schema_of(text: Any) -> pa.Schema:
    """The table schema for a recorded output schema (:func:`schema_json`)."""
    import pyarrow as pa

    if not isinstance(text, str):
        raise SinkError("delta", "the recorded part holds no schema to create the table with")
    schema = pa.ipc.read_schema(pa.py_buffer(bytes.fromhex(text)))
    return pa.schema([pa.field(f.name, plain(f.type), f.nullable) for f in schema])


def evolve(root: Path, table: Any, recorded: Any, partition_by: tuple[str, ...]) -> bool:
    """``schema_mode='merge'``: add the recorded output's new columns to the table (nullable),
    in a commit of their own before the epoch's; done again after a crash, it finds nothing
    to add. Whether a commit was made."""
    import pyarrow as pa
    from deltalake import write_deltalake

    if recorded is None:
        return False
    out = schema_of(recorded)
    have = pa.schema(table.schema().to_arrow())
    added = [n for n in out.names if n not in have.names]
    if not added:
        return False
    nullable = pa.schema([f.with_nullable(True) for f in out])
    empty = pa.table({f.name: pa.array([], f.type) for f in nullable}, schema=nullable)
    write_deltalake(
        str(root),
        empty,
        mode="append",
        schema_mode="merge",
        partition_by=list(partition_by) or None,
    )
    log.info("delta %s: added column(s) %s", root, added)
    return True
