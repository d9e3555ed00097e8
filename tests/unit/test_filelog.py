"""stoker.sources._filelog: the durable, append-only list of a file source's input files."""

from __future__ import annotations

import json
import multiprocessing
import os
from pathlib import Path

import pytest

from stoker.errors import SourceError, StaleAttempt
from stoker.sources._fence import AttemptFence, owner_from_json, owner_to_json
from stoker.sources._filelog import Entry, FileLog, FolderScan, list_folder
from stoker.store import open_store
from stoker.store.records import Owner
from stoker.types import AttemptNo, AttemptState, JobId

S = 1_000 * 10**9  # 1000 s in ns


def _lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _ids(log: FileLog) -> list[tuple[int, str]]:
    return [(e.seq, e.path) for e in log.entries]


# list_folder -----------------------------------------------------------------------------------


def _touch(path: Path, size: int, mtime: float) -> str:
    path.write_bytes(b"x" * size)
    os.utime(path, ns=(int(mtime * 1e9), int(mtime * 1e9)))
    return str(path)


def test_list_folder_gives_visible_files_oldest_first(tmp_path: Path) -> None:
    b = _touch(tmp_path / "b.json", 2, 1_000)
    a = _touch(tmp_path / "a.json", 1, 2_000)
    c = _touch(tmp_path / "c.json", 3, 1_000)  # same mtime as b: the path breaks the tie
    _touch(tmp_path / ".hidden.json", 1, 10)
    _touch(tmp_path / "_tmp.json", 1, 10)
    (tmp_path / "sub").mkdir()
    assert list_folder(tmp_path, None) == [(S, b, 2), (S, c, 3), (2 * S, a, 1)]


def test_list_folder_filters_by_suffix(tmp_path: Path) -> None:
    keep = _touch(tmp_path / "a.csv", 1, 1_000)
    _touch(tmp_path / "a.csv.tmp", 1, 1_000)
    assert list_folder(tmp_path, ".csv") == [(S, keep, 1)]


def test_list_folder_of_an_empty_folder(tmp_path: Path) -> None:
    assert list_folder(tmp_path, None) == []


# append, seal, reload --------------------------------------------------------------------------


def test_a_new_log_is_empty_and_creates_no_file(tmp_path: Path) -> None:
    log = FileLog(tmp_path / "log" / "s0.jsonl")
    assert (log.entries, log.sealed) == ([], False)
    log.append([])
    assert not (tmp_path / "log").exists()


def test_append_numbers_entries_in_the_given_order_and_writes_them(tmp_path: Path) -> None:
    path = tmp_path / "log" / "s0.jsonl"
    log = FileLog(path)
    log.append([(2, "/in/b", 20), (1, "/in/a", 10)])
    assert log.entries == [Entry(0, "/in/b", 20, 2), Entry(1, "/in/a", 10, 1)]
    assert _lines(path) == [
        {"seq": 0, "path": "/in/b", "size": 20, "mtime": 2},
        {"seq": 1, "path": "/in/a", "size": 10, "mtime": 1},
    ]


def test_known_files_are_not_appended_again(tmp_path: Path) -> None:
    path = tmp_path / "s0.jsonl"
    log = FileLog(path)
    log.append([(1, "/in/a", 10)])
    log.append([(1, "/in/a", 10), (3, "/in/c", 30)])
    log.append([(1, "/in/a", 10)])
    assert _ids(log) == [(0, "/in/a"), (1, "/in/c")]
    assert len(_lines(path)) == 2
    # A reloaded log knows them too.
    again = FileLog(path)
    again.append([(3, "/in/c", 30), (4, "/in/d", 40)])
    assert _ids(again) == [(0, "/in/a"), (1, "/in/c"), (2, "/in/d")]


def test_reload_gives_the_same_entries(tmp_path: Path) -> None:
    path = tmp_path / "s0.jsonl"
    log = FileLog(path)
    log.append([(1, "/in/a", 10)])
    log.append([(2, "/in/b", 20)])
    again = FileLog(path)
    assert (again.entries, again.sealed) == (log.entries, False)


def test_seal_is_written_once_and_survives_a_reload(tmp_path: Path) -> None:
    path = tmp_path / "s0.jsonl"
    log = FileLog(path)
    log.append([(1, "/in/a", 10)], seal=True)
    assert log.sealed
    log.append([], seal=True)
    assert _lines(path) == [{"seq": 0, "path": "/in/a", "size": 10, "mtime": 1}, {"sealed": True}]
    again = FileLog(path)
    assert (again.entries, again.sealed) == ([Entry(0, "/in/a", 10, 1)], True)
    again.append([], seal=True)
    assert len(_lines(path)) == 2


def test_sealing_an_empty_snapshot_writes_the_seal(tmp_path: Path) -> None:
    path = tmp_path / "s0.jsonl"
    FileLog(path).append([], seal=True)
    again = FileLog(path)
    assert (again.entries, again.sealed) == ([], True)


def test_blank_lines_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "s0.jsonl"
    path.write_text(
        '{"seq": 0, "path": "/in/a", "size": 1}\n\n{"seq": 1, "path": "/in/b", "size": 2}\n'
    )
    assert FileLog(path).entries == [Entry(0, "/in/a", 1), Entry(1, "/in/b", 2)]


# torn last line --------------------------------------------------------------------------------


def test_a_torn_last_line_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "s0.jsonl"
    path.write_text('{"seq": 0, "path": "/in/a", "size": 1}\n{"seq": 1, "pa')
    log = FileLog(path)
    assert (log.entries, log.sealed) == ([Entry(0, "/in/a", 1)], False)


def test_a_last_line_without_its_newline_is_torn_too(tmp_path: Path) -> None:
    # The write of a line and its newline is one write; without the newline it was cut short
    # (and never fsynced, so never acknowledged), even when the text happens to parse.
    path = tmp_path / "s0.jsonl"
    path.write_text(
        '{"seq": 0, "path": "/in/a", "size": 1}\n{"seq": 1, "path": "/in/b", "size": 2}'
    )
    assert FileLog(path).entries == [Entry(0, "/in/a", 1)]


def test_a_torn_seal_does_not_seal(tmp_path: Path) -> None:
    path = tmp_path / "s0.jsonl"
    path.write_text('{"seq": 0, "path": "/in/a", "size": 1}\n{"seal')
    log = FileLog(path)
    assert (log.entries, log.sealed) == ([Entry(0, "/in/a", 1)], False)


def test_entries_appended_after_a_torn_line_survive_the_next_reload(tmp_path: Path) -> None:
    path = tmp_path / "s0.jsonl"
    path.write_text('{"seq": 0, "path": "/in/a", "size": 1}\n{"seq": 1, "pa')
    log = FileLog(path)
    log.append([(2, "/in/b", 2), (3, "/in/c", 3)], seal=True)
    assert _ids(log) == [(0, "/in/a"), (1, "/in/b"), (2, "/in/c")]
    again = FileLog(path)
    assert (again.entries, again.sealed) == (log.entries, True)
    assert _lines(path) == [
        {"seq": 0, "path": "/in/a", "size": 1},
        {"seq": 1, "path": "/in/b", "size": 2, "mtime": 2},
        {"seq": 2, "path": "/in/c", "size": 3, "mtime": 3},
        {"sealed": True},
    ]


# duplicates and order on load -------------------------------------------------------------------


def test_the_same_path_twice_is_repaired_into_a_hole(tmp_path: Path) -> None:
    # Two unlocked writers (code before the lock) both appended /in/b: the second entry reads
    # nothing, so the file is read once, and the seqs after it keep their meaning.
    path = tmp_path / "s0.jsonl"
    path.write_text(
        '{"seq": 0, "path": "/in/a", "size": 1}\n'
        '{"seq": 1, "path": "/in/b", "size": 2}\n'
        '{"seq": 2, "path": "/in/b", "size": 2}\n'
        '{"seq": 3, "path": "/in/c", "size": 3}\n'
    )
    log = FileLog(path)
    assert log.repaired == [2]
    assert [(e.seq, e.path) for e in log.files(0, 4)] == [(0, "/in/a"), (1, "/in/b"), (3, "/in/c")]
    assert log.next_seq == 4
    log.append([(9, "/in/d", 4)])
    assert _ids(FileLog(path))[-1] == (4, "/in/d")


def test_a_seq_that_does_not_grow_is_refused_naming_the_line(tmp_path: Path) -> None:
    # Two writers numbered from their own memory: seq 1 means two files; no repair can know
    # which one an offset meant.
    path = tmp_path / "s0.jsonl"
    path.write_text(
        '{"seq": 0, "path": "/in/a", "size": 1}\n'
        '{"seq": 1, "path": "/in/b", "size": 2}\n'
        '{"seq": 1, "path": "/in/c", "size": 3}\n'
    )
    with pytest.raises(SourceError, match=r"s0.jsonl:3: seq 1 after seq 1") as err:
        FileLog(path)
    assert err.value.field == "files.log"


def test_seq_numbers_come_from_the_file_not_from_memory(tmp_path: Path) -> None:
    path = tmp_path / "s0.jsonl"
    first, second = FileLog(path), FileLog(path)
    first.append([(1, "/in/a", 1)])
    second.append([(2, "/in/b", 1)])  # its memory says 0 entries; the file says 1
    first.append([(2, "/in/b", 1), (3, "/in/c", 1)])  # b is known from the file
    assert [(x["seq"], x["path"]) for x in _lines(path)] == [
        (0, "/in/a"),
        (1, "/in/b"),
        (2, "/in/c"),
    ]


# two processes, one of them a stale attempt ---------------------------------------------------


def _store_with_two_attempts(db: Path) -> tuple[Owner, Owner]:
    """A job whose attempt 1 (owner ``old``) was taken over by attempt 2 (owner ``new``)."""
    old = Owner(host="h", pid=101, pid_started="t1")
    new = Owner(host="h", pid=202, pid_started="t2")
    st = open_store(db)
    try:
        st.create_job(JobId("j"), "j", {}, {})
        st.start_attempt(JobId("j"), old, 60.0, AttemptNo(0))
        st.start_attempt(JobId("j"), new, 60.0, AttemptNo(1), previous_dead=True)
    finally:
        st.close()
    return old, new


def _appender(log_path: str, db: str, owner: str, tag: str, n: int, out: str) -> None:
    """A process appending ``n`` files of its own plus files both racers find."""
    log = FileLog(Path(log_path))
    fence = AttemptFence(db, "j", owner_from_json(owner))
    refused = 0
    for i in range(n):
        files = [(i, f"/in/{tag}-{i}", 1), (i, f"/in/shared-{i}", 1)]
        try:
            log.append(files, guard=fence.check)
        except StaleAttempt:
            refused += 1
    fence.close()
    Path(out).write_text(str(refused))


def test_two_appenders_race_and_the_stale_attempt_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    old, new = _store_with_two_attempts(db)
    log_path = tmp_path / "sources" / "s0.files.jsonl"
    ctx = multiprocessing.get_context("spawn")
    n = 60
    procs = [
        ctx.Process(
            target=_appender,
            args=(str(log_path), str(db), owner_to_json(o), tag, n, str(tmp_path / tag)),
        )
        for o, tag in ((old, "old"), (new, "new"), (new, "new2"))
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    assert (tmp_path / "old").read_text() == str(n)  # every append of the stale one refused
    assert (tmp_path / "new").read_text() == "0"
    lines = _lines(log_path)
    seqs = [x["seq"] for x in lines]
    assert seqs == list(range(len(lines)))  # no duplicate, no gap
    paths = [str(x["path"]) for x in lines]
    assert len(paths) == len(set(paths))  # every file once
    assert set(paths) == {f"/in/{t}-{i}" for t in ("new", "new2", "shared") for i in range(n)}
    log = FileLog(log_path)
    assert log.repaired == [] and log.next_seq == 3 * n


def test_the_fence_is_the_attempt_not_a_wall_clock(tmp_path: Path) -> None:
    """The attempt number is the fence: an ended attempt's appends are refused. Its lease is
    its driver's to judge on a monotonic clock; the fence once compared it with this process's
    wall clock, and a clock step refused a healthy driver's appends."""
    db = tmp_path / "store.db"
    _old, new = _store_with_two_attempts(db)
    fence = AttemptFence(str(db), "j", new)
    fence.check()  # current, RUNNING
    st = open_store(str(db))
    try:
        st.end_attempt(JobId("j"), AttemptNo(2), AttemptState.FAILED, "ended")
    finally:
        st.close()
    with pytest.raises(StaleAttempt, match="FAILED"):
        fence.check()
    fence.close()


# the look-back window -------------------------------------------------------------------------
H = 3600 * 10**9  # an hour in ns


def test_a_late_file_inside_the_look_back_is_taken(tmp_path: Path) -> None:
    log = FileLog(tmp_path / "s0.jsonl", lookback_ns=H)
    log.append([(10 * H, "/in/a", 1)])
    added, old = log.append([(10 * H - H // 2, "/in/late", 1)])
    assert [e.path for e in added] == ["/in/late"] and old == []


def test_a_file_past_the_look_back_is_ignored_and_returned_as_old(tmp_path: Path) -> None:
    path = tmp_path / "s0.jsonl"
    log = FileLog(path, lookback_ns=H)
    log.append([(10 * H, "/in/a", 1)])
    added, old = log.append([(8 * H, "/in/too-late", 1), (10 * H, "/in/b", 1)])
    assert [e.path for e in added] == ["/in/b"]
    assert old == [(8 * H, "/in/too-late", 1)]
    assert "/in/too-late" not in path.read_text()


def test_a_name_is_taken_again_only_after_the_look_back(tmp_path: Path) -> None:
    log = FileLog(tmp_path / "s0.jsonl", lookback_ns=H)
    log.append([(10 * H, "/in/a", 1)])
    assert log.append([(10 * H + 1, "/in/a", 1)]) == ([], [])  # the same name, inside
    log.append([(12 * H, "/in/b", 1)])
    added, _ = log.append([(12 * H, "/in/a", 2)])  # a new file of an old name, past it
    assert [(e.seq, e.path) for e in added] == [(2, "/in/a")]
    assert FileLog(log.path, lookback_ns=H).repaired == []  # reloads the same way


# compaction -----------------------------------------------------------------------------------


def test_compaction_keeps_what_each_offset_means(tmp_path: Path) -> None:
    path = tmp_path / "s0.jsonl"
    log = FileLog(path, lookback_ns=H, compact_every=5)
    for i in range(30):
        log.append([(i * H, f"/in/f{i}", i)])
    before = {e.seq: e for e in log.entries}
    log.committed(20)
    assert json.loads(path.read_text().splitlines()[0])["compacted"]["base"] == 20
    # Kept: seq >= 20, and the look-back window of the newest (29 h - 1 h) for duplicates.
    assert [x["seq"] for x in _lines(path)[1:]] == list(range(20, 30))
    again = FileLog(path, lookback_ns=H, compact_every=5)
    assert again.next_seq == 30 and again.base == 20
    assert [before[e.seq] for e in again.files(20, 30)] == again.files(20, 30)
    assert [e.path for e in again.files(20, 30)] == [f"/in/f{i}" for i in range(20, 30)]
    with pytest.raises(SourceError, match="compacted"):
        again.files(3, 6)
    # New entries continue the numbering; known names stay known.
    again.append([(29 * H, "/in/f29", 29), (30 * H, "/in/f30", 30)])
    assert _ids(again)[-1] == (30, "/in/f30")
    assert len(path.read_text().splitlines()) < 30


def test_compaction_by_one_process_is_seen_by_another(tmp_path: Path) -> None:
    path = tmp_path / "s0.jsonl"
    a = FileLog(path, lookback_ns=1, compact_every=2)
    b = FileLog(path, lookback_ns=1, compact_every=2)
    for i in range(10):
        a.append([(i, f"/in/f{i}", 1)])
    b.refresh()
    a.committed(8)  # rewrites the file (a new inode)
    b.append([(20, "/in/g", 1)])
    assert b.next_seq == 11 and b.base == 8
    assert [e.path for e in FileLog(path).files(8, 11)] == ["/in/f8", "/in/f9", "/in/g"]


def test_committed_cleans_each_file_once(tmp_path: Path) -> None:
    log = FileLog(tmp_path / "s0.jsonl")
    log.append([(i, f"/in/f{i}", 1) for i in range(5)])
    cleaned: list[int] = []
    log.committed(3, clean=lambda e: cleaned.append(e.seq))
    log.committed(3, clean=lambda e: cleaned.append(e.seq))
    FileLog(log.path).committed(4, clean=lambda e: cleaned.append(e.seq))
    assert cleaned == [0, 1, 2, 3]


# the folder scan ------------------------------------------------------------------------------


def test_the_scan_returns_only_names_it_has_not_seen(tmp_path: Path) -> None:
    scan = FolderScan(tmp_path, None)
    a = _touch(tmp_path / "a.json", 1, 1_000)
    assert [p for _m, p, _s in scan.scan()] == [a]
    scan.accept()
    b = _touch(tmp_path / "b.json", 1, 500)
    _touch(tmp_path / ".c.json", 1, 500)
    assert [p for _m, p, _s in scan.scan()] == [b]
    # Not accepted (the append failed): the same names come back.
    assert [p for _m, p, _s in scan.scan()] == [b]
    scan.accept()
    assert scan.scan() == []


def test_a_settled_folder_is_not_listed(tmp_path: Path) -> None:
    scan = FolderScan(tmp_path, None)
    _touch(tmp_path / "a.json", 1, 1_000)
    os.utime(tmp_path, (1_000, 1_000))  # the folder's last change: long before the scan
    scan.scan()
    scan.accept()
    # A file whose arrival did not move the folder's mtime (forced here) is not seen: the
    # folder was not listed at all.
    _touch(tmp_path / "b.json", 1, 1_000)
    os.utime(tmp_path, (1_000, 1_000))
    assert scan.scan() == []
    (tmp_path / "c.json").write_text("x")  # a real arrival moves the mtime
    assert sorted(Path(p).name for _m, p, _s in scan.scan()) == ["b.json", "c.json"]


def test_a_name_that_left_the_folder_is_looked_at_again_when_it_returns(tmp_path: Path) -> None:
    scan = FolderScan(tmp_path, None)
    a = _touch(tmp_path / "a.json", 1, 1_000)
    _touch(tmp_path / "b.json", 1, 1_000)
    scan.scan()
    scan.accept()
    os.unlink(a)  # archived by clean_source, say
    assert scan.scan() == []
    scan.accept()
    a2 = _touch(tmp_path / "a.json", 2, 2_000)
    assert scan.scan() == [(2 * S, a2, 2)]


def test_entries_inside_the_window_are_kept_and_do_not_force_a_rewrite_each_time(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s0.jsonl"
    log = FileLog(path, lookback_ns=H, compact_every=5)
    for i in range(20):
        log.append([(i, f"/in/f{i}", 1)])  # all within one hour of each other
    log.committed(20)
    # Nothing can be dropped (every entry keeps a late duplicate out): no rewrite.
    assert "compacted" not in path.read_text()
    assert log.append([(3, "/in/f3", 1)]) == ([], [])
    assert FileLog(path, lookback_ns=H).append([(3, "/in/f3", 1)]) == ([], [])
