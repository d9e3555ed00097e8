"""The pure rules of the driver's resource watch: which executors are surplus, which clusters
stoker manages, and the shape of a report."""

from __future__ import annotations

from stoker.runtime.executors import Executor, Reading, surplus
from stoker.runtime.resources import managed_cluster


def ex(eid: str, active: int = 0) -> Executor:
    return Executor(eid, f"127.0.0.{eid}", 1, active, 0)


def test_surplus_takes_idle_executors_newest_first() -> None:
    execs = [ex("0"), ex("1"), ex("2"), ex("10")]
    assert surplus(execs, 2) == ["10", "2"]
    assert surplus(execs, 4) == []
    assert surplus(execs, 5) == []
    assert surplus(execs, 0) == ["10", "2", "1", "0"]


def test_surplus_never_takes_a_busy_executor() -> None:
    execs = [ex("0"), ex("1", active=2), ex("2", active=1)]
    assert surplus(execs, 1) == ["0"]  # only one is idle: the rest waits for the next tick


def test_surplus_counts_executors_already_leaving_as_gone() -> None:
    execs = [ex("0"), ex("1"), ex("2")]
    assert surplus(execs, 1, leaving={"2"}) == ["1"]
    assert surplus(execs, 2, leaving={"2"}) == []


def test_managed_clusters() -> None:
    assert managed_cluster("standalone:workers=2,cores=1,memory=1g")
    assert managed_cluster("nightly")  # a session cluster's name
    assert not managed_cluster("spark://10.0.0.1:7077")
    assert not managed_cluster("local")
    assert not managed_cluster("local[4]")
    assert not managed_cluster(None)


def test_report_shape() -> None:
    r = Reading(False, (ex("10"), ex("2"), Executor("3", None, None, 0, 0)), 3)
    assert r.resources(2, 12.5) == {
        "executors": 3,
        "local": False,
        "cores": 3,
        "warming": 0,
        "executor_ids": ["2", "3", "10"],
        "hosts": ["127.0.0.10", "127.0.0.2"],
        "requested": 2,
        "at": 12.5,
    }
    local = Reading(True, (), 4).resources(None, 1.0)
    assert (local["executors"], local["cores"], local["requested"]) == (0, 4, None)
    assert local["local"] is True


def test_cold_executors_are_reported_and_their_cores_held_back() -> None:
    """A new executor is in the report at once; its cores count once it is warm."""
    two = Executor("7", "127.0.0.7", 2, 0, 0)
    r = Reading(False, (ex("1"), ex("2"), two), 4)
    res = r.resources(None, 1.0, cold=("7",))
    assert (res["executors"], res["cores"], res["warming"]) == (3, 2, 1)
    # One not in Spark's status store yet counts as the average of the others.
    unknown = Reading(False, (ex("1"), ex("2"), Executor("3", None, None, 0, 0)), 3)
    res = unknown.resources(None, 1.0, cold=("3",))
    assert (res["cores"], res["warming"]) == (2, 1)
    # Never fewer than one core while executors are there.
    assert Reading(False, (two,), 2).resources(None, 1.0, cold=("7",))["cores"] == 1
