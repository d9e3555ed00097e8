"""The jobs table's executors cell (issue 41, newcomer walk): a driver in local mode runs its
tasks itself, with no executor; the table said 0, which reads as a job with nothing to run on.
It says "local" and the cores now; a cluster job keeps its number; no report, a dash."""

from __future__ import annotations

from stoker.server.ui import views


def test_a_local_driver_is_local_with_its_cores_not_zero_executors() -> None:
    local = {"resources": {"executors": 0, "local": True, "cores": 2}}
    assert views._executors(local) == "local, 2 cores"
    assert views._executors({"resources": {"executors": 0, "local": True}}) == "local"
    assert views._executors({"resources": {"executors": 3, "local": False, "cores": 6}}) == 3
    # A report from a driver before this change (no "local" key) reads as it did.
    assert views._executors({"resources": {"executors": 0, "cores": 2}}) == 0
    assert views._executors({"resources": None}) is None
