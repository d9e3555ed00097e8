"""A slow healthy start under a job manager (issue 21, item 1): a real ``stoker server`` whose
start lease (``--startup-ttl 5s``) and driver lease (``--lease-ttl 3s``) are both far shorter
than the start of its drivers, whose app sleeps 8 s at import before Spark starts.

The driver holds its attempt from its first second and renews the lease while the app imports
and Spark comes up, so the job is not failed and no second driver starts beside the first. With
``--max-starting 1`` the second job waits for the first driver to be up: never two attempts
STARTING at once, and the one that waited longer starts first.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from tests.support import JVM_OPTS, wait_for
from tests.support.manager import Manager, stop_all

pytestmark = pytest.mark.timeout(900)

SLOW_APP = """\
import time

from stoker import Pipeline, sinks, sources

time.sleep(8)  # the app's import: longer than the manager's start lease and driver lease

pipeline = (
    Pipeline({name!r})
    .source(sources.generator(total=20, max_rows_per_epoch=10, partitions=1))
    .sink(sinks.files({out!r}))
)
"""
CONF = {
    "stoker.master": "local[1]",
    "stoker.trigger": "200ms",
    "spark.driver.extraJavaOptions": JVM_OPTS,
}
DONE = 600.0  # two Spark starts one after the other on a loaded 2-core machine


def test_a_slow_start_holds_its_attempt_and_starts_wait_their_turn(tmp_path: Path) -> None:
    apps = tmp_path / "apps"
    apps.mkdir()
    db = tmp_path / "store.db"
    m = Manager(
        "m",
        f"sqlite:///{db}",
        tmp_path / "state",
        [apps],
        tmp_path / "manager.log",
        lease_ttl=3.0,
        extra_args=["--startup-ttl", "5s", "--max-starting", "1"],
    )
    seen: list[int] = []  # STARTING attempts at each look
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(0.1):
            if not db.exists():
                continue
            try:
                conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
                try:
                    (n,) = conn.execute(
                        "SELECT count(*) FROM attempts WHERE state = 'STARTING'"
                    ).fetchone()
                finally:
                    conn.close()
            except sqlite3.Error:
                continue  # the schema not made yet, a busy file: the next look
            seen.append(int(n))

    watcher = threading.Thread(target=watch, daemon=True)
    try:
        m.wait_up()
        watcher.start()
        for name in ("first", "second"):
            app = apps / f"{name}.py"
            app.write_text(SLOW_APP.format(name=name, out=str(tmp_path / "out" / name)))
            r = m.http.post("/v1/jobs", json={"job_id": name, "entrypoint": str(app), "conf": CONF})
            assert r.status_code in (200, 201, 202), r.text
            # The second is submitted once the first's attempt exists: it queues behind it.
            wait_for(
                f"an attempt of {name}",
                lambda name=name: m.http.get(f"/v1/jobs/{name}").json()["current_attempt"],
                DONE,
            )

        def ended() -> dict[str, str] | None:
            states = {j: m.http.get(f"/v1/jobs/{j}").json()["state"] for j in ("first", "second")}
            return (
                states
                if all(s in ("FINISHED", "FAILED", "CANCELED") for s in states.values())
                else None
            )

        states = wait_for(lambda: f"both jobs to end\n{m.log_tail()}", ended, DONE, every=1.0)
        assert states == {"first": "FINISHED", "second": "FINISHED"}, m.log_tail()
        for name in ("first", "second"):
            attempts = m.http.get(f"/v1/jobs/{name}/attempts").json()
            got = [(a["attempt"], a["state"]) for a in attempts]
            assert got == [(1, "FINISHED")], f"{name}: {attempts}\n{m.log_tail()}"
        first = m.http.get("/v1/jobs/first/attempts").json()[0]
        second = m.http.get("/v1/jobs/second/attempts").json()[0]
        assert first["started_at"] < second["started_at"]
    finally:
        stop.set()
        stop_all([m])
    assert seen and max(seen) == 1, f"STARTING attempts seen at once: max {max(seen, default=0)}"
