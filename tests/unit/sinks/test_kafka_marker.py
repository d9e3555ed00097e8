"""The Kafka sink's marker and staged names (stoker.sinks._kafka_publish, _kafka_stage): what
a commit done again reads as published, and which staged files are whose. No broker."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from stoker.sinks._kafka_publish import Marker, names
from stoker.sinks._kafka_stage import StageTask, parse_name, part_name, staged_files, write_part


def test_a_marker_says_how_much_of_an_epoch_of_its_job_is_published() -> None:
    m = Marker("j", epoch=5, attempt=2, through=1, parts=4)
    assert m.published("j", 5) == 2  # parts 0 and 1: resume at 2
    assert m.published("j", 4) == -1  # a later epoch of the job is marked: all of epoch 4
    assert m.published("j", 6) == 0  # nothing of a later epoch
    assert m.published("other", 5) == 0  # another job id (a restore rewriting): not its
    whole = Marker("j", 5, 2, through=3, parts=4)
    assert whole.whole and whole.published("j", 5) == -1
    empty = Marker("j", 7, 1, through=-1, parts=0)  # an epoch without rows, marked alone
    assert empty.published("j", 7) == -1
    assert Marker.from_metadata(m.to_metadata()) == m
    assert Marker.from_metadata("") is None and Marker.from_metadata("{nope") is None
    assert Marker.from_metadata('{"job": "j"}') is None


def test_staged_names_carry_their_owner_and_task(tmp_path: Path) -> None:
    name = part_name("uid-1", 3, 2, 7, 123456)
    s = parse_name(name)
    assert s is not None and (s.epoch, s.attempt, s.part, s.task, s.uid) == (
        3,
        2,
        7,
        123456,
        "uid-1",
    )
    assert parse_name("e3.a2.p7.t1.uid-1.arrow.tmp") is None
    t = StageTask(str(tmp_path), "uid-1", 3, 2)
    batch = pa.RecordBatch.from_pydict({"key": [b"k"], "value": [b"v"]})
    got, rows, size = write_part(t, 0, 9, iter([batch]))
    assert rows == 1 and size > 0 and got == part_name("uid-1", 3, 2, 0, 9)
    assert write_part(t, 1, 10, iter([batch.slice(0, 0)])) == ("", 0, 0)  # no rows, no file
    (tmp_path / part_name("uid-2", 3, 2, 0, 11)).write_bytes(b"")  # another uid's
    assert [s.name for s in staged_files(tmp_path, "uid-1")] == [got]
    assert staged_files(tmp_path / "missing", "uid-1") == []


def test_the_transactional_id_is_the_uid_and_the_sink() -> None:
    assert names("u1", "abc") == "stoker-u1-abc" != names("u2", "abc")
