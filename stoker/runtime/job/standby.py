"""A driver process kept warm for a job: the app imported, Spark up, the sources'
stream opened and the transform analyzed, holding no attempt, until the leader hands it the
job's next attempt.

What a standby may touch while it waits: its own row of the store's ``standbys`` table (its
lease, READY), reads of the job's record, and Spark objects of its own session. Nothing of
the running attempt: no lease, no checkpoint file, no sink part or staging, no source log (the
sources' stream is analyzed, not started: Spark reads the checkpoint only when a query
starts). The plan checks that read the checkpoint and the store (a lost checkpoint, a
savepoint to restore) run at the takeover, on what is true then.

The handover (``manager/standbys.py``): the leader records the next attempt STARTING, then
marks the standby TAKEN with that attempt; the standby sees it within ``POLL`` seconds, holds
the STARTING attempt (its owner from now on) and runs it as any driver does: the same plan,
recovery, query start from the checkpoint, the same fence (``AttemptRun``).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from stoker.errors import StoreError
from stoker.procs import remove_orphaned_folders, this_owner
from stoker.runtime import launch
from stoker.runtime.attempt import hold_start
from stoker.runtime.job import opening
from stoker.runtime.job.attempt_run import AttemptRun
from stoker.runtime.job.plan import RunOptions, job_basics, plan_job
from stoker.runtime.job.result import JobResult
from stoker.runtime.job.signals import StopSignals
from stoker.sources.base import SourceContext
from stoker.store import Owner, open_store
from stoker.store.fleet_records import UpgradeRecord
from stoker.types import AttemptNo, JobId, StandbyRole, StandbyState, UpgradeState, given_config

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from stoker.pipeline import Pipeline

log = logging.getLogger("stoker.standby")

POLL = 0.05  # s between the standby's looks at its row while it waits (a read)


class StandbyWait:
    """This process as the job's standby, in the store: its lease renewed from the start (so
    a standby that freezes while it warms is replaced), READY once warm, and the attempt the
    leader hands it."""

    def __init__(self, store_url: str, job: str, ttl: float, upgrade: str | None = None) -> None:
        self.store_url = store_url
        self.job = JobId(job)
        self.ttl = ttl
        # An upgrade's standby (the new code, checked before it is READY), or the job's own.
        self.upgrade = upgrade
        self.role = StandbyRole.UPGRADE if upgrade is not None else StandbyRole.STANDBY
        self.owner: Owner = this_owner()
        self.taken: AttemptNo | None = None  # the attempt handed over, once it was
        self._ready = False
        self._gone: str | None = None  # why this process is not wanted, once it is not
        self._stop = threading.Event()
        self._store = open_store(store_url)
        self._thread = threading.Thread(target=self._renew, name="stoker-standby", daemon=True)
        self._thread.start()

    def _renew(self) -> None:
        period = max(0.2, self.ttl / 3)
        while not self._stop.wait(period):
            try:
                rec = self._store.renew_standby(
                    self.job, self.owner, self.ttl, ready=self._ready, role=self.role
                )
            except StoreError as e:  # a lease that lapses tells the leader
                log.warning("standby: lease renewal failed: %s", e)
                continue
            if rec is None:
                self._gone = "this standby's record is gone (the job ended or replaced it)"
                return
            if rec.state == StandbyState.TAKEN:
                return  # an attempt is this process's now: its own lease from here

    def wait(self, stopped: Callable[[], bool]) -> AttemptNo:
        """Say READY, then wait for the attempt the leader hands this process; that attempt.
        ``StandbyNotWanted`` when the row went (or lapsed) first; a signal (``stopped``, or
        a KeyboardInterrupt raised by the handler) ends the wait too."""
        self._ready = True
        rec = self._store.renew_standby(self.job, self.owner, self.ttl, ready=True, role=self.role)
        if rec is None:
            raise launch.StandbyNotWanted("this standby's record is gone before it was ready")
        log.info("standby for job %s: ready, waiting for an attempt", self.job)
        while True:
            if rec is None or self._gone is not None:
                raise launch.StandbyNotWanted(self._gone or "this standby's record is gone")
            if rec.owner != self.owner:
                raise launch.StandbyNotWanted("the job has another standby now")
            if rec.state == StandbyState.TAKEN and rec.attempt is not None:
                self.taken = rec.attempt
                self._stop.set()
                return rec.attempt
            if stopped():
                raise KeyboardInterrupt
            time.sleep(POLL)
            try:
                rec = self._store.get_standby(self.job, self.role)
            except StoreError as e:
                log.warning("standby: cannot read its record: %s", e)

    def upgrade_record(self) -> UpgradeRecord | None:
        """The upgrade this standby is the new code of (None: the job's own standby)."""
        return None if self.upgrade is None else self._store.get_upgrade(self.upgrade)

    def refuse(self, why: str) -> None:
        """End this standby's upgrade REFUSED with ``why`` (the old code runs on)."""
        if self.upgrade is not None:
            self._store.end_upgrade(self.upgrade, UpgradeState.REFUSED, why)

    def leave(self) -> None:
        """Stop renewing. The row stays: the leader removes it once it sees this process
        gone, and counts a standby that ended without being handed an attempt as a failure
        (a standby that fails at each start must not be restarted in a loop)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self._store.close()


WARM_UP_TIMEOUT = 120  # s; a warm-up that takes longer is given up (the standby waits cold)
WARM_UP_PREFIX = "stoker-warm-up-"  # then the standby's pid: its folder under the temp dir
# Epochs of the warm-up query: ``STOKER_STANDBY_WARM_EPOCHS`` (1..50, default 20). One epoch
# loads the streaming engine's classes; the JIT compiles what an epoch runs only once it has
# run many times, and a takeover that starts three queries at once otherwise pays for that
# compilation then (benchmarks.md 17.1, run 5, medians: the takeover's compiler threads 1.77
# -> 1.36 CPU s, every job committing 3.45 -> 3.00 s; the warm-up ~55 s instead of ~18 s of
# one core, before READY). The tests' JVMs compile with C1 only and use 1.
WARM_UP_EPOCHS = "STOKER_STANDBY_WARM_EPOCHS"
WARM_UP_EPOCHS_DEFAULT = 20
WARM_UP_EPOCHS_MAX = 50
WARM_UP_ROWS = 64  # per epoch


def warm_up_epochs() -> int:
    """The warm-up's epochs from ``STOKER_STANDBY_WARM_EPOCHS``; a value that is not a whole
    number in 1..50 is said in the log and the default used (a standby is not refused for it)."""
    raw = os.environ.get(WARM_UP_EPOCHS, "").strip()
    if not raw:
        return WARM_UP_EPOCHS_DEFAULT
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if not 1 <= n <= WARM_UP_EPOCHS_MAX:
        log.warning(
            "standby: %s=%r is not a whole number in 1..%d; %d used",
            WARM_UP_EPOCHS,
            raw,
            WARM_UP_EPOCHS_MAX,
            WARM_UP_EPOCHS_DEFAULT,
        )
        return WARM_UP_EPOCHS_DEFAULT
    return n


def warm_up(session: SparkSession) -> None:
    """Run a throwaway streaming query of :func:`warm_up_epochs` epochs in this session: ids
    from stoker's generator, written as Parquet under a folder of its own removed after (to
    Spark's noop output on a cluster master).

    The first query of a JVM pays for loading and compiling the streaming engine, starting the
    Python worker daemon and the ``foreachBatch`` callback (seconds; a query started again in
    the same session: ~0.1 s, SPARK_FACTS.md); its later epochs get the JIT to compile what
    every epoch runs. A takeover should pay for neither. Nothing of the job is read or
    written: no store (the generator plans without control), another checkpoint, another
    output. A failure is logged; the standby then waits as it is."""
    from stoker.sources.generator import GeneratorSource

    t0 = time.monotonic()
    remove_orphaned_folders(WARM_UP_PREFIX)  # of standbys killed while warming up
    tmp = Path(tempfile.mkdtemp(prefix=f"{WARM_UP_PREFIX}{os.getpid()}-"))
    epochs = warm_up_epochs()
    ran: list[int] = []  # the epochs that read ids, counted by the callback itself
    enough = threading.Event()
    try:
        source = GeneratorSource(
            total=WARM_UP_ROWS * epochs, partitions=1, max_rows_per_epoch=WARM_UP_ROWS
        )
        stream = source.open(session, "warm", tmp)

        # On a local master the epochs write Parquet, as a files sink does; on a cluster
        # master through Spark's "noop" output: the executors may be on other hosts, whose
        # disks this process would never clean.
        local = str(session.sparkContext.master).startswith("local")

        def batch(df: DataFrame, epoch: int) -> None:
            rows = df.count()
            if local:
                df.write.mode("overwrite").parquet(str(tmp / "out"))
            else:
                df.write.format("noop").mode("overwrite").save()
            if rows:  # not the epoch that only marks the generator finished
                ran.append(epoch)
                if len(ran) >= epochs:
                    enough.set()

        # Not availableNow: Spark reads a Python source's whole backlog in one epoch then.
        query = (
            stream.writeStream.foreachBatch(batch)
            .option("checkpointLocation", str(tmp / "checkpoint"))
            .start()
        )
        try:
            deadline = time.monotonic() + WARM_UP_TIMEOUT
            while not enough.wait(0.1):
                if not query.isActive:
                    raise RuntimeError(f"the warm-up query ended: {query.exception()}")
                if time.monotonic() > deadline:
                    log.warning("standby: the warm-up did not end in %.0f s", WARM_UP_TIMEOUT)
                    break
        finally:
            query.stop()
        log.info(
            "standby: warm-up query ran in %.1f s (%d epochs)",
            time.monotonic() - t0,
            len(ran),
        )
    except Exception as e:
        log.warning("standby: the warm-up query failed (the standby waits cold): %s", e)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def check_upgrade(
    standby: StandbyWait, pipeline: Pipeline, stream: DataFrame, root: Path, up: UpgradeRecord
) -> None:
    """The new code's checks that need Spark, before it says READY: its pipeline against the
    one the upgrade was asked with (the file may have changed since), and the state schema of
    every stateful operator against the checkpoint's. A difference refuses the upgrade with
    it, and this process leaves."""
    from stoker.runtime.job.upgrade_check import state_schema_difference

    why = None
    asked = up.checks.get("sources")
    found = [str(s) for s in pipeline.spec().get("sources") or []]
    if asked is not None and found != asked:
        why = f"the new code's sources changed since the upgrade was asked: {found} vs {asked}"
    if why is None:
        why = state_schema_difference(root / "checkpoint", stream)
    if why is not None:
        log.warning("upgrade %s refused: %s", up.upgrade_id, why)
        standby.refuse(why)
        raise launch.StandbyNotWanted(f"upgrade {up.upgrade_id} refused: {why}")
    log.info("upgrade %s: the new code's checks passed", up.upgrade_id)


def execute_standby(
    pipeline: Pipeline, opts: RunOptions, ctx: launch.LaunchContext, standby: StandbyWait
) -> JobResult:
    """Warm up for ``pipeline``'s job, wait for its next attempt, then run that attempt as a
    job manager's driver would (:class:`AttemptRun`), reusing the warm session and stream."""
    basics = job_basics(pipeline, opts, None, ctx)
    settings, jid, root = basics.settings, basics.jid, basics.root
    store_url = str(basics.store_url)
    with StopSignals() as signals:
        t0 = time.monotonic()
        session = opts.spark or opening.start_spark(settings, jid, jid)
        signals.rearm()
        paced = settings.trigger if opening.paced(settings, pipeline) else None
        # The sources' stream, analyzed with the transform on top: what a takeover would do
        # first, done now. Nothing of it reads the checkpoint (a query does, once started).
        stream = opening.open_sources(session, pipeline, root, SourceContext(jid, store_url, paced))
        config = basics.config
        up = standby.upgrade_record()
        if standby.upgrade is not None:
            if up is None or up.state != UpgradeState.PENDING:
                raise launch.StandbyNotWanted(f"upgrade {standby.upgrade} is not pending")
            config = pipeline.check_config(given_config(up.new_spec))
        opening.check_transform(stream, pipeline, jid, config)
        if up is not None:
            check_upgrade(standby, pipeline, stream, root, up)
        warm_up(session)
        log.info("standby for job %s: warm in %.1f s", jid, time.monotonic() - t0)
        attempt = standby.wait(lambda: signals.received is not None)
        t_taken = time.monotonic()
        log.info("standby for job %s: handed attempt %d", jid, attempt)
        release = hold_start(store_url, jid, attempt, settings.lease_ttl)
        try:
            taken = replace(ctx, attempt=attempt, release_start=release)
            plan = plan_job(pipeline, replace(opts, spark=session), None, taken)
            run = AttemptRun(plan, signals, warm_stream=stream)
            log.info(
                "standby for job %s: attempt %d planned in %.2f s",
                jid,
                attempt,
                time.monotonic() - t_taken,
            )
            return run.attempt()
        finally:
            release()
