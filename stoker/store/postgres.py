"""PostgreSQL backend: the store for several job managers (high availability)."""

from __future__ import annotations

import re
from typing import Any

from stoker.clock import Clock
from stoker.errors import StoreError
from stoker.store._sqlstore import SqlStore

_PARAM = re.compile(r"(?<![:\w]):([a-z_][a-z0-9_]*)")


# A store transaction is a few statements with only stoker's own Python between them: one whose
# session sits idle inside it this long belongs to a process that stopped (SIGSTOP, a frozen
# VM) or hung there. The server then ends that session, which rolls its transaction back and
# frees the rows it locked: otherwise every writer of those rows (the leader failing the
# frozen driver's attempt, whose tick then waits for good) waits until it is continued.
IDLE_TX_TIMEOUT = 30.0


class PostgresStore(SqlStore):
    """Store in a PostgreSQL database given by a ``postgresql://`` URL."""

    dialect = "postgres"
    pool_size = 8  # a manager serves requests in parallel; PostgreSQL runs them in parallel

    def __init__(
        self, dsn: str, clock: Clock | None = None, idle_tx_timeout: float = IDLE_TX_TIMEOUT
    ) -> None:
        self.idle_tx_timeout = idle_tx_timeout
        super().__init__(dsn, clock)

    def _connect(self) -> Any:
        import psycopg

        try:
            conn = psycopg.connect(self.url, autocommit=False, connect_timeout=10)
        except psycopg.Error as e:
            raise StoreError(f"cannot connect to PostgreSQL store {_redact(self.url)}: {e}") from e
        try:
            # Set on the session, not in the URL's options (a user's own there stay theirs).
            ms = max(1, round(self.idle_tx_timeout * 1000))
            conn.execute(f"SET idle_in_transaction_session_timeout = {ms}")
            conn.commit()
        except psycopg.Error as e:
            conn.close()
            raise StoreError(f"cannot set up PostgreSQL store {_redact(self.url)}: {e}") from e
        return conn

    def _is_disconnect(self, err: BaseException) -> bool:
        import psycopg

        return isinstance(err, psycopg.OperationalError)

    def _is_db_error(self, err: BaseException) -> bool:
        import psycopg

        return isinstance(err, psycopg.Error)

    def _is_unique_violation(self, err: BaseException) -> bool:
        import psycopg

        return isinstance(err, psycopg.errors.UniqueViolation)

    def _store_error(self, err: BaseException) -> StoreError:
        import psycopg

        why = (
            "is unavailable (server down or connection lost)"
            if isinstance(err, psycopg.OperationalError)
            else "failed"
        )
        text = str(err).strip()
        return StoreError(
            f"PostgreSQL store {_redact(self.url)} {why} ({type(err).__name__}: {text})"
        )

    def _translate(self, queries: dict[str, str]) -> dict[str, str]:
        # psycopg reads every '%' of a query given parameters as a placeholder: a literal one
        # (LIKE 'x%') must be doubled before ':name' becomes '%(name)s'.
        return {k: _PARAM.sub(r"%(\1)s", v.replace("%", "%%")) for k, v in queries.items()}

    def _begin(self, cur: Any, write: bool) -> None:
        # psycopg opens the transaction implicitly on the first statement.
        return None

    def _migrate(self) -> None:
        # Two managers starting at once must not both run a migration.
        with self._tx() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(74117)")
            cur.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations "
                "(version BIGINT PRIMARY KEY, applied_at DOUBLE PRECISION NOT NULL)"
            )
        with self._tx() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(74117)")
            super()._migrate_in(cur)

    def _schema_version(self, cur: Any) -> int:
        cur.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations")
        return int(cur.fetchone()[0])


def _redact(url: str) -> str:
    return re.sub(r"://([^:/@]+):[^@]*@", r"://\1:***@", url)
