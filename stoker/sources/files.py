"""A file source (json lines, csv, parquet, text) as a Spark streaming source.

Bounded: the files present when the job first starts. Unbounded: every file that appears in the
folder, in order of discovery. Writers should move finished files into the folder atomically;
names starting with '.' or '_' are skipped until renamed.

An epoch's files are grouped into ``partitions`` contiguous runs (a file is never split, so
never more partitions than files); by default one per core the job's executors have
(:func:`stoker.sources._control.partitions_for`). A replay may group them differently: the
files, so the rows, are the same, since they are named by the logged range alone.

Backlog: ``reportLatestOffset`` is the end of the file log (every file discovered so far, read
or not; the discovery itself runs in ``latestOffset``, so this costs nothing), and
:func:`~stoker.sources._files_reader.backlog` is the number of files past an epoch's end.

Here: the source's options, their checks and the Spark data source. Beside it: the stream
reader (discovery, offsets, partitions; ``_files_reader.py``), the formats and the simple DDL
(``_files_format.py``), the clean-up of committed files (``_files_clean.py``), and the file
log they share (``_filelog.py``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader
from pyspark.sql.types import StructType

from stoker.durations import parse_duration
from stoker.errors import InvalidInput, InvalidSource
from stoker.procs import this_owner
from stoker.sources._fence import owner_to_json
from stoker.sources._filelog import FileLog
from stoker.sources._files_clean import check_clean
from stoker.sources._files_format import _NESTED, parse_simple_ddl
from stoker.sources._files_reader import _FilesReader
from stoker.sources.base import SourceContext

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

FORMAT = "stoker_files"
FORMATS = ("json", "csv", "parquet", "text")
# Spark's text source: one row per line, in one string column.
TEXT_SCHEMA = "value string"
DEFAULT_MAX_FILE_AGE = 7 * 24 * 3600.0  # Spark's maxFileAge default: a week


class FilesDataSource(DataSource):
    """Spark data source behind :func:`stoker.sources.files`."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        raise InvalidSource("files.schema", "a file source needs an explicit schema")

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return _FilesReader(dict(self.options), schema)


def parse_age(value: str | float | int | None) -> float | None:
    """Seconds from ``3600``, ``"90s"``, ``"12h"``, ``"7d"`` (a positive duration,
    stoker.durations); None (no limit) stays None."""
    if value is None:
        return None
    try:
        return parse_duration(value, "files.max_file_age", positive=True)
    except InvalidInput as e:
        raise InvalidSource(e.field, e.message) from None


@dataclass(frozen=True)
class FilesSource:
    """Files of one format in one folder; bounded = the files there at the job's first start."""

    path: str
    format: str
    # None: only for text (``value string``); every other format needs one.
    schema: StructType | str | None = None
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

    @staticmethod
    def _log_path(sid: str, state_dir: Path) -> Path:
        """Where the source ``sid`` of a job with this state folder logs the files it takes."""
        return state_dir / "sources" / f"{sid}.files.jsonl"

    def state_behind(self, sid: str, state_dir: Path, offset: dict[str, Any]) -> str | None:
        """What this source's log in ``state_dir`` lacks that the checkpoint's newest
        ``offset`` names (the log numbers files; the offset counts them), or None. A log lost
        with the checkpoint kept would number new files below what the checkpoint has read,
        and they would never be read."""
        seq = int(offset.get("seq") or 0)
        if seq <= 0:
            return None
        log = self._log_path(sid, state_dir)
        if not log.exists():
            return f"has read files 0..{seq - 1} of source {sid}, whose log {log} is missing"
        end = FileLog(log).next_seq
        if end < seq:
            return f"has read files 0..{seq - 1} of source {sid}, whose log {log} ends at {end}"
        return None

    def describe(self) -> str:
        kind = "bounded" if self.bounded else "unbounded"
        extra = f", clean_source={self.clean_source!r}" if self.clean_source else ""
        return f"files({self.path!r}, format={self.format!r}, {kind}{extra})"

    def struct(self) -> StructType:
        """The schema as a StructType (a DDL string with nested types needs a live session)."""
        if self.schema is None:
            if self.format != "text":
                raise InvalidSource("files.schema", "a file source needs an explicit schema")
            return self._text_struct(TEXT_SCHEMA)
        if isinstance(self.schema, StructType):
            return self.schema
        simple = parse_simple_ddl(self.schema)
        if simple is not None:
            return simple
        try:
            parsed = StructType.fromDDL(self.schema)
        except Exception as e:  # pyspark raises several types for a bad DDL string
            raise InvalidSource("files.schema", f"cannot parse schema {self.schema!r}: {e}") from e
        if not isinstance(parsed, StructType):
            raise InvalidSource("files.schema", f"{self.schema!r} is not a list of columns")
        return parsed

    def validate(self) -> None:
        if self.format not in FORMATS:
            raise InvalidSource(
                "files.format", f"unknown format {self.format!r}; use one of {', '.join(FORMATS)}"
            )
        if self.schema is None and self.format == "text":
            pass  # Spark's text schema, value string
        elif not isinstance(self.schema, StructType | str) or (
            isinstance(self.schema, str) and not self.schema.strip()
        ):
            raise InvalidSource("files.schema", "give a StructType or a DDL string like 'id long'")
        if isinstance(self.schema, str) and not _NESTED.search(self.schema):
            parse_simple_ddl(self.schema, strict=True)
        if self.format == "text":
            self._check_text_schema()
        folder = Path(self.path)
        if not folder.exists():
            raise InvalidSource("files.path", f"input folder {str(folder)!r} does not exist")
        if not folder.is_dir():
            raise InvalidSource("files.path", f"input path {str(folder)!r} is not a folder")
        if not os.access(folder, os.R_OK | os.X_OK):
            raise InvalidSource("files.path", f"input folder {str(folder)!r} is not readable")
        if self.max_files_per_epoch is not None and self.max_files_per_epoch < 1:
            raise InvalidSource("files.max_files_per_epoch", "must be >= 1")
        if self.partitions is not None and (
            not isinstance(self.partitions, int)
            or isinstance(self.partitions, bool)
            or self.partitions < 1
        ):
            raise InvalidSource(
                "files.partitions",
                f"must be an integer >= 1 (or None: one per core), got {self.partitions!r}",
            )
        parse_age(self.max_file_age)
        self._validate_clean(folder)

    def _check_text_schema(self) -> None:
        """Text, as Spark's text source: one string column (``value`` by default)."""
        from pyspark.sql.types import StringType

        if self.schema is None:
            return
        nested = isinstance(self.schema, str) and _NESTED.search(self.schema)
        struct = None if nested else self.struct()
        if (
            struct is None
            or len(struct.fields) != 1
            or not isinstance(struct.fields[0].dataType, StringType)
        ):
            given = self.schema if struct is None else struct.simpleString()
            raise InvalidSource(
                "files.schema",
                "format 'text' reads each line into one string column (Spark's text source), "
                f"not {given!r}: leave the schema out ({TEXT_SCHEMA!r}) or name one string "
                "column",
            )

    @staticmethod
    def _text_struct(ddl: str) -> StructType:
        parsed = parse_simple_ddl(ddl)
        assert parsed is not None
        return parsed

    def _validate_clean(self, folder: Path) -> None:
        check_clean(self.clean_source, self.archive_dir, folder)

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
            "log_path": str(self._log_path(sid, state_dir).resolve()),
            "checkpoint": str((state_dir / "checkpoint").resolve()),
            "header": "true" if self.header else "false",
            "suffix": self.options.get("suffix", ""),
            "max_file_age_s": "" if age is None else repr(age),
            "compact_every": self.options.get("compact_every", ""),
            "clean_source": self.clean_source or "",
            "archive_dir": str(Path(self.archive_dir).resolve()) if self.archive_dir else "",
            "partitions": "" if self.partitions is None else str(self.partitions),
            # A date or time written without a zone is local to the session's zone, as in
            # Spark's own file sources; the reader runs where the session's conf is not.
            "time_zone": _session_zone(spark, self.struct()),
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


def _session_zone(spark: SparkSession, schema: StructType) -> str:
    """The session's time zone (``spark.sql.session.timeZone``), refused when the schema has
    a ``timestamp`` column and the reader could not apply the zone to it."""
    from pyspark.sql.types import TimestampType

    from stoker.sources._files_time import zone

    name = str(spark.conf.get("spark.sql.session.timeZone") or "UTC")
    instants = any(isinstance(f.dataType, TimestampType) for f in schema.fields)
    if instants and zone(name) is None:
        raise InvalidSource(
            "files.schema",
            f"spark.sql.session.timeZone {name!r} is not a zone the file source can read "
            "times in: use a region (e.g. 'Europe/Paris'), 'UTC' or an offset like '+02:00'",
        )
    return name
