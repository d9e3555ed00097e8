"""Issue 39 item 6: an outage of what every job shares (here the PostgreSQL server of its sink)
outlasts the restarts that the former default strategy allowed (fixed-delay, 3 in a row, 1 s
apart) and a job under the default now rides it out: it keeps restarting, its delays growing
with a jitter, and runs again once the server is back, instead of ending FAILED for good.

Real processes: a ``stoker server`` on an SQLite store, its driver on local Spark, and a
throwaway PostgreSQL server crashed (``pg_ctl stop -m immediate``) and started again on its
port with its data, as the chaos harness's ``pg_down`` does. The job is submitted without a
restart strategy: the default is what is tested.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stoker.restart import DEFAULT_STRATEGY, FORMER_DEFAULT
from tests.chaos.nemesis import BouncingPostgres
from tests.support import JVM_OPTS, wait_for
from tests.support.manager import Manager, one_manager

pytestmark = pytest.mark.timeout(1200)

SPARK = 600.0  # a cold Spark driver on a loaded 2-core machine
JOB = "shared"
# The failures in a row the former default gave up at (its 3 restarts used up), and how many
# this test waits for before the server comes back: one more than that.
FORMER_LIMIT = FORMER_DEFAULT.attempts + 1
RIDDEN_OUT = FORMER_LIMIT + 1

APP = """\
from stoker import Pipeline, sinks, sources

p = Pipeline({job!r})
p.source(sources.generator(total=None, rows_per_second=20, max_rows_per_epoch=20, partitions=1))
p.sink(sinks.postgres({dsn!r}, table="ids"))
"""


@pytest.fixture
def server() -> Iterator[BouncingPostgres]:
    pg = BouncingPostgres()
    pg.start()
    try:
        yield pg
    finally:
        pg.stop()


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[Manager]:
    with one_manager(tmp_path, "outage") as m:
        yield m


def _get(m: Manager, path: str) -> Any:
    r = m.http.get(path)
    assert r.status_code == 200, (path, r.status_code, r.text)
    return r.json()


def _story(m: Manager) -> str:
    """What a timeout shows: the job, its attempts, the manager's log."""
    job = _get(m, f"/v1/jobs/{JOB}")
    atts = [
        (a["attempt"], a["state"], (a["error"] or "")[:200])
        for a in _get(m, f"/v1/jobs/{JOB}/attempts")
    ]
    return f"{job}\n{atts}\n--- manager log:\n{m.log_tail(3000)}"


def _live(m: Manager) -> dict[str, Any]:
    """The job, which must not have ended (FAILED is what the former default came to)."""
    job: dict[str, Any] = _get(m, f"/v1/jobs/{JOB}")
    assert job["state"] not in ("FAILED", "CANCELED", "FINISHED"), _story(m)
    return job


def _committed_by(m: Manager, attempt: int) -> bool:
    epochs = _get(m, f"/v1/jobs/{JOB}/epochs")
    return any(e["state"] == "COMMITTED" and e["decided_by"] >= attempt for e in epochs)


def test_the_default_strategy_rides_out_an_outage_of_the_sinks_server(
    tmp_path: Path, server: BouncingPostgres, manager: Manager
) -> None:
    app = tmp_path / "apps" / "shared.py"
    app.write_text(APP.format(job=JOB, dsn=server.dsn))
    conf = {
        "stoker.master": "local[1]",
        "stoker.trigger": "500ms",
        "spark.driver.extraJavaOptions": JVM_OPTS,
    }
    r = manager.http.post("/v1/jobs", json={"entrypoint": str(app), "conf": conf})
    assert r.status_code == 201, r.text
    assert r.json()["spec"]["restart_strategy"] == DEFAULT_STRATEGY.to_dict(), r.json()

    # Running and writing: its first epoch committed.
    wait_for(lambda: f"a first epoch\n{_story(manager)}", lambda: _committed_by(manager, 1), SPARK)
    assert _live(manager)["failures"] == 0

    server.crash()
    try:
        # The running attempt fails on its next commit; each next one at opening its sink.
        # It goes on restarting past the failure the former default gave up at.
        wait_for(
            lambda: f"{RIDDEN_OUT} failures in a row\n{_story(manager)}",
            lambda: _live(manager)["failures"] >= RIDDEN_OUT,
            SPARK,
        )
    finally:
        server.come_back()
    down = _live(manager)
    atts = _get(manager, f"/v1/jobs/{JOB}/attempts")
    failed = [a for a in atts if a["state"] == "FAILED"]
    assert len(failed) >= RIDDEN_OUT, atts
    # The running attempt failed writing its epoch; each one after it at opening its sink,
    # before Spark started (exit 16: the sink's server, not bad input).
    assert "psycopg" in failed[0]["error"] or "PostgreSQL" in failed[0]["error"], failed[0]
    for a in failed[1:]:
        assert "SinkError: postgres.dsn: cannot connect to PostgreSQL" in a["error"], a

    # Back: the next attempt runs and commits (after its delay, up to ~8 s by now).
    resumed = down["current_attempt"]
    wait_for(
        lambda: f"an epoch after the outage\n{_story(manager)}",
        lambda: _committed_by(manager, resumed),
        SPARK,
    )
    job = _live(manager)
    assert job["state"] == "RUNNING", _story(manager)

    # The delays grew from 1 s by 1.5 each failure, each times its jitter, drawn from the job
    # id and the failed attempt's number: the same here as in any run (a restart starts when
    # the manager next looks after its due time: later, never earlier).
    def jitter(attempt: int) -> float:
        return DEFAULT_STRATEGY.jitter_factor(f"{JOB}/{attempt}")

    by_number = {a["attempt"]: a for a in _get(manager, f"/v1/jobs/{JOB}/attempts")}
    for n, backoff in zip(range(1, RIDDEN_OUT), [1.0, 1.5, 2.25, 3.375], strict=True):
        gap = by_number[n + 1]["started_at"] - by_number[n]["ended_at"]
        assert gap >= backoff * jitter(n) - 0.05, (n, gap, by_number)
    # The manager's log says each delay and the jitter that made it.
    decided = re.findall(
        rf"job {JOB} attempt (\d+) failed: the restart strategy restarts it in ([\d.]+) s "
        r"\(backoff ([\d.]+) s x jitter ([\d.]+); failure (\d+) in a row\)",
        manager.log.read_text(errors="replace"),
    )
    assert len(decided) >= RIDDEN_OUT, manager.log_tail()
    for attempt, _delay, _backoff, factor, in_a_row in decided[:RIDDEN_OUT]:
        assert in_a_row == attempt  # no reset: every attempt failed within the hour
        assert factor == f"{jitter(int(attempt)):.3f}", decided
    assert len({factor for *_, factor, _ in decided}) > 1, decided  # jitter, not a constant
