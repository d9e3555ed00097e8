"""Change the number of state partitions of a stopped job, offline, through Spark's checkpoint
repartitioning (``SparkSession._streamingCheckpointManager.repartition``, experimental in
Spark 4.2+). Run in a child process by :mod:`stoker.manager.state`::

    python -m stoker.runtime.repartition CHECKPOINT N [--skip 7,8]

It prints one JSON line: ``{"ok": true, "from": 8, "to": N, "batch": ..., "skipped": [...]}``
(exit 0); a refusal ``{"ok": false, "refused": true, "field": ..., "message": ...}`` (exit 2,
nothing changed); a failure of Spark's own ``{"ok": false, "error": ..., "unfinished": ...}``
(exit 1).

What Spark 4.3 requires, and how stoker meets it:

- The state store provider must be RocksDB: with the HDFS-backed provider (Spark's default)
  the repartition fails *after* writing its batch to the offset log, and that unfinished batch
  then stops the query from starting. So the provider is checked first, from the settings the
  checkpoint's offset log records (Spark pins the provider there), and refused up front.
- Every stateful operator must be one Spark can repartition, and the query must have one
  (a query without state fails the same late way): checked from the operators' metadata.
- The newest batch of the offset log must be committed (Spark's commit log), else Spark refuses
  (``LAST_BATCH_FAILED``), as a skipped batch could be written twice by a sink that recognises
  its output by batch id. A stopped stoker job often has such a batch: planned, never run (a
  graceful stop refuses to start it) or cut short by a crash. Spark's way out is to drain the
  query with ``trigger(availableNow=True)``, which would run the user's pipeline and, for an
  endless source, never end. stoker needs no drain: its commit point is its own store, not
  Spark's batch id. A batch whose stoker epoch was not decided wrote nothing that stays
  (recovery aborts its prepared parts), so Spark may skip it (``enforceExactlyOnceSink=
  False``): its input is read again, under a new epoch, after the restart. The caller checks
  the store and names the batches it allows to be skipped (``--skip``); any other uncommitted
  batch is refused (a decided epoch that Spark did not log as committed: run the job again
  and stop it gracefully, so that Spark logs it).

Reading the checkpoint (:mod:`stoker.checkpoint_layout`) needs no Spark; only the repartition
itself starts a local SparkSession in this process.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from stoker.checkpoint_layout import (
    CHECKPOINT_FORMAT_KEY,
    ROCKSDB_PROVIDER,
    SHUFFLE_PARTITIONS,
    CheckpointState,
    inspect,
    read_offset_conf,
)

# The providers and operators Spark 4.3's repartitioning handles (its StateRewriter and
# StatePartitionKeyExtractorFactory); anything else fails half-way in Spark.
REPARTITIONABLE_PROVIDERS = frozenset({ROCKSDB_PROVIDER})
REPARTITIONABLE_OPERATORS = frozenset(
    {
        "stateStoreSave",  # groupBy().agg()
        "dedupe",  # dropDuplicates
        "dedupeWithinWatermark",
        "sessionWindowStateStoreSaveExec",
        "symmetricHashJoin",
        "flatMapGroupsWithState",
        "applyInPandasWithState",
        "transformWithStateExec",
        "transformWithStateInPandasExec",
        "transformWithStateInPySparkExec",
    }
)

# While ``stoker state repartition`` rewrites a job's checkpoint it holds this file in the
# job's state folder (stoker.manager.state writes it: the holder's host, pid, pid start
# marker and the partitions asked for, as JSON).
LOCK_NAME = "repartition.lock"

# Exit codes of the child process.
OK, FAILED, REFUSED = 0, 1, 2


class Refusal(Exception):
    """The checkpoint cannot be repartitioned as asked; nothing was changed."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def repartitioning(state_dir: Path) -> str | None:
    """Who is repartitioning the state of the job in ``state_dir`` now (``"pid 123 on host,
    to 5 partitions"``), or None: no lock, or the process that left it is gone.

    A driver asks after it has claimed its attempt and before it starts the query: the
    repartition asks the store after taking the lock, so one of the two always sees the
    other and the query never runs while the checkpoint is rewritten.
    """
    from stoker.procs import owner_is_dead
    from stoker.store import Owner

    try:
        d = json.loads((state_dir / LOCK_NAME).read_text())
        holder = Owner(str(d["host"]), int(d["pid"]), str(d["pid_started"]))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError):
        # Being written this instant, or left half-written: taken as live.
        return f"a process whose lock {state_dir / LOCK_NAME} cannot be read (remove it if none)"
    if owner_is_dead(holder):
        return None
    return f"pid {holder.pid} on {holder.host}, to {d.get('partitions')} partitions"


def check(state: CheckpointState, partitions: int, skip: Sequence[int] = ()) -> None:
    """Refuse (:class:`Refusal`) what Spark cannot do or stoker must not let it do."""
    where = str(state.path)
    if partitions < 1:
        raise Refusal("partitions", f"must be a whole number of at least 1, got {partitions}")
    if state.last_batch is None:
        raise Refusal(
            "job",
            f"its checkpoint ({where}) has no epoch yet: there is no state to repartition. A "
            "new job takes its state partitions from -D spark.sql.shuffle.partitions",
        )
    if state.last_committed is None:
        raise Refusal(
            "job",
            "no epoch of it has committed yet (Spark's commit log is empty): run it until one "
            "has, or start it afresh with -D spark.sql.shuffle.partitions",
        )
    if not state.operators:
        raise Refusal(
            "job",
            "its query keeps no state (no stateful operator in its checkpoint): Spark's "
            "repartitioning rewrites state only, there is nothing to repartition",
        )
    if state.provider not in REPARTITIONABLE_PROVIDERS:
        raise Refusal(
            "job",
            f"its state is kept by {state.provider.rsplit('.', 1)[-1]} ({state.provider}), "
            "which Spark's repartitioning does not support (only RocksDBStateStoreProvider); "
            "Spark pins the provider in the checkpoint, so the job keeps its "
            f"{state.partitions} state partitions",
        )
    if state.conf.get(CHECKPOINT_FORMAT_KEY, "1") not in ("1", ""):
        raise Refusal(
            "job",
            f"its state uses checkpoint format version {state.conf[CHECKPOINT_FORMAT_KEY]}, "
            "which Spark 4.3's repartitioning does not rewrite correctly yet (only version 1)",
        )
    unsupported = sorted(
        {n for n in state.operators.values() if n not in REPARTITIONABLE_OPERATORS}
    )
    if unsupported:
        raise Refusal(
            "job",
            f"its query has stateful operators Spark's repartitioning does not support: "
            f"{', '.join(unsupported)} (supported: "
            f"{', '.join(sorted(REPARTITIONABLE_OPERATORS))})",
        )
    pending = pending_repartition(state)
    if pending is not None and pending != partitions:
        raise Refusal(
            "partitions",
            f"the checkpoint ends with a repartition to {pending} that did not finish; Spark "
            f"lets the query start only once it has: run it again with {pending}, then "
            f"repartition to {partitions}",
        )
    if state.partitions == partitions and pending is None:
        raise Refusal(
            "partitions",
            f"the job has {partitions} state partitions already (its checkpoint's newest "
            f"committed epoch, {state.last_committed}, records them)",
        )
    stray = [b for b in state.uncommitted if b not in set(skip)]
    if stray:
        raise Refusal(
            "job",
            f"Spark's checkpoint has epochs {_span(stray)} planned and not committed, and "
            "they may not be skipped (stoker decided them, or the checkpoint changed since it "
            "was read: is the job running?). Run the job again and stop it gracefully "
            "(SIGTERM, Ctrl-C or stoker cancel) so that Spark commits them, then repartition",
        )


def _span(batches: Sequence[int]) -> str:
    return str(batches[0]) if len(batches) == 1 else f"{batches[0]}-{batches[-1]}"


def repartition(checkpoint: Path, partitions: int, skip: Sequence[int] = ()) -> dict[str, Any]:
    """Check the checkpoint, then repartition its state to ``partitions`` in a local Spark.

    ``skip``: the uncommitted batches the caller found undecided in stoker's store; Spark
    marks them skipped (their input is read again after the restart). Raises
    :class:`Refusal` before Spark starts when it cannot be done.
    """
    before = inspect(checkpoint)
    check(before, partitions, skip)
    t0 = time.monotonic()
    spark = _local_spark()
    try:
        manager = spark._streamingCheckpointManager
        manager.repartition(str(checkpoint), partitions, not before.uncommitted)
    finally:
        spark.stop()
    after = inspect(checkpoint)
    return {
        "ok": True,
        "checkpoint": str(checkpoint),
        "from": before.partitions,
        "to": after.partitions,
        "batch": after.last_committed,
        "skipped": before.uncommitted,
        "seconds": round(time.monotonic() - t0, 3),
    }


def _local_spark() -> Any:
    """A quiet local SparkSession for the rewrite (stoker's driver defaults)."""
    import logging

    from pyspark.sql import SparkSession

    from stoker.runtime.session import spark_conf
    from stoker.settings import Settings

    logging.getLogger("py4j").setLevel(logging.WARNING)
    builder = SparkSession.builder.appName("stoker:state-repartition").master("local[*]")
    for k, v in spark_conf(Settings()).items():
        builder = builder.config(k, v)
    return builder.getOrCreate()


def pending_repartition(state: CheckpointState) -> int | None:
    """The partitions of a repartition the checkpoint ends with that did not finish (its
    batch is the newest in the offset log, not committed, and records other shuffle partitions
    than the batch before it: Spark's own test), else None. Spark refuses to start the query
    until the same repartition is run again."""
    last = state.last_batch
    if last is None or not state.uncommitted or last < 1:
        return None
    now = (read_offset_conf(state.path, last) or {}).get(SHUFFLE_PARTITIONS)
    before = (read_offset_conf(state.path, last - 1) or {}).get(SHUFFLE_PARTITIONS)
    if now is None or before is None or now == before or not now.isdigit():
        return None
    return int(now)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m stoker.runtime.repartition")
    ap.add_argument("checkpoint", type=Path)
    ap.add_argument("partitions", type=int)
    ap.add_argument("--skip", default="", help="uncommitted batches that may be skipped: 7,8")
    args = ap.parse_args(argv)
    skip = [int(b) for b in args.skip.split(",") if b.strip()]
    try:
        out = repartition(args.checkpoint, args.partitions, skip)
    except Refusal as r:
        _answer({"ok": False, "refused": True, "field": r.field, "message": r.message})
        return REFUSED
    except Exception as e:
        from stoker.runtime.job.query import brief

        _answer(
            {
                "ok": False,
                "error": brief(e),
                "unfinished": pending_repartition(inspect(args.checkpoint)),
            }
        )
        return FAILED
    _answer(out)
    return OK


def _answer(out: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
