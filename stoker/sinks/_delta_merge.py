"""How a Delta sink writes an upsert (``output_mode='update'``, or a ``key`` in append mode):
the epoch's prepared files are read back on the driver and MERGEd into the table on ``key`` in
the epoch's one Delta commit, which carries the same ``txn`` marker as an append. The prepared
files themselves never enter the log (the MERGE writes its own); the commit's clean-up deletes
them.

Two rows of one key in one epoch (two partitions, or a transform that makes them) give one
row: the last written, as the PostgreSQL sink's upsert does.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from stoker.sinks._delta_schema import schema_of

if TYPE_CHECKING:
    import pyarrow as pa


def epoch_rows(root: Path, adds: list[dict[str, Any]], recorded: Any) -> pa.Table:
    """The rows of the epoch's prepared files, with their partition columns, in the recorded
    output schema (order of the files, then of the rows)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = schema_of(recorded)
    pieces = []
    for a in adds:
        t = pq.read_table(root / str(a["path"]))
        for col, value in (a.get("partition_values") or {}).items():
            typ = schema.field(col).type
            t = t.append_column(col, pa.array([value] * t.num_rows, pa.string()).cast(typ))
        pieces.append(t.select(schema.names).cast(schema))
    if not pieces:
        return schema.empty_table()
    return pa.concat_tables(pieces)


def last_per_key(rows: pa.Table, key: tuple[str, ...]) -> pa.Table:
    """One row per key: the last of ``rows`` that holds it."""
    import pyarrow as pa

    if rows.num_rows == 0:
        return rows
    numbered = rows.append_column("__stoker_n", pa.array(range(rows.num_rows), pa.int64()))
    last = numbered.group_by(list(key), use_threads=False).aggregate([("__stoker_n", "max")])
    keep = sorted(last.column("__stoker_n_max").to_pylist())
    return rows.take(pa.array(keep, pa.int64()))


def predicate(key: tuple[str, ...]) -> str:
    """The MERGE's match: every key column equal in target ``t`` and source ``s``."""
    return " AND ".join(f't."{k}" = s."{k}"' for k in key)


def merge_epoch(
    root: Path,
    table: Any,
    adds: list[dict[str, Any]],
    recorded: Any,
    key: tuple[str, ...],
    partition_by: tuple[str, ...],
    props: Any,
) -> None:
    """MERGE the epoch's rows into the table on ``key`` in one commit (``props`` carries the
    txn marker); an empty table is made first when there is none (its own commit, made again
    by a retry: ``mode='ignore'``)."""
    from deltalake import DeltaTable, Schema

    if table is None:
        DeltaTable.create(
            str(root),
            Schema.from_arrow(schema_of(recorded)),
            mode="ignore",
            partition_by=list(partition_by) or None,
        )
        table = DeltaTable(str(root))
    source = last_per_key(epoch_rows(root, adds, recorded), key)
    if source.num_rows == 0:  # the marker alone: the epoch is done, nothing changes
        table.create_write_transaction(
            [], "append", table.schema(), list(partition_by) or None, commit_properties=props
        )
        return
    (
        table.merge(
            source,
            predicate(key),
            source_alias="s",
            target_alias="t",
            commit_properties=props,
        )
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )
