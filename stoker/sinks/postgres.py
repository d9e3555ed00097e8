"""A PostgreSQL sink with real two-phase commit, exact under Spark task retries and speculation.

Each Spark task writes its partition in its own transaction: ``COPY`` of the rows, one marker
row in ``stoker_parts`` naming the part, then ``PREPARE TRANSACTION <gid>`` with

    gid = stoker:<job>:<epoch>:<attempt>:<partition>:<task attempt id>:<sink tag>:<uid hash>

The Spark task attempt id makes every copy of a task (a retry, a speculative copy, a zombie
that prepares late) a part of its own: no task ever touches another's gid. The sink tag names
the table as the server resolved it (schema and all), the uid hash the job's record: every
query of prepared parts is scoped by job, table and uid, and one uid of a job id owns a table
(:mod:`._pg_owner`). The parts Spark reports back from the task attempts whose results it
kept (exactly one per partition) are the epoch's recorded set: the runtime stores it with the
PREPARED sink transaction before the epoch is decided. Commit commits exactly that set; a gid
of the set that is not prepared any more was committed before if its marker row is visible
(the marker commits with it), and is lost otherwise: commit then raises :class:`SinkError`
rather than commit a partial epoch. Every other prepared gid of the sink, job and uid for
this epoch or an earlier one is a stray (a retried or speculative task's copy, a zombie's
late part): commit rolls it back. Recovery rolls back every such prepared gid that is left
once the decided epochs are committed.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stoker.errors import InvalidSink, SinkError
from stoker.sinks._arrow import collect_parts
from stoker.sinks._pg_modes import (
    STAGE_COLUMNS,
    apply_stage,
    check_key,
    check_mode,
    check_unique_key,
    ensure_stage,
    stage_name,
    staged,
)
from stoker.sinks._pg_owner import (
    check_still_owner,
    claim,
    hand_over,
    qualified,
    read_owner,
    refusal,
)
from stoker.sinks._pg_parts import (
    ParsedGid,
    Scope,
    _markers_name,
    finish_part,
    job_parts,
    part_visible,
    prepared_parts,
    uid_hash,
)
from stoker.sinks._pg_server import (
    _pg_type,
    add_missing_columns,
    check_columns,
    check_options,
    check_output_columns,
    connect,
    default_writers,
    ensure_markers,
    fit_writers,
    max_prepared,
    resolve_table,
    server_key,
)
from stoker.sinks._pg_task import _Task, _write_partition, write_plan
from stoker.sinks.base import (
    Decision,
    PartitionId,
    Prepared,
    PreparedPart,
    Recovered,
    SinkOwner,
    TaskAttemptId,
)
from stoker.types import AttemptNo, Epoch, JobId

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame
    from pyspark.sql.types import DataType, StructType

log = logging.getLogger("stoker.sinks.postgres")


def _type_hint(dt: DataType) -> str:
    """The column type to suggest for a Spark type (a placeholder where stoker has none)."""
    try:
        return _pg_type(dt)
    except InvalidSink:
        return f"<a type for {dt.simpleString()}>"


def _tag(name: str) -> str:
    return hashlib.sha1(name.encode()).hexdigest()[:8]


@dataclass
class PostgresSink:
    """Exactly-once rows in a PostgreSQL table through PREPARE TRANSACTION / COMMIT PREPARED.

    ``max_writers`` bounds the Spark tasks that write an epoch (each holds one prepared
    transaction until commit): the epoch's frame is coalesced to at most that many partitions.
    None: a quarter of the server's ``max_prepared_transactions``.

    ``key`` (column names) makes every epoch an upsert on them, as the pipeline's
    ``output_mode='update'`` needs; ``output_mode='complete'`` replaces the table's rows with
    each epoch's (:mod:`._pg_modes`). The pipeline tells the sink its mode
    (:meth:`accept_output_mode`).
    """

    dsn: str
    table: str
    create_table: bool = True
    name: str = ""
    max_writers: int | None = None
    key: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if not self.name:
            self.name = f"postgres:{self.table}"
        self.key = check_key(self.key)
        self._mode = "append"
        self._job: JobId | None = None
        self._uid = ""
        self._tag = ""
        self._legacy_tag = ""
        self._where: tuple[str, str] | None = None  # the resolved (schema, table)
        self._scope = Scope("", "", "", "")  # which prepared parts are ours: set by open()
        self._target: str | None = None
        self._checked: StructType | None = None  # the output schema the table was checked for
        self._writers: int | None = None

    def describe(self) -> str:
        extra = f", max_writers={self.max_writers}" if self.max_writers is not None else ""
        if self.key:
            extra += f", key={list(self.key)!r}"
        return f"postgres(table={self.table!r}{extra})"

    def accept_output_mode(self, mode: str) -> None:
        """Write Spark's output mode ``mode`` as it means: ``append`` (rows appended, or
        upserted with a ``key``), ``update`` (upserted: needs ``key``), ``complete`` (each
        epoch replaces the table's rows). InvalidSink for ``update`` without a key."""
        check_mode(mode, self.key, self.table)
        self._mode = mode

    @property
    def _staged(self) -> bool:
        return staged(self._mode, self.key)

    def _stage(self) -> tuple[str, ...]:
        assert self._where is not None, "open() first"
        return stage_name(self._where, self._tag)

    def descriptor(self) -> dict[str, Any]:
        # The tag is derived again by open() from the same database and table (resolved
        # again: the job created it where it resolved); it is recorded to say which gids are
        # this sink's.
        return {
            "kind": "postgres",
            "dsn": self.dsn,
            "table": self.table,
            "name": self.name,
            "create_table": self.create_table,
            "max_writers": self.max_writers,
            "tag": self._tag,
            "key": list(self.key) if self.key else None,
            "output_mode": self._mode,
        }

    def _connect(self) -> Any:
        return connect(self.dsn)

    # bounds ------------------------------------------------------------------------------------
    default_writers = staticmethod(default_writers)

    def validate(self, owner: SinkOwner) -> None:
        """Check the options and the server; refuse a table another uid of this job id
        writes (read only: the claim is ``open``'s)."""
        check_options(self.table, self.max_writers)
        with self._connect() as conn:
            self._writers = fit_writers(max_prepared(conn), self.max_writers)
            where = self._resolve(conn)
            row = read_owner(conn, where, owner.job_id)
            if self.key and self._mode != "complete":
                check_unique_key(conn, where, self.key)
        if row is not None and not row.owned_by(owner):
            raise refusal(row, owner)

    def target(self) -> str | None:
        """Where the sink writes, once ``validate`` or ``open`` resolved it: two sinks of one
        pipeline with one target are refused (:meth:`stoker.pipeline.Pipeline.check_targets`)."""
        return self._target

    def _resolve(self, conn: Any) -> tuple[str, str]:
        """Resolve the table on the server: where it writes, its tag, its target."""
        where = resolve_table(conn, self.table)
        (db,) = conn.execute("SELECT current_database()").fetchone()
        # Names the sink inside the gid: two PostgreSQL sinks of one job (two schemas, or one
        # table name through two search paths) never take each other's parts for strays.
        self._tag = _tag(f"{db}/{where[0]}.{where[1]}")
        # The tag of versions before the uid in the gid: the table as written.
        self._legacy_tag = _tag(f"{db}/{self.table}")
        self._target = f"table {qualified(where)} of {server_key(conn)}"
        self._where = where
        return where

    def open(self, owner: SinkOwner, state_dir: Path) -> None:
        """Resolve the table and claim it for ``owner`` (or find it ours); refuse it when
        another uid of the job id holds it."""
        with self._connect() as conn:
            where = self._resolve(conn)
            ensure_markers(conn, where)
            row, fresh = claim(conn, where, owner)
            if not row.owned_by(owner):
                raise refusal(row, owner)
            self._job = owner.job_id
            self._uid = owner.uid
            self._scope = Scope(owner.job_id, self._tag, uid_hash(owner.uid), self._legacy_tag)
            if fresh:
                self._roll_back_released(conn)

    def hand_over(self, previous: SinkOwner, to: SinkOwner) -> bool:
        """A restore from ``previous``'s savepoint: the table's rows for ``previous``'s job id
        go on as ``to``'s (the same uid, another id); that job id is refused from now on.
        Whether a row was marked now (False: nothing of ``previous`` here, or done before)."""
        with self._connect() as conn:
            return hand_over(conn, self._resolve(conn), previous, to)

    def _roll_back_released(self, conn: Any) -> None:
        """Roll back the parts another uid of this job id left prepared in this table: the
        table had no owner row, so that uid released it (the user, see :func:`refusal`)
        and no job will ever commit them."""
        for p in job_parts(conn, self._scope.job):
            if self._scope.foreign(p) and finish_part(conn, p.gid, commit=False):
                log.warning(
                    "postgres: rolled back %s, left by a uid that released the table", p.gid
                )

    def _ensure_table(self, schema: StructType) -> None:
        """Create the table (``create_table``; with its key as primary key) and the stage
        (an upsert or a replace) if they are missing, and check that the table has a column
        for every output column: once per output schema."""
        if self._checked == schema:
            return
        from psycopg import sql

        assert self._where is not None, "open() first"
        with self._connect() as conn:
            if self.create_table:
                cols = [
                    sql.SQL("{} {}").format(sql.Identifier(f.name), sql.SQL(_pg_type(f.dataType)))
                    for f in schema.fields
                ]
                if self.key:
                    keys = sql.SQL(", ").join(map(sql.Identifier, self.key))
                    cols.append(sql.SQL("PRIMARY KEY ({})").format(keys))
                conn.execute(
                    sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(
                        sql.Identifier(*self._where), sql.SQL(", ").join(cols)
                    )
                )
            types = {f.name: _type_hint(f.dataType) for f in schema.fields}
            if self.create_table:
                # A table the sink made takes the columns new code adds (an upgrade):
                # nullable, so the rows written before, and older code's, hold NULL there.
                added = add_missing_columns(
                    conn, self._where, {f.name: _pg_type(f.dataType) for f in schema.fields}
                )
                if added:
                    log.info("sink %s: added nullable column(s) %s", self.name, ", ".join(added))
            check_columns(conn, self._where, types, self.name)
            if self._staged:
                # The stage too: parts COPY every output column into it.
                added = ensure_stage(conn, self._stage(), schema)
                if added:
                    log.info("sink %s: stage took column(s) %s", self.name, ", ".join(added))
        self._checked = schema

    def _check_columns(self, columns: list[str]) -> None:
        check_output_columns(columns, self.key, STAGE_COLUMNS if self._staged else (), self.name)

    def check_output(self, df: DataFrame) -> None:
        """Refuse, before the job is recorded, an output this sink could not write (called
        with the transform's output on an empty batch): its column names, then the plan an
        epoch writes through, analysed (nothing runs)."""
        self._check_columns(df.columns)
        write_plan(df, 1, None).schema  # noqa: B018 (analysis is asked for)

    def writers(self) -> int:
        """How many partitions (so prepared transactions) an epoch is written through."""
        if self._writers is None:
            with self._connect() as conn:
                self._writers = fit_writers(max_prepared(conn), self.max_writers)
        return self._writers

    # protocol ----------------------------------------------------------------------------------
    def prepare(self, df: DataFrame, epoch: Epoch, attempt: AttemptNo) -> Prepared:
        if self._job is None:
            raise SinkError("postgres", f"sink {self.name!r} prepared before open()")
        self._check_columns(df.columns)  # before the table is made
        self._ensure_table(df.schema)
        assert self._where is not None
        t = _Task(
            self.dsn,
            self._where,
            tuple(df.columns),
            self._job,
            self._uid,
            epoch,
            attempt,
            self._tag,
            self._stage() if self._staged else None,
        )

        def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            return _write_partition(t, batches)

        out = write_plan(df, self.writers(), write)
        results, n = collect_parts(out)  # planned once (out.rdd would plan it again)
        # The kept results: one per partition, from the task attempt whose result Spark kept.
        parts = sorted(
            (
                PreparedPart(
                    id=r["gid"],
                    partition=PartitionId(int(r["part"])),
                    task_attempt=TaskAttemptId(int(r["task"])),
                    task_attempt_number=int(r["task_attempt"]),
                    rows=int(r["rows"]),
                )
                for r in results
            ),
            key=lambda p: p.partition,
        )
        got = [p.partition for p in parts]
        if got != list(range(n)):
            raise SinkError(
                "postgres",
                f"epoch {epoch}: expected one prepared part per partition 0..{n - 1}, Spark "
                f"returned parts for partitions {got}",
            )
        return Prepared(
            rows=sum(p.rows for p in parts),
            detail={"gids": [p.id for p in parts], "parts": [p.to_json() for p in parts]},
            parts=tuple(parts),
        )

    def _prepared(self, conn: Any) -> list[ParsedGid]:
        """This sink's prepared gids of this job and uid (and the job's legacy gids, which
        name no uid: see :meth:`Scope.holds`), in this database."""
        assert self._job is not None, "open() first"
        return prepared_parts(conn, self._scope)

    def _owner(self) -> SinkOwner:
        assert self._job is not None, "open() first"
        return SinkOwner(self._job, self._uid)

    def commit(self, epoch: Epoch, attempt: AttemptNo, detail: Mapping[str, Any]) -> None:
        """Commit exactly the recorded gids of (epoch, attempt); roll back the strays."""
        if self._job is None:
            raise SinkError("postgres", f"sink {self.name!r} committed before open()")
        gids = detail.get("gids")
        if not isinstance(gids, list) or not all(isinstance(g, str) for g in gids):
            raise SinkError(
                "postgres",
                f"epoch {epoch} of attempt {attempt}: the recorded sink transaction names no "
                f"prepared parts (detail {dict(detail)!r}); nothing can be committed exactly",
            )
        kept = set(gids)
        assert self._where is not None
        with self._connect() as conn:
            check_still_owner(conn, self._where, self._owner())
            held = {p.gid for p in self._prepared(conn)}
            # 1. Every recorded part is prepared or was committed before (a commit or recovery
            #    that crashed midway). A part that is neither is lost: say so, commit nothing.
            lost = [
                g
                for g in gids
                if g not in held and not part_visible(conn, self._where, self._uid, g)
            ]
            if lost:
                raise SinkError(
                    "postgres",
                    f"epoch {epoch} was decided for attempt {attempt} with {len(gids)} parts, "
                    f"but {len(lost)} of them are neither prepared nor committed: {lost}. "
                    "Their rows are lost; nothing of the epoch was committed by this call",
                )
            # 2. Commit the recorded set. One that vanished meanwhile was committed by a
            #    concurrent recovery of the same decision, or it is lost.
            for g in gids:
                vanished = g in held and not finish_part(conn, g, commit=True)
                if vanished and not part_visible(conn, self._where, self._uid, g):
                    raise SinkError(
                        "postgres", f"epoch {epoch}: part {g} vanished before its commit"
                    )
            # 2b. An upsert or a replace: apply the epoch's staged rows (and any a crash left
            #     unapplied) to the table, in one transaction. A crash before it leaves the
            #     epoch unfinished in the store: recovery commits it again, and applies.
            if self._staged:
                apply_stage(
                    conn,
                    self._where,
                    self._stage(),
                    self._uid,
                    epoch,
                    self.key,
                    replace=self._mode == "complete",
                )
            # 3. Strays: every other part of this epoch, and every part left of earlier ones
            #    (all decided and committed by now), e.g. a zombie task that prepared late.
            for p in self._prepared(conn):
                if p.gid not in kept and p.epoch <= epoch:
                    finish_part(conn, p.gid, commit=False)
                    log.info("postgres: rolled back stray part %s", p.gid)
            # 4. Markers are needed only while an epoch may still be committed again: keep
            #    this epoch's and the one before (a fenced zombie's late commit finds them).
            from psycopg import sql

            conn.execute(
                sql.SQL("DELETE FROM {} WHERE uid = %s AND job_id = %s AND epoch < %s").format(
                    sql.Identifier(*_markers_name(self._where))
                ),
                (self._uid, self._job, epoch - 1),
            )

    def abort(self, epoch: Epoch, attempt: AttemptNo) -> None:
        with self._connect() as conn:
            for p in self._prepared(conn):
                if p.epoch == epoch and p.attempt == attempt:
                    finish_part(conn, p.gid, commit=False)

    def recover(self, decision: Decision, up_to: AttemptNo | None = None) -> Recovered:
        """Roll back every prepared part left by attempts up to ``up_to``: the decided
        epochs' recorded parts were committed before this runs (see
        :meth:`TwoPhaseSink.recover`). A later attempt's parts (its gid names the attempt)
        are that attempt's, in flight: never touched."""
        done = Recovered()
        with self._connect() as conn:
            for p in self._prepared(conn):
                if up_to is not None and p.attempt > up_to:
                    continue
                if not finish_part(conn, p.gid, commit=False):
                    continue
                if decision(p.epoch) == p.attempt:
                    done.strays.append(p.gid)
                elif (p.epoch, p.attempt) not in done.aborted:
                    done.aborted.append((p.epoch, p.attempt))
        return done

    def committed_epochs(self, owner: SinkOwner) -> list[Epoch] | None:
        """The epochs of job uid ``owner.uid`` whose marker rows in ``stoker_parts`` are
        visible (a marker commits with its part and only with it), in order.

        Commit deletes a job's markers older than its latest epoch - 1, so this is the last
        one or two epochs each job of that uid committed here, not every epoch: epochs commit
        in order, so the newest is the high-water mark of what the uid's jobs wrote. A table
        that has no marker table yet holds nothing of anyone's."""
        from psycopg import sql

        markers = _markers_name(self.table)
        with self._connect() as conn:
            if conn.execute("SELECT to_regclass(%s)", (".".join(markers),)).fetchone()[0] is None:
                return []
            rows = conn.execute(
                sql.SQL("SELECT DISTINCT epoch FROM {} WHERE uid = %s ORDER BY epoch").format(
                    sql.Identifier(*markers)
                ),
                (owner.uid,),
            ).fetchall()
        return [Epoch(int(r[0])) for r in rows]
