"""A source reader that cannot read its job's control state fails the trigger.

Planning without the control state would ignore a pause and every rate limit: an endless
generator without a limit of its own would plan 10,000,000 rows, and Spark would log that
offset and replay it as it is. The reader raises instead, so the micro-batch fails with a
clear error and the job's restart policy decides what next. Real stores: an SQLite file whose
folder became a file, and a PostgreSQL database dropped while the reader runs.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from stoker.errors import SourceError
from stoker.sources.generator import GeneratorDataSource
from stoker.store import Store, open_store
from stoker.types import ControlKind, job_id
from tests.pg import ThrowawayPostgres

JOB = job_id("unreadable")


def _paused_job(store: Store) -> None:
    store.create_job(JOB, "p", {}, {})
    store.add_control(JOB, ControlKind.PAUSE, {}, sender="ops")


def _endless_reader(url: str) -> Any:
    """A generator with neither a total nor a limit of its own: only control holds it back."""
    source: Any = GeneratorDataSource({"sid": "s0", "job_id": JOB, "store_url": url})
    return source.streamReader(None)


def _assert_fails_the_trigger(reader: Any, start: dict[str, Any]) -> None:
    with pytest.raises(SourceError) as e:
        reader.latestOffset(start, reader.getDefaultReadLimit())
    assert str(e.value).startswith(f"control: cannot read the control state of job {JOB}")
    assert "no epoch is planned without its pause and rate limits" in str(e.value)


def test_an_sqlite_store_gone_before_the_plan_fails_the_trigger(tmp_path: Path) -> None:
    folder = tmp_path / "state"
    store = open_store(folder / "store.db")
    try:
        _paused_job(store)
    finally:
        store.close()
    reader = _endless_reader(f"sqlite:///{folder / 'store.db'}")
    shutil.rmtree(folder)
    folder.write_text("not a folder any more")

    _assert_fails_the_trigger(reader, reader.initialOffset())


def test_a_postgres_store_gone_while_planning_fails_the_trigger(
    pg_server: ThrowawayPostgres,
) -> None:
    name = "unreadable_control"
    url = pg_server.create_database(name)
    try:
        store = open_store(url)
        try:
            _paused_job(store)
        finally:
            store.close()
        reader = _endless_reader(url)
        start = reader.initialOffset()
        paused = reader.latestOffset(start, reader.getDefaultReadLimit())
        assert paused["next"] == 0  # the empty epoch that applies the pause
        assert reader.latestOffset(paused, reader.getDefaultReadLimit()) == paused  # held

        pg_server.drop_database(name)

        _assert_fails_the_trigger(reader, paused)
        _assert_fails_the_trigger(reader, paused)  # and again at the next trigger
    finally:
        pg_server.drop_database(name)
