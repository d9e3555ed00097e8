"""A job that ends leaves nothing prepared (issue 7, item 6).

Real processes throughout: ``stoker server`` managers whose drivers are killed by the cancel
timeout or fail for good after their restarts, an in-process ``stoker run`` that fails, and the
cleanup process on its own. Afterwards no prepared transaction is left in PostgreSQL
(``pg_prepared_xacts``), the files sink's ``_staging`` is empty, and the epochs the store
decided are visible in both sinks, each id once.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stoker.store import Owner, open_store
from stoker.types import (
    AttemptNo,
    AttemptState,
    ControlVersion,
    Epoch,
    JobId,
    JobState,
    TxnState,
)
from tests.support import (
    JVM_OPTS,
    LIGHT_JVM,
    REPO,
    file_sink_ids,
    pg_ids,
    pg_prepared,
    stoker_cmd,
    wait_for,
)
from tests.support.manager import Manager, stop_all

pytestmark = pytest.mark.timeout(900)

JOB_TIMEOUT = 420.0  # a cold Spark driver on a loaded 2-core machine
CONF = {
    "stoker.master": "local[1]",
    "stoker.trigger": "200ms",
    "spark.driver.extraJavaOptions": JVM_OPTS,
}

# An endless-enough generator into PostgreSQL and files; only defines the pipeline (the driver
# and the cleanup process find it).
APP = """\
from stoker import Pipeline, sinks, sources

pipeline = (
    Pipeline({name!r})
    .source(sources.generator(total=1_000_000, max_rows_per_epoch=100, partitions=2))
    .sink(sinks.postgres({dsn!r}, table={table!r}))
    .sink(sinks.files({out!r}))
)
"""

# In-process: epoch FAIL_EPOCH fails inside Spark after partition 0 of the PostgreSQL sink has
# prepared its part (partition 1 waits for that prepared transaction, then raises).
FAILING_APP = """\
import os
import time

import psycopg

import stoker
from stoker import Pipeline, sinks, sources

DSN = {dsn!r}
FAIL_EPOCH = {fail_epoch}


def boom(batches):
    from pyspark import TaskContext

    if TaskContext.get().partitionId() == 1:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with psycopg.connect(DSN) as conn:
                if conn.execute("SELECT count(*) FROM pg_prepared_xacts").fetchone()[0]:
                    break
            time.sleep(0.2)
        raise RuntimeError("boom: a bad record in epoch " + str(FAIL_EPOCH))
    yield from batches


def transform(df, ctx):
    if ctx.epoch != FAIL_EPOCH:
        return df
    return df.mapInArrow(boom, df.schema)


p = (
    Pipeline("fails")
    .source(sources.generator(total=100_000, max_rows_per_epoch=100, partitions=2))
    .transform(transform)
    .sink(sinks.postgres(DSN, table="fails"))
    .sink(sinks.files({out!r}))
)
stoker.run(p, trigger="200ms")
"""


def _staged(out: Path) -> list[str]:
    staging = out / "_staging"
    return sorted(p.name for p in staging.iterdir()) if staging.exists() else []


def _clean(dsn: str, out: Path) -> bool:
    return not pg_prepared(dsn) and not _staged(out)


def _assert_decided_visible(epochs: list[dict[str, Any]], dsn: str, table: str, out: Path) -> None:
    """Every id of the committed epochs is in both sinks once; nothing of any other epoch."""
    committed = [e for e in epochs if e["state"] == "COMMITTED"]
    assert committed, f"no epoch was committed: {epochs}"
    assert all(e["state"] == "COMMITTED" for e in epochs if e["state"] != "PINNED"), epochs
    total = sum(int(e["rows"]) for e in committed)
    expected = Counter(range(total))
    assert file_sink_ids(out) == expected
    assert pg_ids(dsn, table) == expected


# managers ------------------------------------------------------------------------------------
@pytest.fixture
def apps(tmp_path: Path) -> Path:
    d = tmp_path / "apps"
    d.mkdir()
    return d


@contextlib.contextmanager
def _manager(tmp_path: Path, apps: Path, store: str, fault: str, *extra: str) -> Iterator[Manager]:
    m = Manager(
        "m",
        store,
        tmp_path / "state",
        [apps],
        tmp_path / "manager.log",
        env={"STOKER_FAULT": fault},
        extra_args=list(extra),
    )
    try:
        m.wait_up()
        yield m
    finally:
        stop_all([m])


def _submit(m: Manager, job: str, app: Path, strategy: dict[str, Any]) -> None:
    r = m.http.post(
        "/v1/jobs",
        json={
            "job_id": job,
            "entrypoint": str(app),
            "conf": CONF,
            "restart_strategy": strategy,
        },
    )
    assert r.status_code == 201, r.text


def _job(m: Manager, job: str) -> dict[str, Any]:
    r = m.http.get(f"/v1/jobs/{job}")
    assert r.status_code == 200, r.text
    return dict(r.json())


def _log(m: Manager, job: str, attempt: int) -> str:
    r = m.http.get(f"/v1/jobs/{job}/attempts/{attempt}/log")
    return r.text if r.status_code == 200 else ""


def _story(m: Manager, job: str, dsn: str, out: Path) -> str:
    return (
        f"job {_job(m, job)}\nprepared {pg_prepared(dsn)}\nstaged {_staged(out)}\n"
        f"manager log:\n{m.log_tail()}"
    )


def _wait_resolved(m: Manager, job: str, dsn: str, out: Path) -> dict[str, Any]:
    wait_for(
        lambda: "the janitor to resolve the sinks: " + _story(m, job, dsn, out),
        lambda: _clean(dsn, out) and _job(m, job)["resolved_at"] is not None,
        timeout=180.0,
    )
    return _job(m, job)


def test_a_cancel_that_kills_a_driver_after_prepare_leaves_nothing_prepared(
    tmp_path: Path, apps: Path, pg_dsn: str
) -> None:
    """The driver hangs with epoch 2 prepared; the cancel timeout kills it; the job ends
    CANCELED and the janitor's cleanup aborts the prepared parts; epochs 0 and 1 stay."""
    out = tmp_path / "out" / "stalls"
    app = apps / "stalls.py"
    app.write_text(APP.format(name="stalls", dsn=pg_dsn, table="stalls", out=str(out)))
    store = f"sqlite:///{tmp_path / 'store.db'}"
    with _manager(tmp_path, apps, store, "stall_after_prepare:2", "--cancel-timeout", "3") as m:
        _submit(m, "stalls", app, {"strategy": "none"})
        wait_for(
            lambda: "the driver to stall after preparing epoch 2: " + _log(m, "stalls", 1),
            lambda: "injected stall at after_prepare epoch 2" in _log(m, "stalls", 1),
            timeout=JOB_TIMEOUT,
        )
        assert pg_prepared(pg_dsn), "epoch 2 should be prepared in PostgreSQL"
        assert _staged(out), "epoch 2 should be staged in the files sink"
        r = m.http.post("/v1/jobs/stalls/cancel")
        assert r.status_code == 202, r.text
        wait_for(
            lambda: f"the job to end CANCELED: {_job(m, 'stalls')}",
            lambda: _job(m, "stalls")["state"] == "CANCELED",
            timeout=120.0,
        )
        view = _wait_resolved(m, "stalls", pg_dsn, out)
        assert "cancel timed out" in (view["attempt"]["error"] or "")
        epochs = m.http.get("/v1/jobs/stalls/epochs").json()
        _assert_decided_visible(epochs, pg_dsn, "stalls", out)
        assert "resolved" in (tmp_path / "state" / "logs" / "stalls" / "cleanup.log").read_text()


def test_a_job_failed_after_its_restarts_leaves_nothing_prepared(
    tmp_path: Path, apps: Path, pg_dsn: str
) -> None:
    """Every attempt dies right after preparing epoch 2 (one restart allowed): the job ends
    FAILED with the second attempt's parts prepared; the janitor aborts them. The store is
    PostgreSQL too: its URL reaches the cleanup process through the environment."""
    out = tmp_path / "out" / "dies"
    app = apps / "dies.py"
    app.write_text(APP.format(name="dies", dsn=pg_dsn, table="dies", out=str(out)))
    with _manager(tmp_path, apps, pg_dsn, "after_prepare:2") as m:
        _submit(m, "dies", app, {"strategy": "fixed-delay", "attempts": 1, "delay": 0})
        wait_for(
            lambda: f"the job to fail for good: {_job(m, 'dies')}",
            lambda: _job(m, "dies")["state"] == "FAILED",
            timeout=2 * JOB_TIMEOUT,
        )
        view = _wait_resolved(m, "dies", pg_dsn, out)
        assert view["current_attempt"] == 2
        # On a loaded machine one attempt may instead be given up for a slow start (its startup
        # lease expired): the other one crashed with epoch 2 prepared.
        crash = "injected crash at after_prepare epoch 2"
        assert any(crash in _log(m, "dies", n) for n in (1, 2))
        epochs = m.http.get("/v1/jobs/dies/epochs").json()
        _assert_decided_visible(epochs, pg_dsn, "dies", out)


# A failure's clean end is in every lane under a manager (failed after its restarts); the
# in-process form in the whole suite.
@pytest.mark.variant
def test_an_in_process_run_that_fails_leaves_nothing_prepared(tmp_path: Path, pg_dsn: str) -> None:
    """``stoker run`` fails in epoch 3 with a part of it prepared: the runner resolves the
    sinks on its way out (the job is FAILED, nothing prepared, epochs 0-2 visible)."""
    out = tmp_path / "out"
    app = tmp_path / "fails.py"
    app.write_text(FAILING_APP.format(dsn=pg_dsn, fail_epoch=3, out=str(out)))
    state = tmp_path / "state"
    p = subprocess.run(
        stoker_cmd(
            "run",
            str(app),
            "-D",
            f"stoker.state_dir={state}",
            "-D",
            "stoker.master=local[2]",
            "-D",
            f"spark.driver.extraJavaOptions={LIGHT_JVM}",
        ),
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=JOB_TIMEOUT,
    )
    assert p.returncode == 8, p.stdout + p.stderr
    assert "boom: a bad record in epoch 3" in p.stderr, p.stderr[-5000:]
    assert pg_prepared(pg_dsn) == []
    assert _staged(out) == []
    st = open_store(state / "store.db")
    try:
        job = st.get_job(JobId("fails"))
        assert job.state == JobState.FAILED
        assert job.resolved_at is not None
        epochs = [e.to_dict() for e in st.list_epochs(JobId("fails"), limit=100)]
    finally:
        st.close()
    assert {e["epoch"] for e in epochs if e["state"] == "COMMITTED"} == {0, 1, 2}
    _assert_decided_visible(epochs, pg_dsn, "fails", out)


# the cleanup process on its own -----------------------------------------------------------------
CLEANUP_APP = """\
import stoker
from stoker import Pipeline, sinks, sources

p = Pipeline("leftovers").source(sources.generator(total=10)).sink(sinks.files({out!r}))
print("main ran")
stoker.run(p)
raise SystemExit("not reached: stoker.run hands the pipeline back in collect mode")
"""


def test_the_cleanup_process_resolves_an_ended_job_without_spark(tmp_path: Path) -> None:
    """Epoch 1 decided by attempt 1, epoch 2 only staged: the cleanup commits 1, aborts 2,
    marks the job resolved, and starts no JVM (there is no Java to start), from the sink
    descriptors in the store (the app file is not run)."""
    out = tmp_path / "out"
    app = tmp_path / "leftovers.py"
    app.write_text(CLEANUP_APP.format(out=str(out)))
    url = f"sqlite:///{tmp_path / 'store.db'}"
    jid = JobId("leftovers")
    st = open_store(url)
    try:
        st.create_job(jid, "leftovers", {"kind": "app"}, {})
        att = st.start_attempt(jid, Owner("elsewhere", 1, "1"), 30.0, AttemptNo(0))
        # What its driver recorded when it opened the sinks: the cleanup's only source.
        files = {"kind": "files", "path": str(out), "format": "parquet", "name": f"files:{out}"}
        st.set_job_sinks(jid, [files])
        st.pin_epoch(jid, Epoch(1), att.attempt, ControlVersion(0))
        st.decide_epoch(jid, Epoch(1), att.attempt, 1, False)
        st.pin_epoch(jid, Epoch(2), att.attempt, ControlVersion(0))
        for e in (1, 2):
            part = out / "_staging" / f"epoch={e}.attempt={att.attempt}"
            part.mkdir(parents=True)
            (part / "part-0.parquet").write_bytes(b"rows")
            st.record_txn(jid, Epoch(e), f"files:{out}", att.attempt, TxnState.PREPARED, {})
        st.finish_attempt(jid, att.attempt, AttemptState.FAILED, JobState.FAILED, "gone")
        assert st.get_job(jid).resolved_at is None
    finally:
        st.close()
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "SPARK_HOME")},
        "JAVA_HOME": str(tmp_path / "no-java"),
        "PATH": os.path.dirname(sys.executable) + ":/usr/bin:/bin",
        "STOKER_STORE_URL": url,
    }
    p = subprocess.run(
        [
            *(sys.executable, "-m", "stoker.runtime.cleanup", "--job", "leftovers"),
            *("--store", "sqlite:///(redacted)", "--state-dir", str(tmp_path / "state")),
            *("--", str(app)),
        ],
        cwd=str(REPO),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert "main ran" not in p.stdout  # the app file is not loaded: no user code runs
    assert _staged(out) == []
    assert sorted(x.name for x in out.glob("epoch=*")) == ["epoch=1"]
    st = open_store(url)
    try:
        job = st.get_job(jid)
        assert job.resolved_at is not None
        assert st.get_epoch(jid, Epoch(1)).state.name == "COMMITTED"  # type: ignore[union-attr]
    finally:
        st.close()


def test_the_cleanup_process_leaves_a_live_job_alone(tmp_path: Path) -> None:
    """A job restarted meanwhile is not ended: its staged part is not the cleanup's to abort."""
    out = tmp_path / "out"
    app = tmp_path / "leftovers.py"
    app.write_text(CLEANUP_APP.format(out=str(out)))
    url = f"sqlite:///{tmp_path / 'store.db'}"
    jid = JobId("leftovers")
    st = open_store(url)
    try:
        st.create_job(jid, "leftovers", {"kind": "app"}, {})
        att = st.start_attempt(jid, Owner("elsewhere", 1, "1"), 30.0, AttemptNo(0))
        part = out / "_staging" / f"epoch=0.attempt={att.attempt}"
        part.mkdir(parents=True)
    finally:
        st.close()
    p = subprocess.run(
        [
            *(sys.executable, "-m", "stoker.runtime.cleanup", "--job", "leftovers"),
            *("--store", url, "--state-dir", str(tmp_path / "state"), "--", str(app)),
        ],
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert "not ended: nothing done" in p.stderr
    assert _staged(out) == ["epoch=0.attempt=1"]


# the janitor without Spark -----------------------------------------------------------------------
# Its driver fails validating the source (before Spark, before claiming its attempt): the job
# ends FAILED with no sink ever opened, and the janitor marks it resolved without running the app
# (a part staged before, which no record of the job names, is left for its next recovery).
NO_SOURCE_APP = """\
from stoker import Pipeline, sinks, sources

pipeline = (
    Pipeline("nosource")
    .source(sources.files({missing!r}, format="json", schema="id long"))
    .sink(sinks.files({out!r}))
)
"""


def test_the_janitor_resolves_a_job_its_driver_could_not(tmp_path: Path, apps: Path) -> None:
    out = tmp_path / "out"
    leftover = out / "_staging" / "epoch=0.attempt=1"
    leftover.mkdir(parents=True)
    app = apps / "nosource.py"
    app.write_text(NO_SOURCE_APP.format(missing=str(tmp_path / "missing"), out=str(out)))
    with _manager(tmp_path, apps, f"sqlite:///{tmp_path / 'store.db'}", "") as m:
        _submit(m, "nosource", app, {"strategy": "none"})
        wait_for(
            lambda: f"the job to fail and be resolved: {_job(m, 'nosource')}\n{m.log_tail()}",
            lambda: (
                _job(m, "nosource")["state"] == "FAILED"
                and _job(m, "nosource")["resolved_at"] is not None
            ),
            timeout=180.0,
        )
        # Its driver never opened its sinks: nothing of this job to resolve. The leftover
        # is no record of its own; the job's next recovery (once its sinks open) aborts it.
        assert _staged(out) == ["epoch=0.attempt=1"]
        log = (tmp_path / "state" / "logs" / "nosource" / "cleanup.log").read_text()
        assert "nothing to resolve" in log
        assert "stoker cleanup: job nosource resolved" in log
