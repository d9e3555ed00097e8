"""The files source on real Spark: clean_source after commit only, compaction across a restart,
and a zombie driver (SIGSTOPped, resumed after a new attempt took over) that cannot append.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import signal
import subprocess
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from stoker import JobState, Pipeline, sinks, sources
from stoker.sources._filelog import FileLog
from tests.support import file_sink_ids, kill_group, start_driver, wait_for
from tests.support.background import BackgroundRun

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

TRIGGER = "100ms"


def _put(folder: Path, name: str, ids: range) -> Path:
    """Write a JSON-lines file and rename it into ``folder`` (as writers should)."""
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{name}.tmp"
    tmp.write_text("".join(json.dumps({"id": i}) + "\n" for i in ids))
    os.rename(tmp, folder / name)
    return folder / name


def _wait(
    what: str, pred: Callable[[], bool], timeout: float = 120.0, log: Path | None = None
) -> None:
    def details() -> str:
        extra = ""
        if log is not None and log.exists():
            extra = "\n" + "\n".join(log.read_text(errors="replace").splitlines()[-40:])
        return f"{what}{extra}"

    wait_for(details, pred, timeout, every=0.1)


def _stop_query(spark: SparkSession, jid: str) -> None:
    for q in spark.streams.active:
        if q.name == f"stoker_{jid}":
            q.stop()


def _holds(out: Path, ids: frozenset[int]) -> bool:
    return set(file_sink_ids(out)) == ids


def _log_lines(state: Path) -> list[dict[str, Any]]:
    path = state / "sources" / "s0.files.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


# clean_source ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["archive", "delete"])
def test_clean_source_moves_a_file_only_after_its_epoch_committed(
    spark: SparkSession, tmp_path: Path, mode: str
) -> None:
    jid = f"clean_{mode}"
    indir, archive, out, state = (tmp_path / n for n in ("in", "archive", "out", "state"))
    indir.mkdir()
    entered, release = threading.Event(), threading.Event()

    def gate(df: DataFrame) -> DataFrame:
        # The epoch that reads id 1000 waits here, before its prepare: not committed yet.
        if df.where(df.id == 1000).count():
            entered.set()
            assert release.wait(120)
        return df

    src = sources.files(
        str(indir),
        "json",
        "id long",
        clean_source=mode,
        archive_dir=str(archive) if mode == "archive" else None,
    )
    p = Pipeline(jid).source(src).transform(gate).sink(sinks.files(str(out)))
    first = _put(indir, "u0.json", range(0, 5))
    run = BackgroundRun(pipeline=p, state_dir=state, trigger=TRIGGER, spark=spark)
    try:
        _wait("u0 in the sink", lambda: set(file_sink_ids(out)) == set(range(5)))
        _wait("u0 cleaned", lambda: not first.exists())
        if mode == "archive":
            assert (archive / "u0.json").read_text().count("\n") == 5
        else:
            assert not archive.exists()

        second = _put(indir, "u1.json", range(1000, 1005))
        assert entered.wait(120), "the epoch reading u1 did not start"
        time.sleep(1.0)  # several triggers: nothing may move while the epoch is uncommitted
        assert second.exists()
        assert not (archive / "u1.json").exists()
        release.set()
        _wait("u1 in the sink", lambda: set(range(1000, 1005)) <= set(file_sink_ids(out)))
        _wait("u1 cleaned", lambda: not second.exists())
        if mode == "archive":
            assert sorted(x.name for x in archive.iterdir()) == ["u0.json", "u1.json"]
    finally:
        release.set()
        _stop_query(spark, jid)
        run.wait()
    assert run.error is None, run.error
    assert file_sink_ids(out) == Counter([*range(5), *range(1000, 1005)])
    assert {x["cleaned"] for x in _log_lines(state) if "cleaned" in x} >= {1, 2}


# compaction -----------------------------------------------------------------------------------


def test_a_job_restarted_after_compaction_reads_nothing_twice(
    spark: SparkSession, tmp_path: Path
) -> None:
    jid = "compacting"
    indir, out, state = tmp_path / "in", tmp_path / "out", tmp_path / "state"
    indir.mkdir()
    # A look-back of 1 ms: entries of committed epochs are not kept for duplicate checks
    # either, so compaction drops them; after the restart the old files, still in the
    # folder, are recognised by the watermark alone.
    src = sources.files(str(indir), "json", "id long", max_file_age="1ms")
    src = dataclasses.replace(src, options={"compact_every": "2"})
    p = Pipeline(jid).source(src).sink(sinks.files(str(out)))

    run = BackgroundRun(pipeline=p, state_dir=state, trigger=TRIGGER, spark=spark)
    want: set[int] = set()
    try:
        for k in range(6):
            ids = range(100 * k, 100 * k + 10)
            _put(indir, f"f{k}.json", ids)
            want |= set(ids)
            _wait(f"f{k} in the sink", functools.partial(_holds, out, frozenset(want)))
        _wait("the log compacted", lambda: "compacted" in _log_lines(state)[0])
    finally:
        _stop_query(spark, jid)
        run.wait()
    assert run.error is None, run.error
    loaded = FileLog(state / "sources" / "s0.files.jsonl")
    assert loaded.base >= 3 and loaded.next_seq == 6
    seqs_kept = [x["seq"] for x in _log_lines(state) if "seq" in x]
    assert len(seqs_kept) < 6  # entries of committed epochs are gone from the file

    # Files that arrive while the job is down, then a restart from the same checkpoint.
    for k in range(6, 8):
        ids = range(100 * k, 100 * k + 10)
        _put(indir, f"f{k}.json", ids)
        want |= set(ids)
    run = BackgroundRun(pipeline=p, state_dir=state, trigger=TRIGGER, spark=spark, restart=True)
    try:
        _wait("f6, f7 in the sink", lambda: set(file_sink_ids(out)) == want)
        time.sleep(1.0)  # a few more triggers: nothing more may come
    finally:
        _stop_query(spark, jid)
        run.wait()
    assert run.error is None, run.error
    assert run.result is not None and run.result.state == JobState.CANCELED
    assert file_sink_ids(out) == Counter(want)
    seqs = [x["seq"] for x in _log_lines(state) if "seq" in x]
    assert seqs == sorted(set(seqs)) and max(seqs) == 7


# a zombie driver --------------------------------------------------------------------------------
ZOMBIE_APP = '''\
"""Unbounded files -> files sink (a driver for the zombie test)."""
import os

import stoker
from stoker import Pipeline, sinks, sources

p = Pipeline("zombie")
p.source(sources.files(os.environ["Z_IN"], "json", "id long"))
p.sink(sinks.files(os.environ["Z_OUT"]))

if __name__ == "__main__":
    stoker.run(p, trigger="200ms")
'''


def _write_locks(pids: set[int], files: list[Path]) -> list[str]:
    """The POSIX write locks ``pids`` hold on ``files`` (by inode), from /proc/locks."""
    inodes = {f.stat().st_ino for f in files if f.exists()}
    held = []
    for line in Path("/proc/locks").read_text().splitlines():
        parts = line.split()
        # "1: POSIX  ADVISORY  WRITE 1234 08:01:5678 0 EOF" (a blocked waiter adds "->")
        if len(parts) < 6 or parts[1] == "->" or parts[3] != "WRITE":
            continue
        if int(parts[4]) in pids and int(parts[5].rsplit(":", 1)[1]) in inodes:
            held.append(line)
    return held


def _stop_outside_store_writes(pgid: int, store: Path, tries: int = 200) -> None:
    """SIGSTOP process group ``pgid`` at a moment none of it holds a write lock on ``store``
    (or its journal files); SIGCONT and try again otherwise."""
    from stoker.procs import group_pids

    files = [store, store.with_name(store.name + "-wal"), store.with_name(store.name + "-shm")]
    files.append(store.with_name(store.name + "-journal"))
    for _ in range(tries):
        os.killpg(pgid, signal.SIGSTOP)
        if not _write_locks(set(group_pids(pgid)), files):
            return
        os.killpg(pgid, signal.SIGCONT)
        time.sleep(0.02)
    raise AssertionError(f"group {pgid} held the store's write lock at every one of {tries} tries")


def _lease_lapsed(state: Path) -> bool:
    import sqlite3

    with sqlite3.connect(state / "store.db", timeout=1) as conn:
        row = conn.execute(
            "SELECT a.lease_expires_at FROM attempts a JOIN jobs j "
            "ON a.job_id = j.job_id AND a.attempt = j.current_attempt"
        ).fetchone()
    return row is not None and float(row[0]) < time.time()


def test_a_resumed_zombie_driver_cannot_append_and_no_file_is_read_twice(tmp_path: Path) -> None:
    app = tmp_path / "zombie_app.py"
    app.write_text(textwrap.dedent(ZOMBIE_APP))
    indir, out, state = tmp_path / "in", tmp_path / "out", tmp_path / "state"
    indir.mkdir()
    env = {"Z_IN": str(indir), "Z_OUT": str(out), "STOKER_FAULT": ""}
    args = ("-D", f"stoker.state_dir={state}", "-D", "stoker.lease_ttl=3s")
    want: set[int] = set()

    def put(k: int) -> None:
        ids = range(100 * k, 100 * k + 10)
        _put(indir, f"f{k}.json", ids)
        want.update(ids)

    def in_sink() -> bool:
        return set(file_sink_ids(out)) == want

    log_a, log_b = tmp_path / "driver-a.log", tmp_path / "driver-b.log"
    a = start_driver(app, *args, env=env, log=log_a)
    b: subprocess.Popen[bytes] | None = None
    try:
        put(0)
        _wait("f0 read by driver A", in_sink, timeout=180, log=log_a)
        # The driver, its JVM and the JVM's Python reader, stopped while none of them holds
        # the SQLite store's write lock: a process frozen inside a write transaction blocks
        # every writer of the file (SQLite's one lock), driver B's start too.
        _stop_outside_store_writes(a.pid, state / "store.db")
        _wait("A's lease (3 s) to lapse while it is stopped", lambda: _lease_lapsed(state), 60)
        b = start_driver(app, *args, env=env, log=log_b)
        put(1)
        _wait("f1 read by driver B", in_sink, timeout=180, log=log_b)
        # A wakes up, finds f2 in the folder like B does, and may not append it.
        put(2)
        os.killpg(a.pid, signal.SIGCONT)
        _wait("driver A to stop itself", lambda: a.poll() is not None, timeout=60, log=log_a)
        put(3)
        _wait("f2, f3 read by driver B", in_sink, timeout=120, log=log_b)
        assert b.poll() is None, "driver B must still run"
    finally:
        os.killpg(a.pid, signal.SIGCONT) if a.poll() is None else None
        kill_group(a)
        if b is not None:
            kill_group(b)
    assert a.returncode != 0
    assert file_sink_ids(out) == Counter(want)  # nothing read twice, nothing skipped
    lines = _log_lines(state)
    entries = [x for x in lines if "seq" in x]
    assert [x["seq"] for x in entries] == list(range(len(entries)))
    assert sorted(Path(x["path"]).name for x in entries) == [f"f{k}.json" for k in range(4)]
