"""The leader's warm standbys (issue 24) without Spark: a real store, real processes standing
in for standby drivers (a ``sleep``: what the leader sees of a standby is its process and its
row), a manual clock. The standby driver itself, with Spark, is in tests/e2e/test_standby.py.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from stoker.clock import ManualClock
from stoker.manager import Supervisor, SupervisorConfig
from stoker.manager.launcher import LocalProcessLauncher, this_host
from stoker.manager.standbys import BACKOFF
from stoker.procs import process_start_marker
from stoker.store import Owner, open_store
from stoker.types import (
    AttemptNo,
    AttemptState,
    ControlVersion,
    Epoch,
    JobId,
    JobKind,
    JobState,
    StandbyState,
    job_id,
)
from tests.support import wait_for

JOB = job_id("warm")


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def sup(tmp_path: Path, clock: ManualClock) -> Iterator[Supervisor]:
    store = open_store(tmp_path / "store.db", clock)
    s = Supervisor(store, SupervisorConfig(tmp_path, store.url), LocalProcessLauncher())
    yield s
    store.close()


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        p.kill()
        p.wait()


def _process(procs: list[subprocess.Popen[bytes]]) -> Owner:
    """A live process of this host (a stand-in for a driver): its owner record."""
    # A process group of its own, as a driver is (the launcher kills the group).
    p = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True
    )
    procs.append(p)
    return Owner(this_host(), p.pid, process_start_marker(p.pid))


def _job(sup: Supervisor, tmp_path: Path, procs: list[subprocess.Popen[bytes]]) -> Owner:
    """A job submitted with a standby, its attempt 1 RUNNING as a live process; the owner."""
    app = tmp_path / "app.py"
    app.write_text("")
    spec = {
        "kind": "app",
        "entrypoint": str(app),
        "args": [],
        "conf": {},
        "standby": True,
        "restart_strategy": {"strategy": "fixed-delay", "attempts": 3, "delay": 30},
    }
    sup.store.create_job(JOB, "warm", spec, {})
    driver = _process(procs)
    sup.store.start_attempt(JOB, driver, 10.0, AttemptNo(0))
    return driver


def _ready_standby(sup: Supervisor, procs: list[subprocess.Popen[bytes]]) -> Owner:
    owner = _process(procs)
    sup.store.add_standby(JOB, owner, "/logs/standby.log", 10.0)
    sup.store.renew_standby(JOB, owner, 10.0, ready=True)
    return owner


def _kill_driver_until_handed(sup: Supervisor, procs: list[subprocess.Popen[bytes]]) -> None:
    """The running driver (the first process) dies; step the leader until attempt 2 exists."""
    procs[0].kill()
    procs[0].wait()
    wait_for(
        "attempt 2 handed over",
        lambda: (sup.step(), sup.store.get_job(JOB).current_attempt == 2)[1],
        timeout=30,
        every=0.05,
    )


def _commit_first_epoch(sup: Supervisor, jid: JobId) -> None:
    """Epoch 0 of ``jid`` decided by its attempt 1 and committed."""
    sup.store.pin_epoch(jid, Epoch(0), AttemptNo(1), ControlVersion(0))
    sup.store.decide_epoch(jid, Epoch(0), AttemptNo(1), rows_in=1, final=False)
    sup.store.mark_epoch_committed(jid, Epoch(0))


def test_a_dead_drivers_next_attempt_goes_to_the_ready_standby_at_once(
    sup: Supervisor, tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    store = sup.store
    _job(sup, tmp_path, procs)
    standby = _ready_standby(sup, procs)
    # Seen gone: attempt 1 failed, and without the strategy's 30 s delay (a standby is
    # ready) attempt 2 is handed over in the same step (or the next, while the killed
    # driver's processes are still seen).
    _kill_driver_until_handed(sup, procs)

    failed = store.get_attempt(JOB, AttemptNo(1))
    assert failed is not None and failed.state == AttemptState.FAILED
    att = store.get_attempt(JOB, AttemptNo(2))
    assert att is not None and failed.ended_at is not None
    assert att.started_at == failed.ended_at  # the manual clock did not move: no delay
    assert (att.state, att.owner.pid, att.log_path) == (
        AttemptState.STARTING,
        0,  # the standby holds it itself
        "/logs/standby.log",
    )
    sb = store.get_standby(JOB)
    assert sb is not None and (sb.state, sb.attempt) == (StandbyState.TAKEN, 2)
    assert sup.started_attempts == 0  # no driver was started: the standby took it
    assert sup.standbys.handed == 1
    # The standby holds, then claims its attempt: the row goes, it is the job's driver now.
    store.hold_start(JOB, AttemptNo(2), standby, 10.0)
    store.claim_attempt(JOB, AttemptNo(2), standby, 10.0)
    sup.step()
    after = store.get_standby(JOB)
    assert after is None or after.owner != standby  # gone, or a new standby warming


def test_a_frozen_standby_is_stopped_and_not_handed_the_attempt(
    sup: Supervisor,
    tmp_path: Path,
    clock: ManualClock,
    procs: list[subprocess.Popen[bytes]],
) -> None:
    store = sup.store
    driver = _job(sup, tmp_path, procs)
    _ready_standby(sup, procs)
    store.renew_lease(JOB, AttemptNo(1), 60.0)  # the driver lives on
    sup.step()  # the manager sees the standby's lease (stoker.leases)
    store.renew_lease(JOB, AttemptNo(1), 60.0)
    clock.advance(11.0)  # the standby renewed nothing: frozen (SIGSTOP) or cut off
    sup.step()
    assert store.get_standby(JOB) is None
    wait_for("the standby killed", lambda: procs[1].poll() is not None, timeout=30)
    store.close()
    # The next one waits for the backoff: a standby that fails must not loop.
    sup.step()
    assert store.get_standby(JOB) is None
    # The driver dies: the restart strategy's delay applies (no standby is ready).
    procs[0].kill()
    procs[0].wait()
    sup.step()
    job = store.get_job(JOB)
    assert job.state == JobState.RESTARTING
    assert job.next_attempt_at == clock.now() + 30
    assert driver.pid == procs[0].pid
    assert BACKOFF > 0


def test_the_standby_of_an_ended_job_is_stopped(
    sup: Supervisor, tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    store = sup.store
    _job(sup, tmp_path, procs)
    _ready_standby(sup, procs)
    store.finish_attempt(JOB, AttemptNo(1), AttemptState.CANCELED, JobState.CANCELED)
    sup.step()
    assert store.get_standby(JOB) is None
    wait_for("the standby killed", lambda: procs[1].poll() is not None, timeout=30)
    store.close()


def test_a_standby_is_started_once_the_attempt_has_committed(
    sup: Supervisor, tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    store = sup.store
    _job(sup, tmp_path, procs)
    sup.step()
    assert store.get_standby(JOB) is None  # not beside an attempt that committed nothing
    _commit_first_epoch(sup, JOB)
    sup.step()
    sb = store.get_standby(JOB)
    assert sb is not None and sb.state == StandbyState.WARMING
    assert sb.owner.host == this_host() and sb.owner.pid > 0
    assert Path(sb.log_path).parent == tmp_path / "logs" / JOB
    # A real standby driver of an empty file: it finds no pipeline and exits; seen gone, it
    # is replaced after the backoff, not at once.
    wait_for(
        "the failed standby forgotten",
        lambda: (sup.step(), store.get_standby(JOB) is None)[1],
        timeout=120,
    )
    sup.step()
    assert store.get_standby(JOB) is None


def test_a_standby_is_asked_for_on_local_masters_or_standalone_ones_with_a_core_cap(
    tmp_path: Path,
) -> None:
    from stoker.errors import InvalidInput, JobNotFound
    from stoker.manager import JobManager

    app = tmp_path / "apps" / "app.py"
    app.parent.mkdir()
    app.write_text("")
    store = open_store(tmp_path / "store.db")
    manager = JobManager(store, tmp_path, [app.parent])
    master = "spark://127.0.0.1:7077"
    try:
        made = manager.submit("warm", str(app), conf={"stoker.master": "local[2]"}, standby=True)
        assert made.job.spec["standby"] is True
        plain = manager.submit("plain", str(app))
        assert "standby" not in plain.job.spec  # older specs stay equal
        # A standalone master: the standby is a second Spark application, its cores capped.
        capped = {"spark.master": master, "spark.cores.max": "1"}
        made = manager.submit("on-cluster", str(app), conf=capped, standby=True)
        assert made.job.spec["standby"] is True
        for jid, conf, said in (
            ("uncapped", {"spark.master": master}, "needs spark.cores.max"),
            ("zero", {"spark.master": master, "spark.cores.max": "0"}, "(given: 0)"),
        ):
            with pytest.raises(InvalidInput) as err:
                manager.submit(jid, str(app), conf=conf, standby=True)
            assert err.value.field == "standby", jid
            assert said in err.value.message and "second Spark application" in err.value.message
            with pytest.raises(JobNotFound):  # refused: nothing made
                store.get_job(jid)  # type: ignore[arg-type]
        # A value that is no number of cores, or a master that is neither local nor a
        # standalone one on loopback, is refused as conf before the standby is judged
        # (issue 39 item 9: the conf allow-list).
        for jid, conf, fld in (
            ("junk", {"spark.master": master, "spark.cores.max": "all"}, "spark.cores.max"),
            ("yarn", {"spark.master": "yarn"}, "spark.master"),
        ):
            with pytest.raises(InvalidInput) as err:
                manager.submit(jid, str(app), conf=conf, standby=True)
            assert err.value.field == f"conf.{fld}", jid
            with pytest.raises(JobNotFound):
                store.get_job(jid)  # type: ignore[arg-type]
    finally:
        manager.close()
        store.close()


def test_a_leader_that_died_mid_handover_leaves_the_standby_to_the_next_one(
    tmp_path: Path, clock: ManualClock, procs: list[subprocess.Popen[bytes]]
) -> None:
    """The old leader recorded attempt 2 for the standby and died before marking it TAKEN:
    the next leader replaces the attempt nobody launched after the launch grace, without
    counting a failure, and hands attempt 3 to the standby (not killed, still READY)."""
    store = open_store(tmp_path / "store.db", clock)
    old = Supervisor(store, SupervisorConfig(tmp_path, store.url), LocalProcessLauncher())
    _job(old, tmp_path, procs)
    standby = _ready_standby(old, procs)
    old.step()  # it leads
    procs[0].kill()  # the driver dies; the old leader fails its attempt ...
    procs[0].wait()
    store.attempt_failed(JOB, AttemptNo(1), "the driver is gone", store.clock.now())
    made = old.dispatcher._new_attempt(store.get_job(JOB), store.get_standby(JOB))
    assert made is not None and made.attempt == 2  # ... records attempt 2, and dies
    new = Supervisor(
        open_store(tmp_path / "store.db", clock),
        SupervisorConfig(tmp_path, store.url, holder="manager-new"),
        LocalProcessLauncher(),
    )
    clock.advance(old.cfg.leader_ttl + 0.1)  # the old leader's lease lapses
    store.renew_standby(JOB, standby, 10.0)  # the standby lives on, renewing its lease
    new.step()
    assert store.get_job(JOB).current_attempt == 2  # within the launch grace: waited for
    clock.advance(new.cfg.launch_grace + 1)
    store.renew_standby(JOB, standby, 10.0)
    for _ in range(5):  # the leader lease, renewed on real time, is found lapsed once: again
        new.step()
        if store.get_job(JOB).current_attempt == 3:
            break
    job = store.get_job(JOB)
    # Attempt 2 replaced without a failure counted (the one counted is attempt 1's).
    assert (job.current_attempt, job.failures) == (3, 1)
    sb = store.get_standby(JOB)
    assert sb is not None and (sb.state, sb.attempt, sb.owner) == (StandbyState.TAKEN, 3, standby)
    assert procs[1].poll() is None  # the standby lives: it is attempt 3's driver
    new.store.close()
    store.close()


def test_a_standby_frozen_after_the_handover_gives_its_attempt_up_at_once(
    tmp_path: Path, clock: ManualClock, procs: list[subprocess.Popen[bytes]]
) -> None:
    """Handed an attempt right after its last renewal, the standby froze (SIGSTOP) and never
    held it: the attempt is given up after the standby's lease, without a failure counted,
    not after the 120 s start lease; the standby is killed and the next attempt starts."""
    from stoker.manager.standbys import HANDOVER_LOST

    store = open_store(tmp_path / "store.db", clock)
    # A lease shorter than the launch grace: the standby's lapse is what is seen first.
    cfg = SupervisorConfig(tmp_path, store.url, lease_ttl=4.0)
    sup = Supervisor(store, cfg, LocalProcessLauncher())
    _job(sup, tmp_path, procs)
    _ready_standby(sup, procs)
    _kill_driver_until_handed(sup, procs)
    failures = store.get_job(JOB).failures
    clock.advance(sup.cfg.lease_ttl + 1)  # the standby holds nothing
    sup.step()
    att = store.get_attempt(JOB, AttemptNo(2))
    assert att is not None and (att.state, att.error) == (AttemptState.FAILED, HANDOVER_LOST)
    assert store.get_job(JOB).failures == failures  # the manager's handover, not the job
    assert store.get_standby(JOB) is None
    wait_for("the standby killed", lambda: procs[1].poll() is not None, timeout=30)
    store.close()


def test_a_standby_another_manager_started_is_not_judged_by_an_old_standbys_exit(
    sup: Supervisor, tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    """This manager's own standby of the job exited and was collected; the standby now
    recorded is another manager's (a failover between): it lives, and is left alone."""
    launcher = sup.launcher
    assert isinstance(launcher, LocalProcessLauncher)
    _job(sup, tmp_path, procs)
    mine = launcher.start_standby(
        JOB, [sys.executable, "-c", "pass"], {}, tmp_path / "sb.log", tmp_path
    )
    wait_for(
        "its own standby to exit and be collected",
        lambda: (launcher.reap(lambda j, a: False), launcher.is_gone(mine))[1],
        timeout=60,
    )
    other = _ready_standby(sup, procs)  # started by another manager: not a child here
    assert not launcher.is_gone(other)
    sup.step()
    sb = sup.store.get_standby(JOB)
    assert sb is not None and sb.owner == other  # not taken for the exited one
    assert procs[1].poll() is None


# Applications (their standby runs the program up to its first job: runtime/appdriver.py) ------
APP = job_id("etl")
APP_JOBS = (job_id("etl.orders"), job_id("etl.users"))


def _application(sup: Supervisor, tmp_path: Path, procs: list[subprocess.Popen[bytes]]) -> Owner:
    """An application submitted with a standby, its attempt 1 RUNNING as a live process, and
    two jobs of it, each with attempt 1 RUNNING under it; the driver's owner."""
    app = tmp_path / "etl.py"
    app.write_text("")
    spec = {
        "kind": "application",
        "entrypoint": str(app),
        "args": [],
        "conf": {},
        "cluster": "local",
        "standby": True,
        "restart_strategy": {"strategy": "fixed-delay", "attempts": 3, "delay": 30},
    }
    sup.store.create_job(APP, "etl", spec, {}, kind=JobKind.APPLICATION)
    driver = _process(procs)
    sup.store.start_attempt(APP, driver, 10.0, AttemptNo(0))
    for jid in APP_JOBS:
        sup.store.create_job(jid, jid, {"kind": "in_app"}, {}, app_id=APP)
        sup.store.start_attempt(jid, driver, 10.0, AttemptNo(0), app_attempt=AttemptNo(1))
    return driver


def test_an_applications_standby_starts_once_every_job_committed_and_runs_the_appdriver(
    sup: Supervisor, tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    store = sup.store
    _application(sup, tmp_path, procs)
    _commit_first_epoch(sup, APP_JOBS[0])
    sup.step()
    assert store.get_standby(APP) is None  # one job has not committed yet
    _commit_first_epoch(sup, APP_JOBS[1])
    sup.step()
    sb = store.get_standby(APP)
    assert sb is not None and sb.state == StandbyState.WARMING
    argv = Path(f"/proc/{sb.owner.pid}/cmdline").read_bytes().split(b"\0")
    assert b"stoker.runtime.appdriver" in argv and b"--standby" in argv, argv
    assert b"--attempt" not in argv
    # Its program (an empty file) submits no job: nothing to keep warm, the standby exits;
    # seen gone, it is replaced after the backoff, not at once.
    wait_for(
        "the standby of a program with no job forgotten",
        lambda: (sup.step(), store.get_standby(APP) is None)[1],
        timeout=120,
    )
    sup.step()
    assert store.get_standby(APP) is None
    (log,) = (tmp_path / "logs" / APP).glob("standby-*.log")
    assert "without submitting a job: nothing to keep warm" in log.read_text()


def test_a_dead_application_drivers_next_attempt_goes_to_its_ready_standby(
    sup: Supervisor, tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    store = sup.store
    _application(sup, tmp_path, procs)
    standby = _process(procs)
    store.add_standby(APP, standby, "/logs/standby.log", 10.0)
    store.renew_standby(APP, standby, 10.0, ready=True)
    procs[0].kill()  # the application's driver
    procs[0].wait()
    wait_for(
        "application attempt 2 handed over",
        lambda: (sup.step(), store.get_job(APP).current_attempt == 2)[1],
        timeout=30,
        every=0.05,
    )
    failed = store.get_attempt(APP, AttemptNo(1))
    att = store.get_attempt(APP, AttemptNo(2))
    assert failed is not None and failed.state == AttemptState.FAILED
    assert att is not None and att.started_at == failed.ended_at  # no restart delay
    assert (att.state, att.log_path) == (AttemptState.STARTING, "/logs/standby.log")
    sb = store.get_standby(APP)
    assert sb is not None and (sb.state, sb.attempt) == (StandbyState.TAKEN, 2)
    assert sup.started_attempts == 0 and sup.standbys.handed == 1
    # The standby claims it (as runtime/appdriver.py's gate does): it is the driver now.
    store.claim_attempt(APP, AttemptNo(2), standby, 10.0)
    sup.step()
    after = store.get_standby(APP)
    assert after is None or after.owner != standby
    assert procs[1].poll() is None  # the driver it became is not killed
