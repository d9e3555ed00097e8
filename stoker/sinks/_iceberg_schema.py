"""The schema side of the Iceberg sink: what an epoch's output may bring to a table, the table
made from the first epoch's output, and the ``schema_mode='merge'`` evolution.

Both changes happen on the driver before any task writes (in ``prepare``), because the tasks
write the table's field ids into their files: a new column needs its id first. Neither adds a
snapshot, so no reader sees a row of an undecided epoch; a table or column made by an epoch
that is then aborted stays (empty, or null in every row).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from stoker.errors import InvalidSink, SinkError
from stoker.sinks._arrow import output_arrow_schema
from stoker.sinks._iceberg_catalog import FIELD, Where, check_table, load, redacted

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

log = logging.getLogger("stoker.sinks.iceberg")

_TRIES = 10
# A table the sink makes gets one commit per epoch: manifests merged as they pile up (pyiceberg's
# merge append, Iceberg's default in Java), and old metadata files deleted after each commit
# (the newest 100 kept), so that neither grows with the epochs.
NEW_TABLE = {
    "commit.manifest-merge.enabled": "true",
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "100",
}


def plain(t: pa.DataType) -> pa.DataType:
    """``t`` as a table of that type holds it, for comparing: string and binary not in their
    large forms, timestamps in microseconds (UTC when zoned), nested types alike, every
    field nullable and without metadata."""
    import pyarrow as pa

    if pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return pa.binary()
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", tz="UTC" if t.tz else None)
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, plain(f.type)) for f in t])
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return pa.list_(plain(t.value_type))
    if pa.types.is_map(t):
        return pa.map_(plain(t.key_type), plain(t.item_type))
    return t


def arrow_schema(df: DataFrame) -> pa.Schema:
    """The Arrow schema the writer tasks get for ``df``."""
    return output_arrow_schema(df)


def fits(have: pa.DataType, out: pa.DataType) -> bool:
    """Whether a column of the table's type ``have`` takes the output's ``out``: the same
    type, or one Iceberg's own promotions widen to it (a smaller integer into int or long, a
    float into double). A table made from a Spark ``short`` or ``byte`` column holds ints."""
    import pyarrow as pa

    have, out = plain(have), plain(out)
    if have.equals(out):
        return True
    if pa.types.is_signed_integer(have) and pa.types.is_signed_integer(out):
        return bool(out.bit_width <= have.bit_width)
    return pa.types.is_float64(have) and pa.types.is_float32(out)


def table_arrow(table: Any) -> pa.Schema:
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    return schema_to_pyarrow(table.schema(), include_field_ids=False)


def check_output(
    out: pa.Schema,
    table: Any,
    where: Where,
    schema_mode: str | None,
    key: tuple[str, ...] | None,
) -> None:
    """Refuse (InvalidSink, nothing written) an output ``out`` the table cannot take: key
    columns the output lacks, columns the table has not (unless ``schema_mode='merge'``) or
    holds with another type, required columns missing. ``table``: None while there is none
    (the first epoch creates it)."""
    absent = [c for c in key or () if c not in out.names]
    if absent:
        raise InvalidSink(
            "iceberg.key", f"key columns {absent} are not columns of the output {out.names}"
        )
    if len(set(out.names)) != len(out.names):
        raise InvalidSink("iceberg.columns", f"the output names a column twice: {out.names}")
    if table is None:
        return
    check_table(table, where)
    have = table_arrow(table)
    new = [f for f in out if f.name not in have.names]
    if new and schema_mode != "merge":
        cols = ", ".join(f"{f.name} {f.type}" for f in new)
        raise InvalidSink(
            "iceberg.schema",
            f"the output adds column(s) {cols} that the Iceberg table {where.identifier} does "
            "not have; nothing was written. To let the job add them to the table (optional "
            "columns, in a schema update of their own), give sinks.iceberg(catalog, "
            f"{where.identifier!r}, ..., schema_mode='merge')",
        )
    changed = [
        f"{f.name} ({have.field(f.name).type} in the table, {f.type} in the output)"
        for f in out
        if f.name in have.names and not fits(have.field(f.name).type, f.type)
    ]
    if changed:
        raise InvalidSink(
            "iceberg.schema",
            f"column type(s) differ: {', '.join(changed)}; cast them in the transform",
        )
    schema = table.schema()
    required = [f.name for f in schema.fields if f.required and f.name not in out.names]
    if required:
        raise InvalidSink(
            "iceberg.schema",
            f"the table's required (NOT NULL) column(s) {required} are not in the output",
        )


def ready_table(catalog: Any, where: Where, out: pa.Schema, schema_mode: str | None) -> Any:
    """The table, made first from ``out`` (every column optional) when there is none, and
    with ``out``'s new columns added when ``schema_mode='merge'``; checked against ``out``."""
    import pyarrow as pa
    from pyiceberg.exceptions import CommitFailedException, TableAlreadyExistsError

    for _ in range(_TRIES):
        table = load(catalog, where)
        if table is None:
            optional = pa.schema([f.with_nullable(True) for f in out])
            try:
                catalog.create_namespace_if_not_exists(where.namespace)
                table = catalog.create_table(
                    where.identifier, schema=optional, properties=NEW_TABLE
                )
                log.info("iceberg: created table %s in %s", where.identifier, where.shown())
            except TableAlreadyExistsError:
                continue  # made meanwhile by another writer: read it
            except Exception as e:
                raise SinkError(
                    FIELD, f"the Iceberg table {where.identifier} cannot be made: {redacted(e)}"
                ) from e
        check_output(out, table, where, schema_mode, None)
        added = [f for f in out if f.name not in table.schema().column_names]
        if not added:
            return table
        try:
            with table.update_schema() as update:
                update.union_by_name(pa.schema([f.with_nullable(True) for f in added]))
            log.info(
                "iceberg: added column(s) %s to %s",
                [f.name for f in added],
                where.identifier,
            )
        except CommitFailedException:
            continue  # another writer changed the table: read it again
    raise SinkError(
        FIELD,
        f"the Iceberg table {where.identifier} kept changing under the sink's schema checks "
        f"({_TRIES} tries)",
    )
