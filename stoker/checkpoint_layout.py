"""Spark's streaming checkpoint folder: every fact stoker relies on about its layout, in one
place. Files only: no Spark (the runtime, the job manager and the sources read it alike).

What a query's checkpoint holds (Spark 4.x, as stoker's drivers write it)::

    metadata            {"id": "<query id>"}: the query's id (one line of JSON)
    offsets/<batch>     the offset log: one file per batch planned, named by its batch id
    commits/<batch>     the commit log: one file per batch Spark committed
    state/<op>/<part>/  each stateful operator's state store files, per partition
    state/<op>/_metadata/metadata, .../v2/<n>   the operator's metadata (its name)

A log file (offsets, commits) is a version line (``v1``) and then JSON lines. An offset log
entry's second line is the batch's metadata, with the SQL settings Spark pinned for the query
(``conf``: the state store provider, the shuffle partitions); each line after it is one
source's offset, in the order of the query's sources. Spark writes each entry to a hidden
temporary file and renames it into place; Hadoop's local file system keeps a checksum beside
each file (``.<name>.crc``), which it checks when present.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("stoker.checkpoint")

OFFSETS = "offsets"
COMMITS = "commits"
STATE = "state"
METADATA = "metadata"
# Spark's logs in a checkpoint that it requires empty when the query has planned no batch.
QUERY_LOGS = (OFFSETS, COMMITS)
LOG_VERSION = "v1"

# SQL settings the offset log pins for the query's life.
PROVIDER_KEY = "spark.sql.streaming.stateStore.providerClass"
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
HDFS_PROVIDER = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
CHECKPOINT_FORMAT_KEY = "spark.sql.streaming.stateStore.checkpointFormatVersion"

# The files a state store partition writes per version: <version>.<one of these>.
STATE_FILE_KINDS = ("zip", "changelog", "delta", "snapshot")


# the logs ------------------------------------------------------------------------------------
def batch_ids(folder: Path) -> list[int]:
    """The batch ids of a log folder (or the numbered folders under ``state/``), in order; []
    when the folder does not exist."""
    try:
        return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit())
    except FileNotFoundError:
        return []


def batch_files(folder: Path) -> list[Path]:
    """The entries of a log folder (hidden temporary and checksum files left out), in order."""
    return [folder / str(b) for b in batch_ids(folder)]


def offset_ids(checkpoint: Path) -> list[int]:
    """The batches of the offset log (planned), in order."""
    return batch_ids(checkpoint / OFFSETS)


def commit_ids(checkpoint: Path) -> list[int]:
    """The batches of the commit log (committed by Spark), in order."""
    return batch_ids(checkpoint / COMMITS)


def has_offset_log(checkpoint: Path) -> bool:
    """Whether the query has started on this checkpoint once (its offset log exists)."""
    return (checkpoint / OFFSETS).is_dir()


def is_committed(checkpoint: Path, batch: int) -> bool:
    """Whether Spark's commit log holds ``batch``."""
    return (checkpoint / COMMITS / str(batch)).exists()


def last_committed(checkpoint: Path) -> int | None:
    """The newest batch of the commit log; None when there is none or it cannot be read."""
    try:
        return max(int(p.name) for p in (checkpoint / COMMITS).iterdir() if p.name.isdigit())
    except (OSError, ValueError):
        return None


def uncommitted(checkpoint: Path) -> list[int]:
    """The batches planned in the offset log after the newest one committed."""
    offsets, commits = offset_ids(checkpoint), commit_ids(checkpoint)
    if not offsets:
        return []
    first = commits[-1] + 1 if commits else 0
    return list(range(first, offsets[-1] + 1))


def offset_lines(checkpoint: Path, batch: int) -> list[str] | None:
    """The source offset lines of ``batch``'s offset log entry (after its version and metadata
    lines), one per source in the query's order; None when there is no such entry (not
    written, or purged by Spark's retention). Other read errors are raised."""
    try:
        lines = (checkpoint / OFFSETS / str(batch)).read_text().splitlines()
    except FileNotFoundError:
        return None
    return lines[2:]


def read_offset_conf(checkpoint: Path, batch: int | None = None) -> dict[str, str] | None:
    """The SQL settings Spark recorded with ``batch`` (default: the newest) in the checkpoint's
    offset log; None when there is no such entry."""
    if batch is None:
        ids = offset_ids(checkpoint)
        if not ids:
            return None
        batch = ids[-1]
    try:
        lines = (checkpoint / OFFSETS / str(batch)).read_text().splitlines()
    except FileNotFoundError:
        return None
    if len(lines) < 2:
        return None
    try:
        meta = json.loads(lines[1])
    except ValueError:
        return None
    if isinstance(meta, dict) and "conf" not in meta and isinstance(meta.get("metadata"), dict):
        meta = meta["metadata"]  # another layout of the entry: the settings sit one level down
    conf = meta.get("conf") if isinstance(meta, dict) else None
    return {str(k): str(v) for k, v in conf.items()} if isinstance(conf, dict) else {}


def checkpoint_partitions(checkpoint: Path) -> int | None:
    """``spark.sql.shuffle.partitions`` as the newest entry of the offset log records it; None
    when there is no entry (the query has not planned an epoch) or it says nothing."""
    conf = read_offset_conf(checkpoint)
    value = None if conf is None else conf.get(SHUFFLE_PARTITIONS)
    try:
        return None if value is None else max(1, int(value))
    except (TypeError, ValueError):
        return None


# agreement with the store -------------------------------------------------------------------
def behind_store(last_batch: int | None, decided: int | None) -> bool:
    """Whether a checkpoint whose offset log ends at ``last_batch`` (None: no entry) has lost
    epochs the store decided (``decided``: the newest DECIDED or COMMITTED epoch, None: none).

    Spark resumes from its checkpoint alone: a checkpoint without the store's decided epochs
    numbers its batches from its own end again, and the epoch pin takes every batch the store
    decided as a replay and skips it, with whatever input Spark gave it now: lost, silently.

    Not behind, and normal: a checkpoint ahead of the store by the epoch in flight (offsets
    written for batch N, the store has nothing, or a PINNED record, for N); an epoch the store
    decided whose commit log entry Spark has not written (a crash between the decide and
    Spark's commit: the offsets for it are there, the replay skips it); a checkpoint ahead by
    many batches (a restore installs one cut at the savepoint's epoch for a job whose store
    has none of them); no checkpoint and nothing decided (a fresh job). The commit log is
    not compared: Spark writes offsets N only after commits N-1, so the offset log's end
    says it all.
    """
    return decided is not None and (last_batch is None or last_batch < decided)


def describe_end(checkpoint: Path) -> str:
    """Where the checkpoint's logs end, for a message: "does not exist", "has no offsets",
    "ends at batch 3 (committed up to 2)"."""
    if not checkpoint.exists():
        return "does not exist"
    offsets, commits = offset_ids(checkpoint), commit_ids(checkpoint)
    if not offsets:
        return "has no offsets"
    committed = f"committed up to {commits[-1]}" if commits else "none committed"
    return f"ends at batch {offsets[-1]} ({committed})"


# changing the logs ---------------------------------------------------------------------------
def drop_log_file(path: Path) -> None:
    """A Spark log file and its Hadoop checksum file (a missing .crc is not checked)."""
    path.unlink(missing_ok=True)
    (path.parent / f".{path.name}.crc").unlink(missing_ok=True)


def trim_logs(checkpoint: Path, batch: int | None) -> None:
    """Drop the offset and commit log entries of the batches after ``batch`` (None: all)."""
    for sub in QUERY_LOGS:
        for f in batch_files(checkpoint / sub):
            if batch is None or int(f.name) > batch:
                drop_log_file(f)


def clear_half_written_logs(checkpoint: Path) -> list[Path]:
    """Remove what a killed driver left half written in a checkpoint whose query never planned
    a batch: Spark writes each log entry to a hidden temporary file and renames it, so a
    SIGKILL during the write of the first entry leaves only that temporary file; Spark then
    finds the log folder not empty on batch 0 and refuses to start the query, for good
    (STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY). With no batch in the offset log there is
    nothing to lose: the query starts from the beginning anyway. Returns what was removed."""
    offsets = checkpoint / OFFSETS
    if not offsets.is_dir() or any(p.name.isdigit() for p in offsets.iterdir()):
        return []
    removed: list[Path] = []
    for name in QUERY_LOGS:
        folder = checkpoint / name
        if not folder.is_dir():
            continue
        for p in folder.iterdir():
            if p.name.startswith(".") and p.is_file():
                p.unlink(missing_ok=True)
                removed.append(p)
    if removed:
        log.warning(
            "checkpoint %s: removed %d half-written log file(s) of a driver killed before its "
            "first epoch was planned: %s",
            checkpoint,
            len(removed),
            ", ".join(p.name for p in removed),
        )
    return removed


def set_query_id(checkpoint: Path, query_id: str) -> None:
    """Give the checkpoint's query another id (nothing when there is no metadata yet, or it is
    not what this Spark writes)."""
    meta = checkpoint / METADATA
    if not meta.exists():
        return
    try:
        data = json.loads(meta.read_text())
    except ValueError:
        return  # not what this Spark writes: leave it to Spark
    data["id"] = query_id
    drop_log_file(meta)
    meta.write_text(json.dumps(data, separators=(",", ":")))


# the state -----------------------------------------------------------------------------------
def has_state(checkpoint: Path) -> bool:
    """Whether the query keeps state (a stateful operator wrote its folder)."""
    return (checkpoint / STATE).is_dir()


def operators(checkpoint: Path) -> dict[int, str]:
    """Stateful operator id -> name, from each operator's metadata under ``state/<id>``."""
    found: dict[int, str] = {}
    state = checkpoint / STATE
    for op in batch_ids(state):
        meta = state / str(op) / "_metadata"
        files = [meta / "metadata"]
        v2 = batch_ids(meta / "v2")
        if v2:
            files.insert(0, meta / "v2" / str(v2[-1]))
        for f in files:
            name = _operator_name(f)
            if name is not None:
                found[op] = name
                break
        else:
            found[op] = "unknown"
    return found


@dataclass(frozen=True)
class StateSchema:
    """The schema Spark recorded for one stateful operator's state: its key's and its
    value's columns (each a Spark type as JSON: a name, or an object for a nested type)."""

    key: list[Any]
    value: list[Any]


def state_schemas(checkpoint: Path) -> dict[int, StateSchema | None]:
    """Stateful operator id -> the state schema Spark wrote for it, read from the schema file
    it keeps beside the operator's first partition (``state/<op>/0/_metadata/schema``: a
    version line, then the key's and the value's struct as JSON), or from the newest file of
    ``state/<op>/_stateSchema/default/``; None for an operator whose schema cannot be read."""
    found: dict[int, StateSchema | None] = {}
    state = checkpoint / STATE
    for op in batch_ids(state):
        files = [state / str(op) / "0" / "_metadata" / "schema"]
        v3 = state / str(op) / "_stateSchema" / "default"
        if v3.is_dir():
            files = sorted((f for f in v3.iterdir() if not f.name.startswith(".")), reverse=True)
            files.append(state / str(op) / "0" / "_metadata" / "schema")
        found[op] = None
        for f in files:
            schema = _read_schema(f)
            if schema is not None:
                found[op] = schema
                break
    return found


def _read_schema(path: Path) -> StateSchema | None:
    try:
        raw = path.read_bytes()[:1_000_000].decode("utf-8", errors="replace")
    except OSError:
        return None
    structs: list[list[Any]] = []
    decoder = json.JSONDecoder()
    at = raw.find('{"type":"struct"')
    while at >= 0 and len(structs) < 2:
        try:
            obj, end = decoder.raw_decode(raw, at)
        except ValueError:
            at = raw.find('{"type":"struct"', at + 1)
            continue
        structs.append([f.get("type") for f in obj.get("fields") or []])
        at = raw.find('{"type":"struct"', end)
    if len(structs) < 2:
        return None
    return StateSchema(structs[0], structs[1])


def _operator_name(path: Path) -> str | None:
    try:
        lines = path.read_text().splitlines()
    except (FileNotFoundError, IsADirectoryError):
        return None
    for line in lines[1:]:
        try:
            info = json.loads(line).get("operatorInfo") or {}
        except (ValueError, AttributeError):
            continue
        if info.get("operatorName"):
            return str(info["operatorName"])
    return None


def state_partitions(checkpoint: Path) -> dict[int, int]:
    """Operator id -> how many state partitions hold its newest state version.

    Read from the files: each partition's folder ``state/<op>/<partition>`` holds a file per
    version it wrote (``<v>.zip``, ``<v>.changelog``, ``<v>.delta``, ``<v>.snapshot``);
    folders a repartition to fewer partitions left behind hold only older versions.
    (Spark's ``state-metadata`` reader is no help here: it shows the number an operator's
    first metadata file recorded, which a repartition does not rewrite.)
    """
    out: dict[int, int] = {}
    state = checkpoint / STATE
    for op in batch_ids(state):
        versions: dict[int, set[int]] = {}
        for part in batch_ids(state / str(op)):
            for f in (state / str(op) / str(part)).iterdir():
                stem, dot, ext = f.name.partition(".")
                if dot and stem.isdigit() and ext in STATE_FILE_KINDS:
                    versions.setdefault(int(stem), set()).add(part)
        out[op] = len(versions[max(versions)]) if versions else 0
    return out


# all of it -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class CheckpointState:
    """What a query's checkpoint says about its epochs and its state (files only)."""

    path: Path
    last_batch: int | None  # newest entry of the offset log
    last_committed: int | None  # newest entry of the commit log
    conf: dict[str, str] = field(default_factory=dict)  # as the newest committed batch records
    operators: dict[int, str] = field(default_factory=dict)  # stateful operator id -> name

    @property
    def partitions(self) -> int | None:
        value = self.conf.get(SHUFFLE_PARTITIONS)
        return int(value) if value is not None and value.isdigit() else None

    @property
    def provider(self) -> str:
        # A checkpoint written without the setting was written with Spark's default.
        return self.conf.get(PROVIDER_KEY) or HDFS_PROVIDER

    @property
    def uncommitted(self) -> list[int]:
        """Batches planned in the offset log and not in the commit log."""
        if self.last_batch is None:
            return []
        first = 0 if self.last_committed is None else self.last_committed + 1
        return list(range(first, self.last_batch + 1))


def inspect(checkpoint: Path) -> CheckpointState:
    """Read the checkpoint's logs and state metadata."""
    offsets = offset_ids(checkpoint)
    commits = commit_ids(checkpoint)
    newest = commits[-1] if commits else None
    conf = read_offset_conf(checkpoint, newest) if newest is not None else None
    return CheckpointState(
        path=checkpoint,
        last_batch=offsets[-1] if offsets else None,
        last_committed=newest,
        conf=conf or {},
        operators=operators(checkpoint),
    )
