"""An Apache Iceberg sink on ``pyiceberg`` and its SQL catalog: one snapshot per epoch, exactly
once, no JVM jar.

Prepare: the table is made from the first epoch's output when it is missing (or given the
output's new columns with ``schema_mode='merge'``), then each Spark task writes its rows as a
Parquet data file with the table's field ids (:mod:`._iceberg_task`) and returns the file's
statistics; the kept ones (one task attempt per partition, as Spark kept its result) are the
part recorded in the store. A data file no snapshot names is invisible to every reader.

Commit: the table is read, and the ancestry of its current snapshot searched for the newest
snapshot whose summary carries this job's ``stoker.uid`` and this sink's ``stoker.sink``
(:mod:`._iceberg_marker`); its ``stoker.epoch`` at or past the epoch means committed before
(a crash between the catalog's commit and the store's record of it), and nothing is done.
Otherwise one snapshot is committed with the recorded files and the marker: a fast append;
in ``complete`` mode an overwrite of every current file; in ``update`` mode (or with a
``key``) pyiceberg's upsert on the key (copy-on-write). pyiceberg's own retry of a commit that
lost to a concurrent writer is switched off for the sink's commits, so that a commit retried
after a ``CommitFailedException`` reads the marker again first: another writer's append is
simply committed after, a commit of the same epoch by another attempt of the job (a recovery
beside a stalled driver) is never repeated.

A catalog that cannot be reached at the commit (its PostgreSQL down or restarting) is waited
out, up to ``OUTAGE_S``, each try reading the marker first: the epoch is committed once when
the database is back, the attempt fails only after that.

Files of aborted attempts and of task copies Spark did not keep are deleted by abort, by the
commit's clean-up and by recovery, from the intents the tasks wrote before their files; a
file a snapshot of the epoch names is never deleted.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stoker.errors import InvalidSink, SinkError
from stoker.sinks._arrow import collect_parts
from stoker.sinks._delta_merge import last_per_key
from stoker.sinks._files_owner import check_uid
from stoker.sinks._iceberg_catalog import (
    FIELD,
    OUTAGE_S,
    Where,
    check_table,
    check_writable,
    load,
    open_catalog,
    parse,
    redacted,
    require_pyiceberg,
    table_root,
    through_outages,
    without_retries,
)
from stoker.sinks._iceberg_expire import expire
from stoker.sinks._iceberg_marker import current_files, epoch_files, marker, newest_epoch
from stoker.sinks._iceberg_schema import arrow_schema, check_output, ready_table
from stoker.sinks._iceberg_task import (
    STAGING,
    IcebergTask,
    data_file,
    intents_dir,
    write_partition,
    write_plan,
)
from stoker.sinks.base import (
    Decision,
    PartitionId,
    Prepared,
    PreparedPart,
    Recovered,
    SinkOwner,
    TaskAttemptId,
)
from stoker.testing import fault_point
from stoker.types import AttemptNo, Epoch

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

log = logging.getLogger("stoker.sinks.iceberg")

MODES = ("append", "update", "complete")
SCHEMA_MODES = (None, "merge")
_INTENTS = re.compile(r"^(\d+)\.(\d+)$")
# Commits lost to other writers before this gives up (each loser reads the marker again).
_COMMIT_TRIES = 20
_MERGE = "commit.manifest-merge.enabled"


@dataclass
class IcebergSink:
    """Exactly-once epochs in the Iceberg table ``table`` of the SQL catalog at ``catalog``,
    one snapshot each."""

    catalog: str = field(repr=False)  # may hold a password: describe() shows it redacted
    table: str = ""
    warehouse: str | None = None
    key: tuple[str, ...] | None = None
    schema_mode: str | None = None
    name: str = ""
    keep_snapshots: int | None = None  # expire older snapshots (sinks/_iceberg_expire.py)

    def __post_init__(self) -> None:
        self._where: Where = parse(self.catalog, self.table, self.warehouse)
        keep = self.keep_snapshots
        if keep is not None and (isinstance(keep, bool) or not isinstance(keep, int) or keep < 1):
            raise InvalidSink(
                "iceberg.keep_snapshots", f"must be a whole number of at least 1, got {keep!r}"
            )
        if not self.name:
            self.name = f"iceberg:{self._where.identifier}"
        self._owner: SinkOwner | None = None
        self._mode = "append"
        self._catalog: Any = None
        self._checked: pa.Schema | None = None
        self.outage_s = OUTAGE_S  # how long a commit waits out a catalog it cannot reach

    def describe(self) -> str:
        extra = f", schema_mode={self.schema_mode!r}" if self.schema_mode else ""
        return f"iceberg({self._where.shown()!r}, {self._where.identifier!r}{extra})"

    def descriptor(self) -> dict[str, Any]:
        # The catalog's URL (an SQLite file's path made absolute; a password in it too, as in
        # the PostgreSQL sink's DSN): the job manager's cleanup opens the catalog with it, from
        # wherever it runs; answers and logs redact it.
        return {
            "kind": "iceberg",
            "catalog": self._where.url,
            "table": self._where.identifier,
            "warehouse": self._where.warehouse,
            "name": self.name,
            "key": list(self.key) if self.key else None,
            "schema_mode": self.schema_mode,
            "output_mode": self._mode,
            **({"keep_snapshots": self.keep_snapshots} if self.keep_snapshots else {}),
        }

    def target(self) -> str:
        return f"Iceberg table {self._where.identifier} in {self._where.shown()}"

    def accept_output_mode(self, mode: str) -> None:
        """``append``: each epoch's files appended (with a ``key``: upserted). ``update``:
        each epoch upserted on ``key`` (required). ``complete``: each epoch's files replace
        the table's. One snapshot commit each."""
        if mode == "update" and not self.key:
            raise InvalidSink(
                "iceberg.key",
                "output_mode='update' gives each epoch's changed rows: the Iceberg sink "
                "upserts them into the table on a key, and needs it: "
                "sinks.iceberg(catalog, table, key=['k', ...])",
            )
        if mode not in MODES:
            raise InvalidSink(
                "iceberg.output_mode", f"must be append, update or complete, got {mode!r}"
            )
        self._mode = mode

    @property
    def _upsert(self) -> bool:
        return self._mode == "update" or (self._mode == "append" and bool(self.key))

    # checks ------------------------------------------------------------------------------------
    def _cat(self) -> Any:
        if self._catalog is None:
            self._catalog = open_catalog(self._where)
        return self._catalog

    def _table(self) -> Any:
        """The table as the catalog holds it now; None when there is none (an SQLite catalog
        not made yet holds none: it is not made for asking)."""
        file = self._where.sqlite_file
        if file is not None and not file.exists():
            return None
        return load(self._cat(), self._where)

    def validate(self, owner: SinkOwner) -> None:
        require_pyiceberg()
        check_uid(owner)
        if self.schema_mode not in SCHEMA_MODES:
            raise InvalidSink(
                "iceberg.schema_mode", f"must be None or 'merge', got {self.schema_mode!r}"
            )
        check_writable(self._where)
        table = self._table()
        if table is not None:
            check_table(table, self._where)

    def check_output(self, df: DataFrame) -> None:
        """Refuse, before the job is recorded, an output this table cannot take: columns the
        table has not (without ``schema_mode='merge'``) or holds with another type, required
        columns missing, key columns missing."""
        self._check_schema(df)
        write_plan(df, None).schema  # noqa: B018 (analysis is asked for)

    def _check_schema(self, df: DataFrame) -> pa.Schema:
        schema = arrow_schema(df)
        if self._checked is None or not self._checked.equals(schema):
            check_output(schema, self._table(), self._where, self.schema_mode, self.key)
            self._checked = schema
        return schema

    def _bound(self) -> SinkOwner:
        if self._owner is None:
            raise SinkError(FIELD, f"{self.describe()} is used before open()")
        return self._owner

    def open(self, owner: SinkOwner, state_dir: Path) -> None:
        require_pyiceberg()
        check_uid(owner)
        self._cat()
        self._owner = owner

    def committed_epochs(self, owner: SinkOwner) -> list[Epoch] | None:
        """The newest epoch of job uid ``owner.uid`` in the snapshot ancestry's marker (epochs
        commit in order: it stands for every one before it)."""
        table = self._table()
        if table is None:
            return []
        newest = newest_epoch(table, owner.uid, self.name)
        return [] if newest is None else [Epoch(newest)]

    # protocol ----------------------------------------------------------------------------------
    def prepare(self, df: DataFrame, epoch: Epoch, attempt: AttemptNo) -> Prepared:
        owner = self._bound()
        schema = self._check_schema(df)  # before any task writes
        table = ready_table(self._cat(), self._where, schema, self.schema_mode)
        columns = tuple(df.columns)
        projected = table.schema().select(*columns)
        t = IcebergTask(
            root=str(table_root(table)),
            location=str(table.location()),
            uid=owner.uid,
            epoch=int(epoch),
            attempt=int(attempt),
            columns=columns,
            schema=projected.model_dump_json(),
            properties=tuple(sorted(table.metadata.properties.items())),
        )

        def write(batches: Any) -> Any:
            return write_partition(t, batches)

        out = write_plan(df, write)
        results, n = collect_parts(out)
        first: dict[int, Any] = {}  # partition -> its result row (one task attempt each)
        for r in results:
            first.setdefault(int(r["part"]), r)
        got = sorted(first)
        if got != list(range(n)):
            raise SinkError(
                FIELD,
                f"epoch {epoch}: expected results for partitions 0..{n - 1}, Spark returned "
                f"partitions {got}",
            )
        parts = tuple(
            PreparedPart(
                id=f"{epoch}.{attempt}.t{int(first[p]['task'])}",
                partition=PartitionId(p),
                task_attempt=TaskAttemptId(int(first[p]["task"])),
                task_attempt_number=int(first[p]["task_attempt"]),
                rows=int(first[p]["rows"]),
            )
            for p in got
        )
        files = [json.loads(first[p]["file"]) for p in got if first[p]["file"]]
        return Prepared(
            rows=sum(p.rows for p in parts),
            detail={"files": files, "parts": [p.to_json() for p in parts]},
            parts=parts,
        )

    def commit(self, epoch: Epoch, attempt: AttemptNo, detail: Mapping[str, Any]) -> None:
        """One snapshot with the recorded files and the marker; nothing when the marker
        already reaches the epoch. Then the attempt's other files go."""
        owner = self._bound()
        files = detail.get("files")
        if not isinstance(files, list):
            raise SinkError(
                FIELD,
                f"epoch {epoch} of attempt {attempt}: the recorded part names no files "
                f"(detail {dict(detail)!r}); nothing can be committed exactly",
            )
        table = through_outages(
            f"{self.name}: epoch {epoch}",
            lambda: self._commit_snapshot(owner.uid, epoch, attempt, files),
            self._forget_catalog,
            self.outage_s,
        )
        # Crash here: the epoch is in the table, the store does not know yet; the commit done
        # again finds the marker and only cleans up.
        fault_point("iceberg_after_commit", epoch)
        if table is not None:
            # An upsert's prepared files never enter the table (pyiceberg wrote its own).
            kept = set() if self._upsert else {str(f["name"]) for f in files}
            self._clean(table, owner.uid, epoch, attempt, kept)
            if self.keep_snapshots:
                expire(table, self.keep_snapshots, self.name)

    def _forget_catalog(self) -> None:
        """Drop the catalog and its connections: the next use opens them anew."""
        cat, self._catalog = self._catalog, None
        engine = getattr(cat, "engine", None)
        if engine is not None:
            with contextlib.suppress(Exception):
                engine.dispose()

    def _commit_snapshot(
        self, uid: str, epoch: Epoch, attempt: AttemptNo, files: list[dict[str, Any]]
    ) -> Any:
        from pyiceberg.exceptions import CommitFailedException

        last: Exception | None = None
        for _ in range(_COMMIT_TRIES):
            table = self._table()
            if table is None:
                if files:
                    raise SinkError(
                        FIELD,
                        f"epoch {epoch}: the Iceberg table {self._where.identifier} is gone "
                        "from the catalog; its prepared files cannot be committed",
                    )
                return None  # an epoch without rows before any table: nothing to do
            # 1. Committed before (this call's earlier self, a replay, a recovery beside us)?
            done = newest_epoch(table, uid, self.name)
            if done is not None and done >= epoch:
                return table
            # 2. Every recorded file is there: one that is gone was never in a snapshot (the
            #    marker says so), so its rows are lost. Say it, commit nothing.
            root = table_root(table)
            lost = [f["name"] for f in files if not (root / str(f["name"])).is_file()]
            if lost:
                raise SinkError(
                    FIELD,
                    f"epoch {epoch} was decided for attempt {attempt} with {len(files)} data "
                    f"files, but {len(lost)} of them are gone: {lost[:5]}. Their rows are "
                    "lost; nothing of the epoch was committed",
                )
            if not files and self._mode != "complete":
                return table  # nothing to add: no snapshot (the marker stays where it is)
            # 3. The snapshot, built against the table as just read, pyiceberg's own retries
            #    off (a retry must read the marker again: step 1).
            tx = self._snapshot(table, root, uid, epoch, attempt, files)
            # Crash here: manifests and a manifest list are written, the catalog does not name
            # them (orphans no reader sees); the epoch is committed again from step 1.
            fault_point("iceberg_before_catalog", epoch)
            try:
                # 4. The catalog's commit: the new metadata, if the table is still as read.
                return tx.commit_transaction()
            except CommitFailedException as e:
                last = e
                log.warning(
                    "%s: epoch %d commit lost to a concurrent writer (%s); reading the marker "
                    "again",
                    self.name,
                    epoch,
                    redacted(e),
                )
                time.sleep(0.05)
        raise SinkError(
            FIELD,
            f"epoch {epoch}: the Iceberg commit failed {_COMMIT_TRIES} times, last: "
            f"{redacted(last) if last else None}; the epoch stays decided and is committed "
            "when the job runs again",
        )

    def _snapshot(
        self,
        table: Any,
        root: Path,
        uid: str,
        epoch: Epoch,
        attempt: AttemptNo,
        files: list[dict[str, Any]],
    ) -> Any:
        """The epoch's snapshot in a transaction on ``table`` (not committed yet), with the
        marker in its summary: an upsert on the key, an overwrite of every current file
        (``complete``), or an append."""
        tx = without_retries(table).transaction()
        props = marker(uid, self.name, int(epoch), int(attempt))
        spec_id = table.metadata.default_spec_id
        ours = [data_file(f, spec_id) for f in files]
        if self._upsert:
            rows = self._epoch_rows(root, files)
            if rows.num_rows:
                assert self.key
                tx.upsert(
                    last_per_key(rows, self.key),
                    join_cols=list(self.key),
                    snapshot_properties=props,
                )
        elif self._mode == "complete":
            with tx.update_snapshot(snapshot_properties=props).overwrite() as replace:
                for old in current_files(table):
                    replace.delete_data_file(old)
                for f in ours:
                    replace.append_data_file(f)
        else:
            # A fast append adds a manifest per epoch; with the table's
            # commit.manifest-merge.enabled (set on tables the sink makes) small manifests are
            # merged as the commits go on, so that planning a scan stays fast.
            update = tx.update_snapshot(snapshot_properties=props)
            merge = table.metadata.properties.get(_MERGE, "false").lower() == "true"
            with update.merge_append() if merge else update.fast_append() as append:
                for f in ours:
                    append.append_data_file(f)
        return tx

    def _epoch_rows(self, root: Path, files: list[dict[str, Any]]) -> pa.Table:
        """The rows of the epoch's prepared files, in the order of the files (an upsert's
        input: two rows of a key give the last)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        pieces = [pq.read_table(root / str(f["name"])) for f in files]
        return pa.concat_tables(pieces) if pieces else pa.table({})

    def _clean(
        self, table: Any, uid: str, epoch: Epoch, attempt: AttemptNo, kept: set[str]
    ) -> None:
        """After the commit: delete the files of this epoch that are not the committed ones
        (task copies Spark did not keep; other attempts of the epoch, never decided), then
        their intents."""
        root = table_root(table)
        base = root / STAGING / uid
        if not base.is_dir():
            return
        for folder in base.iterdir():
            m = _INTENTS.match(folder.name)
            if m and int(m.group(1)) == epoch:
                self._drop(root, folder, keep=kept if int(m.group(2)) == attempt else set())

    def _drop(self, root: Path, folder: Path, keep: set[str]) -> list[str]:
        """Delete the files the intents in ``folder`` name, but ``keep`` (names relative to
        the table's folder); then the folder."""
        gone = []
        for intent in folder.glob("t*.json"):
            try:
                names = json.loads(intent.read_text(encoding="utf-8")).get("files", [])
            except (OSError, ValueError):
                names = []
            for name in names:
                if name not in keep:
                    (root / name).unlink(missing_ok=True)
                    gone.append(str(name))
        shutil.rmtree(folder, ignore_errors=True)
        return gone

    def _in_table(self, table: Any, root: Path, uid: str, epoch: int) -> set[str]:
        """The names (relative to ``root``) of the files the snapshots of ``epoch`` added."""
        location = str(table.location()).rstrip("/") + "/"
        return {p.removeprefix(location) for p in epoch_files(table, uid, self.name, int(epoch))}

    def abort(self, epoch: Epoch, attempt: AttemptNo) -> None:
        table = self._table()
        if table is None:
            return
        root, uid = table_root(table), self._bound().uid
        folder = intents_dir(root, uid, epoch, attempt)
        if folder.is_dir():
            self._drop(root, folder, keep=self._in_table(table, root, uid, epoch))

    def recover(self, decision: Decision, up_to: AttemptNo | None = None) -> Recovered:
        """Delete the files of this uid that no snapshot of their epoch names: of attempts
        never decided for their epoch, and task copies of decided epochs (intents left by a
        task that wrote after the commit's clean-up). Attempts after ``up_to`` are in flight:
        untouched. Decided epochs were committed before this runs."""
        done = Recovered()
        table = self._table()
        if table is None:
            return done
        root, uid = table_root(table), self._bound().uid
        base = root / STAGING / uid
        if not base.is_dir():
            return done
        for folder in sorted(base.iterdir()):
            m = _INTENTS.match(folder.name)
            if not m:
                continue
            epoch, attempt = Epoch(int(m.group(1))), AttemptNo(int(m.group(2)))
            if up_to is not None and attempt > up_to:
                continue
            gone = self._drop(root, folder, keep=self._in_table(table, root, uid, epoch))
            if decision(epoch) == attempt:
                done.strays.extend(gone)
            else:
                done.aborted.append((epoch, attempt))
        return done
