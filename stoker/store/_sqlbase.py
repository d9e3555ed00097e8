"""The shared plumbing of the SQL store: connection pool, transactions, named queries and
migrations. One mixin per concept (``sql_jobs``, ``sql_attempts``, ...) builds on it."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from stoker.clock import Clock, SystemClock
from stoker.errors import InvalidTransition, JobNotFound, StoreError
from stoker.store import _schema, _sql
from stoker.store.records import AttemptRecord, JobRecord, Owner
from stoker.types import ATTEMPTS, AttemptNo, AttemptState, JobId


def owner_params(owner: Owner) -> dict[str, Any]:
    """A process's identity as the queries' ``:host``, ``:pid`` and ``:pid_started``."""
    return {"host": owner.host, "pid": owner.pid, "pid_started": owner.pid_started}


class SqlBase:
    """What every concept's mixin runs on, over any DB-API backend.

    A backend subclass provides ``_connect()``, ``_begin(cur, write)`` and ``dialect``; every
    store method runs in one transaction (``_tx``) on a connection of a small pool
    (``pool_size``): the lease thread, the epoch loop and a server's request threads each take
    one while they work.
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

    def _is_db_error(self, err: BaseException) -> bool:
        """Whether ``err`` is the database driver's own error (backends say which class)."""
        return False

    def _store_error(self, err: BaseException) -> StoreError:
        """The :class:`StoreError` for the driver error ``err`` (backends word it)."""
        return StoreError(f"store {self.url} failed: {err}")

    def _is_unique_violation(self, err: BaseException) -> bool:
        """Whether ``err`` is a unique or primary key violation (backends refine this)."""
        return False

    @contextlib.contextmanager
    def _tx(self, write: bool = True) -> Iterator[Any]:
        """One transaction on a pooled connection: committed if the body returns, rolled back
        if it raises.

        The one place where database errors meet the rest of stoker: a driver error leaving
        here (locked, server gone, connection lost, not a database) becomes a
        :class:`StoreError` naming the store and the cause; stoker's own errors pass as they
        are. A unique violation that means something to the caller is turned into its domain
        error by the method, inside the body, before it gets here.
        """
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
                    try:
                        conn.rollback()
                    except Exception as rollback_error:
                        if not self._is_db_error(rollback_error):
                            raise
                        broken = True  # the body's error is the one to report
                raise
            else:
                try:
                    conn.commit()
                except BaseException:
                    # Whatever the commit left open on this connection, a new one starts clean.
                    broken = True
                    raise
            finally:
                with contextlib.suppress(Exception):
                    cur.close()
        except Exception as e:
            if self._is_db_error(e):
                raise self._store_error(e) from e
            raise
        finally:
            self._release(conn, broken)

    def _locked_job(self, cur: Any, job_id: JobId) -> JobRecord:
        """The job's row, locked for this transaction (FOR UPDATE on PostgreSQL)."""
        row = self._x(cur, "lock_job", job_id=job_id).fetchone()
        if row is None:
            raise JobNotFound(job_id)
        return JobRecord.from_row(row)

    def _end_attempt_in(
        self,
        cur: Any,
        job_id: JobId,
        attempt: AttemptNo,
        state: AttemptState,
        error: str | None,
        now: float,
        cause: str | None = None,
    ) -> bool:
        """End ``attempt`` as ``state`` inside ``cur``'s transaction; whether it moved.
        ``cause``: whose failure it was (stoker.restart.FailureCause), for a FAILED end; None:
        the cause recorded while it ran (``note_main_raised``), else the job's own.

        The attempt's row is read (locked on PostgreSQL) and the move checked against
        ``ATTEMPT_TRANSITIONS``: a live attempt that may not become ``state`` is
        :class:`~stoker.errors.InvalidTransition`. An attempt that has ended already, or that
        does not exist, is left as it is (ends are idempotent: two managers, or a driver and
        its manager, may both end it). Shared by jobs (a cancel) and attempts.
        """
        if not state.ended:
            raise InvalidTransition(f"an attempt cannot be ended as {state}: not an end state")
        row = self._x(cur, "lock_attempt", job_id=job_id, attempt=attempt).fetchone()
        if row is None:
            return False
        rec = AttemptRecord.from_row(row)
        current = rec.state
        if current.ended:
            return False
        ATTEMPTS.check(current, state)
        if cause is None and state == AttemptState.FAILED:
            # What was recorded while it ran (an application's main raised), else the job's.
            cause = rec.cause or "job"
        self._x(
            cur,
            "end_attempt",
            job_id=job_id,
            attempt=attempt,
            state=str(state),
            error=error,
            now=now,
            from_state=str(current),
            cause=cause,
        )
        return True

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

    def _migrations(self) -> list[tuple[int, str]]:
        """The migrations this stoker knows, in order (a test may add one of its own)."""
        return _sql.migrations()

    def _migrate_in(self, cur: Any) -> None:
        """Apply the migrations newer than the schema's version, inside ``cur``'s transaction.

        A store ahead of this stoker is used as it is if what this stoker does not know is
        expand-only, refused otherwise (:class:`~stoker.errors.StoreTooNew`); a contract
        migration is not applied under a manager of an older stoker
        (:class:`~stoker.errors.MigrationRefused`). Both leave the store unchanged."""
        current = self._schema_version(cur)
        known = self._migrations()
        newest = known[-1][0] if known else 0

        def query(name: str, params: dict[str, Any]) -> list[Any]:
            return list(self._x(cur, name, **params).fetchall())

        if current > newest:
            _schema.refuse_if_too_new(self.url, current, newest, query)
            return
        pending = [(n, s, _schema.kind_of(n, s)) for n, s in known if n > current]
        if not pending:
            return
        if current >= _schema.VERSIONED_FROM:  # older stores have no versions to compare
            kinds = [(n, kind) for n, _, kind in pending]
            _schema.refuse_contract_under_older(self.url, kinds, self.clock.now(), query)
        now = self.clock.now()
        for number, script, _ in pending:
            for statement in _sql.split_statements(script):
                cur.execute(statement)
            self._x(cur, "record_migration", version=number, now=now)
        if pending[-1][0] >= _schema.VERSIONED_FROM:  # the columns exist now
            version = _schema.stoker_version()
            for number, _, kind in pending:
                self._x(
                    cur,
                    "describe_migration",
                    version=number,
                    kind=kind,
                    stoker_version=version,
                )
