"""Upgrading stoker itself (issue 39 item 5), with real processes: managers and drivers of the
previous stoker and of this checkout on one store.

- A stoker older than its store (the store holds a contract migration it does not know) is
  refused by the CLI and by ``stoker server`` with exit 2 and a message naming both versions,
  on SQLite and on PostgreSQL: no retry, nothing that reads as an outage.
- A contract migration is not applied while a manager of an older schema leads; once it is
  stopped the migration goes in, and that manager's stoker is then refused.
- The rolling upgrade: the previous stoker (this repository at the commit before migration
  0020, extracted with ``git archive`` into a temporary folder and run from there with
  ``PYTHONPATH``, so its ``stoker`` shadows this checkout's) runs a leader, a standby and two
  jobs on PostgreSQL. Its standby, then its leader, are replaced by this checkout's managers
  (the first migrates the store, expand only, under the older leader), then the managers are
  rolled back to the previous stoker on the migrated store. The drivers of the previous stoker
  run throughout: the same attempt and process, no failure counted, epochs committed after
  every step, every id once in each sink.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stoker.clock import SystemClock
from stoker.errors import MigrationRefused
from stoker.store import _sql
from stoker.store.postgres import PostgresStore
from stoker.store.sqlite import SqliteStore
from tests.support import JVM_OPTS, REPO, exactly_once, file_sink_ids, stoker_cmd, wait_for
from tests.support.manager import MANAGER_START, Manager, stop_all

NEWEST = _sql.migrations()[-1][0]
SPARK = 600.0  # cold Spark starts of two drivers on a loaded 2-core host
TTL_ARGS = {"lease_ttl": 5.0, "leader_ttl": 2.0}

APP = """\
from stoker import Pipeline, sinks, sources

pipeline = (
    Pipeline({name!r})
    .source(sources.generator(total=None, rows_per_second=20, max_rows_per_epoch=20, partitions=1))
    .sink(sinks.files({out!r}))
)
"""
CONF = {
    "stoker.master": "local[1]",
    "stoker.trigger": "500ms",
    "spark.driver.extraJavaOptions": JVM_OPTS,
}


def _url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    return str(request.getfixturevalue("pg_dsn"))


def _newer(url: str, kind: str) -> Any:
    """The store as a newer stoker opens it: one more migration, of ``kind``."""
    script = f"-- kind: {kind}\nCREATE TABLE future_{kind} (a BIGINT);\n"
    base: Any = PostgresStore if url.startswith("postgresql") else SqliteStore

    class Newer(base):
        def _migrations(self) -> list[tuple[int, str]]:
            return [*super()._migrations(), (NEWEST + 1, script)]

    return Newer(url if base is PostgresStore else url[len("sqlite:///") :], SystemClock())


def _cli(*args: str, env: dict[str, str] | None = None, cwd: Path = REPO) -> Any:
    return subprocess.run(
        stoker_cmd(*args),
        capture_output=True,
        text=True,
        timeout=MANAGER_START,
        cwd=str(cwd),
        env={**os.environ, **(env or {})},
    )


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_stoker_older_than_its_store_is_refused_by_the_cli_and_the_manager(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = _url(backend, tmp_path, request)
    _newer(url, "contract").close()  # a newer stoker migrated the store

    for argv in (
        ["list", "--store", url],
        ["server", "--store", url, "--state-dir", str(tmp_path / "m"), "--insecure-no-token"],
    ):
        done = _cli(*argv)
        assert done.returncode == 2, (argv, done.stdout, done.stderr)
        err = done.stderr
        assert f"has schema version {NEWEST + 1}, newer than this stoker (" in err, err
        assert f", schema {NEWEST}) can use: migration {NEWEST + 1} (contract, applied by " in err
        assert "against this store; nothing was changed" in err, err
        assert "unavailable" not in err and "Traceback" not in err, err


def test_a_contract_migration_waits_for_the_older_leader_to_stop(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    (tmp_path / "apps").mkdir()
    m = Manager("leader", url, tmp_path / "m", [tmp_path / "apps"], tmp_path / "m.log")
    try:
        m.wait_up()
        wait_for(
            "the manager to lead",
            lambda: (m.http.get("/v1/managers").json().get("leader") or {}).get("holder"),
            MANAGER_START,
        )
        with pytest.raises(MigrationRefused) as e:
            _newer(url, "contract")
        assert f"must apply migration {NEWEST + 1} (contract" in str(e.value)
        assert "the leader manager-" in str(e.value) and f"schema {NEWEST})" in str(e.value)
        # The manager leads on, on a store left as it was.
        assert m.health() is not None
        done = _cli("list", "--store", url)
        assert done.returncode == 0, done.stderr
    finally:
        m.stop()  # SIGTERM: it resigns the lease and forgets its row

    _newer(url, "contract").close()
    done = _cli("server", "--store", url, "--state-dir", str(tmp_path / "m"), "--insecure-no-token")
    assert done.returncode == 2 and "newer than this stoker" in done.stderr, done.stderr


# the rolling upgrade ---------------------------------------------------------------------------


def _previous_stoker(into: Path) -> Path:
    """This repository's ``stoker`` package as it was before migration 0020 (the stoker before
    this one recorded versions), or at ``$STOKER_PREVIOUS_REV``, extracted into ``into``."""
    rev = os.environ.get("STOKER_PREVIOUS_REV")
    if not rev:
        found = subprocess.run(
            ["git", "-C", str(REPO), "log", "--diff-filter=A", "--format=%H", "-1", "--",
             "stoker/store/sql/migrations/0020_stoker_versions.sql"],
            capture_output=True, text=True,
        )  # fmt: skip
        if found.returncode != 0 or not found.stdout.strip():
            pytest.skip(f"no git history to take the previous stoker from: {found.stderr}")
        rev = found.stdout.strip() + "^"
    tar = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", rev, "stoker"],
        capture_output=True,
        check=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        t.extractall(into, filter="data")
    assert not (
        into / "stoker" / "store" / "sql" / "migrations" / "0020_stoker_versions.sql"
    ).exists()
    return into


@contextlib.contextmanager
def _managers(store: str) -> Iterator[list[Manager]]:
    started: list[Manager] = []
    try:
        yield started
    finally:
        stop_all(started)


_T0 = [time.monotonic()]


def note(msg: str) -> None:
    """A progress line with the seconds since the scenario began (shown with ``pytest -s``)."""
    print(f"[{time.monotonic() - _T0[0]:6.1f}s] {msg}", flush=True)


def _sigterm(m: Manager) -> None:
    """Stop a manager as an operator does (SIGTERM): its drivers keep running."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(m.proc.pid, signal.SIGTERM)
    m.proc.wait(timeout=60)
    m.http.close()


def _job(m: Manager, jid: str) -> dict[str, Any]:
    r = m.http.get(f"/v1/jobs/{jid}")
    assert r.status_code == 200, r.text
    return dict(r.json())


def _leads(m: Manager) -> None:
    def leading() -> bool:
        assert m.proc.poll() is None, m.log_tail()
        lease = (m.health() and m.http.get("/v1/managers").json().get("leader")) or {}
        return bool(lease) and lease.get("address") == m.url

    wait_for(f"{m.name} to lead\n{m.log_tail()}", leading, MANAGER_START)


def _commits_on(m: Manager, jobs: dict[str, dict[str, Any]]) -> None:
    """Every job commits an epoch beyond the last one seen, in the same attempt and process."""
    for jid, seen in jobs.items():

        def further(jid: str = jid, seen: dict[str, Any] = seen) -> dict[str, Any] | None:
            job = _job(m, jid)
            last = job.get("last_epoch") or {}
            return job if last.get("committed_at") and last["epoch"] > seen["epoch"] else None

        job = wait_for(lambda jid=jid: f"{jid} to commit: {_job(m, jid)}", further, SPARK)
        assert job["state"] == "RUNNING", job
        assert job["attempt"]["attempt"] == seen["attempt"], job  # not restarted
        assert job["attempt"]["pid"] == seen["pid"], job
        assert job["failures"] == seen["failures"], job  # none counted
        seen["epoch"] = job["last_epoch"]["epoch"]
    note(
        f"committing under {m.name}: "
        + ", ".join(f"{j} epoch {v['epoch']}" for j, v in jobs.items())
    )


@pytest.mark.scenario
@pytest.mark.timeout(2400)
def test_managers_upgraded_in_place_and_rolled_back_under_running_drivers(
    tmp_path: Path, pg_dsn: str
) -> None:
    old = _previous_stoker(tmp_path / "previous")
    apps = tmp_path / "apps"
    apps.mkdir()
    previous = {"env": {"PYTHONPATH": str(old)}, "cwd": old}

    def manager(name: str, *, older: bool) -> Manager:
        m = Manager(
            name, pg_dsn, tmp_path / name, [apps], tmp_path / f"{name}.log",
            **TTL_ARGS, **(previous if older else {}),  # type: ignore[arg-type]
        )  # fmt: skip
        started.append(m)
        m.wait_up()
        return m

    _T0[0] = time.monotonic()
    with _managers(pg_dsn) as started:
        # The previous stoker: a leader, a standby, two jobs.
        a = manager("old-leader", older=True)
        _leads(a)
        b = manager("old-standby", older=True)
        outs = {}
        for name in ("alpha", "beta"):
            outs[name] = tmp_path / f"out-{name}"
            entry = apps / f"{name}.py"
            entry.write_text(APP.format(name=name, out=str(outs[name])))
            r = a.http.post("/v1/jobs", json={"entrypoint": str(entry), "conf": CONF})
            assert r.status_code == 201, r.text
        seen: dict[str, dict[str, Any]] = {}
        for name in outs:

            def committed(name: str = name) -> dict[str, Any] | None:
                job = _job(a, name)
                last = job.get("last_epoch") or {}
                return job if last.get("committed_at") and job.get("attempt") else None

            job = wait_for(lambda name=name: f"{name} to commit: {_job(a, name)}", committed, SPARK)
            seen[name] = {
                "attempt": job["attempt"]["attempt"],
                "pid": job["attempt"]["pid"],
                "epoch": job["last_epoch"]["epoch"],
                "failures": job["failures"],
            }
        # The drivers run the previous stoker's code (its managers' rows name no version).
        for name, job in seen.items():
            environ = Path(f"/proc/{job['pid']}/environ").read_bytes().split(b"\0")
            assert f"PYTHONPATH={old}".encode() in environ, name
        assert all("stoker_version" not in m for m in a.http.get("/v1/managers").json()["managers"])
        assert _schema_version(pg_dsn) == _newest_known(old) < NEWEST

        # 1. The standby first: this checkout's manager migrates the store (expand) under the
        #    previous stoker's leader, which leads on.
        _sigterm(b)
        b2 = manager("new-standby", older=False)
        assert _schema_version(pg_dsn) == NEWEST
        _leads(a)
        _commits_on(a, seen)

        # 2. Then the leader: the new standby takes over and adopts the previous drivers.
        _sigterm(a)
        t = time.monotonic()
        _leads(b2)
        note(f"the previous leader stopped: {b2.name} leads {time.monotonic() - t:.1f} s later")
        a2 = manager("new-second", older=False)
        _commits_on(b2, seen)
        rows = b2.http.get("/v1/managers").json()["managers"]
        assert sorted((r["stoker_version"], r["schema_version"]) for r in rows) == [
            (r["stoker_version"], NEWEST) for r in rows
        ], rows
        assert len(rows) == 2 and all(r["stoker_version"] for r in rows), rows

        # 3. Rollback: the previous stoker's manager on the migrated store.
        _sigterm(a2)
        _sigterm(b2)
        t = time.monotonic()
        c = manager("old-again", older=True)
        _leads(c)
        note(f"rolled back: {c.name} started and leads {time.monotonic() - t:.1f} s later")
        _commits_on(c, seen)
        listed = _cli("list", "--store", pg_dsn, env=previous["env"], cwd=old)  # type: ignore[arg-type]
        assert listed.returncode == 0, listed.stderr

        # Every id once: each job canceled, each sink counted.
        for name in outs:
            r = c.http.post(f"/v1/jobs/{name}/cancel")
            assert r.status_code == 202, r.text
        for name, out in outs.items():
            wait_for(
                lambda name=name: f"{name} to end: {_job(c, name)}",
                lambda name=name: _job(c, name)["state"] == "CANCELED",
                SPARK,
            )
            ids = file_sink_ids(out)
            assert ids, f"{name} wrote nothing"
            exactly_once(ids, max(ids) + 1)
            note(f"{name}: {len(ids)} ids, each once")
            attempts = c.http.get(f"/v1/jobs/{name}/attempts").json()
            assert max(x["attempt"] for x in attempts) == seen[name]["attempt"], attempts


def _schema_version(dsn: str) -> int:
    import psycopg

    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT MAX(version) FROM schema_migrations").fetchone()
    assert row is not None
    return int(row[0])


def _newest_known(old: Path) -> int:
    """The newest migration the previous stoker knows, as its own code says."""
    done = subprocess.run(
        [sys.executable, "-c", "import stoker.store._sql as s; print(s.migrations()[-1][0])"],
        capture_output=True, text=True, cwd=str(old), env={**os.environ, "PYTHONPATH": str(old)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return int(done.stdout)
