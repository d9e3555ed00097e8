"""The harness's own pieces, without Spark: schedules are the seed's, and only the seed's."""

from __future__ import annotations

from tests.chaos.schedule import WEIGHTS, generate, load


def test_a_seed_gives_one_schedule_and_another_seed_another() -> None:
    assert generate(5).to_json() == generate(5).to_json()
    assert generate(5).to_json() != generate(6).to_json()


def test_a_schedule_round_trips_through_json_and_drops_steps_by_index() -> None:
    import json

    s = generate(11, faults=12)
    assert load(json.dumps(s.to_json())).to_json() == s.to_json()
    smaller = s.without({0, 5})
    assert [st.index for st in smaller.steps] == [i for i in range(12) if i not in (0, 5)]


def test_faults_fit_the_workload_and_every_kind_is_drawn_over_many_seeds() -> None:
    seen: set[str] = set()
    for seed in range(200):
        s = generate(seed)
        w = s.workload
        kinds = {st.kind for st in s.steps}
        assert w.pg_sink or "pg_down" not in kinds
        assert w.disk or "disk_full" not in kinds
        assert w.files or "files_arrive" not in kinds
        # The generator has epochs for every step to land on, and some after the last.
        assert w.gen >= (sum(st.after_epochs for st in s.steps) + 8) * w.per_epoch
        seen |= kinds
    assert seen == set(WEIGHTS)


def test_kinds_can_be_limited() -> None:
    s = generate(3, faults=30, allow={"worker_kill", "pause"})
    assert {st.kind for st in s.steps} <= {"worker_kill", "pause"}
