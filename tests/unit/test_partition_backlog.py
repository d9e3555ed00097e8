"""Where a backlog is (issue 42 item 2): each source's records beyond an epoch's end and, for
a Kafka source (stoker's or Spark's), each partition's, kept with the epoch's summary of
Spark's progress, bounded whatever the topics, and shown by ``stoker status``, ``/metrics`` and
the job page."""

from __future__ import annotations

import json
from typing import Any

from stoker.cli.display import backlog_line
from stoker.runtime.metrics import (
    MAX_PARTITION_NAME,
    MAX_PARTITIONS,
    source_partitions,
    with_backlogs,
)
from stoker.runtime.progress_summary import summarize
from stoker.server.exposition import render
from stoker.server.progress_metrics import newest_progress, progress_families
from stoker.sources._kafka_reader import KAFKA
from stoker.sources.base import SID
from stoker.store import Store
from stoker.store.records import Owner
from stoker.store.sql_scaling import MAX_PROGRESS_BYTES
from stoker.types import AttemptNo, ControlVersion, Epoch, job_id


def _stoker_kafka(end: dict[str, dict[str, int]], latest: dict[str, dict[str, int]]) -> Any:
    """A progress source of stoker's Kafka source: its offsets as JSON text, as Spark posts."""
    return {
        "description": "PythonMicroBatchStream@1a2b3c",
        "numInputRows": 10,
        "endOffset": json.dumps({SID: "s1", KAFKA: end}),
        "latestOffset": json.dumps({SID: "s1", KAFKA: latest}),
    }


def test_stoker_kafka_and_spark_kafka_sources_give_their_partitions() -> None:
    ours = _stoker_kafka({"orders": {"0": 7, "1": 3}}, {"orders": {"0": 70, "1": 30}})
    assert source_partitions(ours) == {"orders/0": 63, "orders/1": 27}
    spark = {
        "endOffset": json.dumps({"t": {"0": 5, "2": 9}}),
        "latestOffset": json.dumps({"t": {"0": 8, "2": 9}}),
    }
    assert source_partitions(spark) == {"t/0": 3, "t/2": 0}
    # Sources without partitions, or whose latest offsets are unknown: none.
    generator = {"endOffset": {SID: "g", "next": 5}, "latestOffset": {SID: "g", "next": 9}}
    assert source_partitions(generator) is None
    assert source_partitions({"endOffset": json.dumps({"t": {"0": 5}})}) is None
    other_run = _stoker_kafka({"t": {"0": 1}}, {"t": {"0": 2}})
    other_run["latestOffset"] = json.dumps({SID: "s2", KAFKA: {"t": {"0": 2}}})
    assert source_partitions(other_run) is None  # another instance's offsets: not comparable


def test_the_summary_keeps_each_sources_backlog_and_its_partitions() -> None:
    progress = {
        "batchId": 3,
        "sources": [
            _stoker_kafka({"orders": {"0": 7, "1": 3}}, {"orders": {"0": 70, "1": 30}}),
            {"description": "files", "endOffset": "{}", "latestOffset": None},
        ],
    }
    summary = with_backlogs(summarize(progress), progress)
    kafka, files = summary["sources"]
    assert (kafka["backlog"], kafka["partitions"]) == (90, {"orders/0": 63, "orders/1": 27})
    assert "partitionsLeftOut" not in kafka
    assert "backlog" not in files and "partitions" not in files


def test_many_partitions_and_long_topics_stay_bounded() -> None:
    """A topic of a thousand partitions, named with Kafka's longest name (249 characters), in
    eight sources: the furthest behind are kept, the rest counted, and the summary stays well
    under the store's bound (a row it refuses would lose the epoch's metrics)."""
    topic = "t" * 249
    sources = []
    for s in range(8):
        end = {topic: {str(p): 0 for p in range(1000)}}
        latest = {topic: {str(p): p + s for p in range(1000)}}
        sources.append(_stoker_kafka(end, latest))
    progress = {"batchId": 1, "sources": sources}
    summary = with_backlogs(summarize(progress), progress)
    kept = [src["partitions"] for src in summary["sources"]]
    assert sum(len(k) for k in kept) <= MAX_PARTITIONS
    assert all(len(name) <= MAX_PARTITION_NAME for k in kept for name in k)
    first = kept[0]
    assert set(first.values()) == {999, 998, 997, 996, 995, 994}  # the furthest behind
    assert summary["sources"][0]["partitionsLeftOut"] == 1000 - len(first)
    assert len(json.dumps(summary)) < MAX_PROGRESS_BYTES // 2


def test_status_names_the_partitions_furthest_behind() -> None:
    progress = {
        "sources": [
            {"partitions": {"orders/0": 63, "orders/1": 27, "orders/2": 0}},
            {"partitions": {"audit/0": 5}, "partitionsLeftOut": 2},
        ]
    }
    line = backlog_line({"backlog": 95, "progress": progress})
    assert line == "95 (orders/0 63, orders/1 27, audit/0 5, 2 more)"
    assert backlog_line({"backlog": 12_000, "progress": None}) == "12,000"
    assert backlog_line({"backlog": None}) is None


def _committed_epoch(store: Store) -> Any:
    jid = job_id("kafka-job")
    store.create_job(jid, "kafka-job", {"entrypoint": "/nowhere/app.py"}, {})
    att = store.start_attempt(jid, Owner("h", 1, "x"), 600.0, AttemptNo(0)).attempt
    store.pin_epoch(jid, Epoch(0), att, ControlVersion(store.get_job(jid).control_version))
    store.decide_epoch(jid, Epoch(0), att, 120, False)
    store.mark_epoch_committed(jid, Epoch(0))
    return jid


def test_metrics_carry_each_sources_and_each_partitions_backlog(store: Store) -> None:
    jid = _committed_epoch(store)
    progress = {
        "batchId": 0,
        "sources": [_stoker_kafka({"orders": {"0": 7, "1": 3}}, {"orders": {"0": 70, "1": 30}})],
    }
    summary = with_backlogs(summarize(progress, ["kafka(orders)"]), progress)
    store.set_epoch_metrics(jid, Epoch(0), backlog=90, progress=summary)
    newest = newest_progress(store.list_epochs(jid))
    lines = render(list(progress_families([(str(jid), newest)]))).decode().splitlines()
    src = 'job_id="kafka-job",source="0:kafka(orders)"'
    assert f"stoker_job_source_backlog_records{{{src}}} 90.0" in lines
    for part, n in (("orders/0", 63.0), ("orders/1", 27.0)):  # labels as rendered: by name
        labels = f'job_id="kafka-job",partition="{part}",source="0:kafka(orders)"'
        assert f"stoker_job_partition_backlog_records{{{labels}}} {n}" in lines
