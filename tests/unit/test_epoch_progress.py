"""An epoch's progress summary (issue 41 item 8): cut from Spark's StreamingQueryProgress by
the driver, kept with the epoch in a real SQLite store, read back by /metrics' series. The
progress below has the shape pyspark 4.3 posts for a stateful query (a complete-mode count
through foreachBatch); the browser test checks the same figures from a real query."""

from __future__ import annotations

import json
from typing import Any

import pytest
from prometheus_client.core import Metric

from stoker.errors import InvalidInput
from stoker.runtime.progress_summary import MAX_OPERATORS, summarize
from stoker.server.exposition import render
from stoker.server.progress_metrics import newest_progress, progress_families
from stoker.store import Store
from stoker.store.records import Owner
from stoker.types import AttemptNo, ControlVersion, Epoch, job_id

PROGRESS: dict[str, Any] = {
    "id": "8f1c",
    "runId": "a2b3",
    "batchId": 4,
    "numInputRows": 120,
    "inputRowsPerSecond": 40.0,
    "processedRowsPerSecond": 96.5,
    "durationMs": {
        "addBatch": 900,
        "commitOffsets": 20,
        "getBatch": 0,
        "latestOffset": 3,
        "queryPlanning": 80,
        "triggerExecution": 1243,
        "walCommit": 25,
    },
    "stateOperators": [
        {
            "operatorName": "stateStoreSave",
            "numRowsTotal": 7,
            "numRowsUpdated": 7,
            "allUpdatesTimeMs": 41,
            "numRowsRemoved": 0,
            "allRemovalsTimeMs": 0,
            "commitTimeMs": 480,
            "memoryUsedBytes": 2632,
            "numRowsDroppedByWatermark": 0,
            "numShufflePartitions": 2,
            "numStateStoreInstances": 2,
            "customMetrics": {
                "loadedMapCacheHitCount": 8,
                "stateOnCurrentVersionSizeBytes": 1328,
                "SnapshotLastUploaded.partition_0_default": -1,
            },
        }
    ],
    "sources": [
        {
            "description": "stoker_generator",
            "startOffset": '{"next": 0}',
            "endOffset": '{"next": 120}',
            "numInputRows": 120,
            "inputRowsPerSecond": 40.0,
            "processedRowsPerSecond": 96.5,
        }
    ],
    "sink": {"description": "ForeachBatchSink", "numOutputRows": -1},
}


def test_the_summary_keeps_rates_phases_sources_and_each_operators_state() -> None:
    s = summarize(PROGRESS)
    assert s["numInputRows"] == 120 and s["inputRowsPerSecond"] == 40.0
    assert s["processedRowsPerSecond"] == 96.5
    assert s["durationMs"]["addBatch"] == 900 and s["durationMs"]["triggerExecution"] == 1243
    assert s["sources"] == [
        {
            "description": "stoker_generator",
            "numInputRows": 120,
            "inputRowsPerSecond": 40.0,
            "processedRowsPerSecond": 96.5,
        }
    ]
    (op,) = s["stateOperators"]
    assert op["operatorName"] == "stateStoreSave"
    assert (op["numRowsTotal"], op["memoryUsedBytes"], op["commitTimeMs"]) == (7, 2632, 480)
    assert op["stateSizeBytes"] == 1328
    assert op["stateSizeMetric"] == "stateOnCurrentVersionSizeBytes"
    assert s["sink"] == {"description": "ForeachBatchSink"}  # -1 (unknown) rows left out
    json.dumps(s, allow_nan=False)  # plain JSON


def test_the_summary_is_bounded_whatever_spark_posts() -> None:
    many = {
        **PROGRESS,
        "stateOperators": [
            {"operatorName": "x" * 10_000, "numRowsTotal": float("nan"), "memoryUsedBytes": -1}
        ]
        * 500,
        "durationMs": {f"phase{i}": i for i in range(500)},
    }
    s = summarize(many)
    assert len(s["stateOperators"]) == MAX_OPERATORS
    assert len(s["durationMs"]) <= 12
    op = s["stateOperators"][0]
    assert len(op["operatorName"]) <= 120
    assert "numRowsTotal" not in op and "memoryUsedBytes" not in op  # NaN, -1: unknown
    assert len(json.dumps(s)) < 16 * 1024


def _committed_epoch(store: Store) -> Any:
    jid = job_id("counts")
    store.create_job(jid, "counts", {"entrypoint": "/nowhere/app.py"}, {})
    att = store.start_attempt(jid, Owner("h", 1, "x"), 600.0, AttemptNo(0)).attempt
    store.pin_epoch(jid, Epoch(0), att, ControlVersion(store.get_job(jid).control_version))
    store.decide_epoch(jid, Epoch(0), att, 120, False)
    store.mark_epoch_committed(jid, Epoch(0))
    return jid


def test_the_store_keeps_the_summary_with_the_epoch_and_refuses_one_too_big(store: Store) -> None:
    jid = _committed_epoch(store)
    summary = summarize(PROGRESS)
    store.set_epoch_metrics(jid, Epoch(0), duration_ms=1243.0, progress=summary)
    (e,) = store.list_epochs(jid)
    assert e.progress == summary and e.duration_ms == 1243.0
    assert e.to_dict()["progress"] == summary
    # Metrics without a progress keep the one recorded.
    store.set_epoch_metrics(jid, Epoch(0), backlog=3)
    assert store.list_epochs(jid)[0].progress == summary
    with pytest.raises(InvalidInput, match="progress"):
        store.set_epoch_metrics(jid, Epoch(0), progress={"x": "y" * 20_000})
    with pytest.raises(InvalidInput, match="progress"):
        store.set_epoch_metrics(jid, Epoch(0), progress=["not", "an", "object"])  # type: ignore[arg-type]


def test_metrics_series_carry_units_help_and_an_operator_label(store: Store) -> None:
    jid = _committed_epoch(store)
    store.set_epoch_metrics(jid, Epoch(0), progress=summarize(PROGRESS))
    newest = newest_progress(store.list_epochs(jid))
    families: list[Metric] = list(progress_families([(str(jid), newest)]))
    text = render(families).decode()
    lines = text.splitlines()
    assert 'stoker_job_state_rows{job_id="counts",operator="0:stateStoreSave"} 7.0' in lines
    assert (
        'stoker_job_state_memory_bytes{job_id="counts",operator="0:stateStoreSave"} 2632.0' in lines
    )
    assert (
        'stoker_job_state_store_size_bytes{job_id="counts",operator="0:stateStoreSave"} 1328.0'
        in lines
    )
    assert 'stoker_job_state_commit_seconds{job_id="counts",operator="0:stateStoreSave"} 0.48' in (
        lines
    )
    assert 'stoker_job_epoch_phase_seconds{job_id="counts",phase="addBatch"} 0.9' in lines
    assert 'stoker_job_spark_input_rows_per_second{job_id="counts"} 40.0' in lines
    assert 'stoker_job_spark_processed_rows_per_second{job_id="counts"} 96.5' in lines
    for family in families:
        assert f"# HELP {family.name} " in text
    # A job without a progress recorded has none of these series.
    assert render(list(progress_families([("other", None)]))).decode().count("other") == 0


def test_sources_are_named_as_the_pipeline_names_them_when_as_many() -> None:
    named = summarize(PROGRESS, ["generator(rows_per_second=40)"])["sources"][0]
    assert named["description"] == "generator(rows_per_second=40)"
    assert named["spark"] == "stoker_generator"  # Spark's kept beside
    # Not as many (a source Spark lists twice, or a name missing): Spark's descriptions.
    assert summarize(PROGRESS, ["a", "b"])["sources"][0]["description"] == "stoker_generator"


def test_rates_count_the_rows_read_not_the_rows_written() -> None:
    """An aggregation writes a few rows for the many it reads: the input and processing rates
    (the job page's chart, the jobs list, /metrics) count Spark's numInputRows where the
    epoch's progress has it (before: the rows written; a windowed count reading 100-200 rows/s
    showed 0.35-1.3, found by a newcomer walk), and the rows written without one."""
    from dataclasses import replace

    from stoker.server.metrics import rates
    from stoker.server.ui.views import epoch_series
    from stoker.store.records import EpochRecord
    from stoker.types import EpochState

    def epoch(n: int, pinned: float, progress: dict[str, Any] | None) -> EpochRecord:
        return EpochRecord(
            job_id=job_id("counts"),
            epoch=Epoch(n),
            control_version=ControlVersion(0),
            state=EpochState.COMMITTED,
            pinned_by=AttemptNo(1),
            decided_by=AttemptNo(1),
            rows_in=3,  # the windows' counts written
            final=False,
            pinned_at=pinned,
            decided_at=pinned + 0.5,
            committed_at=pinned + 1.0,
            duration_ms=1000.0,
            progress=progress,
        )

    read = summarize(PROGRESS)  # numInputRows 120
    first, second = epoch(0, 100.0, read), epoch(1, 102.0, read)
    assert second.rows_read == 120 and replace(second, progress=None).rows_read == 3
    series = epoch_series([second, first])
    assert series["rows"] == [3, 3]  # what the epochs wrote
    assert series["input_rate"][1] == 60.0 and series["process_rate"][1] == 120.0
    assert rates([first, second], now=104.0) == (60.0, 120.0)
