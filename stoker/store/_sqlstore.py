"""The store logic, written once over DB-API; backends supply connection and dialect."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from stoker.clock import Clock, SystemClock
from stoker.errors import DuplicateJob, JobNotFound, JobTerminal, NotLeader, StaleAttempt
from stoker.store import _sql
from stoker.store.records import (
    AttemptRecord,
    ControlSnapshot,
    EpochRecord,
    JobRecord,
    LeaderLease,
    NewJob,
    Owner,
    SinkTxn,
)
from stoker.types import (
    AttemptNo,
    AttemptState,
    ControlVersion,
    Epoch,
    EpochState,
    JobId,
    JobState,
    TxnState,
    check_transition,
)


class SqlStore:
    """Implements :class:`stoker.store.base.Store` for any DB-API backend.

    A backend subclass provides ``_connect()``, ``_begin(cur, write)`` and ``dialect``; every
    method here runs in one transaction on a connection of a small pool (``pool_size``): the
    lease thread, the epoch loop and a server's request threads each take one while they work.
    """

    dialect = "sqlite"
    pool_size = 1

    def __init__(self, url: str, clock: Clock | None = None) -> None:
        self.url = url
        self.clock: Clock = clock or SystemClock()
        self._q = self._translate(_sql.queries(self.dialect))
        self._idle: list[Any] = []
        self._opened = 0
        self._cond = threading.Condition()
        self._idle.append(self._connect())
        self._opened = 1
        self._migrate()

    # backend hooks ------------------------------------------------------------------------
    def _connect(self) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def _begin(self, cur: Any, write: bool) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _translate(self, queries: dict[str, str]) -> dict[str, str]:
        return queries

    def _schema_version(self, cur: Any) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    # plumbing ------------------------------------------------------------------------------
    def _acquire(self) -> Any:
        with self._cond:
            while not self._idle and self._opened >= self.pool_size:
                self._cond.wait()
            if self._idle:
                return self._idle.pop()
            self._opened += 1
        try:
            return self._connect()
        except BaseException:
            with self._cond:
                self._opened -= 1
                self._cond.notify()
            raise

    def _release(self, conn: Any, broken: bool) -> None:
        with self._cond:
            if broken:
                self._opened -= 1
                with contextlib.suppress(Exception):
                    conn.close()
            else:
                self._idle.append(conn)
            self._cond.notify()

    def _is_disconnect(self, err: BaseException) -> bool:
        """Whether ``err`` means the connection is unusable (backends refine this)."""
        return False

    @contextlib.contextmanager
    def _tx(self, write: bool = True) -> Iterator[Any]:
        conn = self._acquire()
        broken = False
        try:
            cur = conn.cursor()
            self._begin(cur, write)
            try:
                yield cur
            except BaseException as e:
                broken = self._is_disconnect(e)
                if not broken:
                    conn.rollback()
                raise
            else:
                try:
                    conn.commit()
                except BaseException as e:
                    broken = self._is_disconnect(e)
                    raise
            finally:
                with contextlib.suppress(Exception):
                    cur.close()
        finally:
            self._release(conn, broken)

    def _locked_job(self, cur: Any, job_id: JobId) -> JobRecord:
        """The job's row, locked for this transaction (FOR UPDATE on PostgreSQL)."""
        row = self._x(cur, "lock_job", job_id=job_id).fetchone()
        if row is None:
            raise JobNotFound(job_id)
        return JobRecord.from_row(row)

    def _x(self, cur: Any, query: str, /, **params: Any) -> Any:
        cur.execute(self._q[query], params)
        return cur

    def close(self) -> None:
        with self._cond:
            for conn in self._idle:
                conn.close()
            self._opened -= len(self._idle)
            self._idle.clear()

    def _migrate(self) -> None:
        with self._tx() as cur:
            cur.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations "
                "(version BIGINT PRIMARY KEY, applied_at DOUBLE PRECISION NOT NULL)"
            )
            self._migrate_in(cur)

    def _migrate_in(self, cur: Any) -> None:
        """Apply the migrations newer than the schema's version, inside ``cur``'s transaction."""
        current = self._schema_version(cur)
        for number, script in _sql.migrations():
            if number <= current:
                continue
            for statement in _sql.split_statements(script):
                cur.execute(statement)
            cur.execute(
                self._translate({"m": "INSERT INTO schema_migrations VALUES (:v, :t)"})["m"],
                {"v": number, "t": self.clock.now()},
            )

    # jobs ----------------------------------------------------------------------------------
    def create_job(
        self, job_id: JobId, name: str, spec: dict[str, Any], config: dict[str, Any]
    ) -> tuple[JobRecord, bool]:
        with self._tx() as cur:
            return self._create_job_in(cur, job_id, name, spec, config)

    def create_jobs(self, jobs: Sequence[NewJob]) -> list[tuple[JobRecord, bool]]:
        if not jobs:
            return []
        with self._tx() as cur:
            return [self._create_job_in(cur, *job) for job in jobs]

    def _create_job_in(
        self, cur: Any, job_id: JobId, name: str, spec: dict[str, Any], config: dict[str, Any]
    ) -> tuple[JobRecord, bool]:
        now = self.clock.now()
        # The primary key decides: of concurrent callers exactly one inserts.
        created = (
            self._x(
                cur,
                "insert_job",
                job_id=job_id,
                name=name,
                state=str(JobState.CREATED),
                spec=json.dumps(spec, sort_keys=True),
                now=now,
            ).rowcount
            == 1
        )
        if created:
            self._x(
                cur,
                "insert_control_version",
                job_id=job_id,
                version=0,
                config=json.dumps(config, sort_keys=True),
                reason="declared defaults",
                now=now,
            )
        row = self._x(cur, "get_job", job_id=job_id).fetchone()
        return JobRecord.from_row(row), created

    def get_job(self, job_id: JobId) -> JobRecord:
        with self._tx(write=False) as cur:
            row = self._x(cur, "get_job", job_id=job_id).fetchone()
        if row is None:
            raise JobNotFound(job_id)
        return JobRecord.from_row(row)

    def list_jobs(self, state: JobState | None = None) -> list[JobRecord]:
        with self._tx(write=False) as cur:
            rows = self._x(cur, "list_jobs").fetchall()
        jobs = [JobRecord.from_row(r) for r in rows]
        return [j for j in jobs if state is None or j.state == state]

    def set_job_state(self, job_id: JobId, state: JobState, error: str | None = None) -> JobRecord:
        with self._tx() as cur:
            check_transition(self._locked_job(cur, job_id).state, state)
            self._x(
                cur,
                "set_job_state",
                job_id=job_id,
                state=str(state),
                error=error,
                now=self.clock.now(),
            )
            row = self._x(cur, "get_job", job_id=job_id).fetchone()
        return JobRecord.from_row(row)

    def set_job_spec(self, job_id: JobId, spec: dict[str, Any]) -> None:
        with self._tx() as cur:
            self._x(
                cur,
                "set_job_spec",
                job_id=job_id,
                spec=json.dumps(spec, sort_keys=True),
                now=self.clock.now(),
            )

    # attempts ------------------------------------------------------------------------------
    def start_attempt(
        self,
        job_id: JobId,
        owner: Owner,
        lease_ttl: float,
        expected_current: AttemptNo,
        previous_dead: bool = False,
        restart: bool = False,
        state: AttemptState = AttemptState.RUNNING,
        log_path: str | None = None,
        leader: tuple[str, int] | None = None,
    ) -> AttemptRecord:
        now = self.clock.now()
        with self._tx() as cur:
            if (
                leader is not None
                and not self._x(
                    cur, "check_leader", holder=leader[0], token=leader[1], now=now
                ).fetchone()
            ):
                raise NotLeader(f"leader lease {leader[1]} of {leader[0]} is no longer held")
            job = self._locked_job(cur, job_id)
            if job.state.terminal and not restart:
                raise JobTerminal(job_id, str(job.state))
            if job.state == JobState.CANCELING:
                raise DuplicateJob(job_id, "it is being canceled")
            if job.current_attempt != expected_current:
                raise DuplicateJob(job_id, f"attempt {job.current_attempt} started meanwhile")
            if job.current_attempt > 0:
                prev_row = self._x(
                    cur, "get_attempt", job_id=job_id, attempt=job.current_attempt
                ).fetchone()
                prev = AttemptRecord.from_row(prev_row)
                running = prev.state in (AttemptState.RUNNING, AttemptState.STARTING)
                if running and prev.lease_expires_at > now and not previous_dead:
                    raise DuplicateJob(
                        job_id,
                        f"attempt {prev.attempt} runs as pid {prev.owner.pid} on "
                        f"{prev.owner.host}, lease valid for "
                        f"{prev.lease_expires_at - now:.1f}s",
                    )
                if running:
                    # Whatever that process still does, it can no longer decide an epoch.
                    self._x(
                        cur,
                        "end_attempt",
                        job_id=job_id,
                        attempt=prev.attempt,
                        state=str(AttemptState.SUPERSEDED),
                        error="superseded by a newer attempt",
                        now=now,
                    )
            new = AttemptNo(job.current_attempt + 1)
            if job.state not in (JobState.CREATED, JobState.RESTARTING):
                # RUNNING (a dead attempt being replaced) or terminal (an explicit restart):
                # pass through RESTARTING so that the table is respected.
                check_transition(job.state, JobState.RESTARTING)
            changed = self._x(
                cur,
                "set_current_attempt",
                job_id=job_id,
                attempt=new,
                state=str(JobState.RUNNING),
                expected=expected_current,
                now=now,
            ).rowcount
            if changed != 1:
                raise DuplicateJob(job_id, "another attempt started meanwhile")
            self._x(
                cur,
                "insert_attempt",
                job_id=job_id,
                attempt=new,
                state=str(state),
                host=owner.host,
                pid=owner.pid,
                pid_started=owner.pid_started,
                lease_expires_at=now + lease_ttl,
                now=now,
                log_path=log_path,
            )
            arow = self._x(cur, "get_attempt", job_id=job_id, attempt=new).fetchone()
        return AttemptRecord.from_row(arow)

    def claim_attempt(
        self, job_id: JobId, attempt: AttemptNo, owner: Owner, lease_ttl: float
    ) -> AttemptRecord:
        now = self.clock.now()
        with self._tx() as cur:
            n = self._x(
                cur,
                "claim_attempt",
                job_id=job_id,
                attempt=attempt,
                host=owner.host,
                pid=owner.pid,
                pid_started=owner.pid_started,
                lease_expires_at=now + lease_ttl,
            ).rowcount
            row = self._x(cur, "get_attempt", job_id=job_id, attempt=attempt).fetchone()
        if n != 1 or row is None:
            state = "missing" if row is None else AttemptRecord.from_row(row).state
            raise StaleAttempt(
                f"attempt {attempt} of job {job_id!r} cannot be claimed: it is {state} "
                "or no longer the current attempt"
            )
        return AttemptRecord.from_row(row)

    def set_attempt_owner(self, job_id: JobId, attempt: AttemptNo, owner: Owner) -> None:
        with self._tx() as cur:
            self._x(
                cur,
                "set_attempt_owner",
                job_id=job_id,
                attempt=attempt,
                host=owner.host,
                pid=owner.pid,
                pid_started=owner.pid_started,
            )

    def request_cancel(self, job_id: JobId) -> JobRecord:
        now = self.clock.now()
        with self._tx() as cur:
            job = self._locked_job(cur, job_id)
            if job.state.terminal:
                raise JobTerminal(job_id, str(job.state))
            if job.state != JobState.CANCELING:
                # Nothing runs for CREATED and RESTARTING jobs: they end at once. A RUNNING job
                # is asked to stop after its current epoch (the driver sees CANCELING).
                target = JobState.CANCELING if job.state == JobState.RUNNING else JobState.CANCELED
                check_transition(job.state, target)
                self._x(cur, "request_cancel", job_id=job_id, state=str(target), now=now)
                if target == JobState.CANCELED and job.current_attempt:
                    self._x(
                        cur,
                        "end_attempt",
                        job_id=job_id,
                        attempt=job.current_attempt,
                        state=str(AttemptState.CANCELED),
                        error=None,
                        now=now,
                    )
            row = self._x(cur, "get_job", job_id=job_id).fetchone()
        return JobRecord.from_row(row)

    def set_failures(self, job_id: JobId, failures: int, next_attempt_at: float | None) -> None:
        with self._tx() as cur:
            self._x(
                cur,
                "set_failures",
                job_id=job_id,
                failures=failures,
                next_attempt_at=next_attempt_at,
                now=self.clock.now(),
            )

    def restart_job(self, job_id: JobId, spec: dict[str, Any]) -> JobRecord:
        """An ended job goes to RESTARTING (with ``spec``) for the manager to start anew."""
        with self._tx() as cur:
            job = self._locked_job(cur, job_id)
            if job.state.terminal:
                check_transition(job.state, JobState.RESTARTING)
                self._x(
                    cur,
                    "restart_job",
                    job_id=job_id,
                    spec=json.dumps(spec, sort_keys=True),
                    now=self.clock.now(),
                )
            row = self._x(cur, "get_job", job_id=job_id).fetchone()
        return JobRecord.from_row(row)

    def attempt_failed(
        self,
        job_id: JobId,
        attempt: AttemptNo,
        error: str,
        next_attempt_at: float | None,
        count: bool = True,
    ) -> JobRecord:
        """End ``attempt`` FAILED and move its job on: RESTARTING at ``next_attempt_at``,
        FAILED when that is None, CANCELED if a cancel was asked for. A no-op for the job if
        ``attempt`` is no longer its current one."""
        now = self.clock.now()
        with self._tx() as cur:
            job = self._locked_job(cur, job_id)
            self._x(
                cur,
                "end_attempt",
                job_id=job_id,
                attempt=attempt,
                state=str(AttemptState.FAILED),
                error=error,
                now=now,
            )
            if job.current_attempt == attempt and not job.state.terminal:
                if job.state == JobState.CANCELING:
                    target, nxt = JobState.CANCELED, None
                elif next_attempt_at is None:
                    target, nxt = JobState.FAILED, None
                else:
                    target, nxt = JobState.RESTARTING, next_attempt_at
                check_transition(job.state, target)
                self._x(
                    cur,
                    "fail_job_attempt",
                    job_id=job_id,
                    state=str(target),
                    failures=job.failures + (1 if count else 0),
                    next_attempt_at=nxt,
                    error=error,
                    now=now,
                )
            row = self._x(cur, "get_job", job_id=job_id).fetchone()
        return JobRecord.from_row(row)

    # leadership ----------------------------------------------------------------------------
    def acquire_leadership(self, holder: str, address: str, ttl: float) -> LeaderLease | None:
        """Take (or keep) the leader lease if it is free or ours; None if another holds it."""
        now = self.clock.now()
        with self._tx() as cur:
            self._x(cur, "insert_leader", holder=holder, address=address, expires_at=now + ttl)
            self._x(
                cur,
                "take_leader",
                holder=holder,
                address=address,
                expires_at=now + ttl,
                now=now,
            )
            row = self._x(cur, "get_leader").fetchone()
        lease = LeaderLease.from_row(row)
        return lease if lease.holder == holder and lease.expires_at > now else None

    def renew_leadership(self, holder: str, token: int, ttl: float) -> bool:
        now = self.clock.now()
        with self._tx() as cur:
            n = self._x(
                cur, "renew_leader", holder=holder, token=token, expires_at=now + ttl, now=now
            ).rowcount
        return bool(n == 1)

    def resign_leadership(self, holder: str, token: int) -> None:
        with self._tx() as cur:
            self._x(cur, "resign_leader", holder=holder, token=token, now=self.clock.now())

    def get_leader(self) -> LeaderLease | None:
        with self._tx(write=False) as cur:
            row = self._x(cur, "get_leader").fetchone()
        return None if row is None else LeaderLease.from_row(row)

    def counts(self) -> dict[str, int]:
        """Totals for metrics: attempts started, epochs committed."""
        with self._tx(write=False) as cur:
            attempts = int(self._x(cur, "count_attempts").fetchone()[0])
            epochs = int(self._x(cur, "count_committed_epochs").fetchone()[0])
        return {"attempts": attempts, "epochs_committed": epochs}

    def get_attempt(self, job_id: JobId, attempt: AttemptNo) -> AttemptRecord | None:
        with self._tx(write=False) as cur:
            row = self._x(cur, "get_attempt", job_id=job_id, attempt=attempt).fetchone()
        return None if row is None else AttemptRecord.from_row(row)

    def list_attempts(self, job_id: JobId) -> list[AttemptRecord]:
        with self._tx(write=False) as cur:
            rows = self._x(cur, "list_attempts", job_id=job_id).fetchall()
        return [AttemptRecord.from_row(r) for r in rows]

    def renew_lease(self, job_id: JobId, attempt: AttemptNo, lease_ttl: float) -> bool:
        now = self.clock.now()
        with self._tx() as cur:
            n = self._x(
                cur,
                "renew_lease",
                job_id=job_id,
                attempt=attempt,
                lease_expires_at=now + lease_ttl,
                now=now,
            ).rowcount
        return bool(n == 1)

    def end_attempt(
        self, job_id: JobId, attempt: AttemptNo, state: AttemptState, error: str | None = None
    ) -> None:
        with self._tx() as cur:
            self._x(
                cur,
                "end_attempt",
                job_id=job_id,
                attempt=attempt,
                state=str(state),
                error=error,
                now=self.clock.now(),
            )

    # control -------------------------------------------------------------------------------
    def control_snapshot(
        self, job_id: JobId, version: ControlVersion | None = None
    ) -> ControlSnapshot:
        with self._tx(write=False) as cur:
            if version is None:
                row = self._x(cur, "get_job", job_id=job_id).fetchone()
                if row is None:
                    raise JobNotFound(job_id)
                version = ControlVersion(int(row[5]))
            crow = self._x(cur, "get_control_version", job_id=job_id, version=version).fetchone()
        if crow is None:
            raise JobNotFound(f"{job_id} (control version {version})")
        return ControlSnapshot(ControlVersion(int(crow[0])), json.loads(crow[1]))

    def declare_defaults(self, job_id: JobId, defaults: dict[str, Any]) -> ControlSnapshot:
        now = self.clock.now()
        with self._tx() as cur:
            version = int(self._locked_job(cur, job_id).control_version)
            crow = self._x(cur, "get_control_version", job_id=job_id, version=version).fetchone()
            current = json.loads(crow[1])
            if current == defaults:
                return ControlSnapshot(ControlVersion(version), current)
            new = version + 1
            self._x(
                cur,
                "insert_control_version",
                job_id=job_id,
                version=new,
                config=json.dumps(defaults, sort_keys=True),
                reason="declared defaults changed",
                now=now,
            )
            self._x(cur, "set_control_version", job_id=job_id, version=new, now=now)
        return ControlSnapshot(ControlVersion(new), dict(defaults))

    # epochs --------------------------------------------------------------------------------
    def pin_epoch(
        self, job_id: JobId, epoch: Epoch, attempt: AttemptNo, control_version: ControlVersion
    ) -> EpochRecord:
        with self._tx() as cur:
            self._x(
                cur,
                "pin_epoch",
                job_id=job_id,
                epoch=epoch,
                attempt=attempt,
                control_version=control_version,
                now=self.clock.now(),
            )
            row = self._x(cur, "get_epoch", job_id=job_id, epoch=epoch).fetchone()
        return EpochRecord.from_row(row)

    def decide_epoch(
        self, job_id: JobId, epoch: Epoch, attempt: AttemptNo, rows_in: int, final: bool
    ) -> EpochRecord:
        with self._tx() as cur:
            n = self._x(
                cur,
                "decide_epoch",
                job_id=job_id,
                epoch=epoch,
                attempt=attempt,
                rows_in=rows_in,
                final=int(final),
                now=self.clock.now(),
            ).rowcount
            row = self._x(cur, "get_epoch", job_id=job_id, epoch=epoch).fetchone()
        rec = EpochRecord.from_row(row) if row is not None else None
        if n == 1 and rec is not None:
            return rec
        if rec is not None and rec.state != EpochState.PINNED and rec.decided_by == attempt:
            return rec  # decided by this very attempt before: idempotent
        raise StaleAttempt(
            f"attempt {attempt} of job {job_id!r} may not decide epoch {epoch}: "
            + ("it is not pinned" if rec is None else f"epoch is {rec.state}, ")
            + "or the attempt is no longer current / its lease lapsed"
        )

    def mark_epoch_committed(self, job_id: JobId, epoch: Epoch) -> None:
        with self._tx() as cur:
            self._x(cur, "commit_epoch", job_id=job_id, epoch=epoch, now=self.clock.now())

    def get_epoch(self, job_id: JobId, epoch: Epoch) -> EpochRecord | None:
        with self._tx(write=False) as cur:
            row = self._x(cur, "get_epoch", job_id=job_id, epoch=epoch).fetchone()
        return None if row is None else EpochRecord.from_row(row)

    def list_epochs(self, job_id: JobId, limit: int = 100) -> list[EpochRecord]:
        with self._tx(write=False) as cur:
            rows = self._x(cur, "list_epochs", job_id=job_id, limit=limit).fetchall()
        return [EpochRecord.from_row(r) for r in rows]

    def epochs_in_state(self, job_id: JobId, state: str) -> list[EpochRecord]:
        with self._tx(write=False) as cur:
            rows = self._x(
                cur, "list_epochs_in_state", job_id=job_id, state=str(EpochState(state))
            ).fetchall()
        return [EpochRecord.from_row(r) for r in rows]

    # sink transactions ---------------------------------------------------------------------
    def record_txn(
        self,
        job_id: JobId,
        epoch: Epoch,
        sink: str,
        attempt: AttemptNo,
        state: TxnState,
        detail: dict[str, Any],
    ) -> None:
        with self._tx() as cur:
            self._x(
                cur,
                "upsert_txn",
                job_id=job_id,
                epoch=epoch,
                sink=sink,
                attempt=attempt,
                state=str(state),
                detail=json.dumps(detail, sort_keys=True),
                now=self.clock.now(),
            )

    def list_txns(self, job_id: JobId, state: TxnState | None = None) -> list[SinkTxn]:
        with self._tx(write=False) as cur:
            if state is None:
                rows = self._x(cur, "list_txns", job_id=job_id).fetchall()
            else:
                rows = self._x(
                    cur, "list_txns_in_state", job_id=job_id, state=str(state)
                ).fetchall()
        return [SinkTxn.from_row(r) for r in rows]
