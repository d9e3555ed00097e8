"""The harness's own pieces, without Spark: schedules are the seed's, and only the seed's."""

from __future__ import annotations

import hashlib
import json

from tests.chaos.schedule import (
    ADDED,
    CLOCK_FROM_SEED,
    CLOCK_ONLY,
    CLUSTER_ONLY,
    CRASH_POINTS,
    LINEAGE_FROM_SEED,
    LINEAGE_LOCAL,
    LINEAGE_ONLY,
    LOCAL_ONLY,
    NETNS_ONLY,
    PARTITION_MAX,
    PARTITION_MIN,
    PARTITION_WAYS,
    PROTOCOL_FROM_SEED,
    PROTOCOL_ONLY,
    STANDBY_ONLY,
    UPGRADE_FROM_SEED,
    UPGRADE_ONLY,
    WEIGHTS,
    ZOMBIE_POINTS,
    generate,
    load,
)

# The schedules of the recorded runs (docs/chaos-runs, seeds 1-8) as they were drawn before
# the added kinds existed: a hash of each one's JSON without the later ``cluster`` field.
RECORDED = {
    1: "6486839b3f78",
    2: "c99530061e4d",
    3: "d1f5930b15f4",
    4: "02b206d5c4b8",
    5: "ef9755ce31f6",
    6: "e120927deb3d",
    7: "481d5f71f842",
    8: "75ab4e5fb274",
}


def _digest(d: dict[str, object]) -> str:
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:12]


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
    for seed in range(300):
        s = generate(seed)
        w = s.workload
        kinds = {st.kind for st in s.steps}
        assert w.pg_sink or "pg_down" not in kinds
        assert w.disk or "disk_full" not in kinds
        assert w.files or "files_arrive" not in kinds
        assert w.cluster or not kinds & CLUSTER_ONLY
        assert not (w.cluster and w.managed)
        assert not (w.managed and kinds & LOCAL_ONLY)
        assert w.managed or not w.standby
        assert w.standby or not kinds & STANDBY_ONLY
        assert w.upgrades or not kinds & UPGRADE_ONLY
        assert w.managed or not w.upgrades
        assert not kinds & CLOCK_ONLY  # the clock faults only from CLOCK_FROM_SEED on
        # The generator has epochs for every step to land on, and some after the last.
        assert w.gen >= (sum(st.after_epochs for st in s.steps) + 8) * w.per_epoch
        seen |= kinds
    assert seen == set(WEIGHTS) - CLOCK_ONLY - PROTOCOL_ONLY - NETNS_ONLY - LINEAGE_ONLY


def test_clock_faults_come_from_their_seed_on_and_leave_the_other_draws_alone() -> None:
    with_clock = steps = clocks = 0
    for seed in range(CLOCK_FROM_SEED, CLOCK_FROM_SEED + 200):
        s = generate(seed)
        kinds = [st.kind for st in s.steps]
        assert s.workload.managed or "clock_skew" not in kinds
        with_clock += bool(set(kinds) & CLOCK_ONLY)
        for st in s.steps:
            steps += 1
            if st.kind in CLOCK_ONLY:
                clocks += 1
                assert 3 <= abs(st.arg) <= 600, st
                assert st.scope in (("leader", "all") if st.kind == "clock_step" else ("",)), st
                assert s.workload.managed or st.scope != "all", st
            else:
                assert st.scope == "", st
        # Without the clock kinds, the same schedule but for the steps they replaced (and the
        # ids an added kind they replaced would have needed).
        others = generate(seed, allow=set(WEIGHTS) - CLOCK_ONLY)
        a, b = s.to_json()["workload"], others.to_json()["workload"]
        a.pop("gen"), b.pop("gen")
        assert a == b, seed
        for x, y in zip(s.steps, others.steps, strict=True):
            assert x == y or x.kind in CLOCK_ONLY, (seed, x, y)
    assert 0.06 < clocks / steps < 0.2, (clocks, steps)
    assert with_clock > 150, with_clock
    # Asked for by name, on any seed: every step a clock fault; a skew only under managers.
    s = generate(7, faults=6, allow=set(CLOCK_ONLY))
    assert [st.kind for st in s.steps if st.kind in CLOCK_ONLY] and len(s.steps) == 6
    assert all(st.kind in CLOCK_ONLY for st in s.steps)
    assert load(json.dumps(s.to_json())).to_json() == s.to_json()


def test_kinds_can_be_limited() -> None:
    s = generate(3, faults=30, allow={"worker_kill", "pause"})
    assert {st.kind for st in s.steps} <= {"worker_kill", "pause"}


def test_the_added_kinds_leave_the_recorded_schedules_and_old_draws_alone() -> None:
    for seed, digest in RECORDED.items():
        old = generate(seed, added=False).to_json()
        assert old["workload"].pop("cluster") is False
        assert old["workload"].pop("standby") is False
        assert old["workload"].pop("upgrades") is False
        assert _digest(old) == digest, seed
    replaced = steps = clusters = standbys = upgrades = 0
    for seed in range(300):
        new, old = generate(seed), generate(seed, added=False)
        a, b = new.to_json()["workload"], old.to_json()["workload"]
        clusters += a.pop("cluster")
        b.pop("cluster")
        standbys += a.pop("standby")
        assert b.pop("standby") is False
        upgrades += a.pop("upgrades")
        assert b.pop("upgrades") is False
        # The workload as it was, but for the cluster and the ids an added fault's epochs need.
        changed = [x for x, y in zip(new.steps, old.steps, strict=True) if x != y]
        more, was = a.pop("gen"), b.pop("gen")
        assert (more >= was) if changed else (more == was), seed
        assert a == b, seed
        for x, y in zip(new.steps, old.steps, strict=True):
            steps += 1
            if x != y:  # a step changed only by becoming an added kind
                replaced += 1
                assert x.kind in ADDED | STANDBY_ONLY | UPGRADE_ONLY, (seed, x, y)
                assert y.kind not in ADDED, (seed, x, y)
                assert new.workload.upgrades or x.kind not in UPGRADE_ONLY, (seed, x)
                assert seed >= UPGRADE_FROM_SEED or x.kind not in UPGRADE_ONLY, (seed, x)
                assert new.workload.standby or x.kind not in STANDBY_ONLY, (seed, x)
                assert (x.index, x.after_epochs, x.delay) == (y.index, y.after_epochs, y.delay)
    assert 0.03 < replaced / steps < 0.25, (replaced, steps)
    assert 0.07 < clusters / 300 < 0.2, clusters
    assert 0.08 < standbys / 300 < 0.3, standbys  # half the managed workloads (~35%)
    assert 0.05 < upgrades / 150 < 0.4, upgrades  # 60% of the managed ones from seed 150


def test_the_added_kinds_fit_their_workloads_and_can_be_forced() -> None:
    # Only cluster kinds allowed: the workload is a cluster, every step one of them.
    s = generate(101, faults=8, allow=set(CLUSTER_ONLY))
    assert s.workload.cluster and not s.workload.managed
    assert {st.kind for st in s.steps} <= CLUSTER_ONLY and len(s.steps) == 8
    # Only added kinds that need no cluster: every step one of them, on any workload.
    s = generate(5, faults=8, allow={"savepoint_restore", "rescale"})
    assert {st.kind for st in s.steps} <= {"savepoint_restore", "rescale"} and len(s.steps) == 8
    assert not s.workload.cluster
    for st in generate(3, faults=40, allow={"rescale"}).steps:
        assert st.arg in (4.0, 6.0, 12.0)  # a stateful job's state partitions (from 8)
    # Limiting the kinds keeps the added stream's draws too: the same seed, the same cluster.
    some = set(WEIGHTS) - {"disk_full", "savepoint_restore"}
    assert [generate(n).workload.cluster for n in range(60)] == [
        generate(n, allow=some).workload.cluster for n in range(60)
    ]


def test_protocol_faults_come_from_their_seed_on_for_local_workloads() -> None:
    steps = protocol = with_protocol = 0
    for seed in range(PROTOCOL_FROM_SEED, PROTOCOL_FROM_SEED + 200):
        s = generate(seed)
        kinds = {st.kind for st in s.steps}
        assert not kinds & PROTOCOL_ONLY or not (s.workload.managed or s.workload.cluster)
        with_protocol += bool(kinds & PROTOCOL_ONLY)
        for st in s.steps:
            steps += 1
            if st.kind in PROTOCOL_ONLY:
                protocol += 1
                points = CRASH_POINTS if st.kind == "crash_at" else ZOMBIE_POINTS
                assert st.kind == "power_loss" or 0 <= int(st.arg) < len(points), st
        # The generator has epochs for the armed epochs ahead too.
        assert s.workload.gen >= (sum(st.after_epochs for st in s.steps) + 8) * s.workload.per_epoch
    assert 0.15 < protocol / steps < 0.4, (protocol, steps)
    assert with_protocol > 100, with_protocol
    # Below their seed, none; asked for by name, every step one of them (a local workload).
    assert not any(
        st.kind in PROTOCOL_ONLY for seed in range(300, 400) for st in generate(seed).steps
    )
    s = generate(7, faults=6, allow={"zombie"})
    assert [st.kind for st in s.steps] == ["zombie"] * 6 and not s.workload.managed


def test_partitions_are_drawn_only_with_hosts_and_leave_every_other_draw_alone() -> None:
    with_partition = steps = cuts = stores = 0
    for seed in range(0, 600, 3):
        plain, hosted = generate(seed), generate(seed, hosts=True)
        assert not {st.kind for st in plain.steps} & NETNS_ONLY
        w = hosted.workload
        assert not w.cluster
        kinds = {st.kind for st in hosted.steps}
        assert not kinds & CLUSTER_ONLY
        with_partition += "partition" in kinds
        for st in hosted.steps:
            steps += 1
            if st.kind == "partition":
                cuts += 1
                assert PARTITION_MIN <= st.arg <= PARTITION_MAX, st
                assert st.scope in PARTITION_WAYS, st
            elif st.kind == "heal":
                assert st.arg == 0.0 and st.scope == "", st
        # Always a PostgreSQL sink (else a partition would cut nothing). A workload the hosts
        # did not change (not a cluster, a PostgreSQL sink, the store where it was) keeps
        # its steps but those a partition or a heal replaced (and the ids a replaced added
        # kind needed).
        assert w.pg_sink
        if w.pg_store:
            stores += 1
        p = plain.workload
        if not p.cluster and p.pg_sink and p.pg_store == w.pg_store:
            a, b = plain.to_json()["workload"], hosted.to_json()["workload"]
            a.pop("gen"), b.pop("gen")
            assert a == b, seed
            for x, y in zip(plain.steps, hosted.steps, strict=True):
                assert x == y or y.kind in NETNS_ONLY or x.kind in LINEAGE_ONLY, (seed, x, y)
    assert 0.15 < cuts / steps < 0.35, (cuts, steps)
    assert with_partition > 150, with_partition
    assert 70 < stores < 130, stores  # the store on PostgreSQL in half of them
    # Asked for by name: every step a partition or a heal; not drawn when left out.
    s = generate(7, faults=6, allow=set(NETNS_ONLY), hosts=True)
    assert all(st.kind in NETNS_ONLY for st in s.steps) and len(s.steps) == 6
    assert load(json.dumps(s.to_json())).to_json() == s.to_json()
    s = generate(7, faults=30, allow=set(WEIGHTS) - NETNS_ONLY, hosts=True)
    assert not {st.kind for st in s.steps} & NETNS_ONLY


def test_lineage_probes_follow_a_savepoint_restore_from_their_seed_on() -> None:
    probes = restores = 0
    for seed in range(LINEAGE_FROM_SEED, LINEAGE_FROM_SEED + 300):
        s = generate(seed)
        kinds = [st.kind for st in s.steps]
        for i, k in enumerate(kinds):
            if k in LINEAGE_ONLY:
                probes += 1
                assert i > 0 and kinds[i - 1] == "savepoint_restore", (seed, kinds)
                assert not (s.workload.managed and k in LINEAGE_LOCAL), (seed, k)
            restores += k == "savepoint_restore"
        # Without the probes, the same schedule but for the steps they replaced.
        others = generate(seed, allow=set(WEIGHTS) - LINEAGE_ONLY)
        a, b = s.to_json()["workload"], others.to_json()["workload"]
        a.pop("gen"), b.pop("gen")  # the ids a replaced added kind needed
        assert a == b, seed
        for x, y in zip(s.steps, others.steps, strict=True):
            assert x == y or x.kind in LINEAGE_ONLY, (seed, x, y)
    assert probes > 0.4 * restores > 0, (probes, restores)
    for seed in range(LINEAGE_FROM_SEED):  # no recorded seed gets one
        assert not {st.kind for st in generate(seed, faults=6).steps} & LINEAGE_ONLY
