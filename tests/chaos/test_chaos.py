"""CI's short lane of the chaos harness: a few generated schedules, and the seeds that once
found a bug (kept as regression tests). Long runs: ``python -m tests.chaos --seeds 1-50``;
their figures are in docs/reliability.md."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.chaos.nemesis import BouncingPostgres, can_mount
from tests.chaos.runner import run_schedule
from tests.chaos.schedule import WEIGHTS, generate

pytestmark = [pytest.mark.soak, pytest.mark.spread, pytest.mark.timeout(1500)]

# A few schedules drawn afresh each release of this list: short ones (10 faults each).
SHORT = [9001, 9002]
# Seeds whose schedules found a bug (the issue and the fix in docs/reliability.md).
KEPT: list[int] = [7]  # 7: docs/reliability.md finding 4 (an idle job the runner took for stuck)


@pytest.fixture(scope="module")
def bouncing_pg() -> Iterator[BouncingPostgres]:
    """A PostgreSQL server of the module's own: the nemesis crashes it."""
    server = BouncingPostgres().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.parametrize("seed", SHORT + KEPT)
def test_a_generated_fault_schedule_keeps_every_invariant(
    seed: int, tmp_path: Path, bouncing_pg: BouncingPostgres
) -> None:
    allow = None if can_mount() else set(WEIGHTS) - {"disk_full"}
    schedule = generate(seed, faults=10 if seed in SHORT else 20, allow=allow)
    print(schedule.describe())
    result = run_schedule(schedule, tmp_path / "run", bouncing_pg, keep=True)
    print(result.report())
    assert result.ok, result.report()
    assert result.faults() > 0, result.report()
