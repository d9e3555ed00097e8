"""A second ``stoker run`` of a job while the first is still starting (issue 41 item 8): it
used to start Spark (10-40 s, a JVM) before the store refused it, as the first had no attempt
yet. It is refused at once now, exit 4, naming the first run's pid. The first run is held just
before its Spark starts (``stall_before_spark``), so the second always meets it there; once a
run's attempt is in the store, the store's lease answers (before Spark too)."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from stoker.runtime.runmark import mark_path
from tests.support import kill_group, stoker_cmd
from tests.support.cli_runs import LIGHT, SUSPENDED_EXIT, committed, driver, log_tail, wait_running

APP = """\
import stoker
from stoker import Pipeline, sinks, sources

p = Pipeline("twice").source(sources.generator(rows_per_second=20)).sink(sinks.files("out"))
stoker.run(p, trigger="300ms")
"""


def test_a_second_run_while_the_first_starts_is_refused_before_spark(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text(APP)
    argv = stoker_cmd("run", *LIGHT, "app.py")
    log = tmp_path / "first.log"
    state = tmp_path / ".stoker" / "twice"
    held = {**os.environ, "STOKER_FAULT": "stall_before_spark"}
    with driver(argv, tmp_path, log, env=held) as first:
        stalled = log.with_name("first.log")
        wait_running(first, "the first held", lambda: "before_spark" in stalled.read_text(), log)
        assert mark_path(state).read_text().strip() == str(first.pid)
        second = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert second.returncode == 4, second.stderr
        assert (
            f"job 'twice' is already live: another stoker run (pid {first.pid}) runs it"
            in second.stderr
        ), second.stderr
        assert "starting Spark" not in second.stderr
        kill_group(first)
    # The holder gone, its mark holds nothing: the next run starts, and once its attempt is in
    # the store the store's lease answers a second run, before Spark too.
    log = tmp_path / "next.log"
    with driver(argv, tmp_path, log) as run:
        wait_running(run, "an epoch", lambda: committed(state, "twice"), log)
        third = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert third.returncode == 4, third.stderr
        assert "job 'twice' is already live: attempt 1 runs as pid" in third.stderr
        assert "starting Spark" not in third.stderr
        os.kill(run.pid, signal.SIGTERM)
        assert run.wait(300) == SUSPENDED_EXIT, log_tail(log)
