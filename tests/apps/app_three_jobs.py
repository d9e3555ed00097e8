"""A test application (issue 10): a bounded backfill run with ``stoker.run``, then two streams
started with ``stoker.submit``, each generated ids -> columns telling where the epoch ran ->
a files sink of its own. Run by ``python -m stoker.runtime.appdriver ... -- app_three_jobs.py``
(tests/integration/test_application_driver.py); it defines ``main`` and does not call it.

Environment:
- APP_OUT: folder; each job writes to ``APP_OUT/<pipeline name>`` (required);
- APP_BACKFILL: rows of the backfill (default 200, 100 per epoch);
- APP_STREAM_TOTAL: rows of each stream (empty or absent: unbounded);
- APP_PER_EPOCH: the streams' max_rows_per_epoch (default 20);
- APP_RATE: the streams' rows_per_second (default: none);
- APP_TRIGGER: every job's trigger (default 200ms);
- APP_FAIL_ONCE: ``<pipeline name>:<epoch>``: that job's transform raises once at that epoch
  (a marker file in APP_OUT remembers it raised);
- APP_FAIL_ALWAYS: ``<pipeline name>:<epoch>[,...]``: that job's transform raises at that
  epoch in every attempt (it fails for good once its strategy gives up); ``<name>:file``: it
  raises at every epoch while the file ``APP_OUT/_fail.<name>`` exists (the test decides when);
- APP_STREAMS: the streams' names, comma-separated (default ``stream-a,stream-b``); main
  waits on them in this order;
- APP_OPTIONAL: streams submitted with ``optional=True``, comma-separated;
- APP_RESTART: the streams' restart strategy, JSON (default fixed-delay, 2 restarts, no delay);
- APP_MAIN_RAISES: main raises RuntimeError with this text before it submits anything;
- APP_TASK_POOL: "1": the ``pool`` column is read inside each Spark task (a Python UDF per
  row: slower epochs); else on the driver, in the epoch.

Columns: ``id``; ``ep`` (the epoch), ``att`` (the job's attempt); ``app`` (the Spark
application id), ``pid`` (the driver's pid), ``mode`` (spark.scheduler.mode), all read on the
driver; ``pool``: the scheduler pool of the epoch's Spark jobs.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import stoker
from stoker import Pipeline, sinks, sources

OUT = Path(os.environ["APP_OUT"])
BACKFILL = int(os.environ.get("APP_BACKFILL", "200"))
STREAM_TOTAL = int(os.environ["APP_STREAM_TOTAL"]) if os.environ.get("APP_STREAM_TOTAL") else None
PER_EPOCH = int(os.environ.get("APP_PER_EPOCH", "20"))
RATE = float(os.environ["APP_RATE"]) if os.environ.get("APP_RATE") else None
TRIGGER = os.environ.get("APP_TRIGGER", "200ms")
FAIL_ONCE = os.environ.get("APP_FAIL_ONCE", "")
FAIL_ALWAYS = {
    name: epoch
    for name, epoch in (
        pair.split(":") for pair in os.environ.get("APP_FAIL_ALWAYS", "").split(",") if pair
    )
}
STREAMS = [n for n in os.environ.get("APP_STREAMS", "stream-a,stream-b").split(",") if n]
OPTIONAL = set(os.environ.get("APP_OPTIONAL", "").split(",")) - {""}
TASK_POOL = os.environ.get("APP_TASK_POOL") == "1"
RESTART = json.loads(
    os.environ.get("APP_RESTART") or '{"strategy": "fixed-delay", "attempts": 2, "delay": 0}'
)


def _task_pool(_id: int) -> str | None:
    from pyspark import TaskContext

    tc = TaskContext.get()
    return None if tc is None else tc.getLocalProperty("spark.scheduler.pool")


def _tagger(name: str) -> Any:
    def transform(df: Any, ctx: Any) -> Any:
        from pyspark.sql import functions as F

        marker = OUT / f"_failed_once.{name}"
        if f"{name}:{int(ctx.epoch)}" == FAIL_ONCE and not marker.exists():
            OUT.mkdir(parents=True, exist_ok=True)
            marker.touch()
            raise RuntimeError(f"planned failure of {name} at epoch {int(ctx.epoch)}")
        when = FAIL_ALWAYS.get(name)
        if when == "file" and (OUT / f"_fail.{name}").exists():
            raise RuntimeError(f"{name} fails at every epoch now")
        if when not in (None, "file") and int(ctx.epoch) >= int(when or 0):
            raise RuntimeError(f"{name} fails at every epoch from {when}")
        sc = ctx.spark.sparkContext
        if TASK_POOL:
            pool = F.udf(lambda i: _task_pool(i), "string")(F.col("id"))
        else:
            pool = F.lit(sc.getLocalProperty("spark.scheduler.pool"))
        return df.select(
            F.col("id"),
            F.lit(int(ctx.epoch)).alias("ep"),
            F.lit(int(ctx.attempt)).alias("att"),
            F.lit(sc.applicationId).alias("app"),
            F.lit(os.getpid()).alias("pid"),
            F.lit(sc.getConf().get("spark.scheduler.mode", "FIFO")).alias("mode"),
            pool.alias("pool"),
        )

    return transform


def _pipeline(name: str, total: int | None, per_epoch: int, rate: float | None) -> Pipeline:
    p = Pipeline(name)
    p.source(
        sources.generator(
            total=total, max_rows_per_epoch=per_epoch, rows_per_second=rate, partitions=1
        )
    )
    p.transform(_tagger(name))
    p.sink(sinks.files(str(OUT / name)))
    return p


def main() -> None:
    if os.environ.get("APP_MAIN_RAISES"):
        raise RuntimeError(os.environ["APP_MAIN_RAISES"])
    stoker.run(_pipeline("backfill", BACKFILL, 100, None), trigger=TRIGGER)
    streams = [
        stoker.submit(
            _pipeline(name, STREAM_TOTAL, PER_EPOCH, RATE),
            trigger=TRIGGER,
            restart_strategy=RESTART,
            **({"optional": True} if name in OPTIONAL else {}),
        )
        for name in STREAMS
    ]
    for handle in streams:
        handle.wait()
