"""A driver hung before ``stoker.run`` (issue 39 item 4): its app sleeps for good at import.

Under a real ``stoker server`` with ``--max-starting 1`` the hung driver holds the one start
slot only until ``stoker.startup_timeout`` (3 s here, given explicitly): then it ends its
attempt FAILED naming the phase and the app's line, with the stack of where it hung, and
exits; the second job, waiting CREATED behind it, is started. No Spark starts at all.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import wait_for
from tests.support.manager import Manager, stop_all
from tests.support.procs import Proc, alive

pytestmark = pytest.mark.timeout(300)

HUNG_APP = """\
import time

from stoker import Pipeline, sinks, sources

time.sleep(10**6)  # line 5: the app's import never ends

pipeline = Pipeline({name!r}).source(sources.generator(total=1)).sink(sinks.files({out!r}))
"""
WAIT = 120.0  # a driver's Python start on a loaded 2-core machine, and the 3 s bound


def test_a_hung_import_fails_naming_its_line_and_frees_its_start_slot(tmp_path: Path) -> None:
    apps = tmp_path / "apps"
    apps.mkdir()
    m = Manager(
        "m",
        f"sqlite:///{tmp_path / 'store.db'}",
        tmp_path / "state",
        [apps],
        tmp_path / "manager.log",
        lease_ttl=3.0,
        extra_args=["--max-starting", "1"],
    )
    try:
        m.wait_up()
        for name, conf in (("hung", {"stoker.startup_timeout": "3s"}), ("next", {})):
            app = apps / f"{name}.py"
            app.write_text(HUNG_APP.format(name=name, out=str(tmp_path / "out" / name)))
            body = {
                "job_id": name,
                "entrypoint": str(app),
                "conf": conf,
                "restart_strategy": {"strategy": "none"},
            }
            r = m.http.post("/v1/jobs", json=body)
            assert r.status_code in (200, 201, 202), r.text
        attempts = lambda j: m.http.get(f"/v1/jobs/{j}/attempts").json()  # noqa: E731

        def hung_driver() -> list[Proc]:
            return [p for p in m.driver_procs() if "hung.py" in " ".join(p.argv)]

        drivers = wait_for(lambda: f"the hung driver\n{m.log_tail()}", hung_driver, WAIT, 0.1)
        # The one start slot is the hung job's: the next job waits CREATED.
        assert m.http.get("/v1/jobs/next").json()["state"] == "CREATED"

        job = wait_for(
            lambda: f"the hung job to fail\n{m.log_tail()}",
            lambda: (j := m.http.get("/v1/jobs/hung").json())["state"] == "FAILED" and j,
            WAIT,
        )
        [att] = attempts("hung")
        assert att["state"] == "FAILED", att
        error = att["error"]
        assert error.startswith("no query after 3s: the app's import is still running at hung.py:5")
        assert "time.sleep(10**6)" in error, error  # the stack of where it hung
        assert "hung.py:5" in str(job), job
        wait_for("the hung driver to exit", lambda: not any(alive(p) for p in drivers), WAIT, 0.1)
        # Its slot is free: the next job is started.
        wait_for(
            lambda: f"the next job's attempt\n{m.log_tail()}",
            lambda: attempts("next"),
            WAIT,
        )
    finally:
        stop_all([m])
