"""Helpers of tests/integration/test_worker_loss.py: the driver program those tests run, and a
small client of the driver's Spark REST API (which executor runs tasks now, what failed).

The driver program (:data:`LOSS_APP`, written into the test's folder and run with ``stoker
run``) has two shapes, chosen by ``LOSS_MODE``:

- ``ids``: generated ids 0..LOSS_TOTAL-1 in epochs of LOSS_PER_EPOCH rows, split into
  LOSS_PARTITIONS read partitions, through a ``mapInPandas`` transform, to a files sink
  (LOSS_OUT) and a PostgreSQL sink (LOSS_PG_DSN, table ``ids``).
- ``counts``: the same ids keyed by ``k = id % LOSS_KEYS``, counted per key with Spark's
  keyed state (``applyInPandasWithState``: each epoch emits ``(k, n)``, the running count of
  every key it saw) into a files sink. The running count lives in Spark's state store, in
  ``spark.sql.shuffle.partitions`` state partitions.

Stoker has no output mode for its sinks (``foreachBatch`` runs in Spark's default, append), so
a plain ``groupBy(k).count()`` (update or complete mode) cannot run; keyed state in append
mode is the stateful aggregation it can run.

**The hold** makes "a worker taken away while its executor runs a task of the epoch" certain
rather than likely. The task code (the ``mapInPandas`` function; the per-key function of
``counts``) waits while the file ``LOSS_HOLD_DIR/armed`` exists and ``released`` does not. The
test arms it, waits until a held task says where it runs (a file ``holding.<host>.<pid>``),
takes that host's worker away, then releases the hold: the tasks run on, and the lost one runs
again elsewhere without waiting.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

LOSS_APP = '''\
"""A worker-loss test driver (tests/worker_loss_support.py says what it does)."""
import os
import time

import stoker
from stoker import Pipeline, sinks, sources

MODE = os.environ["LOSS_MODE"]
KEYS = int(os.environ.get("LOSS_KEYS", "10"))
HOLD = os.environ["LOSS_HOLD_DIR"]

gen = sources.generator(
    total=int(os.environ["LOSS_TOTAL"]),
    max_rows_per_epoch=int(os.environ["LOSS_PER_EPOCH"]),
    partitions=int(os.environ.get("LOSS_PARTITIONS", "3")),
)


def _hold():
    """In a task: while the test has armed the hold and not released it, wait (at most 2
    minutes, in case the test died): the test takes a worker away under a running task."""
    armed, released = os.path.join(HOLD, "armed"), os.path.join(HOLD, "released")
    if not os.path.exists(armed) or os.path.exists(released):
        return
    # Tell the test which host this task runs on (stoker's clusters give each worker, and so
    # its executors and their Python workers, SPARK_LOCAL_IP).
    host = os.environ.get("SPARK_LOCAL_IP", "unknown")
    open(os.path.join(HOLD, f"holding.{host}.{os.getpid()}"), "w").close()
    deadline = time.monotonic() + 120
    while not os.path.exists(released):
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)


def _held(batches):
    _hold()
    yield from batches


def _count(key, frames, state):
    import pandas as pd

    _hold()
    n = state.get[0] if state.exists else 0
    for frame in frames:
        n += len(frame)
    state.update((n,))
    yield pd.DataFrame({"k": [int(key[0])], "n": [int(n)]})


def _keyed_counts(df):
    from pyspark.sql import functions as F

    return (
        df.withColumn("k", F.col("id") % KEYS)
        .groupBy("k")
        .applyInPandasWithState(_count, "k long, n long", "n long", "append", "NoTimeout")
    )


p = Pipeline(os.environ["LOSS_JOB"])
if MODE == "ids":
    p.source(gen)
    p.transform(lambda df: df.mapInPandas(_held, df.schema))
    p.sink(sinks.files(os.environ["LOSS_OUT"]))
    p.sink(sinks.postgres(os.environ["LOSS_PG_DSN"], table="ids"))
else:
    p.source(gen, map=_keyed_counts)
    p.sink(sinks.files(os.environ["LOSS_OUT"]))

if __name__ == "__main__":
    stoker.run(p, trigger=os.environ.get("LOSS_TRIGGER", "200ms"))
'''


@dataclass(frozen=True)
class Executor:
    """One executor as the driver's REST API shows it (``/allexecutors``)."""

    id: str
    host: str
    active: bool
    active_tasks: int
    failed_tasks: int
    completed_tasks: int
    remove_reason: str | None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Executor:
        return cls(
            id=str(d["id"]),
            host=str(d.get("hostPort", "")).rsplit(":", 1)[0],
            active=bool(d.get("isActive")),
            active_tasks=int(d.get("activeTasks", 0)),
            failed_tasks=int(d.get("failedTasks", 0)),
            completed_tasks=int(d.get("completedTasks", 0)),
            remove_reason=d.get("removeReason"),
        )


# The driver's UI is on loopback: never through a proxy the environment names.
_HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class SparkUI:
    """The REST API of one driver's Spark UI (``spark.ui.port``), read while it runs."""

    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}/api/v1"
        self._app: str | None = None

    def _get(self, path: str) -> Any:
        with _HTTP.open(f"{self.base}{path}", timeout=5) as r:
            return json.load(r)

    def app_id(self) -> str | None:
        """The application's id, or None while the UI is not up."""
        if self._app is None:
            try:
                apps = self._get("/applications")
            except (OSError, ValueError):
                return None
            if apps:
                self._app = str(apps[0]["id"])
        return self._app

    def executors(self) -> list[Executor]:
        """Every executor the application has had (the driver not counted); [] while the UI
        does not answer."""
        app = self.app_id()
        if app is None:
            return []
        try:
            rows = self._get(f"/applications/{app}/allexecutors")
        except (OSError, ValueError):
            return []
        return [Executor.from_json(d) for d in rows if d.get("id") != "driver"]

    def active_hosts(self) -> set[str]:
        """Hosts with a live executor."""
        return {e.host for e in self.executors() if e.active}

    def failed_tasks(self) -> list[dict[str, Any]]:
        """Every failed task attempt of the application (``taskId``, ``executorId``,
        ``errorMessage``, ...), from the stages that count failed tasks.

        Not an executor's ``failedTasks``: Spark's status store counts a task's end against its
        executor only while that executor is live, and the end of a task lost with its
        executor is often handled after the executor's removal (seen here both ways).
        """
        app = self.app_id()
        if app is None:
            return []
        found: list[dict[str, Any]] = []
        try:
            for stage in self._get(f"/applications/{app}/stages"):
                if int(stage.get("numFailedTasks", 0)) == 0:
                    continue
                path = f"/applications/{app}/stages/{stage['stageId']}/{stage['attemptId']}"
                tasks = self._get(f"{path}/taskList?length=10000")
                found.extend(t for t in tasks if str(t.get("status")).upper() == "FAILED")
        except (OSError, ValueError):
            return []
        return found
