"""A second ``stoker run`` of a live job is refused before Spark starts (issue 23 item 4: it
started Spark and said "already live" 20-30 s later). The live attempt here is held by this
test's own process, with a long lease: a real process, alive, on this host."""

from __future__ import annotations

import subprocess
from pathlib import Path

from stoker.procs import this_owner
from stoker.store import open_store
from stoker.types import AttemptNo, job_id
from tests.support import REPO, stoker_cmd

APP = """\
import stoker
from stoker import Pipeline, sinks, sources

p = Pipeline("live-one").source(sources.generator(total=10)).sink(sinks.files({out!r}))

if __name__ == "__main__":
    stoker.run(p)
"""


def test_a_live_job_is_refused_before_spark_starts(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    store = open_store(f"sqlite:///{state / 'store.db'}")
    try:
        jid = job_id("live-one")
        store.create_job(jid, "live-one", {"sinks": []}, {})
        store.start_attempt(jid, this_owner(), 600.0, AttemptNo(0))
    finally:
        store.close()
    app = tmp_path / "app.py"
    app.write_text(APP.format(out=str(tmp_path / "out")))
    done = subprocess.run(
        stoker_cmd("run", str(app), "-D", f"stoker.state_dir={state}"),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(REPO),
    )
    assert done.returncode == 4, done.stderr
    assert "job 'live-one' is already live: attempt 1 runs as pid" in done.stderr, done.stderr
    assert "starting Spark" not in done.stderr, done.stderr
    assert not (tmp_path / "out").exists()
