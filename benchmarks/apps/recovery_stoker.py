"""Benchmark driver: endless generated ids -> filter(id % 3 == 0) -> files sink, run by stoker.

Run with ``stoker run benchmarks/apps/recovery_stoker.py -D stoker.state_dir=...``.
Environment: BENCH_OUT (files sink folder), BENCH_PER_EPOCH (rows per epoch, default 1000),
BENCH_TRIGGER (default 100ms), BENCH_MARKS (where the phase timestamps go).
It records when each startup phase ends by wrapping stoker's runner functions from outside.
"""

import functools
import os
import time
from typing import Any

from _marks import mark
from pyspark.sql import functions as F

import stoker
from stoker import sinks, sources
from stoker.runtime import epoch as _epoch
from stoker.runtime import runner

IMPORTED = time.time()  # the CLI had imported stoker and pyspark before running this file


def _after(name: str, event: str) -> None:
    fn = getattr(runner, name)

    @functools.wraps(fn)
    def inner(*args: Any, **kwargs: Any) -> Any:
        out = fn(*args, **kwargs)
        extra = {"attempt": int(out.attempt)} if name == "start_attempt" else {}
        mark(event, **extra)
        return out

    setattr(runner, name, inner)


if hasattr(runner, "_open_sources"):
    _after("_open_sources", "sources_opened")
_after("start_attempt", "attempt_started")
_after("recover", "recovered")
_after("get_session", "session_ready")
_after("_start_query", "query_started")
_orig_run = _epoch.EpochProcessor._run


def _run(proc: Any, df: Any, epoch: int) -> None:
    t0 = time.time()
    _orig_run(proc, df, epoch)
    mark(
        "epoch",
        start=t0,
        epoch=int(epoch),
        attempt=int(proc.attempt),
        replayed=bool(proc.timings[-1].replayed),
    )


_epoch.EpochProcessor._run = _run

pipeline = stoker.Pipeline(os.environ.get("BENCH_JOB", "recovery-bench"))
pipeline.source(
    sources.generator(max_rows_per_epoch=int(os.environ.get("BENCH_PER_EPOCH", "1000")))
)
pipeline.transform(lambda df, ctx: df.filter(F.col("id") % 3 == 0))
pipeline.sink(sinks.files(os.environ["BENCH_OUT"], "parquet"))

if __name__ == "__main__":
    mark("app_start", t=IMPORTED)
    stoker.run(pipeline, trigger=os.environ.get("BENCH_TRIGGER", "100ms"))
