"""A test driver whose epochs are slow but move: generated ids spread over many short tasks
(SLOW_TASKS partitions, each sleeping SLOW_TASK_S seconds) -> files sink. For the progress
watchdog: an epoch longer than its bound whose tasks keep completing is not a stall.

Environment: SLOW_OUT (files sink folder, required), SLOW_TOTAL (default 100), SLOW_PER_EPOCH
(default 100), SLOW_TASKS (default 40), SLOW_TASK_S (default 0.5), SLOW_JOB (default "slow").
"""

import os
import time

import stoker
from stoker import Pipeline, sinks, sources

TASKS = int(os.environ.get("SLOW_TASKS", "40"))
NAP = float(os.environ.get("SLOW_TASK_S", "0.5"))

p = Pipeline(os.environ.get("SLOW_JOB", "slow"))
p.source(
    sources.generator(
        total=int(os.environ.get("SLOW_TOTAL", "100")),
        max_rows_per_epoch=int(os.environ.get("SLOW_PER_EPOCH", "100")),
    )
)


def _nap(batches):
    time.sleep(NAP)
    yield from batches


p.transform(lambda df: df.repartition(TASKS).mapInPandas(_nap, df.schema))
p.sink(sinks.files(os.environ["SLOW_OUT"]))

if __name__ == "__main__":
    stoker.run(p, trigger="200ms")
