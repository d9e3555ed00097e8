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
import random
from dataclasses import asdict, dataclass, field
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
}
MANAGER_ONLY = {"leader_kill", "manager_stall"}
LOCAL_ONLY = {"checkpoint_lost"}  # the managers' drivers keep their state where they choose
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
    arg: float  # the fault's own knob: a stall's seconds, a rate, a trigger, a file's index


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
            "steps": [asdict(s) for s in self.steps],
        }

    def describe(self) -> str:
        w = self.workload
        head = (
            f"seed {self.seed}: job {w.job}, {w.gen} generated ids"
            f"{' (stateful, each twice)' if w.stateful else ''}, {w.files} files x {w.per_file}, "
            f"sinks files{' + postgres' if w.pg_sink else ''}, store "
            f"{'postgres' if w.pg_store else 'sqlite'}{', sink on a small disk' if w.disk else ''}"
            f", {'two job managers' if w.managed else 'stoker run'}"
        )
        return "\n".join([head, *(f"  {fmt_step(s)}" for s in self.steps)])


def fmt_step(s: Step) -> str:
    return f"#{s.index:02d} +{s.after_epochs} epochs +{s.delay:.1f}s {s.kind}({s.arg:g})"


def generate(seed: int, faults: int = 20, allow: set[str] | None = None) -> Schedule:
    """The schedule of ``seed``: a workload and ``faults`` steps of the allowed kinds."""
    rng = random.Random(seed)
    files = rng.choice([0, 0, 6, 10])
    pg_sink = rng.random() < 0.8
    per_epoch = rng.choice([100, 200, 300])
    # The draw is made either way, so that limiting the kinds changes nothing else.
    disk = rng.random() < 0.3 and (allow is None or "disk_full" in allow)
    pg_store = pg_sink and rng.random() < 0.3
    managed = rng.random() < 0.35 and (allow is None or bool(MANAGER_ONLY & allow))
    kinds = {k: v for k, v in WEIGHTS.items() if allow is None or k in allow}
    for k in LOCAL_ONLY if managed else MANAGER_ONLY:
        kinds.pop(k, None)
    if not pg_sink:
        kinds.pop("pg_down", None)
    if not disk:
        kinds.pop("disk_full", None)
    if not files:
        kinds.pop("files_arrive", None)
    names, weights = list(kinds), list(kinds.values())
    steps = []
    for i in range(faults):
        kind = rng.choices(names, weights)[0]
        steps.append(
            Step(
                index=i,
                after_epochs=rng.choice([0, 0, 1, 1, 2]),
                delay=round(rng.uniform(0.0, 2.5), 2),
                kind=kind,
                arg=_arg(rng, kind, per_epoch),
            )
        )
    # Enough epochs for every step to land before the job ends, and some after the last.
    epochs = sum(s.after_epochs for s in steps) + 8
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
    )
    return Schedule(seed, w, steps)


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


def load(text: str) -> Schedule:
    d = json.loads(text)
    return Schedule(d["seed"], Workload(**d["workload"]), [Step(**s) for s in d["steps"]])
