"""A test driver for control (issue 9): endless generated ids -> columns that show what each
epoch saw -> files sink. Used by tests/e2e/test_control_runtime.py.

Environment: CTL_JOB (job id), CTL_OUT (files sink folder), CTL_PER_EPOCH (the generator's
max_rows_per_epoch, default 50), CTL_RATE (its rows_per_second, default none), CTL_STATEFUL
("1": the source's map adds a streaming dropDuplicates on ``k = id % 97``, unioned with every
row, so a lost state would emit a key twice).

Output columns: ``id``; ``ep``, ``cv``, ``tag``, ``events`` (the epoch's ``ctx.epoch``,
``ctx.control_version``, ``ctx.config["tag"]`` and the names in ``ctx.events``); ``app_id`` and
``driver_pid`` (the Spark application and the driver process); ``task``: JSON of
``stoker.control.current()`` read inside the Spark task (epoch, version, config, log level, and
the worker's root Python logger level); with CTL_STATEFUL also ``k`` and ``branch``
("dedup" or "all"). Config: ``min_mod`` (rows with ``id % 100 < min_mod`` are dropped) and
``tag``. Custom events: ``mark`` (accepted) and ``boom`` (its handler raises).
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from stoker import Pipeline, sinks, sources

STATEFUL = os.environ.get("CTL_STATEFUL") == "1"
RATE = os.environ.get("CTL_RATE")


def _task_view(_id: int) -> str | None:
    import stoker.control

    view = stoker.control.current()
    if view is None:
        return None
    return json.dumps(
        {
            "epoch": view.epoch,
            "cv": view.version,
            "tag": view.config.get("tag"),
            "min_mod": view.config.get("min_mod"),
            "level": view.log_level.get("root"),
            "py_level": logging.getLogger().getEffectiveLevel(),
        }
    )


def _dedup(df: Any) -> Any:
    from pyspark.sql import functions as F

    keyed = df.withColumn("k", F.col("id") % 97)
    once = keyed.dropDuplicates(["k"]).withColumn("branch", F.lit("dedup"))
    return once.unionByName(keyed.withColumn("branch", F.lit("all")))


def _transform(df: Any, ctx: Any) -> Any:
    from pyspark.sql import functions as F

    cfg = ctx.config
    # A lambda: no type hints for PySpark to infer an Arrow UDF from (it warns when it cannot).
    probe = F.udf(lambda i: _task_view(i), "string")
    kept = df.where(F.col("id") % 100 >= F.lit(int(cfg["min_mod"])))
    extra = [F.col("k"), F.col("branch")] if STATEFUL else []
    return kept.select(
        F.col("id"),
        *extra,
        F.lit(int(ctx.epoch)).alias("ep"),
        F.lit(int(ctx.control_version)).alias("cv"),
        F.lit(str(cfg["tag"])).alias("tag"),
        F.lit(",".join(e.name for e in ctx.events)).alias("events"),
        F.lit(ctx.spark.sparkContext.applicationId).alias("app_id"),
        F.lit(os.getpid()).alias("driver_pid"),
        probe(F.col("id")).alias("task"),
    )


p = Pipeline(os.environ.get("CTL_JOB", "ctl"), {"min_mod": 0, "tag": "a"})
p.source(
    sources.generator(
        total=None,
        max_rows_per_epoch=int(os.environ.get("CTL_PER_EPOCH", "50")),
        rows_per_second=float(RATE) if RATE else None,
        partitions=1,
    ),
    map=_dedup if STATEFUL else None,
)
p.transform(_transform)
p.sink(sinks.files(os.environ["CTL_OUT"]))


@p.on_control("mark")
def _mark(event: Any, ctx: Any) -> None:
    if not isinstance(event.payload, dict):
        raise TypeError("mark expects an object")


@p.on_control("boom")
def _boom(event: Any, ctx: Any) -> None:
    raise ValueError(f"rules {event.payload.get('rules')!r} are broken")
