"""A query that stops making progress fails its attempt (the progress watchdog, issue 20).

The hang is real: the Python process in which Spark runs a stoker source's reader for the
driver (``pyspark.sql.streaming.python_streaming_source_runner``: ``latestOffset``,
partitions, commit) is frozen with SIGSTOP while the job runs. Spark's driver then waits on
its socket without a timeout: the query's thread never comes back from planning the next
epoch, no epoch, no progress, no idle event, no error, while the attempt's lease is renewed.
Without the watchdog the driver below never ends. With ``stoker.progress_timeout`` small, the
attempt fails (exit 8, the job FAILED, the log saying why), and a restart goes on from the
checkpoint: every id written once.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from stoker.store import open_store
from stoker.types import AttemptState, EpochState, JobState, job_id
from tests.support import (
    APPS,
    exactly_once,
    file_sink_ids,
    kill_group,
    start_driver,
    wait_for,
    wait_group_gone,
)
from tests.support.procs import process_tree, source_runners

pytestmark = [pytest.mark.timeout(600)]

JOB = job_id("stalls")
TOTAL = 3000
PER_EPOCH = 100
STARTUP = 240.0  # Spark's start on a busy 2-core machine


def _tail(log: Path, n: int = 30) -> str:
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    return "\n".join(lines[-n:])


def _committed(state: Path) -> int:
    if not (state / "store.db").exists():
        return 0
    st = open_store(state / "store.db")
    try:
        return sum(e.state == EpochState.COMMITTED for e in st.list_epochs(JOB, limit=10_000))
    finally:
        st.close()


# A small bound for the tests; Spark's idle events every second keep an idle query from
# looking stalled (the bound is never below two of their intervals).
WATCHDOG = (
    "-D",
    "stoker.progress_timeout=5s",
    "-D",
    "spark.sql.streaming.noDataProgressEventInterval=1s",
)
BOUND = 5.2  # the timeout plus the trigger interval (200 ms)
IDLE = 15  # the idle test's timeout (seconds)


def _driver(
    app: str, state: Path, env: dict[str, str], log: Path, *extra: str
) -> subprocess.Popen[bytes]:
    """``stoker run`` of a test app on local[2] with the test's small watchdog bound."""
    args = ["-D", f"stoker.state_dir={state}", "-D", "stoker.master=local[2]", *WATCHDOG]
    return start_driver(APPS / app, *args, *extra, env=env, log=log)


def _finished(driver: subprocess.Popen[bytes], log: Path, what: str) -> int:
    """The driver's exit code once it ended (and its process group is gone); killed and a
    failure of the test when it has not ended in time."""
    try:
        return driver.wait(timeout=STARTUP + 120)
    except subprocess.TimeoutExpired:
        kill_group(driver)
        pytest.fail(f"{what} did not finish\n{_tail(log)}")
    finally:
        wait_group_gone(driver.pid)


def _start(state: Path, out: Path, log: Path, *extra: str) -> subprocess.Popen[bytes]:
    env = {
        "IDS_OUT": str(out),
        "IDS_JOB": JOB,
        "IDS_TOTAL": str(TOTAL),
        "IDS_PER_EPOCH": str(PER_EPOCH),
        "IDS_TRIGGER": "200ms",
        "IDS_PG_DSN": "",
        "IDS_PG2_DSN": "",
        "STOKER_FAULT": "",
    }
    return _driver("ids_app.py", state, env, log, *extra)


def _reader_runners(driver: int) -> list[int]:
    """The query's source runner: started by the JVM, or forked by the driver's zygote (a
    local run has one: stopping its client would freeze nothing)."""
    return sorted(p.pid for p in source_runners(process_tree(pgid=driver, root=driver)))


def test_a_frozen_source_reader_fails_the_attempt_and_a_restart_writes_every_id_once(
    tmp_path: Path,
) -> None:
    state, out = tmp_path / "state", tmp_path / "out"
    log1, log2 = tmp_path / "driver-1.log", tmp_path / "driver-2.log"
    driver = _start(state, out, log1)
    frozen: list[int] = []
    try:
        wait_for(
            lambda: f"3 committed epochs\n{_tail(log1)}",
            lambda: _committed(state) >= 3 or driver.poll() is not None,
            STARTUP,
            0.2,
        )
        assert driver.poll() is None, _tail(log1)
        runners = wait_for("the source's reader process", lambda: _reader_runners(driver.pid), 30)
        for pid in runners:
            os.kill(pid, signal.SIGSTOP)  # the real hang: Spark waits on its socket for ever
            frozen.append(pid)
        at = _committed(state)

        # Before the watchdog this driver never ended: no epoch, no error, lease renewed.
        try:
            rc = driver.wait(timeout=120)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the driver did not end with its query stalled\n{_tail(log1)}")
        text = log1.read_text(errors="replace")
        assert rc == 8, f"rc {rc}\n{_tail(log1)}"
        assert "no progress for" in text and "stoker.progress_timeout" in text, _tail(log1)
        # Where the query hangs depends on when the reader froze: asked for the next epoch's
        # offsets (planning), or reading the rows of an epoch begun (its task never ends; seen
        # in CI on a slow machine: "epoch 3 is running and no task of it completed").
        assert re.search(
            r"the query is planning its next epoch|epoch \d+ is running and no task of it "
            r"completed in that time",
            text,
        ), _tail(log1)
        assert "Listener PythonStreamingQueryListenerWrapper threw" not in text, text[-3000:]
        assert _committed(state) < TOTAL // PER_EPOCH, "the job ended anyway?"
        st = open_store(state / "store.db")
        try:
            job = st.get_job(JOB)
            attempt = st.get_attempt(JOB, job.current_attempt)
            assert job.state == JobState.FAILED
            assert attempt is not None and attempt.state == AttemptState.FAILED
            assert "no progress for" in (attempt.error or "")
        finally:
            st.close()
        assert _committed(state) >= at
    finally:
        for pid in frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if driver.poll() is None:
            kill_group(driver)
        wait_group_gone(driver.pid)

    # The restart strategy's part (here the operator's --restart): the job goes on from its
    # checkpoint and writes every id exactly once.
    rc = _finished(_start(state, out, log2, "--restart"), log2, "the restarted driver")
    assert rc == 0, f"rc {rc}\n{_tail(log2)}"
    exactly_once(file_sink_ids(out), TOTAL)


# The two healthy jobs the watchdog must leave alone (idle, slow) are the other forms of its
# stall test above, which every lane runs: the fast lane leaves them out (43-45 s each).
@pytest.mark.variant
def test_an_idle_job_is_not_failed_for_want_of_data(tmp_path: Path) -> None:
    """No data for several bounds: no epoch at all, only Spark's idle events. The watchdog
    must tell that from a stall; then data comes and is written, and a SIGTERM stops the job
    as usual."""
    inbox, out, state, log = (
        tmp_path / "in",
        tmp_path / "out",
        tmp_path / "state",
        tmp_path / "d.log",
    )
    inbox.mkdir()
    env = {
        "CHAOS_JOB": "idles",
        "CHAOS_GEN": "0",
        "CHAOS_FILES_IN": str(inbox),
        "CHAOS_OUT": str(out),
        "CHAOS_PG_DSN": "",
        "STOKER_FAULT": "",
    }
    # A larger bound here: the first plan starts the source's reader process, which took over
    # 5 s on a machine at load 5 (the watchdog rightly failed it: "planning, last progress:
    # the query started"). What is tested is that idle events count as progress.
    driver = _driver("chaos_app.py", state, env, log, "-D", f"stoker.progress_timeout={IDLE}s")
    try:
        wait_for(
            lambda: f"the query to start\n{_tail(log)}",
            lambda: "query started" in log.read_text(errors="replace") or driver.poll() is not None,
            STARTUP,
            0.2,
        )
        # What is asserted is an absence (no failure for two bounds of an idle query), so
        # the wait is that long; the driver ending meanwhile fails it at once.
        quiet_until = time.monotonic() + 2 * (IDLE + 0.2)
        wait_for(
            "two bounds of an idle query",
            lambda: driver.poll() is not None or time.monotonic() > quiet_until,
            2 * IDLE + 30,
            0.2,
        )
        assert driver.poll() is None, f"an idle job was failed\n{_tail(log)}"
        assert "no progress for" not in log.read_text(errors="replace")

        rows = "".join(json.dumps({"id": i}) + "\n" for i in range(50))
        (inbox / ".part-0.tmp").write_text(rows)
        os.rename(inbox / ".part-0.tmp", inbox / "part-0.json")
        wait_for(
            lambda: f"the file's ids in the sink\n{_tail(log)}",
            lambda: len(file_sink_ids(out)) == 50 or driver.poll() is not None,
            120,
            0.3,
        )
        exactly_once(file_sink_ids(out), 50)
        driver.send_signal(signal.SIGTERM)
        assert driver.wait(timeout=120) == 13, _tail(log)
    finally:
        if driver.poll() is None:
            kill_group(driver)
        wait_group_gone(driver.pid)


@pytest.mark.variant  # a healthy job the watchdog leaves alone (above)
def test_a_slow_epoch_whose_tasks_complete_is_not_a_stall(tmp_path: Path) -> None:
    """Epochs of 40 tasks of half a second on two cores: about twice the bound, with a task
    completing every quarter second. The watchdog looks at the tasks and lets them run. Two
    epochs: the first one after the query starts has a longer bound (it starts Spark's Python
    workers, watchdog.FIRST_EPOCH_S), the second the test's own."""
    out, state, log = tmp_path / "out", tmp_path / "state", tmp_path / "d.log"
    env = {"SLOW_OUT": str(out), "SLOW_TOTAL": "200", "SLOW_PER_EPOCH": "100", "STOKER_FAULT": ""}
    rc = _finished(_driver("slow_epoch_app.py", state, env, log), log, "the slow job")
    text = log.read_text(errors="replace")
    assert rc == 0, f"rc {rc}\n{_tail(log)}"
    assert "no progress for" not in text
    took = {
        int(n): int(ms) for n, ms in re.findall(r"epoch (\d+) committed: 100 rows, (\d+) ms", text)
    }
    later = [ms for n, ms in took.items() if n > 0]
    assert later and max(later) > 1000 * BOUND, f"no later epoch outlasted the bound: {took}"
    exactly_once(file_sink_ids(out), 200)


def test_a_cancel_waits_for_a_hung_epoch_no_longer_than_its_timeout(tmp_path: Path) -> None:
    """Issue 21 item 5: a cancel lets the epoch in flight commit, but one that never ends
    (a task sleeping for an hour) is abandoned after stoker.cancel_timeout: the job ends
    CANCELED with nothing committed, instead of CANCELING for ever (the only bound there is
    for a job of an application, whose driver the job manager does not kill)."""
    out, state, log = tmp_path / "out", tmp_path / "state", tmp_path / "d.log"
    env = {
        "SLOW_OUT": str(out),
        "SLOW_TOTAL": "100",
        "SLOW_PER_EPOCH": "100",
        "SLOW_TASKS": "1",
        "SLOW_TASK_S": "3600",
        "SLOW_JOB": JOB,
        "STOKER_FAULT": "",
    }
    extra = ("-D", "stoker.cancel_timeout=3s", "-D", "stoker.progress_timeout=off")
    driver = _driver("slow_epoch_app.py", state, env, log, *extra)

    def epoch_begun() -> bool:
        if driver.poll() is not None:
            pytest.fail(f"the driver exited ({driver.returncode})\n{_tail(log)}")
        if not (state / "store.db").exists():
            return False
        st = open_store(state / "store.db")
        try:
            return bool(st.list_epochs(JOB, limit=10))
        except Exception:
            return False
        finally:
            st.close()

    wait_for("the first epoch to begin", epoch_begun, STARTUP, every=0.2)
    st = open_store(state / "store.db")
    try:
        st.request_cancel(JOB)
        rc = _finished(driver, log, "the canceled job")
        text = log.read_text(errors="replace")
        assert rc == 0, f"rc {rc}\n{_tail(log)}"
        assert "did not end within 3 s of the stop" in text, _tail(log)
        job = st.get_job(JOB)
        assert job.state == JobState.CANCELED
        assert st.list_attempts(JOB)[-1].state == AttemptState.CANCELED
        assert not any(e.state == EpochState.COMMITTED for e in st.list_epochs(JOB, limit=10))
    finally:
        st.close()
