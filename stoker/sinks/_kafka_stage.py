"""A Kafka sink's staged parts: what a Spark task writes at prepare, durably, before anything
reaches Kafka.

Each task attempt writes its partition's rows (``key``, ``value`` binary, and ``headers`` when
the sink writes them) into one Arrow IPC file in the sink's staging folder, fsyncs it and the
folder, and returns one result row naming it. A file is named by everything that tells it
from another's:

    e<epoch>.a<attempt>.p<partition>.t<task attempt id>.<uid>.arrow

so a retried or speculative copy of a task, or a zombie that writes late, makes a file of its
own (a stray unless Spark kept its result). A partition with no rows stages no file.

Runs in Spark's Python workers: nothing of stoker is imported here but :mod:`stoker.testing`
(the task faults) and the standard library; pyarrow and pyspark inside the task.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from stoker.testing import kill_task_worker, task_fault, task_note

if TYPE_CHECKING:
    import pyarrow as pa

SUFFIX = ".arrow"
_NAME = re.compile(
    r"^e(?P<epoch>\d+)\.a(?P<attempt>\d+)\.p(?P<part>\d+)\.t(?P<task>\d+)"
    r"\.(?P<uid>[A-Za-z0-9_-]{1,64})\.arrow$"
)
RESULT = "part int, task long, task_attempt int, rows long, bytes long, file string"


def part_name(uid: str, epoch: int, attempt: int, part: int, task: int) -> str:
    return f"e{epoch}.a{attempt}.p{part}.t{task}.{uid}{SUFFIX}"


@dataclass(frozen=True)
class StagedName:
    """A staged file's name, parsed."""

    name: str
    epoch: int
    attempt: int
    part: int
    task: int
    uid: str


def parse_name(name: str) -> StagedName | None:
    m = _NAME.match(name)
    if m is None:
        return None
    return StagedName(
        name,
        int(m.group("epoch")),
        int(m.group("attempt")),
        int(m.group("part")),
        int(m.group("task")),
        m.group("uid"),
    )


def staged_files(folder: Path, uid: str) -> list[StagedName]:
    """The staged files of job uid ``uid`` in ``folder`` (none when it does not exist)."""
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    found = [parse_name(n) for n in names]
    return sorted((s for s in found if s is not None and s.uid == uid), key=lambda s: s.name)


def fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class StageTask:
    """What a staging task needs (pickled into it)."""

    folder: str
    uid: str
    epoch: int
    attempt: int


def stage_partition(t: StageTask, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Runs in a Spark task: the partition's rows into one fsynced Arrow IPC file."""
    import pyarrow as pa
    from pyspark import TaskContext

    ctx = TaskContext.get()
    part = ctx.partitionId() if ctx is not None else 0
    task = ctx.taskAttemptId() if ctx is not None else 0
    number = ctx.attemptNumber() if ctx is not None else 0
    name, rows, size = write_part(t, part, task, batches)
    if task_fault("task_after_prepare", t.epoch, part, number) is not None:
        task_note(f"worker death after staging {name or 'no file'}")
        kill_task_worker()
    yield pa.RecordBatch.from_pylist(
        [
            {
                "part": part,
                "task": task,
                "task_attempt": number,
                "rows": rows,
                "bytes": size,
                "file": name,
            }
        ],
        schema=pa.schema(
            [
                ("part", pa.int32()),
                ("task", pa.int64()),
                ("task_attempt", pa.int32()),
                ("rows", pa.int64()),
                ("bytes", pa.int64()),
                ("file", pa.string()),
            ]
        ),
    )


def write_part(
    t: StageTask, part: int, task: int, batches: Iterator[pa.RecordBatch]
) -> tuple[str, int, int]:
    """Write ``batches`` as the staged file of (part, task): (its name, rows, bytes); ("", 0,
    0) when there are no rows (no file). The file and its folder entry are on disk before the
    function returns, so before the epoch can be decided."""
    import pyarrow as pa

    folder = Path(t.folder)
    name = part_name(t.uid, t.epoch, t.attempt, part, task)
    path = folder / name
    rows = 0
    writer: pa.ipc.RecordBatchFileWriter | None = None
    sink: pa.OSFile | None = None
    try:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            if writer is None:
                folder.mkdir(parents=True, exist_ok=True)
                sink = pa.OSFile(str(path), "wb")
                writer = pa.ipc.new_file(sink, batch.schema)
            writer.write_batch(batch)
            rows += batch.num_rows
    finally:
        if writer is not None:
            writer.close()
        if sink is not None:
            sink.close()
    if writer is None:
        return "", 0, 0
    fsync_path(path)
    fsync_path(folder)
    return name, rows, path.stat().st_size
