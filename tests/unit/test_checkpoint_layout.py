"""Spark's checkpoint folder, read and trimmed by stoker.checkpoint_layout: on folders laid out
by hand as Spark 4.x writes them (a log entry is a version line ``v1`` and JSON lines; an
offset entry's second line carries the SQL settings, then one offset per source)."""

from __future__ import annotations

import json
from pathlib import Path

from stoker import checkpoint_layout as cl

ROCKS = cl.ROCKSDB_PROVIDER


def _touch(path: Path, text: str = "v1") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _offsets(cp: Path, batch: int, conf: dict[str, str], *sources: dict[str, object]) -> Path:
    meta = {"batchWatermarkMs": 0, "batchTimestampMs": 0, "conf": conf}
    lines = ["v1", json.dumps(meta), *(json.dumps(s) for s in sources)]
    f = _touch(cp / "offsets" / str(batch), "\n".join(lines) + "\n")
    _touch(cp / "offsets" / f".{batch}.crc", "crc")
    return f


def _commit(cp: Path, batch: int) -> Path:
    _touch(cp / "commits" / f".{batch}.crc", "crc")
    return _touch(cp / "commits" / str(batch), 'v1\n{"nextBatchWatermarkMs":0}\n')


def _checkpoint(tmp_path: Path, planned: int, committed: int, partitions: int = 8) -> Path:
    cp = tmp_path / "checkpoint"
    conf = {cl.SHUFFLE_PARTITIONS: str(partitions), cl.PROVIDER_KEY: ROCKS}
    for b in range(planned):
        _offsets(cp, b, conf, {"sid": "s0", "next": b * 10, "finished": False, "cv": 0})
    for b in range(committed):
        _commit(cp, b)
    _touch(cp / "metadata", '{"id":"q-1"}')
    _touch(cp / ".metadata.crc", "crc")
    return cp


def test_batch_ids_are_the_numbered_entries_in_order(tmp_path: Path) -> None:
    cp = _checkpoint(tmp_path, planned=12, committed=11)
    _touch(cp / "offsets" / ".12.5f3e.tmp")  # half written: not a batch
    assert cl.batch_ids(cp / "offsets") == list(range(12))
    assert cl.offset_ids(cp) == list(range(12))
    assert cl.commit_ids(cp) == list(range(11))
    assert [f.name for f in cl.batch_files(cp / "commits")] == [str(b) for b in range(11)]
    assert cl.batch_ids(tmp_path / "nothing") == []


def test_committed_and_uncommitted(tmp_path: Path) -> None:
    cp = _checkpoint(tmp_path, planned=5, committed=3)
    assert cl.has_offset_log(cp)
    assert cl.is_committed(cp, 2) and not cl.is_committed(cp, 3)
    assert cl.last_committed(cp) == 2
    assert cl.uncommitted(cp) == [3, 4]
    empty = tmp_path / "empty"
    assert not cl.has_offset_log(empty)
    assert cl.last_committed(empty) is None
    assert cl.uncommitted(empty) == []
    only_planned = _checkpoint(tmp_path / "p", planned=2, committed=0)
    assert cl.uncommitted(only_planned) == [0, 1]


def test_offset_lines_and_conf(tmp_path: Path) -> None:
    cp = _checkpoint(tmp_path, planned=3, committed=3, partitions=5)
    lines = cl.offset_lines(cp, 1)
    assert lines is not None and [json.loads(x)["next"] for x in lines] == [10]
    assert cl.offset_lines(cp, 7) is None
    conf = cl.read_offset_conf(cp)
    assert conf is not None and conf[cl.SHUFFLE_PARTITIONS] == "5"
    assert cl.checkpoint_partitions(cp) == 5
    assert cl.read_offset_conf(cp, 9) is None
    assert cl.read_offset_conf(tmp_path / "none") is None
    assert cl.checkpoint_partitions(tmp_path / "none") is None


def test_conf_one_level_down_and_unreadable(tmp_path: Path) -> None:
    cp = tmp_path / "checkpoint"
    nested = {"metadata": {"conf": {cl.SHUFFLE_PARTITIONS: "3"}}}
    _touch(cp / "offsets" / "0", f"v1\n{json.dumps(nested)}\n")
    assert cl.read_offset_conf(cp, 0) == {cl.SHUFFLE_PARTITIONS: "3"}
    _touch(cp / "offsets" / "1", "v1\nnot json\n")
    assert cl.read_offset_conf(cp, 1) is None
    _touch(cp / "offsets" / "2", "v1\n")
    assert cl.read_offset_conf(cp, 2) is None
    _touch(cp / "offsets" / "3", 'v1\n{"batchWatermarkMs":0}\n')
    assert cl.read_offset_conf(cp, 3) == {}


def test_trim_drops_later_entries_and_their_checksums(tmp_path: Path) -> None:
    cp = _checkpoint(tmp_path, planned=5, committed=4)
    cl.trim_logs(cp, 1)
    assert cl.offset_ids(cp) == [0, 1] and cl.commit_ids(cp) == [0, 1]
    assert not (cp / "offsets" / ".2.crc").exists() and (cp / "offsets" / ".1.crc").exists()
    cl.trim_logs(cp, None)
    assert cl.offset_ids(cp) == [] and cl.commit_ids(cp) == []


def test_set_query_id(tmp_path: Path) -> None:
    cp = _checkpoint(tmp_path, planned=1, committed=1)
    cl.set_query_id(cp, "q-2")
    assert json.loads((cp / "metadata").read_text()) == {"id": "q-2"}
    assert not (cp / ".metadata.crc").exists()  # its checksum would no longer match
    cl.set_query_id(tmp_path / "none", "q-3")  # no metadata yet: nothing to do
    assert not (tmp_path / "none").exists()


# A driver killed while Spark wrote the first entry of its offset log leaves a hidden temporary
# file there; Spark then refuses to start the query on batch 0 for good. Such leftovers go when
# the log holds no batch; a log that does is never touched.
def test_leftovers_of_a_first_entry_are_removed(tmp_path: Path) -> None:
    cp = tmp_path / "checkpoint"
    tmp = _touch(cp / "offsets" / ".0.5f3e.tmp")
    crc = _touch(cp / "offsets" / "..0.5f3e.tmp.crc")
    commit_tmp = _touch(cp / "commits" / ".0.77aa.tmp")
    metadata = _touch(cp / "metadata", '{"id": "q"}')
    removed = cl.clear_half_written_logs(cp)
    assert sorted(removed) == sorted([tmp, crc, commit_tmp])
    assert list((cp / "offsets").iterdir()) == [] and list((cp / "commits").iterdir()) == []
    assert metadata.exists()  # the query's id stays


def test_a_log_with_a_batch_is_left_alone(tmp_path: Path) -> None:
    cp = tmp_path / "checkpoint"
    first = _touch(cp / "offsets" / "0")
    tmp = _touch(cp / "offsets" / ".1.9c1d.tmp")
    assert cl.clear_half_written_logs(cp) == []
    assert first.exists() and tmp.exists()


def test_no_checkpoint_yet(tmp_path: Path) -> None:
    assert cl.clear_half_written_logs(tmp_path / "checkpoint") == []


def test_state_operators_and_partitions(tmp_path: Path) -> None:
    cp = _checkpoint(tmp_path, planned=3, committed=3)
    assert not cl.has_state(cp) and cl.operators(cp) == {} and cl.state_partitions(cp) == {}
    info = {"operatorInfo": {"operatorId": 0, "operatorName": "stateStoreSave"}}
    _touch(cp / "state" / "0" / "_metadata" / "metadata", f"v1\n{json.dumps(info)}\n")
    v2 = {"operatorInfo": {"operatorId": 1, "operatorName": "dedupe"}}
    _touch(cp / "state" / "1" / "_metadata" / "v2" / "2", f"v1\n{json.dumps(v2)}\n")
    _touch(cp / "state" / "2" / "_metadata" / "metadata", "v1\n{}\n")
    # Operator 0 wrote version 3 on partitions 0-2; partition 3 is left from before (version 1).
    for part in range(3):
        _touch(cp / "state" / "0" / str(part) / "3.changelog")
        _touch(cp / "state" / "0" / str(part) / "2.zip")
    _touch(cp / "state" / "0" / "3" / "1.zip")
    _touch(cp / "state" / "0" / "3" / ".1.zip.crc")
    assert cl.has_state(cp)
    assert cl.operators(cp) == {0: "stateStoreSave", 1: "dedupe", 2: "unknown"}
    assert cl.state_partitions(cp) == {0: 3, 1: 0, 2: 0}


def test_inspect(tmp_path: Path) -> None:
    cp = _checkpoint(tmp_path, planned=4, committed=2, partitions=6)
    st = cl.inspect(cp)
    assert (st.last_batch, st.last_committed) == (3, 1)
    assert st.partitions == 6 and st.provider == ROCKS and st.uncommitted == [2, 3]
    bare = cl.inspect(tmp_path / "none")
    assert bare.last_batch is None and bare.uncommitted == [] and bare.partitions is None
    assert bare.provider == cl.HDFS_PROVIDER  # Spark's default when nothing is recorded


# agreement with the store ---------------------------------------------------------------------
def test_a_checkpoint_behind_the_stores_decided_epochs_is_told_from_the_normal_cases() -> None:
    """(newest offset batch, newest decided epoch) -> behind. Normal: nothing anywhere (a fresh
    job); the epoch in flight (offsets for N, nothing decided for N); decided but not in
    Spark's commit log (the offsets for it are there); far ahead (a restored checkpoint cut at
    the savepoint's epoch, a store with none of its epochs). Behind: no offsets while the store
    decided epochs (the folder lost), or offsets that end before the newest decided epoch (an
    older copy)."""
    behind = cl.behind_store
    assert not behind(None, None)  # fresh
    assert not behind(0, None)  # epoch 0 in flight, nothing decided yet
    assert not behind(8, 7)  # epoch 8 in flight
    assert not behind(7, 7)  # decided 7, committed by Spark or not
    assert not behind(41, None) and not behind(41, 3)  # restored: ahead of the store
    assert behind(None, 0) and behind(None, 7)  # the checkpoint has no offsets
    assert behind(3, 7) and behind(6, 7)  # truncated: ends before the newest decided epoch


def test_describe_end_names_where_the_logs_end(tmp_path: Path) -> None:
    cp = tmp_path / "checkpoint"
    assert cl.describe_end(cp) == "does not exist"
    (cp / "offsets").mkdir(parents=True)
    assert cl.describe_end(cp) == "has no offsets"
    _offsets(cp, 0, {})
    assert cl.describe_end(cp) == "ends at batch 0 (none committed)"
    _commit(cp, 0)
    _offsets(cp, 1, {})
    assert cl.describe_end(cp) == "ends at batch 1 (committed up to 0)"
