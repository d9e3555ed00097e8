"""The supervisor's decisions that need no driver process: real SQLite (and PostgreSQL) store,
manual clock. Restart strategies alone are in test_restart.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stoker.clock import ManualClock
from stoker.manager import JobManager, Supervisor, SupervisorConfig, processes
from stoker.manager.jobs import job_view
from stoker.manager.launcher import LocalProcessLauncher, this_host
from stoker.manager.reconciler import SUSPEND_BACKOFF
from stoker.procs import group_pids, process_start_marker, this_owner
from stoker.store import Owner, Store, open_store
from stoker.types import AttemptNo, AttemptState, ClusterState, JobId, JobKind, JobState, job_id
from tests.support import wait_for

SPEC = {"kind": "app", "entrypoint": "/nonexistent/app.py", "args": [], "conf": {}}


def _setup(tmp_path: Path) -> tuple[ManualClock, Supervisor]:
    clock = ManualClock()
    store = open_store(tmp_path / "store.db", clock)
    sup = Supervisor(store, SupervisorConfig(state_dir=tmp_path, store_url=store.url))
    return clock, sup


def test_an_attempt_whose_manager_died_before_spawning_is_replaced_without_a_failure(
    tmp_path: Path,
) -> None:
    clock, sup = _setup(tmp_path)
    store = sup.store
    jid = job_id("orphaned")
    store.create_job(jid, "orphaned", SPEC, {})
    # Another manager recorded attempt 1 and died before it could start the driver.
    store.start_attempt(
        jid,
        Owner("elsewhere", 0, "unknown"),
        120.0,
        AttemptNo(0),
        state=AttemptState.STARTING,
    )
    sup.step()  # within the grace time: left alone
    assert store.get_job(jid).state == JobState.RUNNING
    clock.advance(sup.cfg.launch_grace + 1)
    sup.step()
    job = store.get_job(jid)
    attempt = store.get_attempt(jid, AttemptNo(1))
    assert attempt is not None and attempt.state == AttemptState.FAILED
    assert (job.state, job.failures) == (JobState.RESTARTING, 0)
    assert job.next_attempt_at is not None and job.next_attempt_at <= clock.now()


def test_a_lapsed_lease_uses_up_a_restart_and_exhaustion_fails_the_job(tmp_path: Path) -> None:
    clock, sup = _setup(tmp_path)
    store = sup.store
    jid = job_id("lapsing")
    spec = {**SPEC, "restart_strategy": {"strategy": "fixed-delay", "attempts": 1, "delay": 5}}
    store.create_job(jid, "lapsing", spec, {})
    store.start_attempt(jid, Owner("elsewhere", 4242, "x"), 10.0, AttemptNo(0))
    sup.step()  # the supervisor sees the lease (stoker.leases)
    clock.advance(11)
    sup.step()
    job = store.get_job(jid)
    assert (job.state, job.failures, job.next_attempt_at) == (
        JobState.RESTARTING,
        1,
        clock.now() + 5,
    )
    # The second attempt lapses too: the strategy allows one restart only.
    store.start_attempt(jid, Owner("elsewhere", 4243, "x"), 10.0, AttemptNo(1))
    sup.step()  # the supervisor sees the lease (stoker.leases)
    clock.advance(11)
    sup.step()
    job = store.get_job(jid)
    assert (job.state, job.failures) == (JobState.FAILED, 2)
    assert job.last_error == "the lease of attempt 2 expired"


def test_only_one_supervisor_leads_and_the_token_grows_on_takeover(tmp_path: Path) -> None:
    clock, a = _setup(tmp_path)
    b = Supervisor(
        open_store(tmp_path / "store.db", clock),
        SupervisorConfig(state_dir=tmp_path, store_url=a.store.url),
    )
    a.step()
    b.step()
    assert a.is_leader and not b.is_leader
    first = a.token
    clock.advance(a.cfg.leader_ttl + 0.1)  # a stops renewing (it died)
    b.step()
    assert b.is_leader and b.token is not None and first is not None and b.token > first


# Ended attempts under live jobs (issue 7, item 7) ---------------------------------------------
@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    return str(request.getfixturevalue("pg_dsn"))


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def sup(store_url: str, clock: ManualClock, tmp_path: Path) -> Iterator[Supervisor]:
    launcher = LocalProcessLauncher()
    s = Supervisor(open_store(store_url, clock), SupervisorConfig(tmp_path, store_url), launcher)
    yield s
    launcher.wait(timeout=120)  # a driver it launched (it fails fast: no such app)
    s.store.close()


def _running(store: Store, jid: str, spec: dict[str, Any] | None = None) -> None:
    store.create_job(job_id(jid), jid, spec or SPEC, {})
    store.start_attempt(job_id(jid), Owner("elsewhere", 4242, "x"), 10.0, AttemptNo(0))


@pytest.mark.parametrize(
    ("ended", "job_state", "expected"),
    [
        (AttemptState.FINISHED, JobState.RUNNING, JobState.FINISHED),
        (AttemptState.CANCELED, JobState.RUNNING, JobState.CANCELED),
        (AttemptState.CANCELED, JobState.CANCELING, JobState.CANCELED),
        (AttemptState.FINISHED, JobState.CANCELING, JobState.FINISHED),
        (AttemptState.SUSPENDED, JobState.RUNNING, JobState.SUSPENDED),
        (AttemptState.SUSPENDED, JobState.CANCELING, JobState.CANCELED),  # the cancel wins
    ],
)
def test_an_ended_attempt_under_a_live_job_is_repaired(
    sup: Supervisor, ended: AttemptState, job_state: JobState, expected: JobState
) -> None:
    store, jid = sup.store, job_id("half-ended")
    # A job run in-process (not the manager's to launch), as an older version left it: the
    # attempt's end committed, the driver killed before its second transaction set the job.
    _running(store, jid, {"kind": "pipeline"})
    if job_state == JobState.CANCELING:
        store.request_cancel(jid)
    store.end_attempt(jid, AttemptNo(1), ended)
    assert store.get_job(jid).state == job_state

    sup.step()

    job = store.get_job(jid)
    assert (job.state, job.current_attempt, job.failures) == (expected, 1, 0)
    att = store.get_attempt(jid, AttemptNo(1))
    assert att is not None and att.state == ended
    sup.step()  # stays put; an in-process job is resumed by running it again, not by the leader
    assert store.get_job(jid).state == expected


def test_a_repaired_job_ends_and_is_run_again_only_by_a_restart(
    sup: Supervisor, tmp_path: Path
) -> None:
    app = tmp_path / "apps" / "app.py"
    app.parent.mkdir()
    app.write_text("print('never run here')\n")
    manager = JobManager(open_store(sup.store.url, sup.store.clock), tmp_path, [app.parent])
    try:
        jid = manager.submit("stuck", str(app)).job.job_id
        store = sup.store
        store.start_attempt(jid, Owner("elsewhere", 4242, "x"), 10.0, AttemptNo(0))
        store.end_attempt(jid, AttemptNo(1), AttemptState.FINISHED)
        assert manager.submit("stuck", str(app)).outcome == "duplicate"  # the bug

        sup.step()

        assert store.get_job(jid).state == JobState.FINISHED
        again = manager.submit("stuck", str(app))  # the same submission: returned, not run
        assert (again.outcome, again.job.state) == ("duplicate", JobState.FINISHED)
        assert store.get_job(jid).current_attempt == 1
        assert manager.submit("stuck", str(app), restart=True).outcome == "restarted"
    finally:
        manager.close()
        manager.store.close()


# SUSPENDED (item 8) and restart budgets (item 9) -------------------------------------------
def test_a_suspended_app_job_gets_a_new_attempt_without_using_up_a_restart(
    sup: Supervisor, tmp_path: Path
) -> None:
    store, jid = sup.store, job_id("suspended")
    app = tmp_path / "app.py"
    app.write_text("")  # its driver starts and soon fails (no pipeline): not awaited here
    spec = {
        **SPEC,
        "entrypoint": str(app),
        "restart_strategy": {"strategy": "none"},  # no restart at all is allowed
    }
    _running(store, jid, spec)
    store.finish_attempt(jid, AttemptNo(1), AttemptState.SUSPENDED, JobState.SUSPENDED)

    sup.step()

    job = store.get_job(jid)
    assert (job.state, job.current_attempt, job.failures) == (JobState.RUNNING, 2, 0)
    assert sup.started_attempts == 1


def _driver_gone(sup: Supervisor, jid: JobId, attempt: int) -> None:
    rec = sup.store.get_attempt(jid, AttemptNo(attempt))
    assert rec is not None
    wait_for(
        f"attempt {attempt}'s driver to exit",
        lambda: not sup.launcher.still_running(rec.owner),
        120,
        every=0.1,
    )


def test_a_suspended_job_waits_for_a_repartition_and_backs_off_when_suspended_again(
    sup: Supervisor, clock: ManualClock, tmp_path: Path
) -> None:
    """Issue 21, item 6: a driver that finds the state-repartition lock held ends SUSPENDED;
    relaunched at once, it would loop through whole Spark starts for as long as the
    repartition runs. The leader waits for the lock to go, and a job suspended again and again
    is resumed after a growing pause."""
    store, jid = sup.store, job_id("held")
    sup.lease.ttl = (
        3600.0  # the leader lease outlasts the fake clock's jumps (renewed in real time)
    )
    app = tmp_path / "app.py"
    app.write_text("")  # its driver starts and soon fails (no pipeline): not awaited here
    folder = tmp_path / "jobs" / "held"
    folder.mkdir(parents=True)
    spec = {**SPEC, "entrypoint": str(app), "state_dir": str(folder)}
    _running(store, jid, spec)
    store.finish_attempt(jid, AttemptNo(1), AttemptState.SUSPENDED, JobState.SUSPENDED)
    # A live process (this one) holds the lock, as `stoker state repartition` does.
    me = this_owner()
    lock = folder / "repartition.lock"
    lock.write_text(json.dumps({"host": me.host, "pid": me.pid, "pid_started": me.pid_started}))
    for _ in range(3):
        sup.step()
        clock.advance(1)
    job = store.get_job(jid)
    assert (job.state, job.current_attempt, sup.started_attempts) == (JobState.SUSPENDED, 1, 0)
    # A lock left by a process that is gone holds nothing.
    lock.write_text(json.dumps({"host": me.host, "pid": 999_999_999, "pid_started": "x"}))
    sup.step()
    job = store.get_job(jid)
    assert (job.state, job.current_attempt, sup.started_attempts) == (JobState.RUNNING, 2, 1)

    # Suspended again at once (a second time in a row): resumed after 1 s, not before. (Its
    # real driver, started from the empty app, must be gone first: nothing of an attempt runs
    # beside the next one.)
    _driver_gone(sup, jid, 2)
    store.finish_attempt(jid, AttemptNo(2), AttemptState.SUSPENDED, JobState.SUSPENDED)
    sup.step()
    assert store.get_job(jid).current_attempt == 2
    clock.advance(SUSPEND_BACKOFF)
    sup.step()
    assert store.get_job(jid).current_attempt == 3
    # A third time: 2 s.
    _driver_gone(sup, jid, 3)
    store.finish_attempt(jid, AttemptNo(3), AttemptState.SUSPENDED, JobState.SUSPENDED)
    clock.advance(SUSPEND_BACKOFF * 1.5)
    sup.step()
    assert store.get_job(jid).current_attempt == 3
    clock.advance(SUSPEND_BACKOFF)
    sup.step()
    job = store.get_job(jid)
    assert (job.state, job.current_attempt, job.failures) == (JobState.RUNNING, 4, 0)


def test_two_leaders_failing_one_attempt_count_one_failure(
    store_url: str, clock: ManualClock, tmp_path: Path
) -> None:
    a = Supervisor(open_store(store_url, clock), SupervisorConfig(tmp_path, store_url))
    b = Supervisor(open_store(store_url, clock), SupervisorConfig(tmp_path, store_url))
    try:
        jid = job_id("contested")
        _running(a.store, jid)
        a.step()
        assert a.is_leader
        # b was deposed a moment ago and has not noticed yet: it still acts as the leader.
        b.lease.token, b.lease._renewed = a.token, float("inf")
        clock.advance(11)  # the attempt's lease lapsed
        seen = a.store.get_job(jid)  # both listed the jobs before either acted
        a.reconciler.tend(seen, clock.now())
        b.reconciler.tend(seen, clock.now())
        job = a.store.get_job(jid)
        assert (job.state, job.failures) == (JobState.RESTARTING, 1)
    finally:
        a.store.close()
        b.store.close()


def test_a_failure_after_a_healthy_run_is_forgiven(sup: Supervisor, clock: ManualClock) -> None:
    store, jid = sup.store, job_id("long-lived")
    spec = {**SPEC, "restart_strategy": {"strategy": "fixed-delay", "attempts": 1}}
    _running(store, jid, spec)
    sup.step()  # the supervisor sees the lease (stoker.leases)
    clock.advance(11)
    sup.step()  # a quick failure: the one restart allowed
    assert store.get_job(jid).failures == 1
    for n in range(2, 6):  # each later attempt runs past reset_after (600 s), then lapses
        store.start_attempt(jid, Owner("elsewhere", 4242, "x"), 700.0, AttemptNo(n - 1))
        sup.step()  # the supervisor sees the lease (stoker.leases)
        clock.advance(699)
        sup.step()  # still alive
        clock.advance(2)
        sup.step()
        job = store.get_job(jid)
        assert (job.state, job.failures) == (JobState.RESTARTING, 1)
    store.start_attempt(jid, Owner("elsewhere", 4242, "x"), 10.0, AttemptNo(5))
    sup.step()  # the supervisor sees the lease (stoker.leases)
    clock.advance(11)  # a quick failure again: past the budget
    sup.step()
    assert store.get_job(jid).state == JobState.FAILED


def test_failure_rate_reads_the_failure_times_from_the_attempts(
    sup: Supervisor, clock: ManualClock
) -> None:
    store, jid = sup.store, job_id("rated")
    strategy = {"strategy": "failure-rate", "max_failures": 2, "interval": 60, "delay": 0}
    _running(store, jid, {**SPEC, "restart_strategy": strategy})
    for n in range(1, 6):  # a failure every 40 s: never more than two within a minute
        if n > 1:
            clock.advance(29)
            store.start_attempt(jid, Owner("elsewhere", 4242, "x"), 10.0, AttemptNo(n - 1))
        sup.step()  # the supervisor sees the lease (stoker.leases)
        clock.advance(9)
        sup.step()  # lease still valid
        clock.advance(2)
        sup.step()
        job = store.get_job(jid)
        assert (job.state, job.failures) == (JobState.RESTARTING, n)
    store.start_attempt(jid, Owner("elsewhere", 4242, "x"), 10.0, AttemptNo(5))
    sup.step()  # the supervisor sees the lease (stoker.leases)
    clock.advance(11)  # the third failure within 60 s (51 s after the fourth)
    sup.step()
    assert store.get_job(jid).state == JobState.FAILED


# Applications (issue 10) ----------------------------------------------------------------------
APP_SPEC = {
    "kind": "application",
    "entrypoint": "/nonexistent/app.py",
    "args": [],
    "conf": {},
    "cluster": "local",
    "restart_strategy": {"strategy": "none"},
}
OWN_CLUSTER = "standalone:workers=1,cores=1,memory=512m"


def _app(store: Store, aid: str, **spec: Any) -> JobId:
    app = job_id(aid)
    store.create_job(app, aid, {**APP_SPEC, **spec}, {}, kind=JobKind.APPLICATION)
    return app


def _app_running(store: Store, aid: str, ttl: float = 1000.0, **spec: Any) -> JobId:
    """An application whose driver (on another host: never killed here) runs attempt 1."""
    app = _app(store, aid, **spec)
    store.start_attempt(app, Owner("elsewhere", 4242, "x"), ttl, AttemptNo(0))
    return app


def _in_app_job(store: Store, app: JobId, name: str, running: bool) -> JobId:
    jid = job_id(f"{app}.{name}")
    store.create_job(jid, name, {"kind": "in_app", "app_id": app}, {}, app_id=app)
    if running:
        store.start_attempt(
            jid, Owner("elsewhere", 4242, "x"), 10.0, AttemptNo(0), app_attempt=AttemptNo(1)
        )
    return jid


def test_jobs_of_a_live_application_are_never_launched_or_failed_by_the_leader(
    tmp_path: Path,
) -> None:
    clock, sup = _setup(tmp_path)
    store = sup.store
    app = _app_running(store, "live")
    waiting = _in_app_job(store, app, "waiting", running=False)
    lapsed = _in_app_job(store, app, "lapsed", running=True)
    clock.advance(11)  # the job attempt's lease lapsed: its driver's business, not the leader's
    sup.step()
    sup.step()
    assert store.get_job(waiting).state == JobState.CREATED
    assert store.get_job(lapsed).state == JobState.RUNNING
    att = store.get_attempt(lapsed, AttemptNo(1))
    assert att is not None and att.state == AttemptState.RUNNING
    assert sup.started_attempts == 0
    assert store.get_job(app).state == JobState.RUNNING


@pytest.mark.parametrize("end", ["FAILED", "CANCELED", "FINISHED"])
def test_jobs_outliving_their_application_are_ended(tmp_path: Path, end: str) -> None:
    clock, sup = _setup(tmp_path)
    store = sup.store
    app = _app_running(store, "ending", ttl=10.0)
    running = _in_app_job(store, app, "running", running=True)
    waiting = _in_app_job(store, app, "waiting", running=False)
    if end == "FAILED":
        sup.step()  # the supervisor sees the lease (stoker.leases)
        clock.advance(11)  # the driver's lease lapsed; strategy none: the application fails
    elif end == "CANCELED":
        store.request_cancel(app)
        store.finish_attempt(app, AttemptNo(1), AttemptState.CANCELED, JobState.CANCELED)
    else:
        store.finish_attempt(app, AttemptNo(1), AttemptState.FINISHED, JobState.FINISHED)
    sup.step()
    sup.step()
    ended = store.get_job(app)
    assert ended.state == JobState(end)
    expected = JobState.FAILED if end == "FAILED" else JobState.CANCELED
    why = f"application ending ended {end}"
    if end == "FAILED":
        why += ": the lease of attempt 1 expired"
    for jid in (running, waiting):
        job = store.get_job(jid)
        assert (job.state, job.last_error) == (expected, why), jid
    att = store.get_attempt(running, AttemptNo(1))
    assert att is not None
    assert att.state == (AttemptState.FAILED if end == "FAILED" else AttemptState.CANCELED)


def test_an_applications_own_cluster_is_torn_down_when_it_ends(tmp_path: Path) -> None:
    _clock, sup = _setup(tmp_path)
    store = sup.store
    done = _app_running(store, "done", cluster=OWN_CLUSTER)
    live = _app_running(store, "busy", cluster=OWN_CLUSTER)
    for app in (done, live):
        store.create_cluster(f"app-{app}", "app", {"cluster": OWN_CLUSTER}, owner_app=app)
        store.update_cluster(f"app-{app}", state=ClusterState.RUNNING, master_url="spark://x:1")
    store.create_cluster("shared", "session", {"cluster": OWN_CLUSTER})
    store.request_cancel(done)
    store.finish_attempt(done, AttemptNo(1), AttemptState.CANCELED, JobState.CANCELED)
    sup.step()
    assert sup.wait_cluster_work(60)
    states = {c.name: c.state for c in store.list_clusters(include_stopped=True)}
    assert states == {
        "app-done": ClusterState.STOPPED,
        "app-busy": ClusterState.RUNNING,  # its application still runs
        "shared": ClusterState.STARTING,  # a session cluster is never the leader's to stop
    }


def test_a_cluster_start_left_by_a_gone_leader_is_given_up_after_three_minutes(
    tmp_path: Path,
) -> None:
    clock, sup = _setup(tmp_path)
    store = sup.store
    app = _app(store, "waiting", cluster=OWN_CLUSTER)
    # Another manager recorded the start and died: no start runs here.
    store.create_cluster(f"app-{app}", "app", {"cluster": OWN_CLUSTER}, owner_app=app)
    sup.step()
    assert store.get_cluster(f"app-{app}").state == ClusterState.STARTING
    clock.advance(181)
    sup.step()
    assert sup.wait_cluster_work(60)
    rec = store.get_cluster(f"app-{app}")
    assert rec.state == ClusterState.STOPPED
    assert rec.error == "its start was left unfinished by a job manager that is gone"
    # No attempt used up: the next look starts a new cluster (not run here).
    job = store.get_job(app)
    assert (job.state, job.current_attempt, job.failures) == (JobState.CREATED, 0, 0)
    store.request_cancel(app)


def test_a_cluster_that_failed_fails_the_attempt_through_the_restart_strategy(
    tmp_path: Path,
) -> None:
    _clock, sup = _setup(tmp_path)
    store = sup.store
    strategy = {"strategy": "fixed-delay", "attempts": 1, "delay": 5}
    app = _app(store, "unlucky", cluster=OWN_CLUSTER, restart_strategy=strategy)
    store.create_cluster(f"app-{app}", "app", {"cluster": OWN_CLUSTER}, owner_app=app)
    store.update_cluster(f"app-{app}", state=ClusterState.FAILED, error="boom: no worker came")
    sup.step()
    job = store.get_job(app)
    assert (job.state, job.failures) == (JobState.RESTARTING, 1)
    att = store.get_attempt(app, AttemptNo(1))
    assert att is not None and att.state == AttemptState.FAILED
    assert att.error == f"its cluster app-{app} failed: boom: no worker came"
    assert sup.wait_cluster_work(60)
    assert store.get_cluster(f"app-{app}").state == ClusterState.STOPPED  # made anew next time
    store.request_cancel(app)


def test_an_application_on_a_session_cluster_that_is_gone_fails(tmp_path: Path) -> None:
    _clock, sup = _setup(tmp_path)
    store = sup.store
    app = _app(store, "orphan", cluster="shared")
    sup.step()
    job = store.get_job(app)
    assert (job.state, job.last_error) == (
        JobState.FAILED,
        "its session cluster 'shared' does not exist",
    )
    assert sup.started_attempts == 0


# A failed attempt's processes (issue 21, item 1) -----------------------------------------------
class _Unkillable(LocalProcessLauncher):
    """Its kills do nothing for a while: a process group that outlives its SIGKILL (a process
    stuck in the kernel, a slow teardown)."""

    def __init__(self) -> None:
        super().__init__()
        self.refused = 0
        self.holding = True

    def kill(self, owner: Owner) -> None:
        if self.holding:
            self.refused += 1
            return
        super().kill(owner)


def test_a_failed_attempts_processes_are_killed_and_seen_gone_before_the_next_starts(
    store_url: str, clock: ManualClock, tmp_path: Path
) -> None:
    """A driver whose lease lapsed in a slow start is alive: before, the leader counted a
    failure and started the next driver beside it (three drivers of one job at once). Now
    the failed attempt's process group is killed, and the next attempt starts only once
    nothing of it runs. Real processes: a "driver" whose group holds a second process that
    outlives it, as a JVM outlives a SIGKILLed Python driver."""
    launcher = _Unkillable()
    sup = Supervisor(open_store(store_url, clock), SupervisorConfig(tmp_path, store_url), launcher)
    sup.lease.ttl = 3600.0  # the leader lease outlasts the fake clock's jumps
    store, jid = sup.store, job_id("slow")
    app = tmp_path / "app.py"
    app.write_text("")  # the next attempt's driver: starts and soon fails, not awaited
    driver = processes.spawn(
        processes.DriverArgv(["sh", "-c", "sleep 600 & wait"], {}), tmp_path / "d.log", tmp_path
    )
    try:
        owner = Owner(this_host(), driver.pid, process_start_marker(driver.pid))
        wait_for("the driver's group", lambda: len(group_pids(driver.pid)) == 2, 30)
        store.create_job(jid, "slow", {**SPEC, "entrypoint": str(app)}, {})
        store.start_attempt(jid, owner, 10.0, AttemptNo(0))
        sup.step()  # the supervisor sees the lease (stoker.leases)
        clock.advance(11)  # its lease lapsed: a slow start
        sup.step()
        job = store.get_job(jid)
        assert (job.state, job.failures) == (JobState.RESTARTING, 1)
        assert launcher.refused == 1  # asked to kill it
        clock.advance(60)  # past any restart delay
        for _ in range(3):
            sup.step()  # still running: killed again, and no second driver beside it
        assert store.get_job(jid).current_attempt == 1 and sup.started_attempts == 0
        assert launcher.refused == 4
        launcher.holding = False
        sup.step()  # killed for real; the next attempt waits until the group is seen gone
        wait_for("the group to go", lambda: not group_pids(driver.pid), 30)
        sup.step()
        job = store.get_job(jid)
        assert (job.current_attempt, sup.started_attempts) == (2, 1)
    finally:
        processes.kill_group(driver.pid)
        driver.wait(30)
        launcher.wait(timeout=120)
        sup.store.close()


# The driver launcher interface (a Kubernetes or YARN launcher would sit there) ---------------
class FakeLauncher:
    """Drivers that run nowhere: started, exited and killed by the test."""

    def __init__(self) -> None:
        self.started: list[tuple[JobId, AttemptNo, list[str], dict[str, str]]] = []
        self.exits: dict[tuple[JobId, AttemptNo], int] = {}
        self.killed: list[Owner] = []
        self.lingering: set[Owner] = set()

    def start(
        self,
        job_id: JobId,
        attempt: AttemptNo,
        argv: list[str],
        env: dict[str, str],
        log_path: Path,
        cwd: Path,
    ) -> Owner:
        self.started.append((job_id, attempt, argv, env))
        return Owner("pod", 1000 + attempt, f"uid-{job_id}-{attempt}")

    def launched(self, job_id: JobId, attempt: AttemptNo) -> bool:
        return any(s[:2] == (job_id, attempt) for s in self.started)

    def exit_code(self, job_id: JobId, attempt: AttemptNo) -> int | None:
        return self.exits.get((job_id, attempt))

    def is_gone(self, owner: Owner) -> bool:
        return False

    def sees_alive(self, owner: Owner) -> bool:
        return False  # a pod is not seen from here: its lease's renewals tell

    def still_running(self, owner: Owner) -> bool:
        # Nothing of a pod can be seen from here (leases and fencing decide), unless the test
        # says a pod's processes still run (``lingering``).
        return owner in self.lingering

    def kill(self, owner: Owner) -> None:
        self.killed.append(owner)

    def reap(self, watched: Any) -> None:
        for key in [k for k in self.exits if not watched(*k)]:
            del self.exits[key]


def test_a_launcher_starts_watches_and_kills_the_drivers(tmp_path: Path) -> None:
    clock = ManualClock()
    store = open_store(tmp_path / "store.db", clock)
    launcher = FakeLauncher()
    sup = Supervisor(store, SupervisorConfig(state_dir=tmp_path, store_url=store.url), launcher)
    jid = job_id("elsewhere")
    spec = {
        **SPEC,
        "conf": {"spark.x.password": "s3cret"},
        "restart_strategy": {"strategy": "none"},
    }
    store.create_job(jid, "elsewhere", spec, {})
    sup.step()
    [(started_job, attempt, argv, env)] = launcher.started
    assert (started_job, attempt, sup.started_attempts) == (jid, 1, 1)
    assert "s3cret" not in " ".join(argv) and "s3cret" in " ".join(env.values())
    rec = store.get_attempt(jid, AttemptNo(1))
    assert rec is not None and rec.owner == Owner("pod", 1001, f"uid-{jid}-1")
    sup.step()  # running: left alone
    assert store.get_job(jid).state == JobState.RUNNING
    launcher.exits[(jid, AttemptNo(1))] = 3
    sup.step()
    job = store.get_job(jid)
    assert (job.state, job.last_error) == (
        JobState.FAILED,
        "the driver exited with code 3 without ending its attempt",
    )
    assert launcher.killed == [Owner("pod", 1001, f"uid-{jid}-1")]  # nothing may keep running
    sup.step()
    assert launcher.exits == {}  # judged: forgotten
    store.close()


# RECONCILING after a failover (issue 39 item 7) -----------------------------------------------
def _shown(store: Store, jid: JobId) -> tuple[str, bool]:
    v = job_view(store, jid)
    return v["state"], v["reconciling"]


def test_a_job_is_reconciling_until_the_new_leader_has_judged_its_driver(tmp_path: Path) -> None:
    """A job whose driver runs on another host (no process to see): RUNNING in the store, but
    shown RECONCILING under a leader that has not seen its lease renewed; RUNNING once it has;
    RECONCILING again after a failover until the next leader has seen it too. The leader of a
    fresh store judges nothing it has not seen either: a record's word is not enough."""
    clock, a = _setup(tmp_path)
    store = a.store
    b = Supervisor(
        open_store(tmp_path / "store.db", clock),
        SupervisorConfig(state_dir=tmp_path, store_url=store.url),
        FakeLauncher(),
    )
    jid = job_id("far-away")
    store.create_job(jid, "far-away", SPEC, {})
    store.start_attempt(jid, Owner("another-host", 4242, "x"), 10.0, AttemptNo(0))
    assert _shown(store, jid) == ("RUNNING", False)  # no manager leads: nothing to reconcile
    a.step()
    b.step()  # b is a standby: it watches a's lease
    assert a.is_leader and not b.is_leader
    assert _shown(store, jid) == ("RECONCILING", True)
    assert store.renew_lease(jid, AttemptNo(1), 10.0)  # the driver renews
    a.step()
    assert _shown(store, jid) == ("RUNNING", False)
    assert store.get_job(jid).judged_by == a.token
    # a dies; b takes over with a higher token: the job is b's to judge.
    clock.advance(a.cfg.leader_ttl + 0.1)
    b.step()
    assert b.is_leader and _shown(store, jid) == ("RECONCILING", True)
    b.step()  # b looks again, no renewal seen yet
    assert _shown(store, jid) == ("RECONCILING", True)
    assert store.renew_lease(jid, AttemptNo(1), 10.0)
    b.step()
    assert _shown(store, jid) == ("RUNNING", False)
    assert store.get_job(jid).state == JobState.RUNNING and store.get_job(jid).failures == 0
    b.store.close()


def test_a_job_the_leader_starts_or_sees_running_here_is_never_reconciling(
    tmp_path: Path,
) -> None:
    clock = ManualClock()
    store = open_store(tmp_path / "store.db", clock)
    sup = Supervisor(
        store, SupervisorConfig(state_dir=tmp_path, store_url=store.url), FakeLauncher()
    )
    started = job_id("started-here")
    store.create_job(started, "started-here", SPEC, {})
    sup.step()  # the leader starts its attempt: judged as it starts it
    assert store.get_job(started).judged_by == sup.token
    store.claim_attempt(started, AttemptNo(1), Owner("pod", 1001, "x"), 10.0)
    assert _shown(store, started) == ("RUNNING", False)
    # A job stoker run runs in its own process (no kind in its spec) is no manager's: never.
    alone = job_id("run-alone")
    store.create_job(alone, "run-alone", {"entrypoint": "/x.py"}, {})
    store.start_attempt(alone, Owner("another-host", 7, "x"), 10.0, AttemptNo(0))
    sup.step()
    assert _shown(store, alone) == ("RUNNING", False)
    store.close()


def test_a_driver_whose_process_this_host_sees_is_judged_at_the_first_look(
    tmp_path: Path,
) -> None:
    """A driver another manager started on this host (here: this test's process, alive):
    judged in the new leader's first look, before any renewal."""
    _clock, sup = _setup(tmp_path)
    store = sup.store
    here = job_id("seen-here")
    store.create_job(here, "seen-here", SPEC, {})
    store.start_attempt(here, this_owner(), 10.0, AttemptNo(0))
    sup.step()
    assert _shown(store, here) == ("RUNNING", False)
    assert store.get_job(here).judged_by == sup.token
    store.close()


# FAILING while the driver's processes still run (issue 39 item 7) ----------------------------
def test_a_job_failing_for_good_is_failing_until_its_drivers_processes_are_gone(
    tmp_path: Path,
) -> None:
    """The strategy gives up while the driver's processes are still seen: the job is FAILING
    (not ended: the janitor does not resolve its sinks, nothing lists it FAILED) and they are
    killed again each tick; FAILED, with the same error, once nothing of them is left."""
    store = open_store(tmp_path / "store.db", ManualClock())
    launcher = FakeLauncher()
    sup = Supervisor(store, SupervisorConfig(state_dir=tmp_path, store_url=store.url), launcher)
    jid = job_id("dying")
    store.create_job(jid, "dying", {**SPEC, "restart_strategy": {"strategy": "none"}}, {})
    sup.step()
    owner = Owner("pod", 1001, f"uid-{jid}-1")
    launcher.lingering.add(owner)  # its JVM outlives the driver for a while
    launcher.exits[(jid, AttemptNo(1))] = 3
    sup.step()
    job = store.get_job(jid)
    error = "the driver exited with code 3 without ending its attempt"
    assert (job.state, job.last_error, job.failures) == (JobState.FAILING, error, 1)
    assert not job.state.terminal and launcher.killed == [owner]
    assert jid not in [j.job_id for j in store.list_jobs(JobState.FAILED)]
    sup.step()  # still seen: killed again, still FAILING
    assert store.get_job(jid).state == JobState.FAILING and launcher.killed == [owner] * 2
    launcher.lingering.clear()
    sup.step()
    job = store.get_job(jid)
    assert (job.state, job.last_error, job.failures) == (JobState.FAILED, error, 1)
    store.close()


def test_a_job_failing_for_good_with_nothing_left_running_is_failed_at_once(
    tmp_path: Path,
) -> None:
    store = open_store(tmp_path / "store.db", ManualClock())
    launcher = FakeLauncher()
    sup = Supervisor(store, SupervisorConfig(state_dir=tmp_path, store_url=store.url), launcher)
    jid = job_id("gone")
    store.create_job(jid, "gone", {**SPEC, "restart_strategy": {"strategy": "none"}}, {})
    sup.step()
    launcher.exits[(jid, AttemptNo(1))] = 3
    sup.step()
    assert store.get_job(jid).state == JobState.FAILED
    store.close()
