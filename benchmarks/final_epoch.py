"""Final-epoch latency: from the last record of a bounded input being read to the job FINISHED.

A bounded stoker job ``generator(total) -> filter(id % 3 == 0) -> files(parquet)`` in one
SparkSession (local[2]). The final epoch is the one whose offsets say every source finished
(for the generator: the epoch that reads the last ids). For each run:

* **final epoch**: its ``foreachBatch`` body, start to end (fence, pin, transform, prepare,
  decide, commit);
* **tail**: end of that body to ``stoker.run`` returning (Spark writes its commit log, stoker
  sees it, stops the query, ends the attempt and the job in the store);
* **total**: start of the final epoch's ``foreachBatch`` to ``stoker.run`` returning.

They are compared with one ordinary epoch of the same job (the median over the epochs that are
neither the first nor the final one, of the ``foreachBatch`` body and of Spark's
``triggerExecution``, which includes the offset log and the commit log). Two modes, interleaved
run by run:

* ``trigger 0``: epochs back to back, so the figures are pure latency;
* ``trigger 5 s``: a processing-time trigger; the tail must be far below 5 s, i.e. the job
  does not wait for the next trigger to notice that it is done.

Run: ``python benchmarks/final_epoch.py [--runs 5] [--slow-trigger 5] [--json out.json]``.
"""

from __future__ import annotations

import itertools
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import _common as C
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQueryListener

import stoker
from stoker import sinks, sources
from stoker.runtime import runner

# When the runner saw Spark's commit log of the final epoch (perf_counter), if it has the hook.
_COMMIT_LOG_SEEN: list[float] = []


def _watch_commit_log() -> None:
    """Wrap the runner's wait for the final commit log, from outside, to split the tail."""
    orig = getattr(runner, "_await_commit_log", None)
    if orig is None:
        return

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        ok = orig(*args, **kwargs)
        _COMMIT_LOG_SEEN.append(time.perf_counter())
        return ok

    runner._await_commit_log = wrapped


class _Trigger(StreamingQueryListener):
    """Spark's triggerExecution per batch that read rows, by query name."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ms: dict[str, dict[int, float]] = {}

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        p = event.progress
        if p.numInputRows:
            with self.lock:
                self.ms.setdefault(p.name, {})[p.batchId] = float(
                    p.durationMs.get("triggerExecution", 0)
                )

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass

    def wait_for(self, name: str, n: int, timeout: float = 20.0) -> dict[int, float]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                got = dict(self.ms.get(name, {}))
            if len(got) >= n:
                return got
            time.sleep(0.05)
        return got


def one_run(
    spark: Any,
    rec: C.EpochRecorder,
    listener: _Trigger,
    work: Path,
    tag: str,
    total: int,
    per_epoch: int,
    trigger_s: float,
) -> dict[str, Any]:
    job = f"final-{tag}"
    p = stoker.Pipeline(job)
    p.source(sources.generator(total=total, max_rows_per_epoch=per_epoch))
    p.transform(lambda df, ctx: df.filter(F.col("id") % 3 == 0))
    p.sink(sinks.files(str(work / "out"), "parquet"))
    _COMMIT_LOG_SEEN.clear()
    t0 = time.perf_counter()
    res = stoker.run(p, spark=spark, trigger=trigger_s, state_dir=work / "state")
    t_return = time.perf_counter()
    epochs = rec.take()
    if str(res.state) != "FINISHED":
        raise RuntimeError(f"job {job} ended {res.state}")
    finals = [e for e in epochs if e["final"]]
    if len(finals) != 1:
        raise RuntimeError(f"job {job}: expected one final epoch, got {finals}")
    fin = finals[0]
    # Ordinary epochs: neither the final one nor the job's first (which pays for Spark's
    # first plan and Python workers).
    first = min(e["epoch"] for e in epochs)
    others = [e for e in epochs if not e["final"] and e["epoch"] != first]
    n_epochs = -(-total // per_epoch)
    trig = listener.wait_for(f"stoker_{job}".replace("-", "_"), n_epochs)
    other_trig = [ms for b, ms in trig.items() if b not in (fin["epoch"], first)]
    gaps = [b["p_start"] - a["p_end"] for a, b in itertools.pairwise(epochs)]
    return {
        "trigger_s": trigger_s,
        "epochs": len(epochs),
        "final_epoch": fin["epoch"],
        "wall_s": t_return - t0,
        "final_epoch_ms": (fin["p_end"] - fin["p_start"]) * 1000,
        "tail_ms": (t_return - fin["p_end"]) * 1000,
        "tail_commit_log_ms": (_COMMIT_LOG_SEEN[-1] - fin["p_end"]) * 1000
        if _COMMIT_LOG_SEEN
        else None,
        "tail_stop_ms": (t_return - _COMMIT_LOG_SEEN[-1]) * 1000 if _COMMIT_LOG_SEEN else None,
        "total_ms": (t_return - fin["p_start"]) * 1000,
        "other_epoch_ms": C.median((e["p_end"] - e["p_start"]) * 1000 for e in others),
        "other_trigger_ms": C.median(other_trig),
        "final_trigger_ms": trig.get(fin["epoch"]),
        "gap_between_epochs_ms": C.median(g * 1000 for g in gaps),
    }


def main() -> int:
    ap = C.arg_parser(__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="runs per mode (default 5)")
    ap.add_argument("--total", type=int, default=100_000, help="rows, trigger-0 mode")
    ap.add_argument("--per-epoch", type=int, default=10_000, help="rows per epoch")
    ap.add_argument("--slow-trigger", type=float, default=5.0, help="seconds (default 5)")
    args = ap.parse_args()
    slow_total = 3 * args.per_epoch  # three epochs: the first, an ordinary one, the final one

    info = C.machine()
    C.print_machine(info)
    print(
        f"job: generator -> filter(id % 3 == 0) -> parquet, {args.per_epoch:,} rows per epoch, "
        f"local[2]; trigger 0: total {args.total:,} ({-(-args.total // args.per_epoch)} "
        f"epochs); trigger {args.slow_trigger:g} s: total {slow_total:,} (3 epochs); "
        f"{args.runs} runs each + 1 warm-up"
    )
    C.quiet_stoker_logs()
    spark = C.session("stoker-bench-final-epoch")
    listener = _Trigger()
    spark.streams.addListener(listener)
    rec = C.EpochRecorder().install()
    _watch_commit_log()
    root = Path(tempfile.mkdtemp(prefix="stoker-bench-final-"))
    runs: dict[str, list[dict[str, Any]]] = {"fast": [], "slow": []}
    try:
        for i in range(args.runs + 1):
            for mode in ("fast", "slow") if i % 2 == 0 else ("slow", "fast"):
                fast = mode == "fast"
                trig = 0.0 if fast else args.slow_trigger
                total = args.total if fast else slow_total
                if i == 0 and mode == "slow":
                    continue  # the warm-up needs only one job
                work = root / f"{mode}-{i}"
                r = one_run(spark, rec, listener, work, f"{mode}-{i}", total, args.per_epoch, trig)
                shutil.rmtree(work, ignore_errors=True)
                label = "warm-up" if i == 0 else f"run {i}"
                print(
                    f"  {label} trigger {trig:g}s: final epoch {r['final_epoch_ms']:6.1f} ms, "
                    f"tail {r['tail_ms']:6.1f} ms, total {r['total_ms']:6.1f} ms "
                    f"(other epochs {r['other_epoch_ms']:6.1f} ms)"
                )
                C.flush()
                if i > 0:
                    runs[mode].append(r)
    finally:
        rec.uninstall()
        spark.streams.removeListener(listener)
        shutil.rmtree(root, ignore_errors=True)

    summary = {mode: _summary(rs) for mode, rs in runs.items()}
    slow = summary["slow"]
    summary["slow"]["tail_fraction_of_trigger"] = slow["tail_ms"] / (args.slow_trigger * 1000)
    _print(summary, args)
    C.write_json(
        args.json,
        {
            "benchmark": "final_epoch",
            "machine": info,
            "params": vars(args) | {"slow_total": slow_total},
            "summary": summary,
            "runs": runs,
        },
    )
    spark.stop()
    return 0


def _summary(rs: list[dict[str, Any]]) -> dict[str, Any]:
    keys = [
        "final_epoch_ms",
        "tail_ms",
        "tail_commit_log_ms",
        "tail_stop_ms",
        "total_ms",
        "other_epoch_ms",
        "other_trigger_ms",
        "gap_between_epochs_ms",
        "wall_s",
    ]
    out: dict[str, Any] = {"runs": len(rs)}
    for k in keys:
        vals = [r[k] for r in rs if r[k] is not None and r[k] == r[k]]
        out[k] = C.median(vals)
        out[k + "_range"] = [min(vals), max(vals)] if vals else None
    out["total_over_ordinary_epoch"] = C.median(
        r["total_ms"] / r["other_trigger_ms"]
        for r in rs
        if r["other_trigger_ms"] == r["other_trigger_ms"]
    )
    return out


def _print(s: dict[str, Any], args: Any) -> None:
    f, sl = s["fast"], s["slow"]

    def cell(d: dict[str, Any], k: str) -> str:
        if not d.get(k + "_range"):
            return C.fmt(d[k])
        return f"{C.fmt(d[k])} ({C.spread(d[k + '_range'])})"

    print()
    print(f"Final epoch latency, medians (min..max) over {f['runs']} / {sl['runs']} runs, ms")
    rows = [
        ["final epoch: foreachBatch body", cell(f, "final_epoch_ms"), cell(sl, "final_epoch_ms")],
        ["tail: body end -> run() returns", cell(f, "tail_ms"), cell(sl, "tail_ms")],
        [
            "  of which: Spark writes its commit log",
            cell(f, "tail_commit_log_ms"),
            cell(sl, "tail_commit_log_ms"),
        ],
        [
            "  of which: query.stop(), store updates",
            cell(f, "tail_stop_ms"),
            cell(sl, "tail_stop_ms"),
        ],
        ["total: final epoch start -> run() returns", cell(f, "total_ms"), cell(sl, "total_ms")],
        [
            "ordinary epoch: foreachBatch body",
            cell(f, "other_epoch_ms"),
            cell(sl, "other_epoch_ms"),
        ],
        [
            "ordinary epoch: triggerExecution (+logs)",
            cell(f, "other_trigger_ms"),
            cell(sl, "other_trigger_ms"),
        ],
        [
            "gap between epochs (end -> next start)",
            cell(f, "gap_between_epochs_ms"),
            cell(sl, "gap_between_epochs_ms"),
        ],
    ]
    print(C.table(["measure", "trigger 0", f"trigger {args.slow_trigger:g} s"], rows))
    print()
    print(
        f"total / one ordinary epoch (triggerExecution): {f['total_over_ordinary_epoch']:.2f} "
        f"(trigger 0), {sl['total_over_ordinary_epoch']:.2f} (trigger {args.slow_trigger:g} s)"
    )
    print(
        f"trigger {args.slow_trigger:g} s: the job ends {sl['tail_ms']:.0f} ms after its final "
        f"epoch = {100 * sl['tail_fraction_of_trigger']:.1f}% of the trigger interval "
        f"[{'does not wait' if sl['tail_ms'] < 0.5 * args.slow_trigger * 1000 else 'WAITS'} "
        "for the next trigger]"
    )


if __name__ == "__main__":
    sys.exit(main())
