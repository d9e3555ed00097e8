"""A job manager's driver plans its queries' batches in source runners forked from its warm
zygote (``stoker/runtime/zygote.py``), for real: a driver process as a manager would start it
(``want_source_zygote``), real Spark, stoker's generator source. While the query runs, its
source runner and Spark's worker daemons are children of the driver's zygote (not new
interpreters Spark started); the job's output holds every id once; once the driver is gone,
so is its zygote."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import JVM_OPTS, exactly_once, file_sink_ids, wait_for
from tests.support.procs import process_tree, still_alive, zygote_children

pytestmark = [pytest.mark.timeout(600)]

SPARK = 300.0
DRIVER = """\
import sys
from stoker.runtime.session import want_source_zygote
want_source_zygote()  # as stoker.runtime.driver does
import stoker
from stoker import Pipeline, sinks, sources

out, total = sys.argv[1], int(sys.argv[2])
p = (
    Pipeline("zyg")
    .source(sources.generator(total=total, rows_per_second=100, max_rows_per_epoch=50))
    .sink(sinks.files(out))
)
stoker.run(p, master="local[1]", trigger="200ms", state_dir=sys.argv[3],
           conf={"spark.driver.extraJavaOptions": sys.argv[4]})
"""


def test_a_drivers_source_runner_is_forked_from_its_zygote(tmp_path: Path) -> None:
    app = tmp_path / "driver.py"
    app.write_text(DRIVER)
    out, state = tmp_path / "out", tmp_path / "state"
    total = 600  # ~6 s of epochs: long enough to see the runner
    proc = subprocess.Popen(
        [sys.executable, str(app), str(out), str(total), str(state), JVM_OPTS],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "driver.log", "wb"),  # noqa: SIM115
    )
    log = tmp_path / "driver.log"
    try:
        # The source runner and Spark's worker daemons (one per kind of work: tasks, the data
        # source's lookup, creation and planning), each forked by the zygote.
        forked = wait_for(
            lambda: f"runner and daemons forked from the zygote:\n{log.read_text()[-3000:]}",
            lambda: (
                len(zygote_children(process_tree(pgid=proc.pid))) >= 3 or proc.poll() is not None
            ),
            SPARK,
        )
        assert proc.poll() is None and forked, log.read_text()[-3000:]
        # The runner reads Spark's requests from the socket Spark gave it (not its argv).
        assert proc.wait(timeout=SPARK) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    exactly_once(file_sink_ids(out), total)
    left = process_tree(pgid=proc.pid)
    wait_for(lambda: f"the zygote gone: {left}", lambda: not still_alive(left), 60)
