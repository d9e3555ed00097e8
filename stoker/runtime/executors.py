"""A driver's executors as Spark sees them: one reading (each executor's host, cores and
running tasks, from the scheduler backend and Spark's status store, through py4j), the report
made of it, which idle executors to remove to come down to a target, and the calls that ask
Spark for a total or remove executors. :class:`~stoker.runtime.resources.ResourceWatch` reads
and acts through this each tick."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Spark's executor limit of a standalone application that never asked for one.
NO_LIMIT = 2**31 - 1


@dataclass(frozen=True)
class Executor:
    """One executor registered with the driver (the driver itself is none)."""

    id: str
    host: str | None
    cores: int | None
    active_tasks: int
    total_tasks: int


@dataclass(frozen=True)
class Reading:
    """The driver's executors at one moment."""

    local: bool  # local mode: tasks run in the driver, there are no executors
    executors: tuple[Executor, ...]
    cores: int  # what the executors (local mode: the driver) can run at once

    def resources(
        self, requested: int | None, at: float, cold: Sequence[str] = ()
    ) -> dict[str, Any]:
        """The report's shape (``JobRecord.resources``). ``cold``: executors whose Python
        workers are still starting; their cores are not counted in ``cores`` (the sources
        split epochs by it) until they are warm, and ``warming`` counts them."""
        gone = set(cold)
        cores = self.cores - sum(self._cores_of(e) for e in self.executors if e.id in gone)
        return {
            "executors": len(self.executors),
            "local": self.local,  # tasks run in the driver: 0 executors is not 0 capacity
            "cores": max(cores, 1) if self.executors else self.cores,
            "warming": sum(1 for e in self.executors if e.id in gone),
            "executor_ids": sorted((e.id for e in self.executors), key=_id_order),
            "hosts": sorted({e.host for e in self.executors if e.host}),
            "requested": requested,
            "at": at,
        }

    def _cores_of(self, executor: Executor) -> int:
        """An executor's cores; one not in Spark's status store yet counts the average."""
        if executor.cores is not None:
            return executor.cores
        known = [e.cores for e in self.executors if e.cores is not None]
        return max(1, round(sum(known) / len(known))) if known else 1


def _id_order(executor_id: str) -> tuple[int, str]:
    return (int(executor_id), "") if executor_id.isdigit() else (1 << 62, executor_id)


def surplus(executors: Iterable[Executor], target: int, leaving: Iterable[str] = ()) -> list[str]:
    """Which executors to remove to come down to ``target``: idle ones only (no task running),
    newest first (the highest id), never one already on its way out (``leaving``)."""
    gone = set(leaving)
    staying = [e for e in executors if e.id not in gone]
    extra = len(staying) - max(0, target)
    if extra <= 0:
        return []
    idle = sorted((e for e in staying if e.active_tasks == 0), key=lambda e: _id_order(e.id))
    return [e.id for e in reversed(idle)][:extra]


class SparkExecutors:
    """The driver JVM's executors, through py4j (the calls SPARK_FACTS measured)."""

    def __init__(self, spark: SparkSession) -> None:
        sc = spark.sparkContext
        jvm = sc._jvm
        assert jvm is not None
        self._jsc = sc._jsc.sc()
        self._jvm = jvm
        self._conv = jvm.scala.jdk.javaapi.CollectionConverters
        self.local = bool(self._jsc.isLocal())
        conf = sc.getConf()
        self.dynamic_allocation = (
            str(conf.get("spark.dynamicAllocation.enabled", "false")).lower() == "true"
        )
        self.cores_max = conf.get("spark.cores.max", None)

    def read(self) -> Reading:
        summaries = {
            str(s.id()): s for s in self._conv.asJava(self._jsc.statusStore().executorList(True))
        }
        if self.local:
            driver = summaries.get("driver")
            cores = int(driver.totalCores()) if driver is not None else 0
            return Reading(True, (), cores or int(self._jsc.defaultParallelism()))
        executors = []
        for eid in (str(i) for i in self._conv.asJava(self._jsc.getExecutorIds())):
            s = summaries.get(eid)
            if s is None:  # registered a moment ago; the status store has not caught up
                executors.append(Executor(eid, None, None, 0, 0))
                continue
            executors.append(
                Executor(
                    eid,
                    str(s.hostPort()).rsplit(":", 1)[0] or None,
                    int(s.totalCores()),
                    int(s.activeTasks()),
                    int(s.totalTasks()),
                )
            )
        return Reading(False, tuple(executors), self._cores(executors))

    def _cores(self, executors: Sequence[Executor]) -> int:
        """The scheduler backend's own count of the registered executors' cores (updated in
        the same step as their registration); the status store's sum if it cannot be read."""
        try:
            count = self._jsc.schedulerBackend().totalCoreCount()
            # py4j hands an AtomicInteger (a java.lang.Number) over as a Python int.
            return int(count if isinstance(count, int) else count.get())
        except Exception:
            return sum(e.cores or 0 for e in executors)

    def request_total(self, n: int) -> bool:
        empty = getattr(getattr(self._jvm.scala.collection.immutable, "Map$"), "MODULE$").empty()
        return bool(self._jsc.requestTotalExecutors(int(n), 0, empty))

    def kill_idle(self, ids: Sequence[str]) -> list[str]:
        """Remove ``ids`` that run no task at the moment the scheduler backend acts (a busy one
        is kept); the ids it removed."""
        seq = self._conv.asScala(self._jvm.java.util.ArrayList(list(ids))).toSeq()
        # adjustTargetNumExecutors, countFailures, force: never a busy executor.
        killed = self._jsc.schedulerBackend().killExecutors(seq, True, False, False)
        return [str(i) for i in self._conv.asJava(killed)]


__all__ = ["NO_LIMIT", "Executor", "Reading", "SparkExecutors", "surplus"]
