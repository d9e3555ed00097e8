"""Wall-clock steps and skew under real job managers and a real driver (issue 39 item 1).

Every Python process of the test's managers and drivers steps its wall clock by what a file of
its manager holds (tests/support/clockstep: ``time.time`` is the real clock plus that offset;
libfaketime breaks ``time.sleep`` on Debian 12 when the monotonic clock is left real, see
there): writing the file steps that manager's clock and its drivers', as NTP or a resumed VM
does. Their monotonic clocks are left alone, as a real step leaves them.

A +30 s step seen by every process made the leader SIGKILL a healthy driver within one tick,
count a failure and lose its own lease for a moment, and a manager whose clock ran behind made
every new attempt fail. Here the wall clocks step by 10 minutes forward and back, and two
managers run 10 minutes apart: the driver keeps its attempt, no failure is counted, the leader
keeps its token, and every id reaches the sink once. The test waits on the leases' own renewal
counters (several TTLs of renewals after each step), never for a fixed time.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import JVM_OPTS, exactly_once, file_sink_ids
from tests.support.core import wait_for
from tests.support.manager import Manager, stop_all

CLOCKSTEP = Path(__file__).resolve().parents[1] / "support" / "clockstep"
LEASE_TTL = 5.0
LEADER_TTL = 2.0
SPARK_START = 420.0
STEP = 600  # seconds: ten minutes, the bound

APP = """\
from stoker import Pipeline, sinks, sources

pipeline = (
    Pipeline("stepped")
    .source(sources.generator(rows_per_second=50.0, max_rows_per_epoch=50, partitions=1))
    .sink(sinks.files({out!r}))
)
"""


def _stepped(offset_file: Path) -> dict[str, str]:
    offset_file.write_text("0\n")
    path = [str(CLOCKSTEP), *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]]
    return {"PYTHONPATH": os.pathsep.join(path), "STOKER_TEST_CLOCK_OFFSET_FILE": str(offset_file)}


class World:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.db = root / "store.db"
        self.store = f"sqlite:///{self.db}"
        self.offsets = [root / "offset-0", root / "offset-1"]
        self.apps = root / "apps"
        self.apps.mkdir()
        self.out = root / "out"
        self.managers: list[Manager] = []

    def start(self) -> None:
        for i, offset in enumerate(self.offsets):
            m = Manager(
                f"manager {i}",
                self.store,
                self.root / f"m{i}",
                [self.apps],
                self.root / f"m{i}.log",
                env=_stepped(offset),
                lease_ttl=LEASE_TTL,
                leader_ttl=LEADER_TTL,
            )
            self.managers.append(m)
            m.wait_up()
            if i == 0:  # the first one leads before the second starts
                wait_for("manager 0 to lead", lambda: self.leader() is not None, 60)

    def step(self, i: int, offset: int) -> None:
        self.offsets[i].write_text(f"{offset}\n")

    def q(self, sql: str, *args: object) -> list[tuple[object, ...]]:
        with sqlite3.connect(self.db, timeout=30) as conn:
            return conn.execute(sql, args).fetchall()

    def leader(self) -> tuple[object, ...] | None:
        try:
            rows = self.q("SELECT holder, token, renewals FROM leader_lease")
        except sqlite3.OperationalError:
            return None
        return rows[0] if rows else None

    def attempts(self) -> list[tuple[object, ...]]:
        return self.q(
            "SELECT attempt, state, renewals, error FROM attempts WHERE job_id = 'stepped' "
            "ORDER BY attempt"
        )

    def committed(self) -> int:
        rows = self.q(
            "SELECT count(*) FROM epochs WHERE job_id = 'stepped' AND state = 'COMMITTED'"
        )
        return int(str(rows[0][0]))

    def logs(self) -> str:
        parts = [f"--- {m.name}\n{m.log_tail()}" for m in self.managers]
        for p in sorted(self.root.glob("m*/logs/stepped/attempt-*.log")):
            parts.append(f"--- {p}\n{p.read_text(errors='replace')[-3000:]}")
        return "\n".join(parts)

    def ride_out(self, what: str) -> None:
        """Wait until the driver renewed its lease for three TTLs, the leader for three of
        its own, and the job committed three more epochs, all after the step; nothing of it
        may have failed meanwhile."""
        (_, _, drv, _), *_ = self.attempts()
        lead = self.leader()
        assert lead is not None
        epochs = self.committed()

        def done() -> bool:
            att = self.attempts()
            now = self.leader()
            assert len(att) == 1 and att[0][1] == "RUNNING", f"{what}: {att}\n{self.logs()}"
            assert now is not None and now[:2] == lead[:2], f"{what}: leader {lead} -> {now}"
            return (
                int(str(att[0][2])) >= int(str(drv)) + 9
                and int(str(now[2])) >= int(str(lead[2])) + 9
                and self.committed() >= epochs + 3
            )

        wait_for(f"{what}: the job to ride it out", done, 300, every=0.5)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path)
    try:
        yield w
    finally:
        stop_all(w.managers)


def test_clock_steps_and_skew_kill_no_driver_and_move_no_leader(world: World) -> None:
    world.start()
    app = world.apps / "app.py"
    app.write_text(APP.format(out=str(world.out)))
    leader = next(m for m in world.managers if (m.health() or {}).get("leader") is True)
    r = leader.http.post(
        "/v1/jobs",
        json={
            "job_id": "stepped",
            "entrypoint": str(app),
            "conf": {
                "stoker.master": "local[1]",
                "spark.driver.extraJavaOptions": JVM_OPTS,
                "stoker.trigger": "500ms",
            },
        },
    )
    assert r.status_code == 201, r.text
    wait_for(
        lambda: f"the job to commit two epochs; logs:\n{world.logs()}",
        lambda: world.committed() >= 2,
        SPARK_START,
        every=0.5,
    )
    token = world.leader()

    world.step(0, STEP)  # the leader and its driver: +10 min; the standby 10 min behind them
    world.ride_out("+10 min on the leader's host (skew)")
    world.step(1, STEP)  # the whole machine: +10 min
    world.ride_out("+10 min everywhere")
    world.step(0, 0)
    world.step(1, 0)  # -10 min everywhere
    world.ride_out("-10 min everywhere")
    world.step(1, -STEP)  # the standby 10 min behind
    world.ride_out("the standby -10 min (skew)")

    r = leader.http.post("/v1/jobs/stepped/cancel")
    assert r.status_code in (200, 202), r.text
    wait_for(
        "the job to end",
        lambda: world.q("SELECT state FROM jobs WHERE job_id = 'stepped'")[0][0] == "CANCELED",
        120,
        every=0.5,
    )
    att = world.attempts()
    assert [(a[0], a[1]) for a in att] == [(1, "CANCELED")], att
    assert world.q("SELECT failures FROM jobs WHERE job_id = 'stepped'") == [(0,)]
    assert world.leader() is not None and world.leader()[:2] == token[:2]  # type: ignore[index]
    rows = sum(
        int(str(n))
        for (n,) in world.q(
            "SELECT rows_in FROM epochs WHERE job_id = 'stepped' AND state = 'COMMITTED'"
        )
    )
    exactly_once(file_sink_ids(world.out), rows)
    for m in world.managers:
        assert "lost the leader lease" not in m.log_tail(200_000), m.name
