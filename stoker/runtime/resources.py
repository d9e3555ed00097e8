"""A driver's executors: what it has, reported to the store, and the executor target applied.

Every driver runs one :class:`ResourceWatch` once its SparkSession is up: a lone job's for the
job, an application's for the application (its jobs share the executors; the report goes to
the application's record and to each of its running jobs' records, where their sources' readers
find the cores). Each second it

1. reads the owner's record: its scaling spec (``scaling``) and the scaler's executor target
   (``executor_target``);
2. applies the target. Mode ``auto`` with a target: ``requestTotalExecutors(target)`` once per
   new target (the master starts executors up to it, and no more). When more executors run
   than the target and the cluster is the user's (not one stoker manages, whose scaler removes
   whole workers gracefully), the surplus that runs no task is removed (the scheduler backend
   refuses a busy one at the moment it acts) and the target is requested again: a kill lowers
   Spark's target to what is left (SPARK_FACTS). Modes ``reactive`` and ``fixed``: no executor
   limit; one set before by this driver is lifted. In local mode there is nothing to request;
3. reads the executors from Spark (the scheduler backend's registered executors, their
   host, cores and running tasks from Spark's status store; local mode: no executors, the
   driver's task slots as cores) and writes ``report_resources`` when they changed and at
   least every :data:`REPORT_S` seconds.

What Spark says of the executors, and the calls that change them, are in
:mod:`stoker.runtime.executors`.

A failure to talk to Spark or to the store is logged and retried at the next tick; it never
fails a job. The first tick runs in :meth:`ResourceWatch.start`, before the job's first epoch,
so a target already set applies from the start and the first epoch's sources see the cores.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from stoker.runtime.executors import NO_LIMIT, Reading, SparkExecutors, surplus
from stoker.types import JobId

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from stoker.store import Store

log = logging.getLogger("stoker.resources")

TICK_S = 1.0
REPORT_S = 5.0
# A new executor's cores count for the sources at the latest this long after it joined, warm
# or not (its warm-up tasks may all have gone to others).
WARM_LIMIT_S = 120.0
# The FAIR pool of the warm-up jobs (in FIFO mode pools mean nothing).
WARM_POOL = "stoker-warm-up"


def _warm_partition(batches: Iterator[Any]) -> Iterator[Any]:
    """A warm-up task (mapInPandas: the executor's Python worker starts and imports pandas
    and pyarrow, as a pipeline's Python tasks do), with a short wait so that the tasks spread
    over the idle executors' cores instead of one core taking them all."""
    time.sleep(0.3)
    yield from batches


def managed_cluster(cluster: str | None) -> bool:
    """Whether an application's cluster spec names a cluster stoker manages (``standalone:...``
    started for it, or a session cluster's name), rather than ``local`` or the user's
    ``spark://`` master."""
    text = (cluster or "local").strip()
    return not (text == "local" or text.startswith(("local[", "spark://")))


class ResourceWatch:
    """The thread that reports a driver's executors and applies its owner's executor target."""

    def __init__(
        self,
        store: Store,
        owner: JobId,
        spark: SparkSession,
        *,
        managed: bool = False,
        every: float = TICK_S,
        report_every: float = REPORT_S,
        clock: Callable[[], float] = time.time,
        warm_up: bool = True,
    ) -> None:
        self.store = store
        self.owner = owner
        self.managed = managed
        self.every = every
        self.report_every = report_every
        self.clock = clock
        self._spark = spark
        self._executors: SparkExecutors | None = None
        self._jobs: set[JobId] = set()
        self._new_jobs: set[JobId] = set()  # not reported to yet
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._latest: dict[str, Any] | None = None
        self._last_report: tuple[dict[str, Any], float] | None = None
        self.requested: int | None = None  # the executor limit this driver set; None: none
        self._leaving: set[str] = set()  # executors this driver removed, not yet gone
        self._warned: set[str] = set()
        # Executors that joined while the owner ran: their Python workers start cold (tens
        # of seconds on a busy machine), and an epoch that gives one of them a partition
        # waits that long. They are warmed by a small job of their own first, and their
        # cores count for the sources once they have run a task (or after WARM_LIMIT_S).
        self.warm_up = warm_up
        self._known: set[str] | None = None  # every executor seen; None: no reading yet
        self._cold: dict[str, float] = {}  # executor id -> when it was first seen
        self._warmer: threading.Thread | None = None
        self._ui: str | None = None

    # the jobs reported to ---------------------------------------------------------------------
    def add_job(self, job: JobId) -> None:
        """Report to ``job``'s record too (a job of the application), from the next tick."""
        if job == self.owner:
            return
        with self._lock:
            self._jobs.add(job)
            self._new_jobs.add(job)
        latest = self._latest
        if latest is not None:
            self._report_to([job], latest)  # its sources' first epoch sees the cores

    def remove_job(self, job: JobId) -> None:
        with self._lock:
            self._jobs.discard(job)
            self._new_jobs.discard(job)

    # the thread -------------------------------------------------------------------------------
    def start(self) -> None:
        """One tick now (the target applied and the resources reported before the first
        epoch), then one every ``every`` seconds on a daemon thread."""
        if self._thread is not None:
            return
        self.tick()
        self._thread = threading.Thread(target=self._run, name="stoker-resources", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop ticking (before the SparkSession stops); waits for a tick in progress."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)

    @property
    def running(self) -> bool:
        return self._thread is not None and not self._stop.is_set()

    def latest(self) -> dict[str, Any] | None:
        """The resources as last read (None before the first successful read)."""
        return self._latest

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.tick()

    def tick(self) -> None:
        """One pass: read the owner's spec and target, apply them, read and report the
        executors. Never raises."""
        try:
            self._tick()
        except Exception as e:  # never the job's failure: logged, and the next tick retries
            self._warn_once("tick", f"resource watch of {self.owner}: {type(e).__name__}: {e}")

    def _tick(self) -> None:
        spark_side = self._spark_side()
        if spark_side is None:
            return
        reading = self._read(spark_side)
        owner = self._owner_record()
        if owner is not None and reading is not None:
            scaling, target = owner
            self._apply(spark_side, reading, scaling, target)
        if reading is not None:
            self._report(reading)

    def _spark_side(self) -> SparkExecutors | None:
        if self._executors is None:
            try:
                self._executors = SparkExecutors(self._spark)
            except Exception as e:
                self._warn_once("spark", f"cannot read the executors from Spark: {e}")
                return None
        return self._executors

    def _read(self, spark_side: SparkExecutors) -> Reading | None:
        try:
            reading = spark_side.read()
        except Exception as e:
            self._warn_once("read", f"reading the executors from Spark failed: {e}")
            return None
        self._warned.discard("read")
        present = {e.id for e in reading.executors}
        self._leaving &= present  # gone for good: forget them
        self._track_cold(reading)
        return reading

    # warming new executors ------------------------------------------------------------------
    def _track_cold(self, reading: Reading) -> None:
        """Note executors that joined after the first reading (those there at the start are
        warmed by the first epoch, which waits for them anyway); forget warm and gone ones;
        start a warm-up job while any is cold."""
        if reading.local:
            return
        present = {e.id: e for e in reading.executors}
        now = time.monotonic()
        if self._known is None:
            if not present:
                return  # no executor yet: the first ones to come are the start's
            self._known = set(present)
            return
        for eid in present:
            if eid not in self._known:
                self._known.add(eid)
                if self.warm_up:
                    self._cold[eid] = now
        for eid in list(self._cold):
            e = present.get(eid)
            if e is None or e.total_tasks > 0 or now - self._cold[eid] >= WARM_LIMIT_S:
                if e is not None and e.total_tasks == 0:
                    log.info("%s: executor %s counted although it ran no task yet", self.owner, eid)
                del self._cold[eid]
        if self._cold and (self._warmer is None or not self._warmer.is_alive()):
            cores = max(1, reading.cores)
            self._warmer = threading.Thread(
                target=self._warm, args=(cores,), name="stoker-warm-up", daemon=True
            )
            self._warmer.start()

    def _warm(self, cores: int) -> None:
        """One small Python job over twice the cores present: the idle new executors take
        its tasks and start their Python workers (pandas and pyarrow imported) outside any
        epoch. Its Spark jobs run in a pool of their own."""
        try:
            sc = self._spark.sparkContext
            sc.setLocalProperty("spark.scheduler.pool", WARM_POOL)
            sc.setJobDescription(f"stoker: warming new executors of {self.owner}")
            n = min(2 * cores, 256)
            (
                self._spark.range(n, numPartitions=n)
                .mapInPandas(_warm_partition, "id long")
                .write.format("noop")
                .mode("overwrite")
                .save()
            )
        except Exception as e:
            self._warn_once("warm", f"{self.owner}: warming new executors failed: {e}")

    def _owner_record(self) -> tuple[dict[str, Any], int | None] | None:
        try:
            rec = self.store.get_job(self.owner)
        except Exception as e:
            self._warn_once("store", f"reading the scaling of {self.owner} failed: {e}")
            return None
        self._warned.discard("store")
        scaling = getattr(rec, "scaling", None)
        target = getattr(rec, "executor_target", None)
        return (scaling if isinstance(scaling, dict) else {}), target

    # applying the target --------------------------------------------------------------------
    def _apply(
        self,
        spark_side: SparkExecutors,
        reading: Reading,
        scaling: dict[str, Any],
        target: int | None,
    ) -> None:
        if reading.local:
            return  # local mode: no executors to ask for
        mode = str(scaling.get("mode") or "fixed")
        if mode == "auto" and spark_side.dynamic_allocation:
            self._warn_once(
                "dynalloc",
                f"{self.owner}: scaling mode auto needs spark.dynamicAllocation.enabled=false "
                "(Spark's own allocation would fight the target): the target is not applied",
            )
            return
        if mode == "reactive" and spark_side.cores_max:
            self._warn_once(
                "coresmax",
                f"{self.owner}: scaling mode reactive, but spark.cores.max={spark_side.cores_max} "
                "caps the executors this application gets",
            )
        if mode == "auto" and target is not None:
            if target != self.requested:
                self._request(spark_side, target, f"executor target {target}")
            if not self.managed:
                self._remove_surplus(spark_side, reading, target)
            return
        if mode != "auto" and self.requested is not None:
            self._request(spark_side, NO_LIMIT, f"scaling mode {mode}: executor limit lifted")

    def _request(self, spark_side: SparkExecutors, n: int, why: str) -> None:
        try:
            ok = spark_side.request_total(n)
        except Exception as e:
            self._warn_once("request", f"{self.owner}: requesting {n} executors failed: {e}")
            return
        self._warned.discard("request")
        if not ok:
            self._warn_once("request", f"{self.owner}: Spark refused the executor request ({why})")
            return
        self.requested = None if n == NO_LIMIT else n
        log.info("%s: %s", self.owner, why)

    def _remove_surplus(self, spark_side: SparkExecutors, reading: Reading, target: int) -> None:
        ids = surplus(reading.executors, target, self._leaving)
        if not ids:
            return
        try:
            killed = spark_side.kill_idle(ids)
        except Exception as e:
            self._warn_once("kill", f"{self.owner}: removing executors {ids} failed: {e}")
            return
        if not killed:
            return  # all busy now: the next tick tries again
        self._leaving.update(killed)
        log.info(
            "%s: executors %s removed (idle, above the target %d)",
            self.owner,
            ", ".join(killed),
            target,
        )
        # The kill lowered Spark's target to what is left: set ours again.
        self._request(spark_side, target, f"executor target {target} after the removal")

    # reporting --------------------------------------------------------------------------------
    def _report(self, reading: Reading) -> None:
        now = self.clock()
        res = reading.resources(self.requested, now, tuple(self._cold))
        ui = self._spark_ui()
        if ui:
            res["spark_ui"] = ui  # the driver's Spark UI, linked from stoker's job page
        self._latest = res
        same = {k: v for k, v in res.items() if k != "at"}
        last = self._last_report
        due = last is None or last[0] != same or now - last[1] >= self.report_every
        with self._lock:
            fresh = sorted(self._new_jobs)
            jobs = sorted(self._jobs)
        if due:
            if self._report_to([self.owner, *jobs], res):
                self._last_report = (same, now)
        elif fresh:
            self._report_to(fresh, res)

    def _spark_ui(self) -> str | None:
        """The address of this driver's Spark UI (None when it is off)."""
        if self._ui is None:
            try:
                self._ui = str(self._spark.sparkContext.uiWebUrl or "")
            except Exception:
                self._ui = ""
        return self._ui or None

    def _report_to(self, jobs: Iterable[JobId], res: dict[str, Any]) -> bool:
        ok = True
        for job in jobs:
            try:
                self.store.report_resources(job, res)
            except Exception as e:
                ok = False
                self._warn_once(f"report:{job}", f"reporting the resources of {job} failed: {e}")
                continue
            self._warned.discard(f"report:{job}")
            with self._lock:
                self._new_jobs.discard(job)
        return ok

    def _warn_once(self, key: str, message: str) -> None:
        """A warning per kind of failure until it clears (a tick a second would flood)."""
        if key not in self._warned:
            self._warned.add(key)
            log.warning("%s", message)
        else:
            log.debug("%s", message)


__all__ = ["ResourceWatch", "managed_cluster"]
