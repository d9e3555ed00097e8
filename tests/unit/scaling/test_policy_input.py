"""The policy's task cap from the jobs' specs (stoker.scaling.policy_input.max_tasks)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from stoker.scaling.policy_input import max_tasks


def _jobs(*parallelism: Any) -> Any:
    return [SimpleNamespace(spec={} if p is None else {"max_parallelism": p}) for p in parallelism]


def test_the_cap_is_the_sum_of_the_jobs_state_partitions_when_all_are_known() -> None:
    assert max_tasks(_jobs(8)) == 8
    assert max_tasks(_jobs(8, 4, 2)) == 14  # an application: its jobs run side by side
    assert max_tasks(_jobs(8, None)) is None  # one not known (not started yet): no cap
    assert max_tasks(_jobs(True)) is None and max_tasks(_jobs(0)) is None
    assert max_tasks([]) is None
