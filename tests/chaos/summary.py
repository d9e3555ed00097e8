"""Sum up recorded chaos runs: ``python -m tests.chaos.summary runs/*.jsonl``.

Prints, for docs/reliability.md, the schedules and their outcome, the injected faults by kind,
the workloads, and every failure with its seed and what the checker found.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import sys
from collections import Counter
from pathlib import Path

LOST = re.compile(r"(\d+) lost")
TWICE = re.compile(r"(\d+) twice")


def main(paths: list[str]) -> None:
    rows = []
    for p in paths:
        rows += [json.loads(line) for line in Path(p).read_text().splitlines() if line.strip()]
    kinds: Counter[str] = Counter()
    for r in rows:
        kinds.update(r["injected"])
    failed = [r for r in rows if not r["ok"]]
    lost = sum(int(m) for r in rows for v in r["violations"] for m in LOST.findall(v))
    twice = sum(int(m) for r in rows for v in r["violations"] for m in TWICE.findall(v))
    stuck = sum(bool(r["error"] and r["error"].startswith("stuck")) for r in rows)
    seeds = [r["seed"] for r in rows]
    print(f"schedules: {len(rows)}, seeds {min(seeds)}..{max(seeds)}")
    print(f"faults injected: {sum(kinds.values())}")
    print(f"failed schedules: {len(failed)} {[r['seed'] for r in failed]}")
    print(f"ids lost: {lost}, ids twice: {twice}, schedules stuck: {stuck}")
    print(
        "minutes: "
        f"{sum(r['seconds'] for r in rows) / 60:.0f} in all, median schedule "
        f"{statistics.median(r['seconds'] for r in rows):.0f}s; driver/manager starts "
        f"{sum(r['starts'] for r in rows)}; load median "
        f"{statistics.median(r.get('load', 0) for r in rows):.1f}"
    )
    managed = sum(r["workload"].get("managed", False) for r in rows)
    pg = sum(r["workload"]["pg_sink"] for r in rows)
    files = sum(r["workload"]["files"] > 0 for r in rows)
    stateful = sum(r["workload"]["stateful"] for r in rows)
    disk = sum(r["workload"]["disk"] for r in rows)
    pg_store = sum(r["workload"]["pg_store"] for r in rows)
    cluster = sum(r["workload"].get("cluster", False) for r in rows)
    print(
        f"workloads: {managed} under two job managers, {len(rows) - managed} under stoker run "
        f"({cluster} of them on a standalone cluster); "
        f"{pg} with a PostgreSQL sink, {pg_store} with the store on PostgreSQL, {files} with an "
        f"unbounded files source, {stateful} stateful, {disk} with the sink on a small disk"
    )
    print("\n| fault | injected |\n|---|---:|")
    for k, n in kinds.most_common():
        print(f"| {k} | {n} |")
    for r in failed:
        print(f"\nseed {r['seed']}: {r['error'] or ''}")
        for v in r["violations"]:
            print(f"  {v}")


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except BrokenPipeError:  # `| head`: the reader has what it wanted; close quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
