"""Warm standby drivers (issue 24), for real: a ``stoker server``, a job submitted with
``standby``, its drivers on real Spark. The running driver is SIGKILLed (its standby takes the
next attempt), then the new driver is frozen with SIGSTOP (its lease lapses, the manager kills
it and the next standby takes over; SIGCONT then wakes nothing), then a standby is SIGKILLed
while it waits (it is replaced). Every id the job read reaches its files sink once, and no
process of the job is left once it is canceled.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stoker.store import open_store
from tests.support import JVM_OPTS, exactly_once, file_sink_ids, wait_for
from tests.support.manager import Manager, one_manager
from tests.support.procs import describe, process_tree, still_alive

pytestmark = [pytest.mark.scenario, pytest.mark.timeout(1500)]

SPARK = 600.0  # a cold Spark driver (and a standby's warm-up beside it) on a loaded 2-core host

APP = """\
from stoker import Pipeline, sinks, sources

pipeline = (
    Pipeline("warm")
    .source(sources.generator(total=None, rows_per_second=50, max_rows_per_epoch=50, partitions=1))
    .sink(sinks.files({out!r}))
)
"""


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[Manager]:
    # Leases of 10 s, not 5: on a loaded CI host a renewal (a store write every third of it)
    # can wait seconds, and a lapsed lease is a takeover this test did not make.
    with one_manager(tmp_path, "standby", lease_ttl=10.0) as m:
        yield m


def write_app(tmp_path: Path) -> tuple[Path, Path]:
    """The job's file in the manager's allowed folder, and its files sink's folder."""
    out = tmp_path / "out"
    app = tmp_path / "apps" / "warm.py"
    app.write_text(APP.format(out=str(out)))
    return app, out


def _job(m: Manager) -> dict[str, Any]:
    r = m.http.get("/v1/jobs/warm")
    assert r.status_code == 200, r.text
    return dict(r.json())


def _ready_standby(m: Manager) -> dict[str, Any]:
    def ready() -> dict[str, Any] | None:
        job = _job(m)
        sb = job.get("standby") or {}
        return job if sb.get("state") == "READY" else None

    return dict(wait_for(lambda: f"a READY standby: {_job(m)}\n{m.log_tail()}", ready, SPARK))


def _committed_by(m: Manager, attempt: int) -> None:
    def committed() -> bool:
        last = _job(m).get("last_epoch") or {}
        return bool(last.get("committed_at")) and (last.get("decided_by") or 0) >= attempt

    wait_for(lambda: f"an epoch committed by attempt {attempt}: {_job(m)}", committed, SPARK)


def test_standbys_take_over_from_killed_and_frozen_drivers_exactly_once(
    tmp_path: Path, manager: Manager
) -> None:
    m = manager
    app, out = write_app(tmp_path)
    conf = {
        "stoker.master": "local[1]",
        "stoker.trigger": "200ms",
        "spark.driver.extraJavaOptions": JVM_OPTS,
    }
    r = m.http.post("/v1/jobs", json={"entrypoint": str(app), "conf": conf, "standby": True})
    assert r.status_code == 201, r.text

    # 1. The running driver is SIGKILLed: its READY standby takes attempt 2.
    job = _ready_standby(m)
    first = job["attempt"]
    standby_pid = job["standby"]["pid"]
    assert first["state"] == "RUNNING" and standby_pid != first["pid"]
    os.killpg(first["pid"], signal.SIGKILL)

    def handed(n: int) -> dict[str, Any] | None:
        att = _job(m)["attempt"]  # a later attempt, held by its driver (a pid recorded)
        return att if att and att["attempt"] > n and att["pid"] > 0 else None

    second = wait_for("the next attempt", lambda: handed(first["attempt"]), 60)
    # No new driver: the standby is attempt 2's driver.
    assert second["pid"] == standby_pid, f"{second} {_job(m)}\n{m.log_tail()}"
    _committed_by(m, second["attempt"])

    # 2. The new driver is frozen: its lease lapses, the manager kills it (SIGKILL reaches a
    # stopped process) and the next standby, once ready, takes the attempt after it.
    job = _ready_standby(m)
    assert job["attempt"]["pid"] == standby_pid, f"{job}\n{m.log_tail()}"
    frozen = process_tree(pgid=standby_pid, root=standby_pid)
    os.killpg(standby_pid, signal.SIGSTOP)
    third = wait_for("a takeover from the frozen driver", lambda: handed(second["attempt"]), 120)
    assert third["pid"] == job["standby"]["pid"], f"{third} {job}\n{m.log_tail()}"
    # Killed, not left stopped: once gone, a SIGCONT wakes nothing that could write.
    wait_for(lambda: describe(still_alive(frozen)), lambda: not still_alive(frozen), 60)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(standby_pid, signal.SIGCONT)
    _committed_by(m, third["attempt"])

    # 3. A standby killed while it waits is replaced (after a backoff), and takes over later.
    killed = _ready_standby(m)["standby"]["pid"]
    os.killpg(killed, signal.SIGKILL)

    def replaced() -> bool:
        pid = (_job(m).get("standby") or {}).get("pid")
        return pid is not None and pid != killed

    wait_for("a new standby", replaced, 120)
    _ready_standby(m)
    metrics = m.http.get("/metrics").text
    assert 'stoker_job_standby_ready{job_id="warm"} 1.0' in metrics, m.log_tail()
    assert "stoker_standby_takeovers_total 2.0" in metrics, m.log_tail()

    cancel_and_check(m, out, ["FAILED", "FAILED", "CANCELED"])


def cancel_and_check(m: Manager, out: Path, attempts: list[str]) -> None:
    """The end: the job canceled, every epoch committed, every id it read written once, its
    standby gone, its attempts ended as ``attempts`` say."""
    r = m.http.post("/v1/jobs/warm/cancel")
    assert r.status_code == 202, r.text
    wait_for("the job canceled", lambda: _job(m)["state"] == "CANCELED", SPARK)
    st = open_store(m.store)
    try:
        epochs = st.list_epochs("warm", limit=100_000)  # type: ignore[arg-type]
        assert all(str(e.state) == "COMMITTED" for e in epochs)
        total = sum(e.rows_in or 0 for e in epochs)
        wait_for("the standby gone", lambda: st.get_standby("warm") is None, 60)  # type: ignore[arg-type]
    finally:
        st.close()
    assert total > 0
    exactly_once(file_sink_ids(out), total)
    atts = m.http.get("/v1/jobs/warm/attempts").json()
    assert [a["state"] for a in atts] == attempts, f"{atts}\n{m.log_tail()}"
