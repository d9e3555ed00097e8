"""Backlog: each source kind's pure function of (end, latest) offsets, what the stoker readers
report as their latest offset, and how an epoch's progress becomes its recorded metrics."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from stoker.runtime.metrics import (
    epoch_duration_ms,
    progress_backlog,
    ran_batch,
    source_backlog,
)
from stoker.sources._files_format import parse_simple_ddl
from stoker.sources._files_reader import backlog as files_backlog
from stoker.sources.files import FilesDataSource
from stoker.sources.generator import GeneratorDataSource
from stoker.sources.generator import backlog as generator_backlog
from stoker.sources.spark import kafka_backlog


def gen(next_: int, sid: str = "s0", finished: bool = False) -> dict[str, Any]:
    return {"sid": sid, "next": next_, "finished": finished}


def seq(n: int, sid: str = "s1") -> dict[str, Any]:
    return {"sid": sid, "seq": n, "finished": False}


# the pure functions -----------------------------------------------------------------------
def test_generator_backlog_is_rows_past_the_end() -> None:
    assert generator_backlog(gen(100), gen(250)) == 150
    assert generator_backlog(gen(100), gen(100)) == 0
    assert generator_backlog(gen(100), gen(90)) == 0  # never negative


def test_files_backlog_is_files_past_the_end() -> None:
    assert files_backlog(seq(3), seq(10)) == 7
    assert files_backlog(seq(10), seq(10)) == 0
    assert files_backlog(seq(10), seq(4)) == 0


def test_kafka_backlog_sums_latest_minus_end_over_partitions() -> None:
    end = {"events": {"0": 10, "1": 20}, "other": {"0": 5}}
    latest = {"events": {"0": 15, "1": 20}, "other": {"0": 9}}
    assert kafka_backlog(end, latest) == 5 + 0 + 4


def test_kafka_backlog_falls_back_to_the_average_metric() -> None:
    end = {"events": {"0": 10, "1": 20, "2": 0}}
    assert kafka_backlog(end, None, {"avgOffsetsBehindLatest": "2.5"}) == 8  # round(7.5)
    assert kafka_backlog(end, None, {}) is None
    assert kafka_backlog(end, None, {"avgOffsetsBehindLatest": "n/a"}) is None


def test_kafka_backlog_refuses_other_shapes() -> None:
    assert kafka_backlog({"a": 1}, {"a": 2}) is None
    assert kafka_backlog(None, None) is None
    assert kafka_backlog({"t": {"0": True}}, {"t": {"0": 3}}) is None


# from a progress ----------------------------------------------------------------------------
def source_progress(end: Any, latest: Any, metrics: dict[str, str] | None = None) -> dict[str, Any]:
    # As PySpark hands them over: offsets as JSON text ("null" for none).
    return {
        "description": "x",
        "startOffset": "null",
        "endOffset": json.dumps(end),
        "latestOffset": json.dumps(latest),
        "metrics": metrics or {},
    }


def progress(batch: int, sources: list[dict[str, Any]], ran: bool = True) -> dict[str, Any]:
    duration = {"latestOffset": 3, "triggerExecution": 420}
    if ran:
        duration.update(addBatch=300, walCommit=20)
    return {"batchId": batch, "durationMs": duration, "sources": sources}


def test_source_backlog_dispatches_on_the_offset_shape() -> None:
    assert source_backlog(source_progress(gen(10), gen(40))) == 30
    assert source_backlog(source_progress(seq(2), seq(5))) == 3
    kafka = source_progress({"t": {"0": 1}}, {"t": {"0": 11}})
    assert source_backlog(kafka) == 10
    # a stoker source that reported no latest offset, or another source's: unknown
    assert source_backlog(source_progress(gen(10), None)) is None
    assert source_backlog(source_progress(gen(10, "s0"), gen(40, "s9"))) is None
    assert source_backlog(source_progress({"rate": 5}, {"rate": 9})) is None
    assert source_backlog({"endOffset": "not json", "latestOffset": "x"}) is None


def test_epoch_backlog_sums_the_sources_that_know_theirs() -> None:
    both = progress(4, [source_progress(gen(10), gen(40)), source_progress(seq(1), seq(3))])
    assert progress_backlog(both) == 32
    partial = progress(4, [source_progress(gen(10), gen(40)), source_progress({"r": 1}, None)])
    assert progress_backlog(partial) == 30
    assert progress_backlog(progress(4, [source_progress({"r": 1}, None)])) is None
    assert progress_backlog(progress(4, [])) is None


def test_an_idle_trigger_is_not_an_epoch_that_ran() -> None:
    assert ran_batch(progress(3, []))
    assert not ran_batch(progress(4, [], ran=False))
    assert epoch_duration_ms(progress(3, [])) == 420.0
    assert epoch_duration_ms({"durationMs": {}}) is None


# what the readers report --------------------------------------------------------------------
def test_bounded_generator_reports_its_total_as_latest() -> None:
    reader: Any = GeneratorDataSource({"sid": "s0", "total": "1000", "max_rows_per_epoch": "100"})
    reader = reader.streamReader(None)
    assert reader.reportLatestOffset() is None  # nothing planned yet
    end = reader.latestOffset(reader.initialOffset(), reader.getDefaultReadLimit())
    assert end["next"] == 100
    latest = reader.reportLatestOffset()
    assert latest["next"] == 1000
    assert generator_backlog(end, latest) == 900


def test_rate_paced_generator_reports_the_rows_produced_so_far() -> None:
    src: Any = GeneratorDataSource({"sid": "s0", "rows_per_second": "1000000"})
    reader = src.streamReader(None)
    start = reader.initialOffset()
    first = reader.latestOffset(start, ReadAllAvailable())
    before = reader.reportLatestOffset()["next"]
    assert before >= first["next"]
    deadline = time.monotonic() + 30
    while reader.reportLatestOffset()["next"] <= before:  # the rate keeps producing
        assert time.monotonic() < deadline
        time.sleep(0.001)


def test_endless_generator_without_a_rate_reports_no_latest() -> None:
    src: Any = GeneratorDataSource({"sid": "s0", "max_rows_per_epoch": "10"})
    reader = src.streamReader(None)
    reader.latestOffset(reader.initialOffset(), reader.getDefaultReadLimit())
    assert reader.reportLatestOffset() is None


def test_files_source_reports_every_file_discovered(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    for i in range(5):
        (folder / f"f{i}.json").write_text(json.dumps({"id": i}) + "\n")
    opts = {
        "sid": "s1",
        "path": str(folder),
        "format": "json",
        "bounded": "false",
        "log_path": str(tmp_path / "log.jsonl"),
        "max_files_per_epoch": "2",
    }
    src: Any = FilesDataSource(opts)
    reader = src.streamReader(parse_simple_ddl("id long"))
    assert reader.reportLatestOffset() is None
    end = reader.latestOffset(reader.initialOffset(), reader.getDefaultReadLimit())
    assert end["seq"] == 2  # two files per epoch
    latest = reader.reportLatestOffset()
    assert latest["seq"] == 5
    assert files_backlog(end, latest) == 3


@pytest.mark.parametrize(("files", "parts", "sizes"), [(7, 3, [3, 2, 2]), (2, 8, [1, 1])])
def test_files_are_grouped_in_contiguous_runs(files: int, parts: int, sizes: list[int]) -> None:
    from stoker.sources._control import contiguous_groups

    paths = [f"/in/{i}" for i in range(files)]
    groups = contiguous_groups(paths, parts)
    assert [len(g) for g in groups] == sizes
    assert [p for g in groups for p in g] == paths
    assert contiguous_groups([], 4) == []


def test_a_rate_change_keeps_the_rows_produced_and_not_read(tmp_path: Path) -> None:
    """Rows the generator produced at the old rate and no epoch read yet are still owed after
    a rate change (measured before: a step down from 750 to 150 rows/s dropped 47,230 rows of
    backlog, which made the backlog after the step look smaller than it was)."""
    from stoker.store import open_store
    from stoker.types import ControlKind, JobId

    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = open_store(url)
    jid = JobId("gen-job")
    store.create_job(jid, "gen", {}, {})
    src: Any = GeneratorDataSource(
        {
            "sid": "s0",
            "rows_per_second": "2000",
            "max_rows_per_epoch": "1",
            "store_url": url,
            "job_id": jid,
        }
    )
    reader = src.streamReader(None)
    end = reader.latestOffset(reader.initialOffset(), reader.getDefaultReadLimit())
    deadline = time.monotonic() + 30
    while reader.reportLatestOffset()["next"] - end["next"] < 100:  # a backlog builds up
        assert time.monotonic() < deadline
        time.sleep(0.005)
        end = reader.latestOffset(end, reader.getDefaultReadLimit())
    owed = generator_backlog(end, reader.reportLatestOffset())
    store.add_control(jid, ControlKind.RATE_LIMIT, {"rows_per_second": 1.0}, sender="test")
    end = reader.latestOffset(end, reader.getDefaultReadLimit())  # planned under the new rate
    assert generator_backlog(end, reader.reportLatestOffset()) >= owed - 2
    store.close()
