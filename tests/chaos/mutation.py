"""Mutation runs: the harness tested by planting bugs in a copy of stoker.

``python -m tests.chaos mutants [--schedules N] [--seeds 400-409] [names]``: for each mutant of
``tests/chaos/mutants/`` (``<name>.patch``, each opening with what it breaks and what should
catch it), the checkout's files are copied to a folder of its own (the working tree: HEAD may
lack a file another session has yet to commit), the patch is applied there (never to this
checkout), and schedules of the seed sequence are run on the copy one after the other (a
``python -m tests.chaos`` whose drivers, Spark's Python workers and managers import the
copy's stoker) until one fails. The report says per mutant which invariant caught it and after
how many schedules, or that it survived them all.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests.support.core import REPO

MUTANTS = Path(__file__).resolve().parent / "mutants"
# Schedules of these seeds are drawn with the protocol's crash points, zombies and power losses
# (schedule.PROTOCOL_FROM_SEED); a mutant run starts at the first of them by default.
DEFAULT_SEEDS = "400-409"


def names() -> list[str]:
    return sorted(p.stem for p in MUTANTS.glob("*.patch"))


def patch_of(name: str) -> Path:
    return MUTANTS / f"{name}.patch"


def kinds_of(name: str) -> str:
    """The fault kinds the mutant's patch names (its ``Kinds:`` line): what its schedules are
    limited to unless ``--kinds`` or ``--all-kinds`` says otherwise."""
    for line in patch_of(name).read_text().split("\ndiff --git", 1)[0].splitlines():
        if line.startswith("Kinds:"):
            return line.split(":", 1)[1].strip()
    return ""


def applies(name: str, tree: Path = REPO) -> tuple[bool, str]:
    """Whether the mutant's patch applies to ``tree``'s files (``git apply --check``)."""
    done = subprocess.run(
        ["git", "apply", "--check", str(patch_of(name))],
        cwd=tree,
        capture_output=True,
        text=True,
    )
    return done.returncode == 0, done.stderr.strip()


def copy_tree(name: str, root: Path) -> Path:
    """The checkout's files as they are (tracked and untracked, not ignored) with the mutant
    applied: its folder. The working tree rather than HEAD, because the patches are kept
    applying to it (test_mutants.py) and the harness run is the one in it."""
    tree = root / f"mutant-{name}"
    tree.mkdir(parents=True)
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    )
    for rel in filter(None, listed.stdout.decode().split("\0")):
        src = REPO / rel
        if src.is_file():
            (tree / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, tree / rel)
    done = subprocess.run(
        ["git", "apply", str(patch_of(name))], cwd=tree, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"mutant {name}: its patch does not apply to the tree: {done.stderr}")
    return tree


def env_for(tree: Path) -> dict[str, str]:
    """The environment that makes every Python process of a run import ``tree``'s stoker
    (Spark's Python workers inherit PYTHONPATH; the editable install comes after it)."""
    path = [str(tree), *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path)}


def imports_copy(tree: Path) -> bool:
    done = subprocess.run(
        [sys.executable, "-c", "import stoker; print(stoker.__file__)"],
        cwd=tree,
        env=env_for(tree),
        capture_output=True,
        text=True,
    )
    return done.stdout.strip().startswith(str(tree))


@dataclass
class Outcome:
    mutant: str
    caught_by: str | None  # the first violation (or error) of the failing schedule
    schedules: int  # schedules run, the failing one included
    seed: int | None  # the failing schedule's seed
    faults: int
    seconds: float

    def line(self) -> str:
        if self.caught_by is None:
            return (
                f"mutant {self.mutant}: SURVIVED {self.schedules} schedules "
                f"({self.faults} faults, {self.seconds / 60:.1f} min)"
            )
        return (
            f"mutant {self.mutant}: caught after {self.schedules} schedule(s) (seed {self.seed}, "
            f"{self.faults} faults, {self.seconds / 60:.1f} min) by: {self.caught_by}"
        )


def run_mutant(name: str, seeds: list[int], args: argparse.Namespace, root: Path) -> Outcome:
    tree = copy_tree(name, root)
    if not imports_copy(tree):
        raise SystemExit(f"mutant {name}: a process started in {tree} does not import its stoker")
    out = root / f"mutant-{name}.jsonl"
    faults, t0 = 0, time.monotonic()
    inconclusive: list[int] = []
    for n, seed in enumerate(seeds, 1):
        cmd = [sys.executable, "-m", "tests.chaos", "--seed", str(seed), "--out", str(out)]
        cmd += ["--faults", str(args.faults), "--dir", str(root / f"runs-{name}")]
        kinds = "" if args.all_kinds else args.kinds or kinds_of(name)
        if kinds:
            cmd += ["--kinds", kinds]
        print(f"mutant {name}: schedule {n}/{len(seeds)} (seed {seed})", flush=True)
        log = root / f"mutant-{name}-seed-{seed}.log"
        with open(log, "w") as f:
            subprocess.run(cmd, cwd=tree, env=env_for(tree), stdout=f, stderr=subprocess.STDOUT)
        lines = out.read_text().splitlines() if out.exists() else []
        result = json.loads(lines[-1]) if lines else None
        if result is None or result.get("seed") != seed:
            tail = log.read_text(errors="replace").strip().splitlines()[-3:]
            caught = f"the harness ended without a result: {' / '.join(tail)}"
            return Outcome(name, caught, n, seed, faults, time.monotonic() - t0)
        faults += int(result["faults"])
        if not result["ok"] and not result["faults"]:
            # Failed before any fault was injected: the machine (a loaded one's Spark stuck
            # at its start), not the mutant. Said, and the next seed is run.
            why = (result.get("violations") or [None])[0] or result.get("error")
            print(f"mutant {name}: seed {seed} inconclusive (no fault injected): {why}")
            inconclusive.append(seed)
            continue
        if not result["ok"]:
            caught = (result.get("violations") or [None])[0] or result.get("error") or "?"
            return Outcome(name, caught, n, seed, faults, time.monotonic() - t0)
    return Outcome(name, None, len(seeds), None, faults, time.monotonic() - t0)


def main(argv: list[str]) -> int:
    from tests.chaos.__main__ import _seeds

    ap = argparse.ArgumentParser(prog="python -m tests.chaos mutants", description=__doc__)
    ap.add_argument("names", nargs="*", help=f"mutants to run (all: {', '.join(names())})")
    ap.add_argument("--schedules", type=int, default=10, help="schedules at most per mutant")
    ap.add_argument("--seeds", default=DEFAULT_SEEDS, help="the seed sequence, e.g. 400-409")
    ap.add_argument("--faults", type=int, default=4, help="faults drawn per schedule")
    ap.add_argument(
        "--kinds", default="", help="only these fault kinds (default: the patch's Kinds: line)"
    )
    ap.add_argument(
        "--all-kinds", action="store_true", help="schedules as drawn, every kind (slower)"
    )
    ap.add_argument("--dir", default=None, help="where the copies go (default: a temp dir)")
    args = ap.parse_args(argv)
    chosen = args.names or names()
    unknown = sorted(set(chosen) - set(names()))
    if unknown:
        ap.error(f"no such mutant {unknown}: there are {names()}")
    seeds = _seeds(args.seeds)[: args.schedules]
    root = Path(args.dir or tempfile.mkdtemp(prefix="stoker-mutants-"))
    print(f"mutants {chosen} on seeds {seeds}, copies under {root}", flush=True)
    outcomes = []
    for name in chosen:
        outcome = run_mutant(name, seeds, args, root)
        print(outcome.line(), flush=True)
        outcomes.append(outcome)
    print("\n".join(["summary:", *(o.line() for o in outcomes)]), flush=True)
    return 1 if any(o.caught_by is None for o in outcomes) else 0
