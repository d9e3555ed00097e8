"""The supervisor's decisions that need no driver process: real SQLite store, manual clock."""

from __future__ import annotations

from pathlib import Path

import pytest

from stoker.clock import ManualClock
from stoker.errors import InvalidInput
from stoker.manager import Supervisor, SupervisorConfig
from stoker.manager.restart import ExponentialDelay, FixedDelay, NoRestart, parse_strategy
from stoker.store import Owner, open_store
from stoker.types import AttemptNo, AttemptState, JobState, job_id

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


def test_restart_strategies() -> None:
    assert parse_strategy(None) == FixedDelay(3, 1.0)
    assert parse_strategy({"strategy": "none"}).delay(1) is None
    assert isinstance(parse_strategy({"strategy": "none"}), NoRestart)
    fixed = parse_strategy({"strategy": "fixed-delay", "attempts": 2, "delay": 0.5})
    assert [fixed.delay(n) for n in (1, 2, 3)] == [0.5, 0.5, None]
    exp = parse_strategy(
        {"strategy": "exponential-delay", "initial": 1, "max": 5, "multiplier": 2, "attempts": 5}
    )
    assert exp == ExponentialDelay(1.0, 5.0, 2.0, 5)
    assert [exp.delay(n) for n in range(1, 7)] == [1.0, 2.0, 4.0, 5.0, 5.0, None]
    for bad, field in [
        ({"strategy": "sometimes"}, "restart_strategy.strategy"),
        ({"strategy": "fixed-delay", "tries": 2}, "restart_strategy"),
        ({"strategy": "fixed-delay", "delay": -1}, "restart_strategy.delay"),
        ({"strategy": "exponential-delay", "multiplier": 0.5}, "restart_strategy.multiplier"),
    ]:
        with pytest.raises(InvalidInput) as info:
            parse_strategy(bad)
        assert info.value.field == field
