"""A file source (json lines, csv, parquet) as a Spark streaming source.

Bounded: the files present when the job first starts. Unbounded: every file that appears in the
folder, in order of discovery. Writers should move finished files into the folder atomically;
names starting with '.' or '_' are skipped until renamed.

An epoch's files are grouped into ``partitions`` contiguous runs (a file is never split, so
never more partitions than files); by default one per core the job's executors have
(:func:`stoker.sources._control.partitions_for`). A replay may group them differently: the
files, so the rows, are the same, since they are named by the logged range alone.

Backlog: ``reportLatestOffset`` is the end of the file log (every file discovered so far, read
or not; the discovery itself runs in ``latestOffset``, so this costs nothing), and
:func:`backlog` is the number of files past an epoch's end.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxFiles
from pyspark.sql.types import StructType

from stoker import checkpoint_layout
from stoker.errors import SourceError
from stoker.procs import this_owner
from stoker.sources._control import (
    CV,
    ReaderControl,
    hush_if_spark_hung_up,
    limit_of,
    partitions_for,
)
from stoker.sources._fence import AttemptFence, owner_from_json, owner_to_json
from stoker.sources._filelog import Entry, FileLog, FolderScan, list_folder
from stoker.sources.base import FINISHED, SID, SourceContext, parse_offset_line

if TYPE_CHECKING:
    from collections.abc import Iterator

    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

FORMAT = "stoker_files"
FORMATS = ("json", "csv", "parquet")
CLEAN_SOURCE = ("archive", "delete")
DEFAULT_MAX_FILE_AGE = 7 * 24 * 3600.0  # Spark's maxFileAge default: a week

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
        path = Path(e.path)
        try:
            st = path.stat()
        except FileNotFoundError:
            return  # cleaned before a crash, or removed by someone else
        if e.mtime is not None and st.st_mtime_ns != e.mtime:
            return  # another file under the same name now: not the one that was read
        if self.clean_source == "delete":
            path.unlink(missing_ok=True)
            return
        assert self.archive_dir is not None
        self.archive_dir.mkdir(parents=True, exist_ok=True)
        target = self.archive_dir / path.name
        if target.exists():
            target = self.archive_dir / f"{path.name}.{e.seq}"
        try:
            os.rename(path, target)
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
            shutil.move(str(path), str(target))  # another file system: copy, then remove

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """The end of the file log: every file discovered so far (read or not)."""
        if not self._planned:
            return None
        return {SID: self.sid, "seq": self.log.next_seq, FINISHED: False}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        a, b = int(start["seq"]), int(end["seq"])
        paths = [e.path for e in self.log.files(a, b)]
        parts = partitions_for(self.parts, None if self.parts else self.control.cores())
        return [_Files(group) for group in group_files(paths, parts)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _Files)
        schema = StructType.fromJson(__import__("json").loads(self.schema_json))
        for path in partition.paths:
            yield from read_file(path, self.fmt, schema, header=self.header)

    def stop(self) -> None:
        hush_if_spark_hung_up()
        if self.fence is not None:
            self.fence.close()


def group_files(paths: list[str], parts: int) -> list[list[str]]:
    """``paths`` in order, cut into at most ``parts`` contiguous groups whose sizes differ by
    one at most (no empty group)."""
    n = min(len(paths), max(1, parts))
    if n == 0:
        return []
    size, extra = divmod(len(paths), n)
    out, i = [], 0
    for k in range(n):
        j = i + size + (1 if k < extra else 0)
        out.append(paths[i:j])
        i = j
    return out


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


def read_file(
    path: str, fmt: str, schema: StructType, header: bool = True
) -> Iterator[pa.RecordBatch]:
    """Read one file into record batches of exactly ``schema`` (missing columns are null)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    target = to_arrow_schema(schema)
    if fmt == "json":
        import pyarrow.json as pj

        table = pj.read_json(
            path,
            parse_options=pj.ParseOptions(
                explicit_schema=target, unexpected_field_behavior="ignore"
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
                column_types={f.name: f.type for f in target},
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
        if f.name in table.column_names:
            columns.append(table.column(f.name).cast(f.type))
        else:
            columns.append(pa.nulls(table.num_rows, f.type))
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
    ``strict``, a column that is not ``name type`` raises :class:`SourceError`.
    """
    from pyspark.sql import types as T

    known = _simple_types()
    fields = []
    for part in re.split(r",(?![^(]*\))", ddl):
        m = _COLUMN.match(part)
        if m is None:
            if strict:
                raise SourceError(
                    "files.schema", f"cannot parse column {part.strip()!r} of {ddl!r}"
                )
            return None
        name, tname = m.group(1), m.group(2).lower()
        if tname == "decimal" and m.group(3):
            dt: T.DataType = T.DecimalType(int(m.group(3)), int(m.group(4)))
        elif tname in known and not m.group(3):
            dt = known[tname]()
        elif strict:
            raise SourceError("files.schema", f"unknown type {m.group(2)!r} of column {name!r}")
        else:
            return None
        fields.append(T.StructField(name, dt, True))
    return T.StructType(fields)


class FilesDataSource(DataSource):
    """Spark data source behind :func:`stoker.sources.files`."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        raise SourceError("files.schema", "a file source needs an explicit schema")

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return _FilesReader(dict(self.options), schema)


_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?\s*$")
_AGE_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def parse_age(value: str | float | int | None) -> float | None:
    """Seconds from ``3600``, ``"90s"``, ``"12h"``, ``"7d"``; None (no limit) stays None."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise SourceError("files.max_file_age", f"{value!r} is not a duration like '7d' or '12h'")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        m = _AGE.match(value)
        if m is None:
            raise SourceError(
                "files.max_file_age",
                f"{value!r} is not a duration like '7d', '12h', '30m' or a number of seconds",
            )
        seconds = float(m.group(1)) * _AGE_UNITS[m.group(2) or "s"]
    if seconds <= 0:
        raise SourceError("files.max_file_age", f"must be more than 0, got {value!r}")
    return seconds


@dataclass(frozen=True)
class FilesSource:
    """Files of one format in one folder; bounded = the files there at the job's first start."""

    path: str
    format: str
    schema: StructType | str
    bounded: bool = False
    max_files_per_epoch: int | None = None
    header: bool = True
    options: dict[str, str] = field(default_factory=dict)
    # Unbounded: a new file older than the newest file taken minus this is ignored (Spark's
    # maxFileAge). Seconds or "7d"/"12h"/...; None: no limit (remembers every path).
    max_file_age: str | float | None = DEFAULT_MAX_FILE_AGE
    # "archive" (into archive_dir) or "delete" a file once the epoch that read it committed.
    clean_source: str | None = None
    archive_dir: str | None = None
    # Partitions an epoch's files are grouped into; None: one per core the job's executors
    # have (never more than the epoch's files).
    partitions: int | None = None

    def describe(self) -> str:
        kind = "bounded" if self.bounded else "unbounded"
        extra = f", clean_source={self.clean_source!r}" if self.clean_source else ""
        return f"files({self.path!r}, format={self.format!r}, {kind}{extra})"

    def struct(self) -> StructType:
        """The schema as a StructType (a DDL string with nested types needs a live session)."""
        if isinstance(self.schema, StructType):
            return self.schema
        simple = parse_simple_ddl(self.schema)
        if simple is not None:
            return simple
        try:
            parsed = StructType.fromDDL(self.schema)
        except Exception as e:  # pyspark raises several types for a bad DDL string
            raise SourceError("files.schema", f"cannot parse schema {self.schema!r}: {e}") from e
        if not isinstance(parsed, StructType):
            raise SourceError("files.schema", f"{self.schema!r} is not a list of columns")
        return parsed

    def validate(self) -> None:
        if self.format not in FORMATS:
            raise SourceError(
                "files.format", f"unknown format {self.format!r}; use one of {', '.join(FORMATS)}"
            )
        if not isinstance(self.schema, StructType | str) or (
            isinstance(self.schema, str) and not self.schema.strip()
        ):
            raise SourceError("files.schema", "give a StructType or a DDL string like 'id long'")
        if isinstance(self.schema, str) and not _NESTED.search(self.schema):
            parse_simple_ddl(self.schema, strict=True)
        folder = Path(self.path)
        if not folder.exists():
            raise SourceError("files.path", f"input folder {str(folder)!r} does not exist")
        if not folder.is_dir():
            raise SourceError("files.path", f"input path {str(folder)!r} is not a folder")
        if not os.access(folder, os.R_OK | os.X_OK):
            raise SourceError("files.path", f"input folder {str(folder)!r} is not readable")
        if self.max_files_per_epoch is not None and self.max_files_per_epoch < 1:
            raise SourceError("files.max_files_per_epoch", "must be >= 1")
        if self.partitions is not None and (
            not isinstance(self.partitions, int)
            or isinstance(self.partitions, bool)
            or self.partitions < 1
        ):
            raise SourceError(
                "files.partitions",
                f"must be an integer >= 1 (or None: one per core), got {self.partitions!r}",
            )
        parse_age(self.max_file_age)
        self._validate_clean(folder)

    def _validate_clean(self, folder: Path) -> None:
        if self.clean_source is None:
            if self.archive_dir is not None:
                raise SourceError("files.archive_dir", "only used with clean_source='archive'")
            return
        if self.clean_source not in CLEAN_SOURCE:
            raise SourceError(
                "files.clean_source",
                f"unknown value {self.clean_source!r}; use one of {', '.join(CLEAN_SOURCE)} "
                "(or leave it out to keep the files)",
            )
        if not os.access(folder, os.W_OK):
            raise SourceError("files.clean_source", f"input folder {str(folder)!r} is not writable")
        if self.clean_source == "delete":
            if self.archive_dir is not None:
                raise SourceError("files.archive_dir", "only used with clean_source='archive'")
            return
        if not self.archive_dir:
            raise SourceError("files.archive_dir", "clean_source='archive' needs an archive_dir")
        archive = Path(self.archive_dir).resolve()
        if archive == folder.resolve():
            raise SourceError("files.archive_dir", "must not be the input folder itself")
        if archive.exists() and not archive.is_dir():
            raise SourceError("files.archive_dir", f"{str(archive)!r} is not a folder")
        probe = archive
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        if not os.access(probe, os.W_OK | os.X_OK):
            raise SourceError("files.archive_dir", f"{str(archive)!r} is not writable")

    def open(
        self,
        spark: SparkSession,
        sid: str,
        state_dir: Path,
        context: SourceContext | None = None,
    ) -> DataFrame:
        age = parse_age(self.max_file_age)
        opts = {
            "sid": sid,
            "path": str(Path(self.path).resolve()),
            "format": self.format,
            "bounded": "true" if self.bounded else "false",
            "log_path": str((state_dir / "sources" / f"{sid}.files.jsonl").resolve()),
            "checkpoint": str((state_dir / "checkpoint").resolve()),
            "header": "true" if self.header else "false",
            "suffix": self.options.get("suffix", ""),
            "max_file_age_s": "" if age is None else repr(age),
            "compact_every": self.options.get("compact_every", ""),
            "clean_source": self.clean_source or "",
            "archive_dir": str(Path(self.archive_dir).resolve()) if self.archive_dir else "",
            "partitions": "" if self.partitions is None else str(self.partitions),
        }
        if context is not None:
            # The reader checks at each append that this driver still owns the job. Spark
            # redacts option values whose key matches "url" in plans and the UI.
            opts["job_id"] = context.job_id
            opts["store_url"] = context.store_url
            if context.pace_s is not None:
                opts["pace_s"] = repr(float(context.pace_s))
            opts["driver"] = owner_to_json(this_owner())
        if self.max_files_per_epoch:
            opts["max_files_per_epoch"] = str(self.max_files_per_epoch)
        return spark.readStream.format(FORMAT).schema(self.struct()).options(**opts).load()
