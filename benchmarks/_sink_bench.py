"""Shared by the sink benchmarks that race a stoker job against a hand-written
``foreachBatch`` (``delta_sink.py``, ``iceberg_sink.py``): the progress listener that times each
epoch as Spark does, and the round loop with its summary.

Not a benchmark itself. The sides alternate round by round (A B, B A, ...: each goes first
half the time) after one unmeasured warm-up of each; overhead = the median epoch of stoker
minus the baseline's; steady throughput = rows / the sum of the epochs' triggerExecution,
stoker's over the baseline's.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import _common as C
from pyspark.sql.streaming import StreamingQueryListener

# One side's run: (spark, its folder, a tag, total rows, rows per epoch) -> its query's name.
Run = Callable[[Any, Path, str, int, int], str]


class Progress(StreamingQueryListener):
    """The progress of every micro-batch that read rows, by query name and batch id."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.batches: dict[str, dict[int, tuple[float, float]]] = defaultdict(dict)

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        p = event.progress
        if p.numInputRows:
            with self.lock:
                self.batches[p.name][p.batchId] = (
                    float(p.durationMs.get("triggerExecution", 0)),
                    float(p.numInputRows),
                )

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass

    def take(self, name: str, n: int, timeout: float = 30.0) -> list[tuple[float, float]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                got = dict(self.batches.get(name, {}))
            if len(got) >= n:
                return [got[k] for k in sorted(got)]
            time.sleep(0.05)
        raise RuntimeError(f"query {name}: progress of {len(got)} of {n} epochs only")


@contextlib.contextmanager
def spark_session(app: str) -> Iterator[Any]:
    """The tests' ``local[2]`` session (stoker's get_session: a loaded machine can delay the
    Python data source runner's connection back past the 15 s default, which it raises), its
    log at ERROR, closed however the benchmark ends: left open after an error, its JVM kept
    the failed benchmark's process alive (seen: an hour)."""
    from tests.support.spark import local_session

    session = local_session("local[2]", app)
    spark = next(session)
    spark.sparkContext.setLogLevel("ERROR")
    try:
        yield spark
    finally:
        session.close()


def foreach_batch(
    spark: Any, work: Path, name: str, total: int, per_epoch: int, batch: Callable[[Any, int], None]
) -> str:
    """The baseline's shape: stoker's generator source read by plain Structured Streaming at
    trigger 0 (``total`` rows, ``per_epoch`` an epoch, two partitions) into ``batch`` through
    ``foreachBatch``, with a checkpoint under ``work``, run until every row is in; its name."""
    from stoker.sources.generator import FORMAT

    stream = (
        spark.readStream.format(FORMAT)
        .options(sid="s0", total=str(total), max_rows_per_epoch=str(per_epoch), partitions="2")
        .load()
    )
    q = (
        stream.writeStream.foreachBatch(batch)
        .option("checkpointLocation", str(work / "checkpoint"))
        .queryName(name)
        .trigger(processingTime="0 milliseconds")
        .start()
    )
    q.processAllAvailable()
    q.stop()
    if q.exception() is not None:
        raise RuntimeError(f"baseline failed: {q.exception()}")
    return name


def compare(
    spark: Any,
    runs: Mapping[str, Run],
    rows: Callable[[Path], int],
    work: Path,
    total: int,
    per_epoch: int,
    rounds: int,
) -> dict[str, Any]:
    """``runs["stoker"]`` against ``runs["baseline"]``, ``rounds`` rounds after a warm-up,
    each run's output checked by ``rows`` to hold ``total`` rows; the figures as a dict."""
    progress = Progress()
    spark.streams.addListener(progress)
    epochs = -(-total // per_epoch)
    got: dict[str, list[list[tuple[float, float]]]] = {"stoker": [], "baseline": []}
    loads: list[float] = []
    for r in range(-1, rounds):  # round -1: the unmeasured warm-up
        order = ["stoker", "baseline"] if r % 2 == 0 else ["baseline", "stoker"]
        for side in order:
            d = work / f"{side}{r + 1}"
            loads.append(os.getloadavg()[0])
            name = runs[side](spark, d, f"r{r + 1}", total, per_epoch)
            if (n := rows(d)) != total:
                raise RuntimeError(f"{side}: {n} rows, not {total}")
            if r >= 0:
                got[side].append(progress.take(name, epochs))
            shutil.rmtree(d, ignore_errors=True)
        if r >= 0:
            s = C.median(t for t, _ in got["stoker"][-1])
            b = C.median(t for t, _ in got["baseline"][-1])
            print(f"round {r}: median epoch stoker {s:.0f} ms, baseline {b:.0f} ms")
            C.flush()
    spark.streams.removeListener(progress)

    def steady(side: str) -> float:
        return sum(n for run in got[side] for _, n in run) / (
            sum(t for run in got[side] for t, _ in run) / 1000
        )

    med = {side: C.median(t for run in got[side] for t, _ in run) for side in got}
    return {
        "load_1m": [round(x, 2) for x in loads],
        "rounds": rounds,
        "rows_per_epoch": per_epoch,
        "epochs_per_run": epochs,
        "median_epoch_ms": med,
        "overhead_ms_per_epoch": med["stoker"] - med["baseline"],
        "steady_rows_per_s": {side: steady(side) for side in got},
        "steady_throughput_ratio": steady("stoker") / steady("baseline"),
    }


def report(result: Mapping[str, Any]) -> None:
    """The table of medians and rates, and the line of overhead, ratio and load."""
    med, rates = result["median_epoch_ms"], result["steady_rows_per_s"]
    print(
        C.table(
            ["", "median epoch (ms)", "steady rows/s"],
            [[side, C.fmt(med[side]), C.fmt(rates[side], 0)] for side in ("baseline", "stoker")],
        )
    )
    loads = result["load_1m"]
    print(
        f"overhead {result['overhead_ms_per_epoch']:.1f} ms per epoch of "
        f"{result['rows_per_epoch']} rows; steady throughput stoker/baseline "
        f"{result['steady_throughput_ratio']:.3f}; load {min(loads):.1f}..{max(loads):.1f}"
    )
