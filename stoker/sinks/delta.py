"""A Delta Lake sink on ``deltalake`` (delta-rs): one Delta commit per epoch, exactly once.

Prepare: each Spark task writes its rows as Parquet data files into the table's folder
(:mod:`._delta_task`) and returns their ``add`` actions' fields; the kept ones (one task attempt
per partition, as Spark kept its result) are the part recorded in the store. A data file no
log entry names is invisible to every Delta reader.

Commit: one Delta commit holding the decided attempt's files and the action
``txn(appId="stoker:<uid>:<sink name>", version=<epoch>)``, the same marker delta-spark writes
for ``txnAppId``/``txnVersion``. A commit whose table already holds a ``txn`` version of that
app id at or past the epoch does nothing (a commit done again after a crash between the Delta
commit and the store's record of it); ``committed_epochs`` reads the same marker. A commit
that loses the race for a log version to another writer is checked again by delta-rs against
the winner (another appender: retried on the new version; the same app id: a conflict, and
the marker is read again here, so an epoch is never committed twice).

The first epoch creates the table (its schema and ``partition_by``) in its own commit. An
output column the table lacks is refused before anything is written, unless
``schema_mode="merge"`` (the column is added in a commit of its own before the epoch's).
Output modes: ``append``; ``update`` (and append with a ``key``): the epoch's rows MERGEd on
the key in its one commit (:mod:`._delta_merge`); ``complete``: each epoch replaces the table's
files in its one commit.

Files of aborted attempts and of task copies Spark did not keep are deleted by abort, by the
commit's clean-up and by recovery, from the intents the tasks wrote before their files; a
task that writes after all of those (a zombie) leaves files no log names, which Delta's
``VACUUM`` removes.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stoker.errors import InvalidSink, SinkError
from stoker.sinks._arrow import collect_parts
from stoker.sinks._delta_merge import merge_epoch
from stoker.sinks._delta_schema import (
    arrow_schema,
    check_output,
    evolve,
    schema_json,
    schema_of,
)
from stoker.sinks._delta_task import STAGING, DeltaTask, intents_dir, write_partition, write_plan
from stoker.sinks._files_owner import check_uid
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

log = logging.getLogger("stoker.sinks.delta")

FIELD = "delta"
MODES = ("append", "update", "complete")
SCHEMA_MODES = (None, "merge")
_INTENTS = re.compile(r"^(\d+)\.(\d+)$")
# Commits lost to writers of the same app id before this gives up (each loser re-reads the
# marker: one of them finds its epoch committed and stops).
_COMMIT_TRIES = 20


def require_deltalake() -> None:
    """The ``deltalake`` package, or InvalidSink saying how to get it."""
    try:
        import deltalake  # noqa: F401
    except ImportError as e:
        raise InvalidSink(
            "delta",
            "the Delta sink needs the deltalake package (delta-rs): pip install 'stoker[delta]'",
        ) from e


@dataclass
class DeltaSink:
    """Exactly-once epochs in the Delta table at ``path``, one Delta commit each."""

    path: str
    partition_by: tuple[str, ...] = ()
    key: tuple[str, ...] | None = None
    schema_mode: str | None = None
    name: str = ""

    def __post_init__(self) -> None:
        if not self.name:
            self.name = f"delta:{self.path}"
        self._root = Path(self.path).resolve()
        self._owner: SinkOwner | None = None
        self._mode = "append"
        self._checked: pa.Schema | None = None
        self._dt: Any = None  # the DeltaTable opened last (see _table)

    def describe(self) -> str:
        extra = f", partition_by={list(self.partition_by)!r}" if self.partition_by else ""
        if self.schema_mode:
            extra += f", schema_mode={self.schema_mode!r}"
        return f"delta({self.path!r}{extra})"

    def descriptor(self) -> dict[str, Any]:
        return {
            "kind": "delta",
            "path": str(self._root),
            "name": self.name,
            "partition_by": list(self.partition_by),
            "key": list(self.key) if self.key else None,
            "schema_mode": self.schema_mode,
            "output_mode": self._mode,
        }

    def target(self) -> str:
        return f"Delta table {str(self._root)!r}"

    def app_id(self, uid: str) -> str:
        """The ``txn`` app id of this sink for job uid ``uid``."""
        return f"stoker:{uid}:{self.name}"

    def accept_output_mode(self, mode: str) -> None:
        """``append``: each epoch's rows added (with a ``key``: upserted). ``update``: each
        epoch MERGEd on ``key`` (required). ``complete``: each epoch replaces the table's
        files. All in the epoch's one commit."""
        if mode == "update" and not self.key:
            raise InvalidSink(
                "delta.key",
                "output_mode='update' gives each epoch's changed rows: the Delta sink MERGEs "
                "them into the table on a key, and needs it: sinks.delta(path, key=['k', ...])",
            )
        if mode not in MODES:
            raise InvalidSink(
                "delta.output_mode", f"must be append, update or complete, got {mode!r}"
            )
        self._mode = mode

    @property
    def _upsert(self) -> bool:
        return self._mode == "update" or (self._mode == "append" and bool(self.key))

    # checks ------------------------------------------------------------------------------------
    def validate(self, owner: SinkOwner) -> None:
        require_deltalake()
        check_uid(owner)
        if self.schema_mode not in SCHEMA_MODES:
            raise InvalidSink(
                "delta.schema_mode", f"must be None or 'merge', got {self.schema_mode!r}"
            )
        root = self._root
        if root.exists() and not root.is_dir():
            raise InvalidSink("delta.path", f"{str(root)!r} exists and is not a folder")
        probe = root
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
            raise InvalidSink("delta.path", f"table folder {str(root)!r} cannot be written")
        if root.is_dir() and not (root / "_delta_log").is_dir():
            # What a first epoch prepared before a crash (its files, its partition folders,
            # its intents) is this sink's own, not another's data.
            others = [
                p.name
                for p in root.iterdir()
                if p.name != STAGING and not p.name.startswith("stoker-") and "=" not in p.name
            ]
            if others:
                raise InvalidSink(
                    "delta.path",
                    f"{str(root)!r} is a folder that holds no Delta table (no _delta_log) but "
                    f"other files ({', '.join(sorted(others)[:3])}): choose another path",
                )

    def check_output(self, df: DataFrame) -> None:
        """Refuse, before the job is recorded, an output this table cannot take: names Delta
        cannot hold, partition columns it lacks, columns the table has not (without
        ``schema_mode='merge'``) or holds with another type."""
        self._check_schema(df)
        write_plan(df, None).schema  # noqa: B018 (analysis is asked for)

    def _check_schema(self, df: DataFrame) -> pa.Schema:
        schema = arrow_schema(df)
        if self._checked is None or not self._checked.equals(schema):
            check_output(
                schema,
                self.partition_by,
                self._table(),
                self._root,
                self.path,
                self.schema_mode,
                self.key,
            )
            self._checked = schema
        return schema

    # layout ------------------------------------------------------------------------------------
    def _bound(self) -> SinkOwner:
        if self._owner is None:
            raise SinkError(FIELD, f"{self.describe()} is used before open()")
        return self._owner

    def _table(self) -> Any:
        """The table as its log stands now, or None when there is none yet. The table opened
        before is brought up to date with the log entries written since (``update_incremental``)
        rather than opened again: an open reads the last checkpoint and every file it names,
        each epoch, and the table grows by an epoch's files every epoch."""
        from deltalake import DeltaTable

        if not (self._root / "_delta_log").is_dir():
            self._dt = None
            return None
        if self._dt is not None:
            try:
                self._dt.update_incremental()
                return self._dt
            except Exception as e:  # the entries after it are gone (log clean-up): open it
                log.info("%s: opening the Delta log again (%s)", self.name, e)
                self._dt = None
        try:
            self._dt = DeltaTable(str(self._root))
            return self._dt
        except Exception as e:
            from deltalake.exceptions import TableNotFoundError

            if isinstance(e, TableNotFoundError):
                return None
            raise SinkError(
                FIELD, f"the Delta table {str(self._root)!r} cannot be read: {e}"
            ) from e

    def open(self, owner: SinkOwner, state_dir: Path) -> None:
        require_deltalake()
        check_uid(owner)
        self._root.mkdir(parents=True, exist_ok=True)
        self._owner = owner

    def committed_epochs(self, owner: SinkOwner) -> list[Epoch] | None:
        """The newest epoch of job uid ``owner.uid`` in the table's ``txn`` marker (epochs
        commit in order: it stands for every one before it)."""
        table = self._table()
        if table is None:
            return []
        v = table.transaction_version(self.app_id(owner.uid))
        return [] if v is None else [Epoch(int(v))]

    # protocol ----------------------------------------------------------------------------------
    def prepare(self, df: DataFrame, epoch: Epoch, attempt: AttemptNo) -> Prepared:
        owner = self._bound()
        self._check_schema(df)  # before any task writes
        t = DeltaTask(
            str(self._root), owner.uid, epoch, attempt, tuple(df.columns), self.partition_by
        )

        def write(batches: Any) -> Any:
            return write_partition(t, batches)

        out = write_plan(df, write)
        results, n = collect_parts(out)
        first: dict[int, Any] = {}  # partition -> its result row (one task attempt each)
        rows: dict[int, int] = {}
        adds: list[dict[str, Any]] = []
        for r in results:
            p = int(r["part"])
            first.setdefault(p, r)
            rows[p] = rows.get(p, 0) + int(r["rows"])
            if r["add"]:
                adds.append(json.loads(r["add"]))
        parts = {
            p: PreparedPart(
                id=f"{epoch}.{attempt}.t{int(r['task'])}",
                partition=PartitionId(p),
                task_attempt=TaskAttemptId(int(r["task"])),
                task_attempt_number=int(r["task_attempt"]),
                rows=rows[p],
            )
            for p, r in first.items()
        }
        got = sorted(parts)
        if got != list(range(n)):
            raise SinkError(
                FIELD,
                f"epoch {epoch}: expected results for partitions 0..{n - 1}, Spark returned "
                f"partitions {got}",
            )
        kept_parts = tuple(parts[p] for p in got)
        return Prepared(
            rows=sum(p.rows for p in kept_parts),
            detail={
                "adds": adds,
                "schema": schema_json(self._checked),
                "parts": [p.to_json() for p in kept_parts],
            },
            parts=kept_parts,
        )

    def commit(self, epoch: Epoch, attempt: AttemptNo, detail: Mapping[str, Any]) -> None:
        """One Delta commit with the recorded files and ``txn(app id, epoch)``; nothing when
        the table's marker already reaches the epoch. Then the attempt's other files go."""
        owner = self._bound()
        adds = detail.get("adds")
        if not isinstance(adds, list):
            raise SinkError(
                FIELD,
                f"epoch {epoch} of attempt {attempt}: the recorded part names no files "
                f"(detail {dict(detail)!r}); nothing can be committed exactly",
            )
        self._commit_log(epoch, attempt, adds, detail.get("schema"))
        # Crash here: the epoch is in the table, the store does not know yet; the commit done
        # again finds the marker and only cleans up.
        fault_point("delta_after_log", epoch)
        # An upsert's prepared files never enter the log (the MERGE wrote its own): all go.
        kept = set() if self._upsert else {str(a["path"]) for a in adds}
        self._clean(owner.uid, epoch, attempt, kept)

    def _commit_log(
        self, epoch: Epoch, attempt: AttemptNo, adds: list[dict[str, Any]], schema: Any
    ) -> None:
        from deltalake import Schema
        from deltalake.exceptions import CommitFailedError, DeltaError
        from deltalake.transaction import (
            AddAction,
            CommitProperties,
            Transaction,
            create_table_with_add_actions,
        )

        app = self.app_id(self._bound().uid)
        last: Exception | None = None
        for _ in range(_COMMIT_TRIES):
            table = self._table()
            if table is not None:
                done = table.transaction_version(app)
                if done is not None and done >= epoch:
                    return  # 1. committed before (by this call's earlier self, or a replay)
            # 2. Every recorded file is there: one that is gone was never in the log (the
            #    marker says so), so its rows are lost. Say it, commit nothing.
            lost = [a["path"] for a in adds if not (self._root / a["path"]).is_file()]
            if lost:
                raise SinkError(
                    FIELD,
                    f"epoch {epoch} was decided for attempt {attempt} with {len(adds)} data "
                    f"files, but {len(lost)} of them are gone: {lost[:5]}. Their rows are "
                    "lost; nothing of the epoch was committed",
                )
            actions = [
                AddAction(
                    path=str(a["path"]),
                    size=int(a["size"]),
                    partition_values=dict(a.get("partition_values") or {}),
                    modification_time=int(a["modification_time"]),
                    data_change=True,
                    stats=str(a.get("stats") or "{}"),
                )
                for a in adds
            ]
            props = CommitProperties(app_transactions=[Transaction(app, int(epoch))])
            try:
                # 3. The commit: the files and the marker in one log entry (an upsert: the
                #    epoch's rows MERGEd on the key, and the marker).
                if self._upsert:
                    assert self.key
                    merge_epoch(self._root, table, adds, schema, self.key, self.partition_by, props)
                elif table is None:
                    create_table_with_add_actions(
                        str(self._root),
                        Schema.from_arrow(schema_of(schema)),
                        actions,
                        mode="error",
                        partition_by=list(self.partition_by) or None,
                        commit_properties=props,
                    )
                else:
                    if self.schema_mode == "merge" and evolve(
                        self._root, table, schema, self.partition_by
                    ):
                        table = self._table()
                    table.create_write_transaction(
                        actions,
                        "overwrite" if self._mode == "complete" else "append",
                        table.schema(),
                        partition_by=list(self.partition_by) or None,
                        commit_properties=props,
                    )
                return
            except (CommitFailedError, DeltaError) as e:
                last = e
                # Lost to a writer of the same app id (a replay, a recovery), or to another
                # creator of the table: read the marker again.
                log.warning(
                    "%s: epoch %d commit conflicted (%s); trying again", self.name, epoch, e
                )
                time.sleep(0.05)
        raise SinkError(
            FIELD,
            f"epoch {epoch}: the Delta commit failed {_COMMIT_TRIES} times, last: {last}; "
            "the epoch stays decided and is committed when the job runs again",
        )

    def _clean(self, uid: str, epoch: Epoch, attempt: AttemptNo, kept: set[str]) -> None:
        """After the commit: delete the files of this epoch that are not the decided ones
        (task copies Spark did not keep; other attempts of the epoch, never decided), then
        their intents."""
        base = self._root / STAGING / uid
        if not base.is_dir():
            return
        for folder in base.iterdir():
            m = _INTENTS.match(folder.name)
            if m and int(m.group(1)) == epoch:
                self._drop(folder, keep=kept if int(m.group(2)) == attempt else set())

    def _drop(self, folder: Path, keep: set[str]) -> list[str]:
        """Delete the files the intents in ``folder`` name, but ``keep``; then the folder."""
        gone = []
        for intent in folder.glob("t*.json"):
            try:
                files = json.loads(intent.read_text(encoding="utf-8")).get("files", [])
            except (OSError, ValueError):
                files = []
            for f in files:
                if f not in keep:
                    (self._root / f).unlink(missing_ok=True)
                    gone.append(str(f))
        shutil.rmtree(folder, ignore_errors=True)
        return gone

    def abort(self, epoch: Epoch, attempt: AttemptNo) -> None:
        folder = intents_dir(self._root, self._bound().uid, epoch, attempt)
        if folder.is_dir():
            self._drop(folder, keep=self._in_log())

    def _in_log(self) -> set[str]:
        """The data files the table's current version names (paths relative to the table)."""
        table = self._table()
        if table is None:
            return set()
        root = str(self._root) + "/"
        return {u.removeprefix("file://").removeprefix(root) for u in table.file_uris()}

    def recover(self, decision: Decision, up_to: AttemptNo | None = None) -> Recovered:
        """Delete the files of this uid that no log entry names: of attempts never decided for
        their epoch, and task copies of decided epochs (their intents left by a task that wrote
        after the commit's clean-up). Attempts after ``up_to`` are in flight: untouched.
        Decided epochs were committed before this runs; a file the log names is never
        deleted."""
        done = Recovered()
        base = self._root / STAGING / self._bound().uid
        if not base.is_dir():
            return done
        in_log = self._in_log()
        for folder in sorted(base.iterdir()):
            m = _INTENTS.match(folder.name)
            if not m:
                continue
            epoch, attempt = Epoch(int(m.group(1))), AttemptNo(int(m.group(2)))
            if up_to is not None and attempt > up_to:
                continue
            gone = self._drop(folder, keep=in_log)
            if decision(epoch) == attempt:
                done.strays.extend(gone)
            else:
                done.aborted.append((epoch, attempt))
        return done
