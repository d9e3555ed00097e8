"""What a Delta sink's Spark task runs on an executor: its rows written as Parquet data files in
the table's folder, and the fields of their ``add`` actions handed back to the driver.

Before a task writes a data file it writes an *intent* naming the files it is about to write,
``<table>/_stoker/<uid>/<epoch>.<attempt>/t<task attempt>.json``: what abort, the commit's
clean-up and recovery read to find the files of an attempt (a retried or speculative copy of
a task, a task of an attempt never decided) without listing the whole table. A data file is
named by (uid, epoch, attempt, Spark task attempt id, number), so no two copies of a task ever
write the same file. Files no log entry names are invisible to every Delta reader.

The task is handed a :class:`DeltaTask` (pickled into it) and yields one result row per file
(and one without a file when its partition held no rows), of schema :data:`RESULT`.
"""

from __future__ import annotations

import functools
import json
import os
import re
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stoker.testing import kill_task_worker, task_fault, task_note

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

    WriteFn = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]

STAGING = "_stoker"  # Delta readers and VACUUM pass by names starting with '_'
RESULT = "part int, task long, task_attempt int, rows long, add string"
# A column name mapInArrow can take as it is: ``df[name]`` reads dots and backticks as a path.
_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class DeltaTask:
    """What a writer task needs (pickled into the task)."""

    root: str
    uid: str
    epoch: int
    attempt: int
    columns: tuple[str, ...]  # the output's names, in order (the plan renames them)
    partition_by: tuple[str, ...]


def intents_dir(root: Path, uid: str, epoch: int, attempt: int) -> Path:
    return root / STAGING / uid / f"{epoch}.{attempt}"


@functools.cache
def result_schema() -> StructType:
    """:data:`RESULT` as a StructType, made once: given as text, every epoch's ``mapInArrow``
    had the JVM parse it (a few ms of the driver's time per epoch)."""
    from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

    return StructType(
        [
            StructField("part", IntegerType()),
            StructField("task", LongType()),
            StructField("task_attempt", IntegerType()),
            StructField("rows", LongType()),
            StructField("add", StringType()),
        ]
    )


def write_plan(df: DataFrame, write: WriteFn | None) -> DataFrame:
    """An epoch's frame through its writer tasks (``write``; None: a plan only analysed).
    Columns whose names ``mapInArrow`` would read as a path (a name Spark generates, with a
    dot), or that clash, are renamed by position first; the tasks name them back from their
    :class:`DeltaTask`. Plain names are kept: a rename is one more plan analysed each epoch."""
    names = df.columns
    plain = all(_PLAIN_NAME.fullmatch(n) for n in names) and len(
        {n.casefold() for n in names}
    ) == len(names)
    if not plain:
        df = df.toDF(*(f"_{i}" for i in range(len(names))))
    return df.mapInArrow(write or _never, result_schema())


def _never(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    raise AssertionError("a plan only analysed ran")


def partition_text(value: Any) -> str | None:
    """A partition value as Delta writes it in ``partitionValues`` (None: null)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if hasattr(value, "isoformat"):
        return str(value.isoformat())
    return str(value)


def _folder(partition_by: tuple[str, ...], values: tuple[str | None, ...]) -> str:
    """Hive-style folders for a partition (``col=value/``), as other Delta writers name them."""
    parts = []
    for col, v in zip(partition_by, values, strict=True):
        text = "__HIVE_DEFAULT_PARTITION__" if v is None else urllib.parse.quote(v, safe="")
        parts.append(f"{col}={text}/")
    return "".join(parts)


_STAT_TYPES = ("int", "float", "double", "decimal", "string", "large_string")


def stats_of(table: pa.Table) -> str:
    """Delta's per-file statistics: rows, and per top-level column its null count, and min
    and max where they are exact and cheap (numbers; strings of up to 32 characters)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    for name, col in zip(table.column_names, table.columns, strict=True):
        if pa.types.is_nested(col.type):
            continue
        nulls[name] = int(col.null_count)
        if not any(str(col.type).startswith(t) for t in _STAT_TYPES) or col.null_count == len(col):
            continue
        mm = pc.min_max(col).as_py()
        lo, hi = mm["min"], mm["max"]
        if isinstance(lo, float) and (lo != lo or hi != hi):  # NaN: no bounds
            continue
        if isinstance(lo, str) and (len(lo) > 32 or len(hi) > 32):
            continue
        if not isinstance(lo, int | float | str):
            lo, hi = str(lo), str(hi)  # decimals
        mins[name], maxs[name] = lo, hi
    return json.dumps(
        {"numRecords": table.num_rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls}
    )


def _groups(t: DeltaTask, table: pa.Table) -> list[tuple[tuple[str | None, ...], pa.Table]]:
    """The rows of ``table`` per partition of the table (one group without partitions)."""
    import pyarrow.compute as pc

    if not t.partition_by:
        return [((), table)]
    keys = table.select(list(t.partition_by)).group_by(list(t.partition_by)).aggregate([])
    out = []
    for row in keys.to_pylist():
        mask = None
        for col in t.partition_by:
            v = row[col]
            m = pc.is_null(table[col]) if v is None else pc.equal(table[col], v)
            mask = m if mask is None else pc.and_(mask, m)
        values = tuple(partition_text(row[c]) for c in t.partition_by)
        rows = table.filter(mask).drop_columns(list(t.partition_by))
        out.append((values, rows))
    return out


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_intent(folder: Path, task: int, files: list[str]) -> None:
    """Name the files a task attempt is about to write, durably, before it writes them."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"t{task}.json"
    tmp = folder / f".t{task}.json.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump({"files": files}, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    _fsync(folder)


def write_files(t: DeltaTask, part: int, task: int, table: pa.Table) -> list[dict[str, Any]]:
    """Write ``table`` (named columns) as this task attempt's data files; their add fields."""
    import pyarrow.parquet as pq

    root = Path(t.root)
    groups = _groups(t, table) if table.num_rows else []
    names = [
        f"{_folder(t.partition_by, values)}stoker-{t.uid}-{t.epoch}-{t.attempt}-{task}-{i}.parquet"
        for i, (values, _rows) in enumerate(groups)
    ]
    if not names:
        return []
    write_intent(intents_dir(root, t.uid, t.epoch, t.attempt), task, names)
    adds: list[dict[str, Any]] = []
    for name, (values, rows) in zip(names, groups, strict=True):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(rows, path)
        _fsync(path)  # durable before the epoch's decision, as a files sink's part
        st = path.stat()
        adds.append(
            {
                "path": name,
                "size": st.st_size,
                "partition_values": dict(zip(t.partition_by, values, strict=True)),
                "modification_time": int(st.st_mtime * 1000),
                "stats": stats_of(rows),
            }
        )
    for folder in {(root / a["path"]).parent for a in adds}:
        _fsync(folder)
    return adds


def write_partition(t: DeltaTask, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Runs in a Spark task: the partition's rows as data files, one result row per file."""
    import pyarrow as pa
    from pyspark import TaskContext

    ctx = TaskContext.get()
    part = ctx.partitionId() if ctx is not None else 0
    task = ctx.taskAttemptId() if ctx is not None else 0
    number = ctx.attemptNumber() if ctx is not None else 0
    got = list(batches)
    if got:
        table = pa.Table.from_batches(got).rename_columns(list(t.columns))
    else:
        table = pa.table({c: pa.array([], pa.null()) for c in t.columns})
    adds = write_files(t, part, task, table) if got else []
    if task_fault("task_after_prepare", t.epoch, part, number) is not None:
        task_note(f"worker death after writing Delta files of epoch {t.epoch} task {task}")
        kill_task_worker()
    slow = task_fault("task_slow", t.epoch, part, number)
    if slow is not None:
        time.sleep(float(slow[0]) if slow else 60.0)
    rows = [
        {
            "part": part,
            "task": task,
            "task_attempt": number,
            "rows": json.loads(a["stats"])["numRecords"],
            "add": json.dumps(a),
        }
        for a in adds
    ] or [{"part": part, "task": task, "task_attempt": number, "rows": 0, "add": ""}]
    yield pa.RecordBatch.from_pylist(
        rows,
        schema=pa.schema(
            [
                ("part", pa.int32()),
                ("task", pa.int64()),
                ("task_attempt", pa.int32()),
                ("rows", pa.int64()),
                ("add", pa.string()),
            ]
        ),
    )
