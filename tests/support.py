"""Helpers shared by the integration and e2e tests: drivers as real processes, sink readers."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
APPS = Path(__file__).resolve().parent / "apps"
# C1 only and the serial collector: cheaper JVMs for a suite of short Spark runs on two cores
# (tests/conftest.py gives them to every Spark JVM the tests start).
LIGHT_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
# A driver's Java options in tests that set them: stoker's stack size (SPARK_FACTS) and LIGHT_JVM.
JVM_OPTS = f"-Xss16m {LIGHT_JVM}"


def stoker_cmd(*args: str) -> list[str]:
    """argv for the stoker CLI of this checkout."""
    return [sys.executable, "-m", "stoker.cli", *args]


def start_driver(
    app: Path, *args: str, env: dict[str, str] | None = None, log: Path | None = None
) -> subprocess.Popen[bytes]:
    """Start ``stoker run app`` as its own process group (so a kill takes the JVM with it)."""
    full_env = {**os.environ, **(env or {})}
    out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115 - handed to the child
    return subprocess.Popen(
        stoker_cmd("run", str(app), *args),
        env=full_env,
        stdout=out,
        stderr=subprocess.STDOUT if log else subprocess.DEVNULL,
        start_new_session=True,
        cwd=str(REPO),
    )


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the driver's whole process group and wait until the driver is gone."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    wait_group_gone(proc.pid)


def wait_group_gone(pgid: int, timeout: float = 30.0) -> None:
    """Wait until no process of group ``pgid`` is left (the JVM may outlive the driver)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        except PermissionError:
            return
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    raise AssertionError(f"process group {pgid} still alive after {timeout}s")


def file_sink_ids(path: Path, column: str = "id") -> Counter[int]:
    """Every value of ``column`` in the committed epochs of a files sink (parquet)."""
    import pyarrow.parquet as pq

    ids: Counter[int] = Counter()
    if not path.exists():
        return ids
    for epoch_dir in sorted(path.glob("epoch=*")):
        for f in sorted(epoch_dir.glob("*.parquet")):
            ids.update(pq.read_table(f, columns=[column]).column(column).to_pylist())
    return ids


def pg_ids(dsn: str, table: str, column: str = "id") -> Counter[int]:
    """Every value of ``column`` in a PostgreSQL table (committed rows only)."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(dsn) as conn:
        try:
            rows = conn.execute(
                sql.SQL("SELECT {} FROM {}").format(sql.Identifier(column), sql.Identifier(table))
            ).fetchall()
        except psycopg.errors.UndefinedTable:
            return Counter()
    return Counter(r[0] for r in rows)


def pg_prepared(dsn: str) -> list[str]:
    """gids of prepared transactions left in the database of ``dsn``."""
    import psycopg

    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT gid FROM pg_prepared_xacts WHERE database = current_database()"
        ).fetchall()
    return [r[0] for r in rows]


def exactly_once(ids: Counter[int], total: int) -> None:
    """Assert ``ids`` holds 0..total-1, each once, naming the first offenders."""
    dupes = sorted(k for k, v in ids.items() if v > 1)
    missing = sorted(set(range(total)) - set(ids))
    extra = sorted(set(ids) - set(range(total)))
    assert not dupes and not missing and not extra, (
        f"duplicates {dupes[:10]} ({len(dupes)}), missing {missing[:10]} ({len(missing)}), "
        f"unexpected {extra[:10]} ({len(extra)})"
    )


def wait_for(
    what: str | Callable[[], str], cond: Callable[[], Any], timeout: float, every: float = 0.5
) -> Any:
    """Poll ``cond`` until it returns something truthy; fail naming ``what`` after ``timeout``
    (a callable ``what`` is asked only then, for the details as they are at the timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            text = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {text}")
        time.sleep(every)
