"""CI's short lane of the chaos harness: a few generated schedules, and the seeds that once
found a bug (kept as regression tests). Long runs: ``python -m tests.chaos --seeds 1-50``;
their figures are in docs/reliability.md."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.chaos.nemesis import BouncingPostgres, can_mount
from tests.chaos.runner import run_schedule
from tests.chaos.schedule import PROTOCOL_ONLY, WEIGHTS, generate

pytestmark = [pytest.mark.soak, pytest.mark.spread, pytest.mark.timeout(1500)]

# A few schedules drawn afresh each release of this list: short ones (10 faults each), drawn
# without the faults inside the protocol, which the next one does alone (each restarts the
# driver: slow), every kind of them (issue 40).
SHORT = [9001, 9002]
PROTOCOL = {9003: 4}
# Schedules that found a bug (the finding and its fix in docs/reliability.md), replayed as they
# were drawn: seed -> (faults, kinds allowed or None for all, drawn with the later kinds).
# Finding 4's seed (7: an idle job the runner, not stoker, took for stuck; 20 faults, the
# longest schedule here at 3-3.5 minutes) is replayed by the long runs, not in CI, whose time
# budget it did not fit: `python -m tests.chaos --seed 7 --faults 20 --without-added-kinds`.
KEPT: dict[int, tuple[int, set[str] | None, bool]] = {
    # finding 5: a restore through a job manager made under a fresh uid (800 ids twice)
    118: (6, {"savepoint_restore", "rescale", "leader_kill", "worker_kill"}, True),
}


@pytest.fixture(scope="module")
def bouncing_pg() -> Iterator[BouncingPostgres]:
    """A PostgreSQL server of the module's own: the nemesis crashes it."""
    server = BouncingPostgres().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.parametrize("seed", SHORT + list(PROTOCOL) + list(KEPT))
def test_a_generated_fault_schedule_keeps_every_invariant(
    seed: int, tmp_path: Path, bouncing_pg: BouncingPostgres
) -> None:
    short = (10, set(WEIGHTS) - PROTOCOL_ONLY, True)
    if seed in PROTOCOL:
        short = (PROTOCOL[seed], set(PROTOCOL_ONLY), True)
    faults, kinds, added = KEPT.get(seed, short)
    allow = kinds if kinds is not None else set(WEIGHTS)
    if not can_mount():
        allow = allow - {"disk_full"}
    schedule = generate(seed, faults=faults, allow=allow, added=added)
    print(schedule.describe())
    result = run_schedule(schedule, tmp_path / "run", bouncing_pg, keep=True)
    print(result.report())
    assert result.ok, result.report()
    assert result.faults() > 0, result.report()
