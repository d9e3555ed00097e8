"""Run chaos schedules: ``python -m tests.chaos --seeds 1-50 [--faults 20] [--out runs.jsonl]``.

Every schedule prints its seed first; a failure prints the schedule, the history of what was
injected and when, and what the checker found. ``--seed N`` replays one schedule;
``--drop 3,7`` replays it without those steps, and ``--minimise`` looks for the fewest steps
that still fail (each try is a whole run: slow, and timing may hide a fault on a try).
``--netns`` runs the drivers and PostgreSQL on hosts in network namespaces of their own and
draws network partitions among the faults (root only: tests/chaos/netns.py).

``python -m tests.chaos mutants [--schedules N] [names]`` runs the harness on copies of stoker
with planted bugs (tests/chaos/mutants/) and says which invariant caught each, after how many
schedules (tests/chaos/mutation.py).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.chaos.runner import Result, run_schedule
from tests.chaos.schedule import Schedule, generate


def _seeds(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        a, _, b = part.partition("-")
        out += list(range(int(a), int(b or a) + 1))
    return out


def _server(hosts: Any = None) -> Any:
    from tests.chaos.nemesis import BouncingPostgres

    if hosts is not None:
        from tests.chaos.netns import NetnsPostgres

        return NetnsPostgres(hosts).start()
    return BouncingPostgres().start()


def _attempt(
    root: Path, seed: int, pg: Any, keep: bool, hosts: Any = None
) -> Callable[[Schedule], Result]:
    """Runs of ``seed``'s schedule (or a smaller one), each in a folder of its own."""
    tries = iter(range(10_000))

    def attempt(s: Schedule) -> Result:
        return run_schedule(s, root / f"seed-{seed}-{next(tries)}", pg, keep=keep, hosts=hosts)

    return attempt


def minimise(schedule: Schedule, attempt: Callable[[Schedule], Result]) -> Schedule:
    """Drop steps while the schedule still fails (one at a time, from the last)."""
    current = schedule
    for step in reversed(schedule.steps):
        trial = current.without({step.index})
        print(f"minimise: without step #{step.index:02d} ...", flush=True)
        if not attempt(trial).ok:
            current = trial
    return current


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(f"chaos: stopped by signal {signum}; cleaning up")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["mutants"]:
        from tests.chaos.mutation import main as mutants

        return mutants(argv[1:])
    ap = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__)
    ap.add_argument("--seeds", default=None, help="e.g. 1-50 or 3,9,12")
    ap.add_argument("--seed", type=int, default=None, help="one schedule (a replay)")
    ap.add_argument("--faults", type=int, default=20, help="faults drawn per schedule")
    ap.add_argument("--kinds", default="", help="only these fault kinds, e.g. worker_kill,pause")
    ap.add_argument("--drop", default="", help="steps left out of the schedule, e.g. 3,7")
    ap.add_argument(
        "--without-added-kinds",
        action="store_true",
        help="the schedules as drawn before savepoint_restore, rescale and the cluster workload "
        "existed (the recorded runs of docs/chaos-runs)",
    )
    ap.add_argument(
        "--netns",
        action="store_true",
        help="the driver and PostgreSQL on hosts in network namespaces, with network "
        "partitions among the faults (root; only `stoker run` workloads on local[N,F])",
    )
    ap.add_argument("--minimise", action="store_true", help="shrink a failing schedule")
    ap.add_argument("--out", default=None, help="append one JSON line per schedule here")
    ap.add_argument("--keep", action="store_true", help="keep every run's folder")
    ap.add_argument("--dir", default=None, help="where runs' folders go (default: a temp dir)")
    args = ap.parse_args(argv)
    # A runner's time limit (`timeout`, a CI job's) stops the harness with SIGTERM: its
    # cleanups (drivers, managers, clusters, the small disk, the throwaway PostgreSQL) run as
    # on Ctrl-C, so no process or mount outlives it.
    signal.signal(signal.SIGTERM, _terminated)
    seeds = [args.seed] if args.seed is not None else _seeds(args.seeds or "1")
    root = Path(args.dir or tempfile.mkdtemp(prefix="stoker-chaos-"))
    print(f"chaos: seeds {seeds[0]}..{seeds[-1]} ({len(seeds)}), folders under {root}", flush=True)
    t0 = time.monotonic()
    with contextlib.ExitStack() as stack:
        hosts = None
        if args.netns:
            from tests.chaos.netns import Hosts

            hosts = stack.enter_context(Hosts())
            named = ", ".join(f"{h} {hosts.netns(h)} {hosts.addr(h)}" for h in hosts.hosts)
            print(f"chaos: hosts {named}", flush=True)
        pg = _server(hosts)
        stack.callback(pg.stop)
        failed, total_faults = _run_seeds(args, seeds, root, pg, hosts)
    took = time.monotonic() - t0
    print(
        f"chaos: {len(seeds)} schedules, {total_faults} faults injected, {len(failed)} failed "
        f"{failed} in {took / 60:.1f} min",
        flush=True,
    )
    return 1 if failed else 0


def _run_seeds(
    args: argparse.Namespace, seeds: list[int], root: Path, pg: Any, hosts: Any
) -> tuple[list[int], int]:
    """Each seed's schedule, one after the other: (the seeds that failed, faults injected)."""
    failed: list[int] = []
    total_faults = 0
    for seed in seeds:
        allow = set(args.kinds.split(",")) if args.kinds else None
        schedule = generate(
            seed,
            args.faults,
            allow=allow,
            added=not args.without_added_kinds,
            hosts=hosts is not None,
        )
        if args.drop:
            schedule = schedule.without({int(i) for i in args.drop.split(",")})
        print(f"--- {schedule.describe().splitlines()[0]}", flush=True)
        attempt = _attempt(root, seed, pg, args.keep, hosts)
        result = attempt(schedule)
        total_faults += result.faults()
        print(result.report(), flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(json.dumps({**result.to_json(), "load": os.getloadavg()[0]}) + "\n")
        if not result.ok:
            failed.append(seed)
            if args.minimise:
                small = minimise(schedule, attempt)
                print("minimal failing schedule:\n" + small.describe(), flush=True)
    return failed, total_faults


if __name__ == "__main__":
    sys.exit(main())
