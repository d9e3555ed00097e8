"""A file source's formats: reading one file (json lines, csv, parquet, text) into record batches of
exactly the source's schema, and the simple DDL (``"id long, name string"``) parsed without a
SparkSession."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from stoker.errors import InvalidSource

if TYPE_CHECKING:
    from collections.abc import Iterator

    import pyarrow as pa
    from pyspark.sql.types import StructType


def read_file(
    path: str, fmt: str, schema: StructType, header: bool = True, time_zone: str = "UTC"
) -> Iterator[pa.RecordBatch]:
    """Read one file into record batches of exactly ``schema`` (missing columns are null).

    Dates and times are read as Spark's own file sources read them, text in the session's
    time zone ``time_zone`` (:mod:`._files_time`); they leave as the Arrow types pyspark's
    Python data sources hand to the JVM (a ``timestamp`` as an instant in UTC)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    from stoker.sources._files_time import cast_typed, from_text, is_temporal

    # The time zone is the one pyspark checks a data source's batches against.
    target = to_arrow_schema(schema, timezone="UTC")
    if fmt == "text":
        yield from read_lines(path, target)
        return
    # Text formats read a date or time column as its text, which Spark's rules then read.
    as_text = {f.name for f in target if is_temporal(f.type)} if fmt != "parquet" else set()
    read_types = {f.name: pa.string() if f.name in as_text else f.type for f in target}
    if fmt == "json":
        import pyarrow.json as pj

        table = pj.read_json(
            path,
            parse_options=pj.ParseOptions(
                explicit_schema=pa.schema([(n, t) for n, t in read_types.items()]),
                unexpected_field_behavior="ignore",
            ),
        )
    elif fmt == "csv":
        import pyarrow.csv as pc

        names = [f.name for f in target]
        table = pc.read_csv(
            path,
            read_options=pc.ReadOptions(
                column_names=None if header else names, autogenerate_column_names=False
            ),
            convert_options=pc.ConvertOptions(
                column_types=read_types,
                include_columns=names,
                include_missing_columns=True,
            ),
        )
    else:
        import pyarrow.parquet as pq

        present = set(pq.read_schema(path).names)
        table = pq.read_table(path, columns=[f.name for f in target if f.name in present])
    columns = []
    for f in target:
        if f.name not in table.column_names:
            columns.append(pa.nulls(table.num_rows, f.type))
        elif f.name in as_text:
            columns.append(from_text(table.column(f.name), f.type, time_zone))
        elif is_temporal(f.type):
            columns.append(cast_typed(table.column(f.name), f.type))
        else:
            columns.append(table.column(f.name).cast(f.type))
    yield from pa.Table.from_arrays(columns, schema=target).to_batches()


# Rows per record batch of a text file: a batch of short lines stays a few MB.
TEXT_BATCH = 8192


def read_lines(path: str, target: pa.Schema) -> Iterator[pa.RecordBatch]:
    """A text file as Spark's text source reads it: one row per line, the line without its
    end (``\n``, ``\r\n`` or ``\r``, as Hadoop's line reader splits), in the one string
    column of ``target``; no row after a final line end; UTF-8 (a byte that is not is read
    as U+FFFD)."""
    import pyarrow as pa

    lines: list[str] = []
    # newline="": lines end at \n, \r\n or \r, and keep their end untranslated.
    with open(path, encoding="utf-8", errors="replace", newline="") as fh:
        for line in fh:
            lines.append(line.rstrip("\r\n") if line.endswith(("\n", "\r")) else line)
            if len(lines) >= TEXT_BATCH:
                yield pa.RecordBatch.from_arrays([pa.array(lines, pa.string())], schema=target)
                lines = []
    if lines:
        yield pa.RecordBatch.from_arrays([pa.array(lines, pa.string())], schema=target)


_NESTED = re.compile(r"[<>]")
_COLUMN = re.compile(
    r"^\s*`?([A-Za-z_][A-Za-z0-9_]*)`?\s+([A-Za-z_]+)\s*(?:\(\s*(\d+)\s*,\s*(\d+)\s*\))?\s*$"
)


def _simple_types() -> dict[str, Any]:
    from pyspark.sql import types as T

    return {
        "long": T.LongType,
        "bigint": T.LongType,
        "int": T.IntegerType,
        "integer": T.IntegerType,
        "short": T.ShortType,
        "smallint": T.ShortType,
        "byte": T.ByteType,
        "tinyint": T.ByteType,
        "double": T.DoubleType,
        "float": T.FloatType,
        "real": T.FloatType,
        "string": T.StringType,
        "boolean": T.BooleanType,
        "date": T.DateType,
        "timestamp": T.TimestampType,
        "timestamp_ntz": T.TimestampNTZType,
        "binary": T.BinaryType,
    }


def parse_simple_ddl(ddl: str, strict: bool = False) -> StructType | None:
    """Parse ``"a long, b string, c decimal(10,2)"`` without a SparkSession.

    Returns None for anything richer (nested types), which Spark parses once it runs; with
    ``strict``, a column that is not ``name type`` raises :class:`~stoker.errors.InvalidSource`.
    """
    from pyspark.sql import types as T

    known = _simple_types()
    fields = []
    for part in re.split(r",(?![^(]*\))", ddl):
        m = _COLUMN.match(part)
        if m is None:
            if strict:
                raise InvalidSource(
                    "files.schema", f"cannot parse column {part.strip()!r} of {ddl!r}"
                )
            return None
        name, tname = m.group(1), m.group(2).lower()
        if tname == "decimal" and m.group(3):
            dt: T.DataType = T.DecimalType(int(m.group(3)), int(m.group(4)))
        elif tname in known and not m.group(3):
            dt = known[tname]()
        elif strict:
            raise InvalidSource("files.schema", f"unknown type {m.group(2)!r} of column {name!r}")
        else:
            return None
        fields.append(T.StructField(name, dt, True))
    return T.StructType(fields)
