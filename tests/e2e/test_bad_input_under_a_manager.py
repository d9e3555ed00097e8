"""Issue 23 item 3: under a job manager, a mistake no restart can fix (here a column the
sources do not have) fails the job for good at its first attempt, saying why; it used to be
retried by the restart strategy three times. Real processes: a ``stoker server`` and its
driver on local Spark."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import JVM_OPTS, wait_for
from tests.support.manager import Manager, one_manager

pytestmark = pytest.mark.timeout(900)

SPARK = 600.0  # a cold Spark driver on a loaded 2-core machine

APP = """\
from stoker import Pipeline, sinks, sources

p = Pipeline("typo")
p.source(sources.generator(total=40, max_rows_per_epoch=20))
p.transform(lambda df, ctx: df.select("idd"))
p.sink(sinks.files({out!r}))
"""


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[Manager]:
    with one_manager(tmp_path, "badinput") as m:
        yield m


def test_bad_input_fails_the_job_at_once_without_restarts(tmp_path: Path, manager: Manager) -> None:
    app = tmp_path / "apps" / "typo.py"
    app.write_text(APP.format(out=str(tmp_path / "apps" / "out")))
    conf = {"stoker.master": "local[1]", "spark.driver.extraJavaOptions": JVM_OPTS}
    body = {
        "entrypoint": str(app),
        "conf": conf,
        "restart_strategy": {"strategy": "fixed-delay", "attempts": 3, "delay": 0.5},
    }
    r = manager.http.post("/v1/jobs", json=body)
    assert r.status_code == 201, r.text

    def ended() -> dict[str, object] | None:
        job = manager.http.get("/v1/jobs/typo").json()
        return job if job["state"] in ("FINISHED", "FAILED", "CANCELED") else None

    job = wait_for(lambda: f"the job to end\n{manager.log_tail()}", ended, SPARK)
    assert job["state"] == "FAILED", job
    assert "bad input: a restart cannot fix it" in str(job["last_error"]), job
    assert "`idd` cannot be resolved" in str(job["last_error"]), job
    attempts = manager.http.get("/v1/jobs/typo/attempts").json()
    assert len(attempts) == 1, attempts
