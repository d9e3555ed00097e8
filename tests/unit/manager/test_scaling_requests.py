"""What users ask of scaling, checked before anything is stored: a submission's ``scaling``,
a control event of kind ``scaling``, new bounds; and what the job manager then records
(stoker.manager.rescales on a real SQLite store; no server, no Spark)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from stoker.control import events
from stoker.errors import InvalidInput, JobTerminal
from stoker.manager.control import submit_control
from stoker.manager.rescales import (
    RescaleTally,
    job_series,
    parse_bounds,
    rescales_view,
    scaling_fields,
    set_bounds,
    trigger_in_force,
)
from stoker.manager.submit import Submission, check_scaling, scaling_spec_entry
from stoker.scalespec import ScalingSpec
from stoker.store import Store
from stoker.types import ControlKind, ControlStatus, JobId, JobKind, JobState, job_id

JOB = job_id("orders")
APP = job_id("shop")
SPEC: dict[str, Any] = {"name": "orders", "sources": ["generator(rows_per_second=10)"]}


@pytest.fixture
def store(store: Store) -> Store:
    store.create_job(JOB, "orders", SPEC, {})
    store.create_job(APP, APP, {"kind": "application"}, {}, kind=JobKind.APPLICATION)
    store.create_job(job_id("shop-a"), "a", {**SPEC, "trigger_s": 2.0}, {}, app_id=JobId(APP))
    return store


# a submission's scaling --------------------------------------------------------------------
def test_a_submission_keeps_a_scaling_in_its_spec_only_when_it_is_not_the_default() -> None:
    base = Submission(Path("/a.py"))
    assert "scaling" not in base.spec()
    fixed = Submission(Path("/a.py"), scaling=check_scaling("fixed"))
    assert fixed.spec() == base.spec()  # the same job as one that said nothing
    auto = Submission(Path("/a.py"), scaling=check_scaling({"mode": "auto", "max": 3}))
    assert auto.spec()["scaling"] == ScalingSpec(mode="auto", max_executors=3).to_dict()
    assert check_scaling(None) is None
    assert scaling_spec_entry(ScalingSpec(mode="reactive")) == {
        **ScalingSpec().to_dict(),
        "mode": "reactive",
    }


@pytest.mark.parametrize("bad", ["", "auto", {"mode": "auto"}, 3, ["auto"], "fixed:max=x"])
def test_a_bad_submitted_scaling_names_the_field(bad: Any) -> None:
    with pytest.raises(InvalidInput) as e:
        check_scaling(bad)
    assert e.value.field == "scaling"


# the control kind --------------------------------------------------------------------------
def test_a_scaling_event_is_normalized_and_changes_no_control_state() -> None:
    kind, body = events.validate({"kind": "scaling", "scaling": "auto:max=2,cooldown=5m"}, {})
    assert kind == ControlKind.SCALING
    assert body == {"scaling": ScalingSpec(mode="auto", max_executors=2, cooldown_s=300).to_dict()}
    config, state = {"a": 1}, {"paused": True, "trigger_s": 2.0}
    assert events.apply("j", config, state, kind, body) == (config, state)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"kind": "scaling"}, "scaling"),
        ({"kind": "scaling", "scaling": None}, "scaling"),
        ({"kind": "scaling", "scaling": "auto:min=2"}, "scaling"),
        ({"kind": "scaling", "scaling": "reactive", "min_executors": 2}, "min_executors"),
    ],
)
def test_a_bad_scaling_event_names_the_field(body: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as e:
        events.validate(body, {})
    assert e.value.field == field


def test_a_scaling_event_applies_at_once_to_the_owner(store: Store) -> None:
    ev, created = submit_control(
        store, "shop-a", {"kind": "scaling", "scaling": "auto:max=4"}, sender="local:me"
    )
    assert created and ev.status == ControlStatus.COMMITTED and ev.applied_epoch is None
    want = ScalingSpec(mode="auto", max_executors=4).to_dict()
    assert ev.result == {"owner": "shop", "scaling": want, "rescale_id": 1}
    assert store.get_job(APP).scaling == want and store.get_job(job_id("shop-a")).scaling is None
    (r,) = store.list_rescales(APP)
    assert (r.kind, r.status, r.sender, r.mode) == ("bounds", "recorded", "local:me", "auto")
    # The version it made is the job's; nothing is pending for its driver.
    assert store.list_controls(job_id("shop-a"), status=ControlStatus.PENDING) == []


def test_a_scaling_event_to_a_job_whose_application_ended_is_refused(store: Store) -> None:
    store.set_job_state(APP, JobState.CANCELED)
    with pytest.raises(JobTerminal):
        submit_control(store, "shop-a", {"kind": "scaling", "scaling": "fixed"}, sender="x")
    assert store.list_controls(job_id("shop-a")) == []


# bounds ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "min_executors"),
        ({"min_executors": None, "max_executors": None}, "min_executors"),
        ({"min_executors": 0}, "min_executors"),
        ({"max_executors": 10_001}, "max_executors"),
        ({"max_executors": "3"}, "max_executors"),
        ({"max_executors": False}, "max_executors"),
        ({"max_executors": 2.5}, "max_executors"),
        ({"max": 2}, "max"),
    ],
)
def test_bad_bounds_name_the_field(body: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as e:
        parse_bounds(body)
    assert e.value.field == field


def test_bounds_parse() -> None:
    assert parse_bounds({"min_executors": 2}) == (2, None)
    assert parse_bounds({"max_executors": 5, "min_executors": None}) == (None, 5)
    assert parse_bounds({"min_executors": 1, "max_executors": 10_000}) == (1, 10_000)
    assert parse_bounds({"max_executors": 90.0}) == (None, 90)  # JSON's whole number


def test_new_bounds_go_to_the_owner_and_its_history(store: Store) -> None:
    store.set_scaling(APP, ScalingSpec(mode="auto", max_executors=2).to_dict())
    out = set_bounds(store, store.get_job(job_id("shop-a")), None, 6, sender="api")
    assert (out["job_id"], out["owner"], out["scaling"]["max_executors"]) == ("shop-a", "shop", 6)
    assert out["rescale"]["reason"] == "bounds min=1,max=2 -> min=1,max=6"
    view = rescales_view(store, store.get_job(job_id("shop-a")))
    assert view["owner"] == "shop" and [r["rescale_id"] for r in view["rescales"]] == [1]
    with pytest.raises(InvalidInput) as e:
        set_bounds(store, store.get_job(APP), 7, None, sender="api")
    assert e.value.field == "min_executors"  # above max 6
    assert store.get_job(APP).scaling["min_executors"] == 1 and len(store.list_rescales(APP)) == 1
    with pytest.raises(InvalidInput) as e:
        rescales_view(store, store.get_job(APP), limit=0)
    assert e.value.field == "limit"


def test_views_show_the_owner_s_scaling_and_the_job_s_partitions(store: Store) -> None:
    store.set_job_spec(job_id("shop-a"), {**SPEC, "max_parallelism": 12})
    store.set_executor_target(APP, 3)
    fields = scaling_fields(store, store.get_job(job_id("shop-a")))
    assert fields == {
        "scaling": ScalingSpec().to_dict(),
        "executor_target": 3,
        "resources": None,
        "max_parallelism": 12,
    }


# metrics -----------------------------------------------------------------------------------
def test_the_trigger_in_force(store: Store) -> None:
    assert trigger_in_force(store, store.get_job(job_id("shop-a"))) == 2.0  # the driver's
    assert trigger_in_force(store, store.get_job(JOB)) == 0.5  # the default
    store.create_job(job_id("given"), "g", {"kind": "app", "conf": {"stoker.trigger": "3s"}}, {})
    assert trigger_in_force(store, store.get_job(job_id("given"))) == 3.0
    store.add_control(
        job_id("given"), ControlKind.TRIGGER, {"interval": "4s", "seconds": 4.0}, sender="x"
    )
    assert trigger_in_force(store, store.get_job(job_id("given"))) == 4.0  # control's


def test_series_leave_out_what_is_unknown_and_what_ended(store: Store) -> None:
    store.report_resources(JOB, {"executors": 2, "cores": 2, "at": 1.0})
    store.create_job(job_id("done"), "d", SPEC, {})
    store.report_resources(job_id("done"), {"executors": 5, "cores": 5, "at": 1.0})
    store.set_job_state(job_id("done"), JobState.CANCELED)
    got = job_series(store, store.list_jobs(kind=None))
    assert got["executors"] == {"orders": 2.0}
    assert got == {**got, "executor_target": {}, "backlog": {}, "utilization": {}}


def test_the_rescale_tally_counts_each_rescale_once(store: Store) -> None:
    tally = RescaleTally()

    def add(owner: JobId, kind: str, at: float) -> None:
        status = {"decision": "decided", "observed": "observed", "bounds": "recorded"}[kind]
        store.add_rescale(
            owner,
            kind=kind,
            policy="p",
            mode="auto",
            signals={},
            from_executors=None,
            to_executors=None,
            reason="r",
            status=status,
            at=at,
        )

    def owners() -> list[Any]:
        return [j for j in store.list_jobs(kind=None) if j.app_id is None]

    assert tally.totals(store, owners()) == {"decision": 0.0, "observed": 0.0, "bounds": 0.0}
    add(JOB, "decision", 10.0)
    add(APP, "observed", 10.0)
    assert tally.totals(store, owners()) == {"decision": 1.0, "observed": 1.0, "bounds": 0.0}
    assert tally.totals(store, owners())["decision"] == 1.0  # read again: counted once
    add(JOB, "decision", 10.0)  # at the same instant as the one counted
    add(JOB, "bounds", 11.0)
    assert tally.totals(store, owners()) == {"decision": 2.0, "observed": 1.0, "bounds": 1.0}
    store.set_job_state(APP, JobState.CANCELED)
    add(APP, "observed", 12.0)  # after it ended: read once more
    assert tally.totals(store, owners())["observed"] == 2.0
