"""A file source's formats: reading one file (json lines, csv, parquet) into record batches of
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
