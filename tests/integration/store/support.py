"""Names and helpers shared by the store contract tests."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import psycopg

from stoker.store import AttemptRecord, JobRecord, Owner, Store
from stoker.types import AttemptNo, JobId, JobKind, job_id

T = TypeVar("T")
OpenStore = Callable[[], Store]

T0 = 1_000_000.0  # the ManualClock's start
TTL = 10.0
JOB = job_id("job-1")
OTHER = job_id("job-2")
OWNER = Owner(host="host-a", pid=101, pid_started="boot-1")
OWNER_B = Owner(host="host-b", pid=202, pid_started="boot-2")
SPEC = {"source": {"kind": "generator", "rows": 10}, "sinks": ["pg"]}
CONFIG = {"batch_rows": 100, "rate": 1.5}


def race(n: int, work: Callable[[int], T]) -> list[T | BaseException]:
    """Run ``work(0..n-1)`` on n threads released together; each result or its exception."""
    barrier = threading.Barrier(n, timeout=60)

    def one(i: int) -> T | BaseException:
        barrier.wait()
        try:
            return work(i)
        except Exception as e:  # collected and asserted on by the caller
            return e

    with ThreadPoolExecutor(max_workers=n) as pool:
        return list(pool.map(one, range(n)))


def raw_rows(url: str, query: str) -> list[tuple[Any, ...]]:
    """Rows of ``query`` read around the store, straight from the database."""
    if url.startswith("sqlite:///"):
        conn = sqlite3.connect(url[len("sqlite:///") :])
        try:
            return [tuple(r) for r in conn.execute(query).fetchall()]
        finally:
            conn.close()
    with psycopg.connect(url) as pconn:
        return [tuple(r) for r in pconn.execute(query.encode()).fetchall()]


def running_job(store: Store) -> AttemptRecord:
    store.create_job(JOB, "orders", SPEC, CONFIG)
    return store.start_attempt(JOB, OWNER, TTL, expected_current=AttemptNo(0))


def raw_execute(url: str, statement: str) -> None:
    """Run ``statement`` around the store, straight on the database, and commit it."""
    if url.startswith("sqlite:///"):
        conn = sqlite3.connect(url[len("sqlite:///") :])
        try:
            with conn:
                conn.execute(statement)
        finally:
            conn.close()
        return
    with psycopg.connect(url) as pconn:
        pconn.execute(statement.encode())


# Applications (issue 10): an application record, and jobs its driver runs.
APP = job_id("app-1")
APP_B = job_id("app-2")
APP_JOB = job_id("app-1.orders")
APP_SPEC = {"kind": "application", "entrypoint": "/apps/main.py", "args": [], "cluster": "local"}


def running_app(store: Store, app: JobId = APP, ttl: float = TTL) -> AttemptRecord:
    """An application with its driver's attempt 1 RUNNING."""
    store.create_job(app, app, APP_SPEC, {}, kind=JobKind.APPLICATION)
    return store.start_attempt(app, OWNER, ttl, expected_current=AttemptNo(0))


def app_job(store: Store, jid: JobId = APP_JOB, app: JobId = APP) -> JobRecord:
    """A job of ``app`` (which must exist), not started."""
    spec = {"kind": "in_app", "app_id": app, **SPEC}
    return store.create_job(jid, "orders", spec, CONFIG, app_id=app)[0]
