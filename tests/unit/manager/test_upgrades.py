"""The leader's upgrades (issue 24) without Spark: a real store, real processes standing in for
the drivers and the standbys, a manual clock. What the leader does is judged from the store
and the processes: the old driver asked to stop once both codes are warm, the swap and the
handover to the new code's standby, the rollback to the old code's standby, the watch window,
a refusal when the new code's standby dies, and a leader that dies mid-upgrade. The whole
path with Spark is tests/e2e/test_upgrade.py.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stoker.clock import ManualClock
from stoker.errors import InvalidInput
from stoker.manager import Supervisor, SupervisorConfig
from stoker.manager.launcher import LocalProcessLauncher, this_host
from stoker.manager.standbys import spec_key
from stoker.manager.upgrades import compare_pipelines
from stoker.procs import process_start_marker
from stoker.store import Owner, Store, open_store
from stoker.types import (
    AttemptNo,
    AttemptState,
    JobState,
    StandbyRole,
    StandbyState,
    UpgradeState,
    job_id,
)
from tests.support import wait_for

JOB = job_id("up")
# A stand-in driver: a process group of its own that outlives SIGTERM (a driver takes it as
# "stop at the next epoch boundary" and ends its attempt itself, as the test does for it).
_PATIENT = "import signal, time; signal.signal(signal.SIGTERM, lambda *a: None)"
# Every stand-in says when its handler is in place (argv[1]): a SIGTERM before would kill it.
_READY = "\nimport pathlib, sys, time; pathlib.Path(sys.argv[1]).touch(); time.sleep(120)\n"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        p.kill()
        p.wait()


def _process(
    procs: list[subprocess.Popen[bytes]], code: str = _PATIENT
) -> tuple[Owner, subprocess.Popen[bytes]]:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:  # gone once the process said it is ready
        ready = Path(folder) / "ready"
        argv = [sys.executable, "-c", code + _READY, str(ready)]
        p = subprocess.Popen(argv, start_new_session=True)
        wait_for("a stand-in process ready", ready.exists, timeout=60, every=0.02)
    procs.append(p)
    return Owner(this_host(), p.pid, process_start_marker(p.pid)), p


def _spec(app: Path) -> dict[str, Any]:
    return {
        "kind": "app",
        "entrypoint": str(app),
        "args": [],
        "conf": {},
        "restart_strategy": {"strategy": "fixed-delay", "attempts": 3, "delay": 30},
    }


class World:
    """A job RUNNING v1 as a stand-in driver, an upgrade to v2 PENDING, and both standbys
    (the old code's, the new code's) READY as stand-in processes."""

    def __init__(
        self,
        tmp_path: Path,
        store: Store,
        procs: list[subprocess.Popen[bytes]],
        driver_code: str = _PATIENT,
        suspended_before: int = 0,
    ):
        self.store = store
        v1, v2 = tmp_path / "v1.py", tmp_path / "v2.py"
        v1.write_text("")
        v2.write_text("")
        self.old, self.new = _spec(v1), _spec(v2)
        store.create_job(JOB, "up", self.old, {})
        self.driver, self.driver_proc = _process(procs, driver_code)
        for n in range(suspended_before):  # earlier attempts stopped by signals
            store.start_attempt(JOB, self.driver, 10.0, AttemptNo(n))
            store.finish_attempt(JOB, AttemptNo(n + 1), AttemptState.SUSPENDED, JobState.SUSPENDED)
        self.first = AttemptNo(suspended_before + 1)
        store.start_attempt(JOB, self.driver, 10.0, AttemptNo(suspended_before))
        self.up = store.add_upgrade(JOB, "up-1", self.old, self.new, 3, 30.0, {"sources": []})
        self.old_sb, _ = _process(procs)
        store.add_standby(JOB, self.old_sb, "/logs/standby.log", 10.0, spec_key=spec_key(self.old))
        store.renew_standby(JOB, self.old_sb, 10.0, ready=True)
        self.new_sb, self.new_proc = _process(procs)
        store.add_standby(
            JOB, self.new_sb, "/logs/upgrade.log", 10.0, StandbyRole.UPGRADE, spec_key(self.new)
        )
        store.renew_standby(JOB, self.new_sb, 10.0, ready=True, role=StandbyRole.UPGRADE)

    def renew(self) -> None:
        """The standbys live on, renewing their leases (as they do every ttl/3)."""
        for owner, role in ((self.old_sb, StandbyRole.STANDBY), (self.new_sb, StandbyRole.UPGRADE)):
            self.store.renew_standby(JOB, owner, 10.0, role=role)

    def old_driver_stops(self) -> None:
        """The old driver does what SIGTERM asks: its epoch commits, its attempt ends
        SUSPENDED, it exits."""
        self.store.finish_attempt(JOB, self.first, AttemptState.SUSPENDED, JobState.SUSPENDED)
        self.driver_proc.kill()
        self.driver_proc.wait()


def _sup(store: Store, tmp_path: Path, holder: str = "manager-a") -> Supervisor:
    return Supervisor(
        store, SupervisorConfig(tmp_path, store.url, holder=holder), LocalProcessLauncher()
    )


def _step_until(sup: Supervisor, world: World, what: str, cond: Any) -> None:
    def stepped() -> Any:
        world.renew()
        sup.step()
        return cond()

    wait_for(what, stepped, timeout=30, every=0.05)


def _stop_asked(sup: Supervisor, world: World, attempt: int = 1) -> None:
    """Step until the leader has asked the old code's ``attempt`` to stop."""
    store = world.store
    _step_until(
        sup,
        world,
        f"attempt {attempt} asked to stop",
        lambda: store.get_upgrade("up-1").stop_attempt == attempt,  # type: ignore[union-attr]
    )


def _handed(sup: Supervisor, world: World, attempt: int, role: StandbyRole) -> None:
    """Step until the job's ``role`` standby was handed ``attempt``."""
    store = world.store
    _step_until(
        sup,
        world,
        f"attempt {attempt} handed to the {role} standby",
        lambda: (sb := store.get_standby(JOB, role)) is not None and sb.attempt == attempt,
    )


def _swapped(sup: Supervisor, world: World) -> None:
    """Step until the old driver is asked to stop, stop it, and step until the swap's
    attempt is handed to the new code's standby."""
    _stop_asked(sup, world)
    world.old_driver_stops()
    _handed(sup, world, 2, StandbyRole.UPGRADE)


def test_both_codes_warm_then_the_old_stops_and_the_new_takes_the_next_attempt(
    tmp_path: Path, clock: ManualClock, procs: list[subprocess.Popen[bytes]]
) -> None:
    store = open_store(tmp_path / "store.db", clock)
    world = World(tmp_path, store, procs)
    sup = _sup(store, tmp_path)
    _swapped(sup, world)
    up = store.get_upgrade("up-1")
    assert up is not None and (up.state, up.stop_attempt, up.swap_attempt) == (
        UpgradeState.SWAPPED,
        1,
        2,
    )
    assert store.get_job(JOB).spec == world.new  # swapped with the upgrade, one transaction
    att = store.get_attempt(JOB, AttemptNo(2))
    assert att is not None and (att.state, att.owner.pid, att.log_path) == (
        AttemptState.STARTING,
        0,  # the new code's standby holds it itself
        "/logs/upgrade.log",
    )
    assert sup.started_attempts == 0  # no cold driver
    # The old code's standby is kept (the way back) while the new code is watched.
    old = store.get_standby(JOB)
    assert old is not None and old.owner == world.old_sb and old.state == StandbyState.READY

    # The new code holds its attempt; its standby row goes, the old code's stays.
    store.hold_start(JOB, AttemptNo(2), world.new_sb, 10.0)
    store.claim_attempt(JOB, AttemptNo(2), world.new_sb, 10.0)
    _step_until(
        sup, world, "the upgrade row gone", lambda: not store.get_standby(JOB, StandbyRole.UPGRADE)
    )
    assert world.new_proc.poll() is None  # it is the job's driver now: not killed
    # The watch window (30 s, no epoch here) passes: CONFIRMED; the old standby is stopped
    # (the job asked for none) and nothing replaces it. The new driver renews its lease.
    for _ in range(4):
        clock.advance(8)
        store.renew_lease(JOB, AttemptNo(2), 10.0)
        world.renew()
    _step_until(
        sup,
        world,
        "CONFIRMED",
        lambda: store.get_upgrade("up-1").state == UpgradeState.CONFIRMED,  # type: ignore[union-attr]
    )
    _step_until(sup, world, "the old code's standby stopped", lambda: not store.get_standby(JOB))
    assert store.get_job(JOB).spec == world.new
    store.close()


def test_new_code_that_fails_in_its_window_is_rolled_back_to_the_old_codes_standby(
    tmp_path: Path, clock: ManualClock, procs: list[subprocess.Popen[bytes]]
) -> None:
    store = open_store(tmp_path / "store.db", clock)
    world = World(tmp_path, store, procs)
    sup = _sup(store, tmp_path)
    _swapped(sup, world)
    store.hold_start(JOB, AttemptNo(2), world.new_sb, 10.0)
    store.claim_attempt(JOB, AttemptNo(2), world.new_sb, 10.0)
    world.new_proc.kill()  # the new code's driver dies in its window
    world.new_proc.wait()
    _handed(sup, world, 3, StandbyRole.STANDBY)
    up = store.get_upgrade("up-1")
    assert up is not None and up.state == UpgradeState.ROLLED_BACK
    assert "attempt 2 of the new code failed" in (up.detail or "")
    job = store.get_job(JOB)
    assert job.spec == world.old and job.failures == 0  # no failure counted
    assert sup.started_attempts == 0
    sb = store.get_standby(JOB)
    assert sb is not None and sb.owner == world.old_sb and sb.state == StandbyState.TAKEN
    store.close()


def test_new_code_that_records_its_own_failure_is_rolled_back_to_the_warm_old_code(
    tmp_path: Path, clock: ManualClock, procs: list[subprocess.Popen[bytes]]
) -> None:
    """The new code's driver ends its attempt FAILED itself (an exception in its epoch) and
    exits: the next attempt goes to the old code's standby in the step that rolls back (the
    standby kept for it is not stopped first)."""
    store = open_store(tmp_path / "store.db", clock)
    world = World(tmp_path, store, procs)
    sup = _sup(store, tmp_path)
    _swapped(sup, world)
    store.hold_start(JOB, AttemptNo(2), world.new_sb, 10.0)
    store.claim_attempt(JOB, AttemptNo(2), world.new_sb, 10.0)
    store.finish_attempt(JOB, AttemptNo(2), AttemptState.FAILED, None, "RuntimeError: v2 breaks")
    world.new_proc.kill()
    world.new_proc.wait()
    _handed(sup, world, 3, StandbyRole.STANDBY)
    up = store.get_upgrade("up-1")
    assert up is not None and up.state == UpgradeState.ROLLED_BACK
    assert "v2 breaks" in (up.detail or "")
    assert store.get_job(JOB).spec == world.old and sup.started_attempts == 0
    store.close()


def test_a_new_code_standby_that_dies_refuses_the_upgrade_and_the_old_code_runs_on(
    tmp_path: Path, clock: ManualClock, procs: list[subprocess.Popen[bytes]]
) -> None:
    store = open_store(tmp_path / "store.db", clock)
    world = World(tmp_path, store, procs)
    world.new_proc.kill()  # e.g. its import failed
    world.new_proc.wait()
    sup = _sup(store, tmp_path)
    _step_until(
        sup,
        world,
        "REFUSED",
        lambda: store.get_upgrade("up-1").state == UpgradeState.REFUSED,  # type: ignore[union-attr]
    )
    up = store.get_upgrade("up-1")
    assert up is not None and "upgrade standby" in (up.detail or "") and up.stop_attempt is None
    assert world.driver_proc.poll() is None  # the old driver was never asked to stop
    att = store.get_attempt(JOB, AttemptNo(1))
    assert att is not None and att.state == AttemptState.RUNNING
    assert store.get_job(JOB).spec == world.old
    # The old code's standby, started for the upgrade only, is stopped.
    _step_until(sup, world, "no standby", lambda: not store.list_standbys())
    store.close()


def test_a_leader_that_dies_after_asking_the_old_driver_to_stop_leaves_the_swap_to_the_next(
    tmp_path: Path, clock: ManualClock, procs: list[subprocess.Popen[bytes]]
) -> None:
    store = open_store(tmp_path / "store.db", clock)
    world = World(tmp_path, store, procs)
    old = _sup(store, tmp_path)
    _stop_asked(old, world, 1)
    # The leader dies here (no resign); the old driver ends its attempt as asked.
    world.old_driver_stops()
    new = _sup(open_store(tmp_path / "store.db", clock), tmp_path, holder="manager-b")
    new.step()  # a standby manager: it sees the leader's lease (stoker.leases)
    clock.advance(old.cfg.leader_ttl + 0.1)
    _handed(new, world, 2, StandbyRole.UPGRADE)
    up = store.get_upgrade("up-1")
    assert up is not None and (up.state, up.swap_attempt) == (UpgradeState.SWAPPED, 2)
    assert store.get_job(JOB).current_attempt == 2  # once: one attempt after the stop
    assert new.started_attempts == 0 and old.started_attempts == 0
    new.store.close()
    store.close()


def test_the_old_driver_is_sent_sigterm_not_killed(
    tmp_path: Path, clock: ManualClock, procs: list[subprocess.Popen[bytes]]
) -> None:
    """The stop is a request: SIGTERM to the driver alone (its epoch in flight commits)."""
    store = open_store(tmp_path / "store.db", clock)
    received = tmp_path / "sigterm"
    code = (
        "import signal\n"
        f"signal.signal(signal.SIGTERM, lambda *a: open({str(received)!r}, 'w').write('TERM'))"
    )
    world = World(tmp_path, store, procs, code)
    sup = _sup(store, tmp_path)
    # The handler creates the file, then writes it: wait for what it writes.
    _step_until(sup, world, "SIGTERM received", lambda: received.exists() and received.read_text())
    assert received.read_text() == "TERM" and world.driver_proc.poll() is None
    store.close()


def test_the_swap_is_not_held_back_by_earlier_suspensions(
    tmp_path: Path, clock: ManualClock, procs: list[subprocess.Popen[bytes]]
) -> None:
    """A job suspended twice before (two signals, two upgrades) resumes after a backoff; the
    suspension a swap asked for is taken over at once (the clock does not move here)."""
    store = open_store(tmp_path / "store.db", clock)
    world = World(tmp_path, store, procs, suspended_before=2)
    sup = _sup(store, tmp_path)
    _stop_asked(sup, world, 3)
    world.old_driver_stops()
    _handed(sup, world, 4, StandbyRole.UPGRADE)
    store.close()


def test_pipelines_are_compared_source_for_source() -> None:
    running = {"sources": ["generator(1)"], "sinks": ["files:/a"], "output_mode": "complete"}
    same = compare_pipelines(running, {**running, "sinks": ["files:/a", "files:/b"]})
    assert same["sinks_kept"] == ["files:/a"] and same["sinks_added"] == ["files:/b"]
    with pytest.raises(InvalidInput, match="other sources"):
        compare_pipelines(running, {**running, "sources": ["generator(2)"]})
    with pytest.raises(InvalidInput, match="output_mode"):
        compare_pipelines(running, {**running, "output_mode": "update"})
    with pytest.raises(InvalidInput, match="not declared its pipeline"):
        compare_pipelines(None, running)
