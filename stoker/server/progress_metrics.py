"""``/metrics``' series from Spark's progress of each live job's newest epoch:
the dashboard's figures (stoker/server/ui/dashboard.py) for Prometheus, with their units in
their names (seconds, bytes, rows) and in their HELP text.

The driver records the figures with each epoch (:mod:`stoker.runtime.progress_summary`); the
collector already holds each live job's newest epochs (its rates), so these series cost the
scrape no read of their own. A job whose newest epochs carry no progress (an older driver,
replays only) has none of them. A stateful operator is labelled by its position in the
query and Spark's name for it (``0:stateStoreSave``): a query may hold two of one kind.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client.core import GaugeMetricFamily, Metric

if TYPE_CHECKING:
    from stoker.store import EpochRecord

# (series, Spark's stateOperators field, factor to the series' unit, HELP)
_STATE_SERIES = (
    (
        "stoker_job_state_rows",
        "numRowsTotal",
        1.0,
        "Rows a stateful operator of the job's query holds in its state (Spark's numRowsTotal), "
        "after the newest epoch with Spark's progress.",
    ),
    (
        "stoker_job_state_updated_rows",
        "numRowsUpdated",
        1.0,
        "Rows a stateful operator updated in its state in that epoch (numRowsUpdated).",
    ),
    (
        "stoker_job_state_removed_rows",
        "numRowsRemoved",
        1.0,
        "Rows a stateful operator removed from its state in that epoch (numRowsRemoved).",
    ),
    (
        "stoker_job_state_late_dropped_rows",
        "numRowsDroppedByWatermark",
        1.0,
        "Input rows a stateful operator dropped as later than the watermark in that epoch.",
    ),
    (
        "stoker_job_state_memory_bytes",
        "memoryUsedBytes",
        1.0,
        "Memory a stateful operator's state stores use, in bytes (memoryUsedBytes).",
    ),
    (
        "stoker_job_state_store_size_bytes",
        "stateSizeBytes",
        1.0,
        "Size of a stateful operator's state store in bytes, as its provider reports it "
        "(HDFS-backed: stateOnCurrentVersionSizeBytes; RocksDB: rocksdbSstFileSize on disk).",
    ),
    (
        "stoker_job_state_update_seconds",
        "allUpdatesTimeMs",
        0.001,
        "Time a stateful operator spent updating its state in that epoch, in seconds.",
    ),
    (
        "stoker_job_state_commit_seconds",
        "commitTimeMs",
        0.001,
        "Time a stateful operator spent committing its state in that epoch, in seconds.",
    ),
)


def newest_progress(recent: Iterable[EpochRecord]) -> EpochRecord | None:
    """The newest of ``recent`` epochs with a progress recorded."""
    with_progress = [e for e in recent if e.progress]
    return max(with_progress, key=lambda e: e.epoch) if with_progress else None


def progress_families(newest: Iterable[tuple[str, EpochRecord | None]]) -> Iterator[Metric]:
    """The series of each ``(job id, newest epoch with a progress)``."""
    state = {
        name: GaugeMetricFamily(name, help_text, labels=["job_id", "operator"])
        for name, _, _, help_text in _STATE_SERIES
    }
    phases = GaugeMetricFamily(
        "stoker_job_epoch_phase_seconds",
        "The newest epoch's time by Spark's phase (durationMs: latestOffset, queryPlanning, "
        "addBatch, walCommit, commitOffsets, triggerExecution the whole), in seconds.",
        labels=["job_id", "phase"],
    )
    offered = GaugeMetricFamily(
        "stoker_job_spark_input_rows_per_second",
        "Rows per second the sources offered in the newest epoch (Spark's inputRowsPerSecond: "
        "its rows over the time since the epoch before began); above the processing rate "
        "means back pressure.",
        labels=["job_id"],
    )
    processed = GaugeMetricFamily(
        "stoker_job_spark_processed_rows_per_second",
        "Rows per second the query processed in the newest epoch (Spark's "
        "processedRowsPerSecond: its rows over its own time).",
        labels=["job_id"],
    )
    source_backlog = GaugeMetricFamily(
        "stoker_job_source_backlog_records",
        "Records (or files) a source had beyond the newest epoch's end, by source (its "
        "position and description, as the job page lists it).",
        labels=["job_id", "source"],
    )
    partition_backlog = GaugeMetricFamily(
        "stoker_job_partition_backlog_records",
        "Records a Kafka partition had beyond the newest epoch's end (the last stable offset "
        "minus the epoch's end offset), by source and topic/partition; the partitions "
        "furthest behind, at most 48 per job.",
        labels=["job_id", "source", "partition"],
    )
    for jid, epoch in newest:
        p: dict[str, Any] = (epoch.progress if epoch is not None else None) or {}
        if not p:
            continue
        for i, src in enumerate(p.get("sources") or []):
            label = f"{i}:{src.get('description') or 'source'}"
            if _is_number(total := src.get("backlog")):
                source_backlog.add_metric([jid, label], float(total))
            for part, n in sorted((src.get("partitions") or {}).items()):
                if _is_number(n):
                    partition_backlog.add_metric([jid, label, str(part)], float(n))
        for i, op in enumerate(p.get("stateOperators") or []):
            label = f"{i}:{op.get('operatorName') or 'stateful'}"
            for name, field, factor, _ in _STATE_SERIES:
                value = op.get(field)
                if isinstance(value, int | float) and not isinstance(value, bool):
                    state[name].add_metric([jid, label], float(value) * factor)
        for phase, ms in sorted((p.get("durationMs") or {}).items()):
            if isinstance(ms, int | float):
                phases.add_metric([jid, str(phase)], float(ms) / 1000.0)
        for family, key in ((offered, "inputRowsPerSecond"), (processed, "processedRowsPerSecond")):
            value = p.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                family.add_metric([jid], float(value))
    yield from state.values()
    yield from (phases, offered, processed, source_backlog, partition_backlog)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


__all__ = ["newest_progress", "progress_families"]
