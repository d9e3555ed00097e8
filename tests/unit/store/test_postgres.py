"""stoker.store.postgres: how the shared named queries become psycopg queries."""

from __future__ import annotations

import re

from stoker.store import _sql
from stoker.store.postgres import PostgresStore


def _translate(queries: dict[str, str]) -> dict[str, str]:
    # _translate needs no connection: call it on a bare instance.
    return PostgresStore.__new__(PostgresStore)._translate(queries)


def test_named_parameters_become_pyformat() -> None:
    out = _translate({"q": "UPDATE t SET a = :a_1, b = :b WHERE c = :a_1"})
    assert out == {"q": "UPDATE t SET a = %(a_1)s, b = %(b)s WHERE c = %(a_1)s"}


def test_casts_and_literal_percent_signs_survive() -> None:
    out = _translate({"q": "SELECT x::text FROM t WHERE n LIKE 'a%' AND y = :y"})
    assert out == {"q": "SELECT x::text FROM t WHERE n LIKE 'a%%' AND y = %(y)s"}


def test_every_postgres_query_is_fully_translated() -> None:
    for name, query in _translate(_sql.queries("postgres")).items():
        assert re.search(r"(?<![:\w]):[a-z_]", query) is None, name


def test_postgres_overrides_only_replace_shared_queries() -> None:
    # A misspelt override would add a query nobody runs and leave the shared one in force.
    assert set(_sql.queries("postgres")) == set(_sql.queries("sqlite"))
    assert _sql.queries("postgres")["lock_job"].endswith("FOR UPDATE")
    assert "FOR SHARE OF j" in _sql.queries("postgres")["decide_epoch"]


def test_postgres_decide_epoch_is_the_shared_one_plus_the_job_row_lock() -> None:
    # The override must follow any change to the shared fence; only the lock may differ.
    def words(query: str) -> list[str]:
        return query.replace("(", " ( ").replace(")", " ) ").split()

    shared = words(_sql.queries("sqlite")["decide_epoch"])
    own = words(_sql.queries("postgres")["decide_epoch"])
    assert own[-5:] == ["FOR", "SHARE", "OF", "j", ")"]
    assert [*own[:-5], ")"] == shared
