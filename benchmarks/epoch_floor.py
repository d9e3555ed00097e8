"""The epoch's fixed cost (issue 45 item 2): a job at trigger 0 with one row per epoch, stoker
against a plain Structured Streaming ``foreachBatch`` job, each with Hadoop's own local file
system classes and with stoker's (``stoker/runtime/hadoop_local.py``).

Four kinds of run, each in a process of its own (the file system classes are the JVM's):

* ``plain-hadoop`` / ``plain-nio``: the ``stoker_generator`` source, 1 row per epoch, a
  ``foreachBatch`` that writes the row as Parquet (``overhead.run_baseline``, filter included);
* ``stoker-hadoop`` / ``stoker-nio``: the same pipeline under ``stoker.run`` into a files sink
  (``overhead.run_stoker``): fence, pin, prepare, decide, commit, the store's transactions.

``-hadoop`` runs with ``STOKER_HADOOP_NIO=0``. Every epoch is timed by
Spark (``durationMs``: triggerExecution, and its walCommit/addBatch/commitOffsets/latestOffset/
queryPlanning/getBatch parts) from a listener; stoker's steps by overhead.py's timers. The kinds
alternate over ``--rounds`` rounds, after one unmeasured warm-up each. A last run of each kind
has counting wrappers first on ``PATH`` (scripts named like the commands Hadoop forks): the
processes forked per epoch. Medians; ratios against ``plain-hadoop`` from the same run.

Run: ``python benchmarks/epoch_floor.py [--rounds 4] [--epochs 150] [--json out.json]``
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import _common as C

from tests.support.procs import counting_wrappers

KINDS = ("plain-hadoop", "plain-nio", "stoker-hadoop", "stoker-nio")
SPARK_STEPS = (
    "latestOffset",
    "queryPlanning",
    "getBatch",
    "walCommit",
    "addBatch",
    "commitOffsets",
)
FORKED = ("chmod", "readlink", "stat", "ls", "df", "id", "groups", "bash", "sh")


def child(kind: str, epochs: int) -> dict[str, Any]:
    """One run of ``kind`` in this process: Spark's per-epoch durations, stoker's steps."""
    import overhead as O

    from stoker.runtime.session import get_session
    from stoker.settings import Settings

    spark = get_session(Settings(master="local[2]"), f"epoch-floor-{kind}")  # a driver's session
    C.quiet_stoker_logs()
    durations: list[dict[str, float]] = []

    from pyspark.sql.streaming import StreamingQueryListener

    class Listen(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None: ...
        def onQueryIdle(self, event: Any) -> None: ...
        def onQueryTerminated(self, event: Any) -> None: ...

        def onQueryProgress(self, event: Any) -> None:
            p = event.progress
            if p.numInputRows:
                durations.append({k: float(v) for k, v in p.durationMs.items()})

    spark.streams.addListener(Listen())
    timer = O._StepTimer()
    timer.install()
    work = Path(tempfile.mkdtemp(prefix="epoch-floor-"))
    try:
        run = O.run_stoker if kind.startswith("stoker") else O.run_baseline
        _, wall = run(spark, work, kind.replace("-", "_"), epochs, 1)
        deadline = time.monotonic() + 30
        while len(durations) < epochs and time.monotonic() < deadline:
            time.sleep(0.05)  # the listener's events arrive after the query's end
        steps = timer.take()
    finally:
        timer.uninstall()
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    return {
        "epochs": len(durations),
        "wall_s": wall,
        "trigger_ms": C.median(d.get("triggerExecution", 0.0) for d in durations),
        "spark_steps": {s: C.median(d.get(s, 0.0) for d in durations) for s in SPARK_STEPS},
        "stoker_steps": O._breakdown(steps) if kind.startswith("stoker") else O._medians(steps),
    }


def spawn(kind: str, epochs: int, count_forks: bool = False) -> dict[str, Any]:
    env = {**os.environ, "STOKER_HADOOP_NIO": "0" if kind.endswith("hadoop") else "1"}
    with tempfile.TemporaryDirectory(prefix="epoch-floor-forks-") as tmp:
        log = Path(tmp) / "forks.log"
        log.touch()
        if count_forks:
            counting_wrappers(Path(tmp) / "bin", log, FORKED)
            env["PATH"] = f"{tmp}/bin{os.pathsep}{env['PATH']}"
        done = subprocess.run(
            [sys.executable, __file__, "--child", kind, "--epochs", str(epochs)],
            env=env, capture_output=True, text=True, timeout=1800,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"{kind} failed:\n{done.stderr[-3000:]}")
        result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        if count_forks:
            result["forks"] = dict(Counter(log.read_text().split()))
    return result


def main() -> int:
    ap = C.arg_parser(__doc__ or "")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=150)
    ap.add_argument("--child", choices=KINDS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.epochs)))
        return 0
    info = C.machine()
    C.print_machine(info)
    for kind in KINDS:
        spawn(kind, 20)  # warm-up: the JVM class archive, the jar, the page cache
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in KINDS}
    for r in range(args.rounds):
        order = KINDS if r % 2 == 0 else tuple(reversed(KINDS))
        for kind in order:
            runs[kind].append(spawn(kind, args.epochs))
            print(f"round {r + 1} {kind}: {runs[kind][-1]['trigger_ms']:.1f} ms", flush=True)
    forks = {k: spawn(k, 30, count_forks=True) for k in KINDS}
    base = C.median(x["trigger_ms"] for x in runs["plain-hadoop"])
    rows = []
    summary: dict[str, Any] = {}
    for kind in KINDS:
        ms = [x["trigger_ms"] for x in runs[kind]]
        eps = [x["epochs"] / x["wall_s"] for x in runs[kind]]
        per_epoch = sum(forks[kind]["forks"].get(c, 0) for c in ("chmod", "readlink", "stat", "ls"))
        per_epoch /= max(forks[kind]["epochs"], 1)
        summary[kind] = {
            "epoch_ms": C.median(ms), "epoch_ms_runs": ms, "epochs_per_s": C.median(eps),
            "hadoop_forks_per_epoch": per_epoch, "forks": forks[kind]["forks"],
            "spark_steps": {
                s: C.median(x["spark_steps"][s] for x in runs[kind]) for s in SPARK_STEPS
            },
            "stoker_steps": runs[kind][-1]["stoker_steps"],
        }  # fmt: skip
        rows.append(
            [kind, C.fmt(C.median(ms)), C.spread(ms), f"{C.median(ms) / base:.2f}",
             C.fmt(C.median(eps), 2), C.fmt(per_epoch, 1)]
        )  # fmt: skip
    print()
    print(
        C.table(
            ["run", "epoch ms (median)", "runs", "x plain-hadoop", "epochs/s", "forks/epoch"], rows
        )
    )
    print()
    print(C.table(["Spark step (median ms)", *KINDS], [
        [s, *(C.fmt(summary[k]["spark_steps"][s]) for k in KINDS)] for s in SPARK_STEPS
    ]))  # fmt: skip
    for kind in ("stoker-hadoop", "stoker-nio"):
        print(f"\nstoker's steps, {kind} (last round, median ms):")
        for label, v in summary[kind]["stoker_steps"].items():
            print(f"  {label:<50} {v:8.1f}")
    ratio = summary["stoker-nio"]["epoch_ms"] / summary["plain-nio"]["epoch_ms"]
    print(f"\nstoker-nio / plain-nio: {ratio:.2f} (goal <= 1.10)")
    print(f"stoker-nio / plain-hadoop: {summary['stoker-nio']['epoch_ms'] / base:.2f}")
    C.print_machine(C.machine())
    C.write_json(args.json, {"machine": info, "summary": summary})
    return 0


if __name__ == "__main__":
    sys.exit(main())
