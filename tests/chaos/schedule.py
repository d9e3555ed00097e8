"""Fault schedules drawn from a seed: the same seed gives the same schedule, whatever the timing.

A schedule is a workload (which sources, sinks, store, how many ids) and a list of steps. Each
step waits for the job to have committed some epochs more than at the step before (or for a
moment of time: a fault may land at start-up, inside an epoch, between two), then injects one
fault. Anchoring steps on committed epochs rather than on the clock keeps a schedule
meaningful however slowly Spark starts on a loaded machine; the timing inside an epoch is left
to chance and is recorded in the history, as Jepsen does.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import asdict, dataclass, field, replace
from typing import Any

# What the nemesis can do, and how often a schedule draws it (weights). Faults that end the
# driver (kill, term, a lost checkpoint) are rarer than those it survives in place, so that a
# schedule of ~20 faults still makes progress.
WEIGHTS: dict[str, int] = {
    "worker_kill": 8,  # SIGKILL of a Python task worker: Spark retries the task (local[N,F])
    "driver_stall": 2,  # SIGSTOP of the driver's Python process for a while, then SIGCONT
    "jvm_stall": 2,  # SIGSTOP of the driver's JVM (Spark itself), then SIGCONT
    "driver_kill": 2,  # SIGKILL of the driver's whole process group; the same command again
    "driver_term": 1,  # SIGTERM of the driver: a graceful stop (exit 13); the same command again
    "pg_down": 1,  # the PostgreSQL server (sink, and the store when it is there) down a while
    "disk_full": 1,  # the files sink's small file system fills up, then is freed
    "pause": 2,  # pause, and a resume a while later
    "config": 1,  # a config change (applied at an epoch boundary)
    "rate_limit": 1,  # rows per epoch changed
    "trigger": 1,  # the trigger interval changed
    "log_level": 1,
    "checkpoint": 1,  # an epoch now
    "event": 1,  # a custom control event
    "savepoint": 1,  # a savepoint, without stopping
    "cancel_resubmit": 1,  # cancel, then the same job submitted again from its checkpoint
    "checkpoint_lost": 1,  # the driver dies and comes back without its checkpoint: refused
    "files_arrive": 2,  # new input files (when the workload reads files)
    "leader_kill": 2,  # SIGKILL of the leading job manager (managed workloads)
    "manager_stall": 1,  # SIGSTOP of the leading job manager for a while, then SIGCONT
    # Added after the first recorded runs (docs/chaos-runs), drawn from a stream of their own
    # (see generate): the earlier kinds' draws, and so old seeds' steps, stay as they were.
    "savepoint_restore": 1,  # stop with a savepoint; a new job id from it, with changed code
    "rescale": 1,  # graceful stop; the state repartitioned (stateful); other parallelism
    "executor_kill": 3,  # SIGKILL of an executor JVM (cluster workloads)
    "executor_stall": 2,  # SIGSTOP of an executor JVM for a while, then SIGCONT (cluster)
    "spark_worker_kill": 2,  # SIGKILL of a Spark worker's group; started again (cluster)
    # Warm standby drivers (issue 24), drawn from a third stream, for jobs submitted with one
    # (a share of the managed workloads): the draws above stay as they were.
    "standby_kill": 1,  # SIGKILL of the job's waiting standby driver (the leader replaces it)
    "standby_stall": 1,  # SIGSTOP of the waiting standby for a while, then SIGCONT
    # Upgrades (issue 24), drawn from a fourth stream, for managed workloads of seeds from
    # UPGRADE_FROM_SEED on (every recorded seed keeps its schedule).
    "upgrade": 1,  # an upgrade to new code (same ids): warmed, swapped at an epoch boundary
    "upgrade_bad": 1,  # an upgrade to code that fails its epochs: rolled back
    # Wall-clock faults (issue 39 item 1), drawn from a fifth stream, for seeds from
    # CLOCK_FROM_SEED on (every recorded seed keeps its schedule). Every process the harness
    # starts has an offset file of its own (tests/support/clockstep): the fault writes them.
    "clock_step": 2,  # wall clocks stepped by arg seconds: the leader's family, or all of them
    "clock_skew": 1,  # the two managers (and their drivers) arg seconds apart (managed only)
    # Faults inside the protocol (issue 40 item 2), drawn from a sixth stream for local
    # workloads of seeds from PROTOCOL_FROM_SEED on (every recorded seed keeps its schedule):
    # a random kill lands between decide and commit about 5% of the time, these always do.
    "crash_at": 3,  # the driver started again armed to SIGKILL itself at CRASH_POINTS[arg]
    "zombie": 2,  # a driver frozen at ZOMBIE_POINTS[arg], a second one takes over, it wakes
    "power_loss": 1,  # killed after a decide, the files sink's unsynced writes dropped
    # Network partitions (issue 39 item 8), drawn from a seventh stream, only for a run with
    # hosts in network namespaces (``--netns``: tests/chaos/netns.py): every other schedule,
    # recorded or not, stays as it was.
    "partition": 3,  # the driver's host cut from PostgreSQL's (one way or both) arg seconds
    "heal": 1,  # every cut healed now (else each heals by itself after its seconds)
    # Savepoint lineage probed (issue 40 item 2, tests/chaos/lineage.py), drawn from an eighth
    # stream for seeds from LINEAGE_FROM_SEED on: the step after a savepoint_restore becomes
    # one of these (LINEAGE_SHARE of the time). Each must be refused, changing nothing.
    "restore_twice": 2,  # the same savepoint restored again into another job id
    "restart_restored": 1,  # the savepoint's own job run again with --restart (local only)
    "fork_early": 1,  # a fork of it while the job it was restored into runs (local only)
}
ADDED = {"savepoint_restore", "rescale", "executor_kill", "executor_stall", "spark_worker_kill"}
MANAGER_ONLY = {"leader_kill", "manager_stall", "clock_skew"}
LOCAL_ONLY = {"checkpoint_lost"}  # the managers' drivers keep their state where they choose
CLUSTER_ONLY = {"executor_kill", "executor_stall", "spark_worker_kill"}
STANDBY_ONLY = {"standby_kill", "standby_stall"}
UPGRADE_ONLY = {"upgrade", "upgrade_bad"}
UPGRADE_FROM_SEED = 150
UPGRADE_SHARE = 0.6  # of those managed workloads: with upgrades among their faults
UPGRADE_STEPS = 0.15  # of such a workload's steps: an upgrade
CLOCK_ONLY = {"clock_step", "clock_skew"}
CLOCK_FROM_SEED = 300  # above every recorded seed (docs/chaos-runs: 1-226)
CLOCK_STEPS = 0.12  # of such a schedule's steps: a clock fault
CLOCK_MAX = 600.0  # seconds: no wall clock is ever more than ten minutes off
STANDBY_SHARE = 0.5  # of the managed workloads drawn with the later kinds: with a standby
STANDBY_STEPS = 0.2  # of a standby workload's steps: a fault of its standby
CLUSTER_SHARE = 0.2  # of the schedules under `stoker run` (~13% of all): on a standalone cluster
PROTOCOL_ONLY = {"crash_at", "zombie", "power_loss"}
NETNS_ONLY = {"partition", "heal"}
NETNS_STEPS = 0.3  # of a schedule's steps with hosts: a partition or a heal
PARTITION_MIN, PARTITION_MAX = 3.0, 60.0  # seconds a partition lasts unless healed before
# Which way a partition cuts: both, or only what the first host sends to the second.
PARTITION_WAYS = ("mgr<->data", "mgr->data", "data->mgr")
PROTOCOL_FROM_SEED = 400  # above every recorded seed
LINEAGE_ONLY = {"restore_twice", "restart_restored", "fork_early"}
LINEAGE_LOCAL = {"restart_restored", "fork_early"}  # the managed runs' outputs are the managers'
LINEAGE_FROM_SEED = 500  # above every recorded seed
LINEAGE_SHARE = 0.7  # of the steps right after a savepoint_restore: a probe
# Stalls that freeze their process inside a write to an SQLite store (scope "in_write").
IN_WRITE_KINDS = {"driver_stall", "standby_stall"}
IN_WRITE_FROM_SEED = 600  # above every recorded seed
IN_WRITE_SHARE = 0.5  # of those stalls, in seeds from there on
PROTOCOL_STEPS = 0.4  # of such a schedule's steps: a fault inside the protocol
# Where a crash_at's driver kills itself (stoker.testing's fault points): before and after the
# decision, between the sinks' commits and the store's mark, before Spark's commit log, inside
# recovery (before a sink's recover, after it), and a Spark task's Python worker right after
# its part's PREPARE (a stray part beside its retry's).
CRASH_POINTS = (
    "after_prepare",
    "after_decide",
    "after_commit",
    "before_spark_commit",
    "sink_recovery_at_start",
    "in_recovery",
    "task_after_prepare",
)
ARMED_AHEAD = 2  # a protocol fault is armed for the epoch this far after the newest one
CRASH_WEIGHTS = (2, 3, 2, 1, 1, 1, 2)  # after_decide the most: decided, not committed
# Where a zombie freezes: just before its decide, just after it, after its sinks' commits.
ZOMBIE_POINTS = ("after_prepare", "after_decide", "after_commit")
# Faults that end a driver: the runner starts the same command again afterwards.
ENDS_DRIVER = {"driver_kill", "driver_term"}


@dataclass(frozen=True)
class Workload:
    job: str
    gen: int  # ids from the generator (0: none)
    per_epoch: int
    stateful: bool  # the generator's ids twice, deduplicated by a stateful operator
    files: int  # input files that arrive over the run (0: no files source)
    per_file: int
    pg_sink: bool
    pg_store: bool  # the store on the PostgreSQL server too (else SQLite)
    disk: bool  # the files sink on a small file system of its own (disk_full faults)
    managed: bool = False  # run by two job managers on one store, not by `stoker run`
    standby: bool = False  # submitted with a warm standby driver (managed only)
    upgrades: bool = False  # upgrades to new code among its faults (managed only)
    # `stoker run` on a Spark standalone cluster the runner starts (a master and two one-core
    # workers on 127.0.0.2 and .3), not on local[N,F]
    cluster: bool = False

    @property
    def total(self) -> int:
        return self.gen + self.files * self.per_file

    @property
    def bounded(self) -> bool:
        """Finishes by itself (no unbounded source): else the runner cancels it at the end."""
        return self.files == 0


@dataclass(frozen=True)
class Step:
    index: int
    after_epochs: int  # committed epochs more than at the step before
    delay: float  # then seconds more
    kind: str
    # the fault's own knob: a stall's seconds, a rate, a trigger, a rescale's state partitions,
    # a clock step's or skew's seconds (signed)
    arg: float
    # whose clocks a clock_step moves: "leader" (the leading manager and its drivers; under
    # `stoker run` the driver) or "all" (every manager and driver); which way a partition
    # cuts (PARTITION_WAYS); "in_write" for a stall that freezes its process while it holds
    # the SQLite store's write lock. Empty for other kinds, and then left out of the JSON (the
    # recorded schedules' digests stay as they were).
    scope: str = ""


@dataclass
class Schedule:
    seed: int
    workload: Workload
    steps: list[Step] = field(default_factory=list)

    def without(self, dropped: set[int]) -> Schedule:
        """The same schedule without the steps of these indexes (for minimising)."""
        return Schedule(self.seed, self.workload, [s for s in self.steps if s.index not in dropped])

    def to_json(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "workload": asdict(self.workload),
            "steps": [_step_json(s) for s in self.steps],
        }

    def describe(self) -> str:
        w = self.workload
        head = (
            f"seed {self.seed}: job {w.job}, {w.gen} generated ids"
            f"{' (stateful, each twice)' if w.stateful else ''}, {w.files} files x {w.per_file}, "
            f"sinks files{' + postgres' if w.pg_sink else ''}, store "
            f"{'postgres' if w.pg_store else 'sqlite'}{', sink on a small disk' if w.disk else ''}"
            f", {'two job managers' if w.managed else 'stoker run'}"
            f"{' with a warm standby' if w.standby else ''}"
            f"{', upgraded to new code' if w.upgrades else ''}"
            f"{' on a standalone cluster' if w.cluster else ''}"
        )
        return "\n".join([head, *(f"  {fmt_step(s)}" for s in self.steps)])


def _step_json(s: Step) -> dict[str, Any]:
    d = asdict(s)
    if not d["scope"]:
        del d["scope"]
    return d


def fmt_step(s: Step) -> str:
    scope = f", {s.scope}" if s.scope else ""
    return f"#{s.index:02d} +{s.after_epochs} epochs +{s.delay:.1f}s {s.kind}({s.arg:g}{scope})"


def generate(
    seed: int,
    faults: int = 20,
    allow: set[str] | None = None,
    added: bool = True,
    hosts: bool = False,
) -> Schedule:
    """The schedule of ``seed``: a workload and ``faults`` steps of the allowed kinds.

    The kinds of ``ADDED`` (and the cluster workload) are drawn from a second random stream:
    the first stream makes exactly the draws it made before they existed, and each step then
    becomes an added kind with the added kinds' share of the weights. So an old seed keeps its
    workload (but a fifth of those under `stoker run` now run on a cluster) and every step but
    those an added kind replaced; ``added=False`` gives the schedule as it was before them
    (the recorded runs of docs/chaos-runs).

    ``hosts``: the run has hosts in network namespaces (tests/chaos/netns.py), and the
    partitions and heals are drawn among the steps (a seventh stream). Such a workload always
    has a PostgreSQL sink (else a partition would cut nothing) and is never on a cluster: the
    cluster's addresses are loopback ones, which a namespace does not share (the first-stream
    draws are made all the same)."""
    rng = random.Random(seed)
    more = random.Random(seed * 1_000_003 + 0xADD)
    files = rng.choice([0, 0, 6, 10])
    # With hosts always a PostgreSQL sink, and more often the store there too: a partition
    # cuts the driver from PostgreSQL, and without it would cut nothing.
    pg_sink = rng.random() < 0.8 or hosts
    per_epoch = rng.choice([100, 200, 300])
    # The draw is made either way, so that limiting the kinds changes nothing else.
    disk = rng.random() < 0.3 and (allow is None or "disk_full" in allow)
    pg_store = pg_sink and rng.random() < (0.5 if hosts else 0.3)
    managed = rng.random() < 0.35 and (allow is None or bool(MANAGER_ONLY & allow))
    # Kinds that only a cluster has to be done to, and nothing else: a cluster, always.
    only_cluster = allow is not None and bool(allow) and allow <= CLUSTER_ONLY
    cluster = (
        added
        and (more.random() < CLUSTER_SHARE or only_cluster)
        and not managed
        and not hosts
        and (allow is None or bool(CLUSTER_ONLY & allow))
    )
    # A third stream for the standby (issue 24): nothing above or below draws from it.
    third = random.Random(seed * 7_000_003 + 0x5B)
    standby_kinds = [k for k in sorted(STANDBY_ONLY) if allow is None or k in allow]
    standby = (
        managed
        and added
        and third.random() < STANDBY_SHARE
        and (allow is None or bool(STANDBY_ONLY & allow))
    )
    # A fourth stream for upgrades (issue 24), for seeds that no recorded run used.
    fourth = random.Random(seed * 9_000_011 + 0x0B)
    upgrade_kinds = [k for k in sorted(UPGRADE_ONLY) if allow is None or k in allow]
    upgrades = (
        managed
        and added
        and seed >= UPGRADE_FROM_SEED
        and bool(upgrade_kinds)
        and fourth.random() < UPGRADE_SHARE
    )
    # A fifth stream for the clock faults (issue 39), for seeds no recorded run used, or
    # whenever they are asked for by name (``--kinds clock_step,...``).
    fifth = random.Random(seed * 11_000_027 + 0xC10)
    clock_weights = {
        k: WEIGHTS[k]
        for k in sorted(CLOCK_ONLY)
        if (allow is None or k in allow) and (managed or k not in MANAGER_ONLY)
    }
    only_clock = allow is not None and bool(allow) and allow <= CLOCK_ONLY
    clocks = bool(clock_weights) and (
        seed >= CLOCK_FROM_SEED or (allow is not None and bool(CLOCK_ONLY & allow))
    )
    # A sixth stream for the faults inside the protocol (issue 40), for local workloads of
    # seeds no recorded run used, or whenever they are asked for by name.
    sixth = random.Random(seed * 13_000_033 + 0xFE)
    protocol_weights = {k: WEIGHTS[k] for k in sorted(PROTOCOL_ONLY) if allow is None or k in allow}
    only_protocol = allow is not None and bool(allow) and allow <= PROTOCOL_ONLY
    # Named in a short list of kinds (--kinds crash_at,worker_kill), not all of them allowed.
    named = (
        allow is not None
        and bool(PROTOCOL_ONLY & allow)
        and not set(WEIGHTS) - PROTOCOL_ONLY - CLOCK_ONLY - NETNS_ONLY <= allow
    )
    protocol = (
        bool(protocol_weights)
        and not managed
        and not cluster
        and (seed >= PROTOCOL_FROM_SEED or named)
    )
    kinds = {
        k: v
        for k, v in WEIGHTS.items()
        if (allow is None or k in allow)
        and k not in STANDBY_ONLY | UPGRADE_ONLY | CLOCK_ONLY | PROTOCOL_ONLY | NETNS_ONLY
        and k not in LINEAGE_ONLY
    }
    # A seventh stream for the partitions (issue 39 item 8), only with hosts.
    seventh = random.Random(seed * 17_000_041 + 0x4E7)
    netns_weights = {k: WEIGHTS[k] for k in sorted(NETNS_ONLY) if allow is None or k in allow}
    only_netns = allow is not None and bool(allow) and allow <= NETNS_ONLY
    partitions = hosts and bool(netns_weights)
    for k in LOCAL_ONLY if managed else MANAGER_ONLY:
        kinds.pop(k, None)
    if not pg_sink:
        kinds.pop("pg_down", None)
    if not disk:
        kinds.pop("disk_full", None)
    if not files:
        kinds.pop("files_arrive", None)
    if not cluster:
        for k in CLUSTER_ONLY:
            kinds.pop(k, None)
    first = {k: v for k, v in kinds.items() if k not in ADDED}
    later = {k: v for k, v in kinds.items() if k in ADDED and added}
    names, weights = list(first), list(first.values())
    share = sum(later.values()) / max(1, sum(later.values()) + sum(weights))
    steps = []
    for i in range(faults):
        kind = rng.choices(names, weights)[0] if names else ""
        after_epochs = rng.choice([0, 0, 1, 1, 2])
        delay = round(rng.uniform(0.0, 2.5), 2)
        arg = _arg(rng, kind, per_epoch)
        if later and (more.random() < share or not names):
            kind = more.choices(list(later), list(later.values()))[0]
            arg = _added_arg(more, kind)
        if standby and standby_kinds and third.random() < STANDBY_STEPS:
            kind = third.choice(standby_kinds)
            arg = round(third.uniform(0.5, 15.0), 1) if kind == "standby_stall" else 0.0
        if upgrades and fourth.random() < UPGRADE_STEPS:
            kind, arg = fourth.choice(upgrade_kinds), 0.0
        scope = ""
        if clocks and (fifth.random() < CLOCK_STEPS or only_clock):
            kind = fifth.choices(list(clock_weights), list(clock_weights.values()))[0]
            arg = _clock_arg(fifth)
            if kind == "clock_step":
                scope = fifth.choice(["leader", "all"]) if managed else "leader"
        if protocol and (sixth.random() < PROTOCOL_STEPS or only_protocol):
            kind = sixth.choices(list(protocol_weights), list(protocol_weights.values()))[0]
            arg = _protocol_arg(sixth, kind)
            scope = ""
        if partitions and (seventh.random() < NETNS_STEPS or only_netns):
            kind = seventh.choices(list(netns_weights), list(netns_weights.values()))[0]
            arg, scope = 0.0, ""
            if kind == "partition":
                arg = _partition_arg(seventh)
                scope = seventh.choice(PARTITION_WAYS)
        steps.append(Step(i, after_epochs, delay, kind, arg, scope))
    if seed >= LINEAGE_FROM_SEED and not hosts:
        _probe_lineage(seed, steps, managed, allow)
    if seed >= IN_WRITE_FROM_SEED and not pg_store:
        _stalls_in_write(seed, steps)
    # Enough epochs for every step to land before the job ends, and some after the last; an
    # added fault the job runs through (a worker down for seconds) gets the epochs it may
    # commit meanwhile (the earlier kinds get none: their seeds keep their workloads).
    epochs = sum(s.after_epochs + _runs_through(s) for s in steps) + 8
    w = Workload(
        job=f"chaos{seed}",
        gen=epochs * per_epoch,
        per_epoch=per_epoch,
        stateful=rng.random() < 0.3,
        files=files,
        per_file=50,
        pg_sink=pg_sink,
        pg_store=pg_store,
        disk=disk,
        managed=managed,
        cluster=cluster,
        standby=standby,
        upgrades=upgrades,
    )
    return Schedule(seed, w, steps)


def _probe_lineage(seed: int, steps: list[Step], managed: bool, allow: set[str] | None) -> None:
    """The step after a savepoint_restore made a lineage probe (an eighth stream: every other
    draw stays as it was)."""
    eighth = random.Random(seed * 19_000_043 + 0x11E)
    weights = {
        k: WEIGHTS[k]
        for k in sorted(LINEAGE_ONLY)
        if (allow is None or k in allow) and not (managed and k in LINEAGE_LOCAL)
    }
    if not weights:
        return
    for i in range(len(steps) - 1):
        if steps[i].kind == "savepoint_restore" and eighth.random() < LINEAGE_SHARE:
            nxt = steps[i + 1]
            kind = eighth.choices(list(weights), list(weights.values()))[0]
            steps[i + 1] = Step(nxt.index, nxt.after_epochs, nxt.delay, kind, 0.0)


def _stalls_in_write(seed: int, steps: list[Step]) -> None:
    """Some stalls of a driver or standby frozen inside a write to the SQLite store, holding its
    one write lock (a ninth stream: every other draw stays as it was). A CI run froze a driver
    there by chance and no lease on the store could be renewed again, the leader's included;
    the leader's lock watch (stoker/manager/lockwatch.py) now kills such a holder."""
    ninth = random.Random(seed * 23_000_047 + 0x5714)
    for i, step in enumerate(steps):
        if step.kind in IN_WRITE_KINDS and ninth.random() < IN_WRITE_SHARE:
            steps[i] = replace(step, scope="in_write")


def _arg(rng: random.Random, kind: str, per_epoch: int) -> float:
    if kind in ("driver_stall", "jvm_stall", "pg_down", "disk_full", "pause"):
        return round(rng.uniform(0.5, 6.0), 1)  # seconds the fault lasts
    if kind == "rate_limit":
        return float(rng.choice([per_epoch // 2, per_epoch, per_epoch * 2]))
    if kind == "trigger":
        return float(rng.choice([100, 200, 500, 1000]))  # milliseconds
    if kind == "config":
        return float(rng.randrange(1000))
    return 0.0


def _runs_through(step: Step) -> int:
    """Epochs (at 5 a second) the job may commit while this added fault is being done."""
    if step.kind == "spark_worker_kill":
        return int((step.arg + 4.0) * 5)  # down, then ~4 s to start a worker again
    if step.kind == "executor_stall":
        return int(step.arg * 5)  # the other executor goes on
    if step.kind in ("crash_at", "zombie", "power_loss"):
        return ARMED_AHEAD + 1  # the armed epoch is ahead of the newest one
    return {"executor_kill": 5, "savepoint_restore": 2, "rescale": 2}.get(step.kind, 0)


def _added_arg(rng: random.Random, kind: str) -> float:
    if kind == "rescale":
        return float(rng.choice([4, 6, 12]))  # a stateful job's new state partitions (from 8)
    if kind == "executor_stall":
        return round(rng.uniform(0.5, 15.0), 1)  # past an executor heartbeat (10 s) at times
    if kind == "spark_worker_kill":
        return round(rng.uniform(0.5, 10.0), 1)  # seconds before the worker is started again
    return 0.0


def _protocol_arg(rng: random.Random, kind: str) -> float:
    """A crash_at's point or a zombie's (an index into CRASH_POINTS, ZOMBIE_POINTS): the
    points around the decision most often (CRASH_WEIGHTS). Half the zombies freeze just
    before their decide, where a missing fence writes twice."""
    if kind == "crash_at":
        return float(rng.choices(range(len(CRASH_POINTS)), CRASH_WEIGHTS)[0])
    if kind == "zombie":
        return 0.0 if rng.random() < 0.5 else float(rng.randrange(1, len(ZOMBIE_POINTS)))
    return 0.0


def _partition_arg(rng: random.Random) -> float:
    """A partition's seconds, log-uniform from a few (inside one epoch's store calls) to a
    minute (past the drivers' 60 s progress watchdog)."""
    return round(math.exp(rng.uniform(math.log(PARTITION_MIN), math.log(PARTITION_MAX))), 1)


def _clock_arg(rng: random.Random) -> float:
    """A step's (or skew's) signed seconds: from a few seconds to ten minutes, as many of each
    order of magnitude (log-uniform), forward or back."""
    seconds = round(math.exp(rng.uniform(math.log(3.0), math.log(CLOCK_MAX))))
    return float(seconds if rng.random() < 0.5 else -seconds)


def load(text: str) -> Schedule:
    d = json.loads(text)
    return Schedule(d["seed"], Workload(**d["workload"]), [Step(**s) for s in d["steps"]])
