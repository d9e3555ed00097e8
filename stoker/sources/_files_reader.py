"""A file source's Spark stream reader: the folder discovered into the file log, offsets as
positions in that log, an epoch's files grouped into partitions and read, and the log cleaned
and compacted as Spark's commit log moves on (one ``stat`` per trigger). ``backlog`` and
``committed_seq`` read the offsets back."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxFiles
from pyspark.sql.types import StructType

from stoker import checkpoint_layout
from stoker.sources._control import (
    CV,
    ReaderControl,
    contiguous_groups,
    hush_if_spark_hung_up,
    limit_of,
    partitions_for,
)
from stoker.sources._fence import AttemptFence, owner_from_json
from stoker.sources._filelog import Entry, FileLog, FolderScan, list_folder
from stoker.sources._files_clean import clean_file
from stoker.sources._files_format import read_file
from stoker.sources.base import FINISHED, SID, parse_offset_line

if TYPE_CHECKING:
    from collections.abc import Iterator

    import pyarrow as pa

# The logger of the file source (the reader is where it speaks).
_log = logging.getLogger("stoker.sources.files")


class _Files(InputPartition):
    def __init__(self, paths: list[str]) -> None:
        self.paths = paths


class _FilesReader(DataSourceStreamReader):
    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.sid = options["sid"]
        self.folder = Path(options["path"])
        self.fmt = options["format"]
        self.bounded = options["bounded"] == "true"
        self.max_files = int(options.get("max_files_per_epoch") or 0)
        self.suffix = options.get("suffix") or None
        self.header = options.get("header", "true") == "true"
        self.schema_json = schema.json()
        self.time_zone = options.get("time_zone") or "UTC"
        age = options.get("max_file_age_s") or ""
        self.log = FileLog(
            Path(options["log_path"]),
            lookback_ns=None if self.bounded or not age else int(float(age) * 1e9),
            compact_every=int(options.get("compact_every") or 10_000),
        )
        self.scan = FolderScan(self.folder, self.suffix)
        self.clean_source = options.get("clean_source") or None
        self.archive_dir = Path(options["archive_dir"]) if options.get("archive_dir") else None
        self.checkpoint = Path(options["checkpoint"]) if options.get("checkpoint") else None
        self.fence: AttemptFence | None = None
        if options.get("job_id") and options.get("store_url") and options.get("driver"):
            self.fence = AttemptFence(
                options["store_url"], options["job_id"], owner_from_json(options["driver"])
            )
        self.control = ReaderControl(
            options.get("store_url"), options.get("job_id"), options.get("pace_s")
        )
        self._commits = -2  # newest batch seen in Spark's commit log; -2: not looked yet
        self._late_checked = False  # bounded: files added after the snapshot were named once
        # None: one partition per core present (see partitions_for).
        self.parts = max(1, int(options["partitions"])) if options.get("partitions") else None
        self._planned = False  # latestOffset ran: the log's end is what discovery found

    def _guard(self) -> None:
        if self.fence is not None:
            self.fence.check()

    def _offset(self, seq: int) -> dict[str, Any]:
        finished = self.bounded and self.log.sealed and seq >= self.log.next_seq
        return {SID: self.sid, "seq": seq, FINISHED: finished}

    def initialOffset(self) -> dict[str, Any]:
        if self.bounded and not self.log.sealed:
            # The snapshot: what is in the folder at the job's first start, and nothing later.
            self.log.append(list_folder(self.folder, self.suffix), seal=True, guard=self._guard)
        return {SID: self.sid, "seq": 0, FINISHED: False}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxFiles(self.max_files) if self.max_files else ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        self._planned = True
        self._follow_commits()  # one stat: also while paused or between paced slots
        if start.get(FINISHED):
            plan = None
        else:
            plan = self.control.plan(start)
            if plan.hold:
                return start  # paused, or paced: no folder scan until the next slot
        if not self.bounded:
            self._discover()
        elif not self._late_checked and self.log.sealed:
            self._warn_late_files()
        if plan is None:
            return start  # a finished source never reads again, whatever control says
        seq = int(start["seq"])
        if plan.empty:
            return {**start, CV: plan.version}
        end = self.log.next_seq
        max_files = limit_of(plan, "max_files_per_epoch", self.max_files or None)
        if max_files:
            end = min(end, seq + int(max_files))
        offset = self._offset(max(seq, end))
        if plan.version is not None:
            offset[CV] = plan.version
        return offset

    def _discover(self) -> None:
        found = self.scan.scan()
        _added, old = self.log.append(found, guard=self._guard)
        if old and self.scan.scans > 0:
            for _mtime, path, _size in old:
                _log.warning(
                    "source %s: %s is older than the newest file taken minus max_file_age "
                    "(%.0f s): ignored",
                    self.sid,
                    path,
                    (self.log.lookback_ns or 0) / 1e9,
                )
        elif old:
            # The first scan after a start cannot tell a file taken long ago (and compacted out
            # of the log) from one that arrived late: no warning per file.
            _log.info("source %s: %d files older than max_file_age left alone", self.sid, len(old))
        self.scan.accept()

    def _warn_late_files(self) -> None:
        """A bounded source reads the files of its first start only: name, once per run, each
        file that arrived in the folder since, so that it is not ignored without a word."""
        self._late_checked = True
        try:
            found = list_folder(self.folder, self.suffix)
        except OSError:
            return
        late = [path for _mtime, path, _size in found if not self.log.known(path)]
        for path in late[:20]:
            _log.warning(
                "source %s: %s arrived after the bounded source's snapshot (its first start) "
                "and is not read; use an unbounded source to read new files",
                self.sid,
                path,
            )
        if len(late) > 20:
            _log.warning("source %s: %d more such files not read", self.sid, len(late) - 20)

    def _follow_commits(self) -> None:
        """Clean and compact up to the newest epoch in Spark's commit log.

        Spark calls :meth:`commit` only when it plans the next epoch, so the files of the last
        epoch before an idle spell (or a stop) would wait; one ``stat`` per trigger finds a new
        commit at once, and a listing at the reader's start finds the newest after a restart.
        """
        if self.checkpoint is None:
            return
        newest = self._commits
        if newest == -2:
            newest = max(checkpoint_layout.commit_ids(self.checkpoint), default=-1)
        while checkpoint_layout.is_committed(self.checkpoint, newest + 1):
            newest += 1
        if newest == self._commits:
            return
        self._commits = newest
        seq = committed_seq(self.checkpoint, self.sid, newest)
        if seq is not None:
            self.commit({SID: self.sid, "seq": seq, FINISHED: False})

    def commit(self, end: dict[str, Any]) -> None:
        # Spark calls this once the epochs up to ``end`` are in its commit log: stoker's
        # foreachBatch returned, so the store has every one of them COMMITTED.
        self.log.committed(int(end["seq"]), clean=self._clean if self.clean_source else None)

    def _clean(self, e: Entry) -> None:
        clean_file(e, self.clean_source, self.archive_dir)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """The end of the file log: every file discovered so far (read or not)."""
        if not self._planned:
            return None
        return {SID: self.sid, "seq": self.log.next_seq, FINISHED: False}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        a, b = int(start["seq"]), int(end["seq"])
        paths = [e.path for e in self.log.files(a, b)]
        parts = partitions_for(self.parts, None if self.parts else self.control.cores())
        return [_Files(group) for group in contiguous_groups(paths, parts)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _Files)
        schema = StructType.fromJson(__import__("json").loads(self.schema_json))
        for path in partition.paths:
            yield from read_file(
                path, self.fmt, schema, header=self.header, time_zone=self.time_zone
            )

    def stop(self) -> None:
        hush_if_spark_hung_up()
        if self.fence is not None:
            self.fence.close()


def backlog(end: dict[str, Any], latest: dict[str, Any]) -> int:
    """Files discovered beyond an epoch's end: ``latest`` (what ``reportLatestOffset`` said)
    minus ``end`` (the epoch's end offset), never negative."""
    return max(0, int(latest["seq"]) - int(end["seq"]))


def committed_seq(checkpoint: Path, sid: str, batch: int) -> int | None:
    """The end offset (seq) of source ``sid`` in epoch ``batch`` of Spark's offset log."""
    lines = checkpoint_layout.offset_lines(checkpoint, batch)
    if lines is None:
        return None  # purged by Spark's retention, or not written: nothing to learn
    for line in lines:
        off = parse_offset_line(line)
        if off is not None and off.get(SID) == sid and "seq" in off:
            return int(off["seq"])
    return None
