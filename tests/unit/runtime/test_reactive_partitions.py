"""Reactive parallelism: a stoker source splits an epoch into one partition per core its job's
driver reported (read from the job's record in a real SQLite store), keeps an explicit
``partitions``, and falls back to 2 while the cores are unknown. A replay split differently
reads the same rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from stoker.errors import SourceError
from stoker.sources import files, generator
from stoker.sources._control import FALLBACK_PARTITIONS, ReaderControl, partitions_for
from stoker.sources._files_format import parse_simple_ddl
from stoker.sources.files import FilesDataSource
from stoker.sources.generator import GeneratorDataSource, split_range
from stoker.store import Store
from stoker.types import job_id

JOB = job_id("reactive-job")


@pytest.fixture
def store(store: Store) -> Store:
    store.create_job(JOB, "p", {}, {})
    return store


def report(store: Store, cores: int) -> None:
    store.report_resources(
        JOB,
        {
            "executors": cores,
            "cores": cores,
            "executor_ids": [str(i) for i in range(cores)],
            "hosts": [],
            "requested": None,
            "at": 0.0,
        },
    )


def generator_reader(store: Store, **opts: str) -> Any:
    options = {
        "sid": "s0",
        "total": "1000",
        "max_rows_per_epoch": "500",
        "job_id": JOB,
        "store_url": store.url,
        **opts,
    }
    src: Any = GeneratorDataSource(options)
    return src.streamReader(None)


def ids(parts: list[Any]) -> list[int]:
    return [i for p in parts for i in range(p.start, p.end)]


def test_the_rule() -> None:
    assert partitions_for(None, 6) == 6
    assert partitions_for(3, 6) == 3  # explicit wins
    assert partitions_for(None, None) == FALLBACK_PARTITIONS == 2
    assert partitions_for(None, 0) == 2  # no executor yet: as unknown


def test_generator_splits_an_epoch_by_the_cores_reported(store: Store) -> None:
    report(store, 3)
    reader = generator_reader(store)
    start = reader.initialOffset()
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    parts = reader.partitions(start, end)
    assert len(parts) == 3
    assert ids(parts) == list(range(500))
    # An executor joins: the next epoch planned is split four ways.
    report(store, 4)
    nxt = reader.latestOffset(end, reader.getDefaultReadLimit())
    parts = reader.partitions(end, nxt)
    assert len(parts) == 4
    assert ids(parts) == list(range(500, 1000))


def test_explicit_partitions_are_kept(store: Store) -> None:
    report(store, 5)
    reader = generator_reader(store, partitions="1")
    start = reader.initialOffset()
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert len(reader.partitions(start, end)) == 1


def test_unknown_cores_fall_back_to_two(store: Store) -> None:
    reader = generator_reader(store)  # nothing reported yet
    start = reader.initialOffset()
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert len(reader.partitions(start, end)) == 2
    no_store: Any = GeneratorDataSource({"sid": "s0", "total": "10"})
    free = no_store.streamReader(None)
    s = free.initialOffset()
    assert len(free.partitions(s, free.latestOffset(s, free.getDefaultReadLimit()))) == 2


def test_a_replay_before_any_plan_reads_the_cores_from_the_store(store: Store) -> None:
    """Right after a start Spark replays the last logged epoch without a latestOffset first."""
    report(store, 3)
    reader = generator_reader(store)
    parts = reader.partitions({"sid": "s0", "next": 10}, {"sid": "s0", "next": 40})
    assert [(p.start, p.end) for p in parts] == [(10, 20), (20, 30), (30, 40)]


@pytest.mark.parametrize("cores", [1, 2, 3, 7, 64])
def test_a_replay_split_differently_reads_the_same_rows(cores: int) -> None:
    assert ids(split_range(17, 1000, cores)) == list(range(17, 1000))
    assert len(split_range(17, 1000, cores)) == min(cores, 983)
    assert split_range(5, 5, cores) == []


def test_files_source_groups_an_epochs_files_by_cores(store: Store, tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    for i in range(7):
        (folder / f"f{i}.json").write_text(json.dumps({"id": i}) + "\n")
    report(store, 3)
    opts = {
        "sid": "s1",
        "path": str(folder),
        "format": "json",
        "bounded": "false",
        "log_path": str(tmp_path / "log.jsonl"),
        "job_id": JOB,
        "store_url": store.url,
    }
    src: Any = FilesDataSource(opts)
    reader = src.streamReader(parse_simple_ddl("id long"))
    start = reader.initialOffset()
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    parts = reader.partitions(start, end)
    assert [len(p.paths) for p in parts] == [3, 2, 2]
    assert sorted(Path(x).name for p in parts for x in p.paths) == [f"f{i}.json" for i in range(7)]
    src_one: Any = FilesDataSource({**opts, "partitions": "7"})
    one_each = src_one.streamReader(parse_simple_ddl("id long"))
    assert [len(p.paths) for p in one_each.partitions(start, end)] == [1] * 7


def test_reader_control_plan_carries_the_cores(store: Store) -> None:
    control = ReaderControl(store.url, JOB)
    assert control.plan({"sid": "s0", "next": 0}).cores is None
    report(store, 2)
    assert control.plan({"sid": "s0", "next": 0}).cores == 2
    assert control.cores() == 2
    control.close()


def test_partitions_option_is_checked() -> None:
    with pytest.raises(SourceError, match=r"generator\.partitions"):
        generator(total=1, partitions=0).validate()
    generator(total=1, partitions=None).validate()
    with pytest.raises(SourceError, match=r"files\.partitions"):
        files("/", "json", "id long", partitions=0).validate()
