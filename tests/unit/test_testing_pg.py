"""tests.pg: the throwaway server the suite runs against (started once per session)."""

from __future__ import annotations

import psycopg
import pytest

from tests.pg import ThrowawayPostgres, find_postgres_bin


def _databases(server: ThrowawayPostgres) -> set[str]:
    with psycopg.connect(server.dsn_for("postgres")) as conn:
        return {r[0] for r in conn.execute("SELECT datname FROM pg_database").fetchall()}


def test_server_is_configured_for_the_suite(pg_server: ThrowawayPostgres) -> None:
    assert pg_server.dsn == f"postgresql://{pg_server.user}@127.0.0.1:{pg_server.port}/stoker"
    with psycopg.connect(pg_server.dsn) as conn:
        settings: dict[str, str] = dict(
            conn.execute(
                "SELECT name, setting FROM pg_settings WHERE name IN "
                "('max_prepared_transactions', 'max_connections', 'fsync', 'listen_addresses')"
            ).fetchall()
        )
    assert settings == {
        "max_prepared_transactions": "64",
        "max_connections": "200",
        "fsync": "off",
        "listen_addresses": "127.0.0.1",
    }


def test_drop_database_rolls_back_prepared_transactions(pg_server: ThrowawayPostgres) -> None:
    dsn = pg_server.create_database("testing_pg_prepared")
    left_open = psycopg.connect(dsn)
    left_open.execute("CREATE TABLE t (a INT)")
    left_open.commit()
    left_open.tpc_begin("stoker-test-gid")
    left_open.execute("INSERT INTO t VALUES (1)")
    left_open.tpc_prepare()

    pg_server.drop_database("testing_pg_prepared")

    assert "testing_pg_prepared" not in _databases(pg_server)
    with psycopg.connect(pg_server.dsn_for("postgres")) as conn:
        assert conn.execute("SELECT count(*) FROM pg_prepared_xacts").fetchone() == (0,)
    left_open.close()


@pytest.mark.parametrize("name", ["", "Upper", "1abc", "a-b", "a;drop", "x" * 64])
def test_database_names_are_plain_identifiers(pg_server: ThrowawayPostgres, name: str) -> None:
    with pytest.raises(ValueError, match="database name"):
        pg_server.create_database(name)


def test_postgres_binaries_are_found_together() -> None:
    folder = find_postgres_bin()
    assert {p.name for p in folder.iterdir()} >= {"initdb", "pg_ctl", "postgres"}
