"""A file source (json lines, csv, parquet) as a Spark streaming source.

Bounded: the files present when the job first starts. Unbounded: every file that appears in the
folder, in order of discovery. Writers should move finished files into the folder atomically;
names starting with '.' or '_' are skipped until renamed.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxFiles
from pyspark.sql.types import StructType

from stoker.errors import SourceError
from stoker.sources._filelog import FileLog, list_folder
from stoker.sources.base import FINISHED, SID

if TYPE_CHECKING:
    from collections.abc import Iterator

    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

FORMAT = "stoker_files"
FORMATS = ("json", "csv", "parquet")


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
        self.log = FileLog(Path(options["log_path"]))

    def _offset(self, seq: int) -> dict[str, Any]:
        finished = self.bounded and self.log.sealed and seq >= len(self.log.entries)
        return {SID: self.sid, "seq": seq, FINISHED: finished}

    def initialOffset(self) -> dict[str, Any]:
        if self.bounded and not self.log.sealed:
            # The snapshot: what is in the folder at the job's first start, and nothing later.
            self.log.append(list_folder(self.folder, self.suffix), seal=True)
        return {SID: self.sid, "seq": 0, FINISHED: False}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxFiles(self.max_files) if self.max_files else ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        if not self.bounded:
            self.log.append(list_folder(self.folder, self.suffix))
        seq = int(start["seq"])
        end = len(self.log.entries)
        if isinstance(limit, ReadMaxFiles):
            end = min(end, seq + limit.max_files)
        return self._offset(max(seq, end))

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        a, b = int(start["seq"]), int(end["seq"])
        if b > len(self.log.entries):
            # Offsets come from this log; a shorter log means it was removed or damaged.
            raise RuntimeError(
                f"file log {self.log.path} has {len(self.log.entries)} entries, epoch needs {b}"
            )
        return [_Files([e.path]) for e in self.log.entries[a:b]]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _Files)
        schema = StructType.fromJson(__import__("json").loads(self.schema_json))
        for path in partition.paths:
            yield from read_file(path, self.fmt, schema, header=self.header)


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

    def describe(self) -> str:
        kind = "bounded" if self.bounded else "unbounded"
        return f"files({self.path!r}, format={self.format!r}, {kind})"

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

    def open(self, spark: SparkSession, sid: str, state_dir: Path) -> DataFrame:
        opts = {
            "sid": sid,
            "path": str(Path(self.path).resolve()),
            "format": self.format,
            "bounded": "true" if self.bounded else "false",
            "log_path": str((state_dir / "sources" / f"{sid}.files.jsonl").resolve()),
            "header": "true" if self.header else "false",
            "suffix": self.options.get("suffix", ""),
        }
        if self.max_files_per_epoch:
            opts["max_files_per_epoch"] = str(self.max_files_per_epoch)
        return spark.readStream.format(FORMAT).schema(self.struct()).options(**opts).load()
