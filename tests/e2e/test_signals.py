"""SIGTERM and SIGINT are not cancel: a signalled driver stops gracefully and its job resumes.

Real ``stoker run`` processes and a real ``stoker server`` with real drivers on Spark; the
signals are real and go to the driver's process only (as ``docker stop`` or systemd send them
to the main process). Expected: the epoch in flight commits, nothing stays prepared, the job
is SUSPENDED; run again (or, under a manager, by itself) it resumes and every id reaches the
sink exactly once. Only ``stoker cancel`` makes a job CANCELED.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from stoker.driverargs import DriverArgs, DriverRole
from stoker.manager import processes
from stoker.store import Owner, open_store
from stoker.types import AttemptNo, AttemptState, EpochState, JobState, TxnState, job_id
from tests.support import (
    JVM_OPTS,
    REPO,
    exactly_once,
    file_sink_ids,
    start_driver,
    stoker_cmd,
    wait_for,
    wait_group_gone,
)
from tests.support.manager import Manager, stop_all

pytestmark = [pytest.mark.spread, pytest.mark.timeout(1500)]

JOB_TIMEOUT = 420.0  # a cold Spark driver on 2 cores other suites share
SUSPENDED_EXIT = 13  # stoker.errors.EXIT_CODES[JobSuspended]
LOCAL = ["-D", "stoker.master=local[1]", "-D", "stoker.trigger=200ms"]
CONF = {
    "stoker.master": "local[1]",
    "stoker.trigger": "200ms",
    "spark.driver.extraJavaOptions": JVM_OPTS,
}

# A pipeline file; the driver (or `stoker run`) finds the module-level Pipeline and runs it.
APP = """\
from stoker import Pipeline, sinks, sources

pipeline = (
    Pipeline({name!r})
    .source(sources.generator(total={total}, max_rows_per_epoch={per_epoch}, partitions=1))
    .sink(sinks.files({out!r}))
)
"""


def _app(folder: Path, name: str, out: Path, total: int | None, per_epoch: int = 400) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.py"
    path.write_text(APP.format(name=name, total=total, per_epoch=per_epoch, out=str(out)))
    return path


def _committed(store_url: str, job: str) -> int:
    st = open_store(store_url)
    try:
        return sum(e.state == EpochState.COMMITTED for e in st.list_epochs(job_id(job), 100_000))
    except Exception:  # the store or the job is not made yet
        return 0
    finally:
        st.close()


def _assert_suspended_cleanly(
    store_url: str, job: str, out: Path, attempt: int, in_flight_may_fail: bool = False
) -> None:
    """SUSPENDED job and attempt; every epoch decided is committed; nothing left prepared.

    ``in_flight_may_fail``: the signal also reached Spark's Python workers (a host shutdown),
    so the epoch in flight may have failed before its decision: it is left PINNED (no output,
    nothing prepared) for the resumed job to replay."""
    st = open_store(store_url)
    try:
        jid = job_id(job)
        j = st.get_job(jid)
        a = st.get_attempt(jid, j.current_attempt)
        assert (j.state, j.current_attempt, j.failures) == (JobState.SUSPENDED, attempt, 0)
        assert a is not None and a.state == AttemptState.SUSPENDED
        eps = st.list_epochs(jid, 100_000)
        states = [e.state for e in eps]  # newest first
        if in_flight_may_fail and states and states[0] == EpochState.PINNED:
            states = states[1:]
        assert states and set(states) == {EpochState.COMMITTED}, eps[:3]
        assert st.list_txns(jid, TxnState.PREPARED) == []
    finally:
        st.close()
    staging = out / "_staging"
    assert not staging.exists() or list(staging.iterdir()) == []
    ids = file_sink_ids(out)
    exactly_once(ids, len(ids))  # 0..n-1, each once: the epochs committed so far


def _wait_exit(proc: subprocess.Popen[bytes], log: Path, timeout: float = 180.0) -> int:
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        tail = log.read_text(errors="replace")[-3000:]
        raise AssertionError(f"driver did not exit:\n{tail}") from None


def _tree(root: int) -> list[int]:
    """``root`` and every process below it (the Spark JVM, its Python workers and readers)."""
    out = subprocess.run(["ps", "-e", "-o", "pid=,ppid="], capture_output=True, text=True).stdout
    children: dict[int, list[int]] = {}
    for line in out.splitlines():
        pid, ppid = (int(x) for x in line.split())
        children.setdefault(ppid, []).append(pid)
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


# 1, 2: `stoker run` in-process ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("sig", "everyone"),
    [
        # SIGTERM to the driver alone (a container stop): the whole suite; every lane sends it
        # to every process of the group (a host shutdown), the harder form.
        pytest.param(signal.SIGTERM, False, id="SIGTERM", marks=pytest.mark.variant),
        pytest.param(signal.SIGINT, False, id="SIGINT", marks=pytest.mark.variant),
        pytest.param(signal.SIGTERM, True, id="SIGTERM-to-every-process"),
    ],
)
def test_a_signalled_local_run_suspends_and_the_same_command_resumes_it(
    tmp_path: Path, sig: signal.Signals, everyone: bool
) -> None:
    """SIGTERM-to-every-process is a host shutdown (systemd stops a unit's whole cgroup at
    once): the Spark JVM, its Python workers and readers get it together with the driver."""
    total = 20_000
    name, out, state = "signalled", tmp_path / "out", tmp_path / "state"
    app = _app(tmp_path / "apps", name, out, total)
    store_url = f"sqlite:///{state / 'store.db'}"
    args = ["-D", f"stoker.state_dir={state}", *LOCAL]
    log = tmp_path / "run-1.log"

    first = start_driver(app, *args, log=log)

    def two_epochs() -> bool:
        assert first.poll() is None, f"exited early:\n{log.read_text(errors='replace')[-3000:]}"
        return _committed(store_url, name) >= 2

    wait_for("two committed epochs", two_epochs, JOB_TIMEOUT)
    if everyone:
        for pid in _tree(first.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
    else:
        os.kill(first.pid, sig)  # the driver process only, as a container stop does
    assert _wait_exit(first, log) == SUSPENDED_EXIT, log.read_text(errors="replace")[-3000:]
    text = log.read_text(errors="replace")
    assert "SUSPENDED" in text and "run the same command again" in text
    _assert_suspended_cleanly(store_url, name, out, attempt=1, in_flight_may_fail=everyone)
    assert len(file_sink_ids(out)) < total  # it was stopped mid-run

    # The same command, no --restart: resumes from the checkpoint and finishes.
    log2 = tmp_path / "run-2.log"
    again = start_driver(app, *args, log=log2)
    assert _wait_exit(again, log2, JOB_TIMEOUT) == 0, log2.read_text(errors="replace")[-3000:]
    exactly_once(file_sink_ids(out), total)
    st = open_store(store_url)
    try:
        jid = job_id(name)
        assert st.get_job(jid).state == JobState.FINISHED
        assert [(a.attempt, a.state) for a in st.list_attempts(jid)] == [
            (1, AttemptState.SUSPENDED),
            (2, AttemptState.FINISHED),
        ]
    finally:
        st.close()


# An epoch stuck in the driver's own code (a call that never returns) while `hang` exists.
HANG_APP = """\
import time
from pathlib import Path

from stoker import Pipeline, sinks, sources

HANG = Path({hang!r})


def _transform(df, ctx):
    if ctx.epoch >= 2 and HANG.exists():
        (HANG.parent / "hanging").write_text(str(ctx.epoch))
        while HANG.exists():
            time.sleep(0.2)
    return df


pipeline = (
    Pipeline({name!r})
    .source(sources.generator(total={total}, max_rows_per_epoch=400, partitions=1))
    .transform(_transform)
    .sink(sinks.files({out!r}))
)
"""


def test_a_second_signal_stops_a_run_stuck_in_an_epoch_at_once(tmp_path: Path) -> None:
    """The first SIGTERM waits for the epoch in flight, which never ends; the second stops
    the run now (exit 13, SUSPENDED, saying which epoch it did not wait for), and the same
    command resumes the job from its last committed epoch: every id once."""
    total = 2_000
    name, out, state = "stuck", tmp_path / "out", tmp_path / "state"
    hang, hanging = tmp_path / "hang", tmp_path / "hanging"
    hang.touch()
    app = tmp_path / f"{name}.py"
    app.write_text(HANG_APP.format(hang=str(hang), name=name, total=total, out=str(out)))
    store_url = f"sqlite:///{state / 'store.db'}"
    args = ["-D", f"stoker.state_dir={state}", *LOCAL]
    log = tmp_path / "run-1.log"

    first = start_driver(app, *args, log=log)

    def stuck() -> bool:
        assert first.poll() is None, f"exited early:\n{log.read_text(errors='replace')[-3000:]}"
        return hanging.exists()

    wait_for("an epoch stuck in the transform", stuck, JOB_TIMEOUT)
    epoch = int(hanging.read_text())
    os.kill(first.pid, signal.SIGTERM)
    wait_for(
        "the first signal to be taken",
        lambda: "stopping after the epoch in flight" in log.read_text(errors="replace"),
        60,
    )
    assert first.poll() is None  # still waiting: the epoch in flight never ends by itself
    os.kill(first.pid, signal.SIGTERM)
    assert _wait_exit(first, log, 120) == SUSPENDED_EXIT, log.read_text(errors="replace")[-3000:]
    text = log.read_text(errors="replace")
    assert (
        f"second signal (SIGTERM): stopping now without waiting for epoch {epoch}; the job is "
        "SUSPENDED and resumes from its last committed epoch"
    ) in text, text[-3000:]
    assert "did not wait for the epoch in flight" in text
    wait_group_gone(first.pid)  # the Spark JVM went with the driver
    st = open_store(store_url)
    try:
        jid = job_id(name)
        j = st.get_job(jid)
        a = st.get_attempt(jid, j.current_attempt)
        assert j.state == JobState.SUSPENDED
        assert a is not None and a.state == AttemptState.SUSPENDED
        assert st.list_txns(jid, TxnState.PREPARED) == []
        assert [e.epoch for e in st.list_epochs(jid, 100_000) if e.state != "COMMITTED"] == [epoch]
    finally:
        st.close()
    before = file_sink_ids(out)  # the epochs before the stuck one, each once
    exactly_once(before, len(before))
    assert 0 < len(before) < total

    hang.unlink()
    log2 = tmp_path / "run-2.log"
    again = start_driver(app, *args, log=log2)
    assert _wait_exit(again, log2, JOB_TIMEOUT) == 0, log2.read_text(errors="replace")[-3000:]
    exactly_once(file_sink_ids(out), total)
    st = open_store(store_url)
    try:
        assert [(a.attempt, a.state) for a in st.list_attempts(job_id(name))] == [
            (1, AttemptState.SUSPENDED),
            (2, AttemptState.FINISHED),
        ]
    finally:
        st.close()


# The pieces, in this process (no Spark) -----------------------------------------------------
def test_stop_signals_raise_before_the_query_and_only_flag_while_it_runs() -> None:
    from stoker.runtime.job.signals import StopSignals

    before = signal.getsignal(signal.SIGTERM)
    with StopSignals() as s, pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGTERM)  # Spark starting: no query to stop gently
        time.sleep(5)  # the handler runs right after os.kill returns; never reached
    assert s.received == signal.SIGTERM
    with StopSignals() as s:
        s.deferred = True  # the query runs: the supervise loop stops it between epochs
        os.kill(os.getpid(), signal.SIGINT)
        s.settle()  # the query is left: the attempt's end is recorded, nothing breaks it off
        os.kill(os.getpid(), signal.SIGTERM)
    assert s.received == signal.SIGTERM and not s.forced
    assert signal.getsignal(signal.SIGTERM) == before
    # A second signal while the graceful stop waits: tests/unit/runtime/test_stop_signals.py.


def test_a_cancel_asked_for_meanwhile_wins_over_a_suspension(tmp_path: Path) -> None:
    from stoker.runtime.job.ending import end_attempt

    st = open_store(tmp_path / "store.db")
    try:
        jid = job_id("both")
        st.create_job(jid, "both", {"kind": "pipeline"}, {})
        st.start_attempt(jid, Owner("h", 1, "x"), 30.0, AttemptNo(0))
        st.request_cancel(jid)  # CANCELING: cannot become SUSPENDED
        assert end_attempt(st, jid, 1, AttemptState.SUSPENDED, JobState.SUSPENDED, None) == (
            JobState.CANCELED
        )
        att = st.get_attempt(jid, AttemptNo(1))
        assert st.get_job(jid).state == JobState.CANCELED
        assert att is not None and att.state == AttemptState.CANCELED
    finally:
        st.close()


# A driver signalled before its job runs (no Spark needed) ---------------------------------------
SLOW_IMPORT_APP = """\
import sys, time

print("app importing", file=sys.stderr, flush=True)
time.sleep(300)
"""


def test_a_driver_signalled_before_its_job_runs_suspends_its_attempt(tmp_path: Path) -> None:
    """A container stopped while the app is still importing (or Spark starting): the attempt
    the manager made ends SUSPENDED, not left STARTING for the manager to count as a failure."""
    store_url = f"sqlite:///{tmp_path / 'manager.db'}"
    jid = job_id("early")
    st = open_store(store_url)
    try:
        st.create_job(jid, "early", {"kind": "app"}, {})
        st.start_attempt(
            jid, Owner("h", 0, "unknown"), 120.0, AttemptNo(0), state=AttemptState.STARTING
        )
        app = tmp_path / "early.py"
        app.write_text(SLOW_IMPORT_APP)
        argv = processes.DriverArgv.of(
            DriverArgs(
                role=DriverRole.JOB,
                name=jid,
                attempt=1,
                store=store_url,
                state_dir=tmp_path / "state",
                entrypoint=app,
                lease_ttl=10.0,
            )
        )
        log = tmp_path / "driver.log"
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                argv,
                env=processes.child_env(argv.env),
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=str(REPO),
                start_new_session=True,
            )
        wait_for("the app to import", lambda: "app importing" in log.read_text(), 120)
        os.kill(proc.pid, signal.SIGTERM)
        assert _wait_exit(proc, log, 60) == SUSPENDED_EXIT, log.read_text()
        job, att = st.get_job(jid), st.get_attempt(jid, AttemptNo(1))
        assert (job.state, job.failures) == (JobState.SUSPENDED, 0)
        assert att is not None and att.state == AttemptState.SUSPENDED
    finally:
        st.close()


# 3, 4: under a job manager --------------------------------------------------------------------
def _get(m: Manager, path: str, **params: Any) -> Any:
    r = m.http.get(path, params=params)
    assert r.status_code == 200, (path, r.status_code, r.text)
    return r.json()


def _story(m: Manager, job: str) -> str:
    try:
        return f"{_get(m, f'/v1/jobs/{job}')}\n{_get(m, f'/v1/jobs/{job}/attempts')}"
    except AssertionError as e:
        return str(e)


def _state(m: Manager, job: str) -> str:
    return str(_get(m, f"/v1/jobs/{job}")["state"])


def _running_attempt(m: Manager, job: str, n: int) -> dict[str, Any]:
    """Wait until attempt ``n`` runs (its driver claimed it) with a committed epoch of its own."""

    def ready() -> dict[str, Any] | None:
        v = _get(m, f"/v1/jobs/{job}")
        assert v["state"] not in ("FINISHED", "CANCELED", "FAILED"), _story(m, job)
        a = v.get("attempt") or {}
        if v["current_attempt"] != n or a.get("state") != "RUNNING" or not a.get("pid"):
            return None
        eps = _get(m, f"/v1/jobs/{job}/epochs", limit=100_000)
        mine = [e for e in eps if e["state"] == "COMMITTED" and e["decided_by"] == n]
        return dict(a) if len(mine) >= 2 else None

    return dict(wait_for(lambda: f"attempt {n} of {job}:\n{_story(m, job)}", ready, JOB_TIMEOUT))


def _resumed(m: Manager, job: str) -> None:
    """Wait until a later attempt than the first took the job on: it committed an epoch of its
    own, or (a bounded job) finished it."""

    def ready() -> bool:
        v = _get(m, f"/v1/jobs/{job}")
        if v["current_attempt"] < 2:
            return False
        if v["state"] == "FINISHED":
            return True
        assert v["state"] not in ("CANCELED", "FAILED"), _story(m, job)
        eps = _get(m, f"/v1/jobs/{job}/epochs", limit=100_000)
        return any(e["state"] == "COMMITTED" and e["decided_by"] >= 2 for e in eps)

    wait_for(lambda: f"{job} resumed:\n{_story(m, job)}", ready, JOB_TIMEOUT)


def test_under_a_manager_sigterm_resumes_by_itself_and_only_cancel_cancels(
    tmp_path: Path,
) -> None:
    apps, total = tmp_path / "apps", 16_000
    bounded_out, endless_out = tmp_path / "out" / "bounded", tmp_path / "out" / "endless"
    bounded = _app(apps, "bounded", bounded_out, total)
    endless = _app(apps, "endless", endless_out, None, per_epoch=200)
    m = Manager(
        "m1",
        f"sqlite:///{tmp_path / 'manager.db'}",
        tmp_path / "server",
        [apps],
        tmp_path / "m1.log",
    )
    try:
        m.wait_up()
        for job, path in (("bounded", bounded), ("endless", endless)):
            r = m.http.post("/v1/jobs", json={"job_id": job, "entrypoint": str(path), "conf": CONF})
            assert r.status_code == 201, r.text

        # 3. SIGTERM to a driver: its attempt ends SUSPENDED, a new one starts by itself.
        for job in ("bounded", "endless"):
            a = _running_attempt(m, job, 1)
            os.kill(int(a["pid"]), signal.SIGTERM)
        for job in ("bounded", "endless"):
            _resumed(m, job)
            atts = _get(m, f"/v1/jobs/{job}/attempts")
            assert (atts[0]["attempt"], atts[0]["state"]) == (1, "SUSPENDED"), _story(m, job)
            # A suspension uses up no restart. (On a loaded machine Spark may fail an attempt
            # after it, "Python worker failed to connect back": that one is counted.)
            failed = sum(a["state"] == "FAILED" for a in atts)
            assert _get(m, f"/v1/jobs/{job}")["failures"] == failed, _story(m, job)

        wait_for(
            lambda: f"bounded to finish:\n{_story(m, 'bounded')}",
            lambda: _state(m, "bounded") == "FINISHED",
            JOB_TIMEOUT,
        )
        exactly_once(file_sink_ids(bounded_out), total)

        # 4. An explicit cancel still ends the job CANCELED, for good.
        p = subprocess.run(
            stoker_cmd("cancel", "endless", "--server", m.url),
            cwd=str(REPO),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert p.returncode == 0, p.stderr
        wait_for(
            lambda: f"endless to be canceled:\n{_story(m, 'endless')}",
            lambda: _state(m, "endless") == "CANCELED",
            JOB_TIMEOUT,
        )
        atts = [(a["attempt"], a["state"]) for a in _get(m, "/v1/jobs/endless/attempts")]
        assert atts[0] == (1, "SUSPENDED") and atts[-1][1] == "CANCELED", atts
        assert all(state == "FAILED" for _, state in atts[1:-1]), atts  # Spark's, under load
        ids: Counter[int] = file_sink_ids(endless_out)
        exactly_once(ids, len(ids))
    finally:
        stop_all([m])
