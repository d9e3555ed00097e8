"""Issue 23 item 10: a manager that is PID 1 in a container (or a child subreaper) is handed a
driver's JVM when the JVM outlives its Python by a moment; it used to stay ``<defunct>`` under
the server until the server exited. Real processes: a ``stoker server`` made a child subreaper
before it starts (as a container's entry point adopts orphans), a real Spark driver that runs
a job to its end.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from stoker.procs import all_stats
from tests.support import JVM_OPTS, file_sink_ids, wait_for
from tests.support.manager import Manager, one_manager

pytestmark = [pytest.mark.scenario, pytest.mark.timeout(900)]

SPARK = 600.0  # a cold Spark driver on a loaded 2-core machine

# Becomes a child subreaper, then execs the server's argv (what follows it).
SUBREAPER = (
    "import ctypes, os, sys; "
    "ctypes.CDLL(None).prctl(36, 1, 0, 0, 0); "
    "os.execvp(sys.argv[1], sys.argv[1:])"
)

APP = """\
from stoker import Pipeline, sinks, sources

p = Pipeline("reaped")
p.source(sources.generator(total=40, max_rows_per_epoch=20))
p.sink(sinks.files({out!r}))
"""


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[Manager]:
    with one_manager(tmp_path, "reaper", wrap=[sys.executable, "-c", SUBREAPER]) as m:
        yield m


def test_a_manager_that_adopts_orphans_leaves_no_defunct_driver_jvm(
    tmp_path: Path, manager: Manager
) -> None:
    out = tmp_path / "apps" / "out"
    app = tmp_path / "apps" / "reaped.py"
    app.write_text(APP.format(out=str(out)))
    conf = {"stoker.master": "local[1]", "spark.driver.extraJavaOptions": JVM_OPTS}
    r = manager.http.post("/v1/jobs", json={"entrypoint": str(app), "conf": conf})
    assert r.status_code == 201, r.text

    def ended() -> dict[str, object] | None:
        job = manager.http.get("/v1/jobs/reaped").json()
        return job if job["state"] in ("FINISHED", "FAILED") else None

    job = wait_for("the job to end", ended, SPARK)
    assert job["state"] == "FINISHED", (job, manager.log_tail())
    assert sorted(file_sink_ids(out)) == list(range(40))

    def children() -> list[str]:
        return [f"{s.pid} {s.state}" for s in all_stats() if s.ppid == manager.proc.pid]

    # Every process the job ran (its driver, its JVM, cleanups) ended and was collected.
    wait_for(lambda: f"the manager's children to go: {children()}", lambda: not children(), 120)
