"""The progress watchdog's signals from Spark: the query's progress and idle events, and the
tasks of the epoch running (:mod:`stoker.runtime.job.watchdog`).

Idle events are seen only by a listener: Spark posts no progress for a trigger that found no
data, only an idle event every ``spark.sql.streaming.noDataProgressEventInterval``. The
listener implements Spark's Python listener interface through py4j itself and reads nothing
but the event's query id (PySpark's own wrapper turns every progress into Python objects:
dozens of JVM calls per epoch). It runs on py4j's callback server, which ``foreachBatch``
has started already.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from stoker.runtime.job.watchdog import DEFAULT_IDLE_INTERVAL_S, spark_duration_s

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from stoker.runtime.job.watchdog import ProgressWatchdog

log = logging.getLogger("stoker.runner")

IDLE_INTERVAL_KEY = "spark.sql.streaming.noDataProgressEventInterval"


def idle_interval_s(spark: SparkSession) -> float:
    """How often Spark posts an idle event while a query finds no data, in seconds."""
    try:
        value = spark.conf.get(IDLE_INTERVAL_KEY, None)
    except Exception:  # a session that cannot answer: Spark's default
        log.debug("reading %s failed", IDLE_INTERVAL_KEY, exc_info=True)
        value = None
    return spark_duration_s(value, DEFAULT_IDLE_INTERVAL_S)


class _Listener:
    """Spark's ``PythonStreamingQueryListener``, for one query (by its id, which stays the
    same across the restarts of a query from its checkpoint)."""

    def __init__(self, query_id: str, watchdog: ProgressWatchdog) -> None:
        self.query_id = query_id
        self.watchdog = watchdog

    def _note(self, query_id: Callable[[], Any], what: str) -> None:
        # An exception here would reach Spark's listener bus, which logs it with a stack
        # trace at every event: a watchdog signal is never worth that.
        try:
            if str(query_id().toString()) == self.query_id:
                self.watchdog.saw(what)
        except Exception:
            log.debug("a query listener event could not be read", exc_info=True)

    # The names are those of Spark's interface.
    def onQueryStarted(self, jevent: Any) -> None:
        pass

    def onQueryProgress(self, jevent: Any) -> None:
        self._note(lambda: jevent.progress().id(), "a query progress event")

    def onQueryIdle(self, jevent: Any) -> None:
        self._note(lambda: jevent.id(), "an idle event (no new data)")

    def onQueryTerminated(self, jevent: Any) -> None:
        pass

    class Java:
        implements = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]


def listen(
    spark: SparkSession, query: StreamingQuery, watchdog: ProgressWatchdog
) -> Callable[[], None]:
    """Feed ``watchdog`` the query's progress and idle events; the returned call stops it.
    Where no listener can be added, the watchdog is turned off (an idle query would look
    stalled without its idle events), and the log says so."""
    try:
        from pyspark.java_gateway import ensure_callback_server_started

        sc = spark.sparkContext
        gateway = sc._gateway
        jvm = sc._jvm
        assert gateway is not None and jvm is not None
        ensure_callback_server_started(gateway)
        wrapper = jvm.org.apache.spark.sql.streaming.PythonStreamingQueryListenerWrapper(
            _Listener(str(query.id), watchdog)
        )
        streams = spark._jsparkSession.streams()
        streams.addListener(wrapper)
    except Exception as e:
        watchdog.timeout_s = 0.0
        log.warning("the progress watchdog is off: no query listener could be added (%s)", e)
        return lambda: None

    def stop() -> None:
        try:
            streams.removeListener(wrapper)
        except Exception:  # the session is going: nothing is listening any more
            log.debug("removing the progress listener failed", exc_info=True)

    return stop


class TaskProbe:
    """Whether a task of the query's current run completed since the last look.

    Spark runs a query's batches (and the Spark jobs ``foreachBatch`` starts, on the query's
    own thread) under the job group of its run id. The signature looked at is the newest job
    of that group and the tasks completed in its jobs still running; a change is progress.
    """

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark
        self._last: tuple[int, int] | None = None

    def moved(self, query: StreamingQuery) -> bool:
        try:
            now = self._signature(str(query.runId))
        except Exception:  # the query or the session is going: no verdict from here
            log.debug("looking at the query's tasks failed", exc_info=True)
            return False
        before, self._last = self._last, now
        return before is not None and now != before

    def _signature(self, run_id: str) -> tuple[int, int]:
        tracker = self.spark.sparkContext._jsc.statusTracker()
        jobs = [int(j) for j in tracker.getJobIdsForGroup(run_id)]
        active = set(int(j) for j in tracker.getActiveJobIds()) & set(jobs)
        done = 0
        for j in active:
            info = tracker.getJobInfo(j)
            if info is None:
                continue
            for s in info.stageIds():
                stage = tracker.getStageInfo(s)
                if stage is not None:
                    done += int(stage.numCompletedTasks())
        return (max(jobs, default=-1), done)
