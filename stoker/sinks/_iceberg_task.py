"""What an Iceberg sink's Spark task runs on an executor: its rows written as one Parquet data
file in the table's ``data/`` folder, with the Iceberg field id of every column set in the
file's schema (readers match columns by id, not by name), and the fields of its ``DataFile``
(size, counts, bounds) handed back to the driver.

Before a task writes its file it writes an *intent* naming it,
``<table>/_stoker/<uid>/<epoch>.<attempt>/t<task attempt>.json`` (as the Delta sink's tasks
do): what abort, the commit's clean-up and recovery read to find the files of an attempt. A
file is named by (uid, epoch, attempt, Spark task attempt id), so no two copies of a task
write the same file; a file no snapshot names is invisible to every Iceberg reader.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stoker.sinks._delta_task import write_intent
from stoker.testing import kill_task_worker, task_fault, task_note

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

    WriteFn = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]

STAGING = "_stoker"  # beside the table's data/ and metadata/ folders; no snapshot names it
RESULT = "part int, task long, task_attempt int, rows long, file string"
_BYTES = ("lower_bounds", "upper_bounds")
_COUNTS = ("column_sizes", "value_counts", "null_value_counts", "nan_value_counts")


@dataclass(frozen=True)
class IcebergTask:
    """What a writer task needs (pickled into the task)."""

    root: str  # the table's folder (its location, local)
    location: str  # the table's location as its metadata says it (file:///...)
    uid: str
    epoch: int
    attempt: int
    columns: tuple[str, ...]  # the output's names, in order (the plan renames them)
    schema: str  # the Iceberg schema of those columns (their field ids), as JSON
    properties: tuple[tuple[str, str], ...]  # the table's properties (metrics, compression)


def intents_dir(root: Path, uid: str, epoch: int, attempt: int) -> Path:
    return root / STAGING / uid / f"{epoch}.{attempt}"


def write_plan(df: DataFrame, write: WriteFn | None) -> DataFrame:
    """An epoch's frame through its writer tasks (``write``; None: a plan only analysed).
    Columns are renamed by position first (as the Delta sink does: a name Spark generates
    reads as a path in ``mapInArrow``); the tasks name them back from their task."""
    plain = df.toDF(*(f"_{i}" for i in range(len(df.columns))))
    return plain.mapInArrow(write or _never, RESULT)


def _never(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    raise AssertionError("a plan only analysed ran")


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file(t: IcebergTask, task: int, table: pa.Table) -> dict[str, Any]:
    """Write ``table`` (named columns) as this task attempt's data file, with field ids; the
    fields of its DataFile, JSON-able (:func:`data_file`)."""
    import pyarrow.parquet as pq
    from pyiceberg.io.pyarrow import (
        compute_statistics_plan,
        data_file_statistics_from_parquet_metadata,
        parquet_path_to_id_mapping,
        schema_to_pyarrow,
    )
    from pyiceberg.schema import Schema

    schema = Schema.model_validate_json(t.schema)
    names = [f.name for f in schema.fields]  # the schema's order: the statistics plan's
    required = [f.name for f in schema.fields if f.required]
    target = schema_to_pyarrow(schema, include_field_ids=True)
    rows = table.select(names)
    for col in required:
        if rows.column(col).null_count:
            raise ValueError(
                f"column {col!r} is required (NOT NULL) in the Iceberg table and the epoch's "
                f"output holds {rows.column(col).null_count} null(s) in it"
            )
    rows = rows.cast(target)
    root = Path(t.root)
    name = f"data/stoker-{t.uid}-{t.epoch}-{t.attempt}-{task}-0.parquet"
    write_intent(intents_dir(root, t.uid, t.epoch, t.attempt), task, [name])
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    props = dict(t.properties)
    codec = props.get("write.parquet.compression-codec", "zstd")
    collected: list[Any] = []
    pq.write_table(
        rows,
        path,
        compression="none" if codec == "uncompressed" else codec,
        metadata_collector=collected,
    )
    _fsync(path)  # durable before the epoch's decision
    _fsync(path.parent)
    stats = data_file_statistics_from_parquet_metadata(
        collected[0],
        compute_statistics_plan(schema, props),
        parquet_path_to_id_mapping(schema),
    )
    fields = stats.to_serialized_dict()
    out: dict[str, Any] = {
        "name": name,
        "path": f"{t.location.rstrip('/')}/{name}",
        "size": path.stat().st_size,
    }
    for k, v in fields.items():
        if k in _BYTES:
            out[k] = {str(i): bytes(b).hex() for i, b in v.items()}
        elif k in _COUNTS:
            out[k] = {str(i): int(n) for i, n in v.items()}
        else:
            out[k] = v
    return out


def data_file(f: Mapping[str, Any], spec_id: int) -> Any:
    """The pyiceberg ``DataFile`` of a recorded file (:func:`write_file`'s fields)."""
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.typedef import Record

    extra: dict[str, Any] = {}
    for k in _BYTES:
        extra[k] = {int(i): bytes.fromhex(b) for i, b in (f.get(k) or {}).items()}
    for k in _COUNTS:
        extra[k] = {int(i): int(n) for i, n in (f.get(k) or {}).items()}
    return DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=str(f["path"]),
        file_format=FileFormat.PARQUET,
        partition=Record(),
        file_size_in_bytes=int(f["size"]),
        record_count=int(f["record_count"]),
        split_offsets=list(f.get("split_offsets") or []) or None,
        sort_order_id=None,
        spec_id=spec_id,
        equality_ids=None,
        key_metadata=None,
        **extra,
    )


def write_partition(t: IcebergTask, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Runs in a Spark task: the partition's rows as one data file (none for no rows), one
    result row."""
    import pyarrow as pa
    from pyspark import TaskContext

    ctx = TaskContext.get()
    part = ctx.partitionId() if ctx is not None else 0
    task = ctx.taskAttemptId() if ctx is not None else 0
    number = ctx.attemptNumber() if ctx is not None else 0
    got = [b for b in batches if b.num_rows]
    written: dict[str, Any] | None = None
    if got:
        table = pa.Table.from_batches(got).rename_columns(list(t.columns))
        written = write_file(t, task, table)
    if task_fault("task_after_prepare", t.epoch, part, number) is not None:
        task_note(f"worker death after writing Iceberg files of epoch {t.epoch} task {task}")
        kill_task_worker()
    slow = task_fault("task_slow", t.epoch, part, number)
    if slow is not None:
        time.sleep(float(slow[0]) if slow else 60.0)
    row = {
        "part": part,
        "task": task,
        "task_attempt": number,
        "rows": int(written["record_count"]) if written else 0,
        "file": json.dumps(written) if written else "",
    }
    yield pa.RecordBatch.from_pylist(
        [row],
        schema=pa.schema(
            [
                ("part", pa.int32()),
                ("task", pa.int64()),
                ("task_attempt", pa.int32()),
                ("rows", pa.int64()),
                ("file", pa.string()),
            ]
        ),
    )
