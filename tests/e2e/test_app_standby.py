"""An application's warm standby (issue 24), for real: a ``stoker server``, a program of three
endless jobs (``tests/apps/app_driver_trio.py``) submitted with ``"standby": true``, its
drivers on real Spark.

The standby runs the program up to its first job and waits there with Spark up. The running
driver is SIGKILLed: the standby is handed the application's next attempt, its ``main`` goes
on under the same job ids and every job commits again under an attempt made by that driver.
Then the new driver is frozen with SIGSTOP once a new standby is ready: its lease lapses, the
manager kills it and the next standby takes over (SIGCONT then wakes nothing). At the end the
application is canceled: each job's files sink holds every id its store says was read, once,
and no driver or standby is left.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stoker import procs
from stoker.store import open_store
from tests.support import JVM_OPTS, exactly_once, file_sink_ids, wait_for
from tests.support.manager import Manager, one_manager
from tests.support.procs import describe, process_tree, still_alive

pytestmark = [pytest.mark.scenario, pytest.mark.timeout(1500)]

SPARK = 600.0  # a cold Spark driver (and a standby's warm-up beside it) on a loaded 2-core host
TRIO = Path(__file__).parent.parent / "apps" / "app_driver_trio.py"
STREAMS = ("a", "b", "c")
_GONE = procs.ProcStat(0, "X", 0, 0, "")


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[Manager]:
    with one_manager(tmp_path, "app-standby") as m:
        yield m


def _app(m: Manager) -> dict[str, Any]:
    r = m.http.get("/v1/applications/trio")
    assert r.status_code == 200, r.text
    return dict(r.json())


def _driver(view: dict[str, Any]) -> dict[str, Any]:
    return next(a for a in view["attempts"] if a["attempt"] == view["attempt"])


def _ready_standby(m: Manager) -> dict[str, Any]:
    def ready() -> dict[str, Any] | None:
        view = _app(m)
        return view if (view.get("standby") or {}).get("state") == "READY" else None

    return dict(wait_for(lambda: f"a READY standby: {_app(m)}\n{m.log_tail()}", ready, SPARK))


def _freeze_holding_the_store_lock(m: Manager, pgid: int) -> None:
    """SIGSTOP the driver's process group at a moment its driver holds the store's write lock
    (it writes several times a second: renewals, three jobs' epochs); stopped at any other
    moment, it is continued and tried again."""
    st = open_store(m.store)

    def frozen_holding() -> bool:
        os.killpg(pgid, signal.SIGSTOP)
        wait_for("the driver stopped", lambda: (procs.stat(pgid) or _GONE).state in "Tt", 30, 0.01)
        lock = st.write_lock()
        if lock is not None and (procs.stat(lock.pid) or _GONE).pgid == pgid:
            return True
        os.killpg(pgid, signal.SIGCONT)
        return False

    try:
        wait_for(
            "the driver frozen while it holds the store's write lock", frozen_holding, 300, 0.05
        )
    finally:
        st.close()


def _every_job_committed_under(m: Manager, app_attempt: int) -> None:
    """Each stream job has committed an epoch decided by a job attempt made under the
    application's attempt ``app_attempt`` (its driver runs it)."""

    def committed() -> bool:
        for name in STREAMS:
            job = m.http.get(f"/v1/jobs/trio.{name}").json()
            att = job.get("attempt") or {}
            last = job.get("last_epoch") or {}
            if att.get("app_attempt") != app_attempt or att.get("state") != "RUNNING":
                return False
            if not last.get("committed_at") or last.get("decided_by") != att.get("attempt"):
                return False
        return True

    wait_for(
        lambda: f"every job committing under application attempt {app_attempt}: {_app(m)}",
        committed,
        SPARK,
    )


def test_an_applications_standby_takes_over_from_killed_and_frozen_drivers_exactly_once(
    tmp_path: Path, manager: Manager
) -> None:
    m = manager
    out = tmp_path / "out"
    app = tmp_path / "apps" / "trio.py"
    shutil.copy(TRIO, app)
    conf = {
        "spark.master": "local[2]",
        "stoker.trigger": "300ms",
        "spark.driver.extraJavaOptions": JVM_OPTS,
    }
    args = [f"out={out}", "backfill=0", f"streams={','.join(STREAMS)}", "rate=20"]
    body = {"app_id": "trio", "entrypoint": str(app), "args": args, "conf": conf}
    r = m.http.post("/v1/applications", json={**body, "standby": True})
    assert r.status_code == 201, r.text
    assert r.json()["standby"] == {"state": "NONE"}  # asked for; started once jobs commit

    # 1. The running driver is SIGKILLed: its READY standby takes application attempt 2.
    view = _ready_standby(m)
    first = _driver(view)
    standby_pid = view["standby"]["pid"]
    assert first["state"] == "RUNNING" and standby_pid != first["pid"]
    _every_job_committed_under(m, first["attempt"])
    frag = m.http.get("/ui/f/applications/trio")  # the web UI's application page shows it
    assert frag.status_code == 200 and 'id="app-standby"' in frag.text, frag.text
    assert 'stoker_application_standby_ready{app_id="trio"} 1.0' in m.http.get("/metrics").text
    os.killpg(first["pid"], signal.SIGKILL)

    def handed(n: int) -> dict[str, Any] | None:
        att = _driver(_app(m))  # a later attempt, held by its driver (a pid recorded)
        return att if att["attempt"] > n and att["pid"] and att["state"] == "RUNNING" else None

    second = wait_for("the next attempt", lambda: handed(first["attempt"]), 60)
    assert second["pid"] == standby_pid  # no new driver: the standby is attempt 2's driver
    _every_job_committed_under(m, second["attempt"])

    # 2. The new driver is frozen once the next standby is ready, and frozen where it hurts
    # most: inside a write to the SQLite store, holding its one write lock (a CI run met it by
    # chance: no lease could be renewed, the leader's included, until the manager's lock watch
    # learnt to kill such a holder). Its lease lapses, the manager kills it (SIGKILL reaches a
    # stopped process), the next standby takes over.
    view = _ready_standby(m)
    assert _driver(view)["pid"] == standby_pid
    frozen = process_tree(pgid=standby_pid, root=standby_pid)
    _freeze_holding_the_store_lock(m, standby_pid)
    third = wait_for("a takeover from the frozen driver", lambda: handed(second["attempt"]), 120)
    assert "the store's write lock has been held" in m.log_tail(100_000), m.log_tail()
    assert third["pid"] == view["standby"]["pid"]
    wait_for(lambda: describe(still_alive(frozen)), lambda: not still_alive(frozen), 60)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(standby_pid, signal.SIGCONT)
    _every_job_committed_under(m, third["attempt"])
    metrics = m.http.get("/metrics").text
    assert "stoker_standby_takeovers_total 2.0" in metrics

    # The end: canceled, every id each job read written once, no driver or standby left.
    r = m.http.post("/v1/applications/trio/cancel")
    assert r.status_code in (200, 202), r.text
    wait_for("the application canceled", lambda: _app(m)["state"] == "CANCELED", SPARK)
    st = open_store(m.store)
    try:
        for name in STREAMS:
            epochs = st.list_epochs(f"trio.{name}", limit=100_000)  # type: ignore[arg-type]
            assert all(str(e.state) == "COMMITTED" for e in epochs), name
            total = sum(e.rows_in or 0 for e in epochs)
            assert total > 0, name
            exactly_once(file_sink_ids(out / name), total)
        wait_for("the standby gone", lambda: st.get_standby("trio") is None, 60)  # type: ignore[arg-type]
    finally:
        st.close()
    states = [a["state"] for a in _app(m)["attempts"]]
    assert states == ["FAILED", "FAILED", "CANCELED"], states
    wait_for(
        lambda: f"no driver left: {describe(m.driver_procs())}",
        lambda: not m.driver_procs(),
        60,
    )
