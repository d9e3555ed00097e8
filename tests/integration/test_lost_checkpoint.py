"""A job whose Spark checkpoint is lost while its store keeps its epochs: refused, not run.

Real ``stoker run`` drivers on real Spark, a files source and a files sink. The job commits
epochs, is stopped (SIGTERM), its checkpoint folder goes (the whole state folder when the
store is kept outside it, as ``--store`` allows), and three files arrive while it is down.
Before the fix the same command ran: Spark started again at batch 0, the store found epoch 0
COMMITTED and skipped it as a replay, and the three files, planned into that epoch, were
never written. Now it exits 2 naming the store's epochs and the checkpoint, and writes nothing;
``--reset-checkpoint`` starts the job over under a new uid: its files source reads every file
again from the beginning (the two read before the loss and the three new ones), into an
emptied output folder, each id exactly once.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from stoker.store import open_store
from stoker.types import EpochState, job_id
from tests.support import JVM_OPTS, exactly_once, file_sink_ids, kill_group, start_driver, wait_for

pytestmark = [pytest.mark.spread, pytest.mark.timeout(1500)]

JOB = "lost_ckpt"
TIMEOUT = 420.0  # a cold Spark driver on 2 cores other suites share
SUSPENDED_EXIT = 13  # stoker.errors.EXIT_CODES[JobSuspended]
INVALID_EXIT = 2  # stoker.errors.EXIT_CODES[InvalidInput], CheckpointBehind's
PER_FILE = 10

APP = """\
from stoker import Pipeline, sinks, sources

pipeline = (
    Pipeline({job!r})
    .source(sources.files({indir!r}, "json", "id long"))
    .sink(sinks.files({out!r}))
)
"""


def _put(folder: Path, k: int) -> None:
    """File k (ids k*10 .. k*10+9), renamed into place as writers should."""
    tmp = folder / f".f{k}.tmp"
    tmp.write_text("".join(json.dumps({"id": i}) + "\n" for i in range(k * 10, k * 10 + 10)))
    os.rename(tmp, folder / f"f{k}.json")


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-4000:] if log.exists() else "(no log)"


def _wait_exit(proc: subprocess.Popen[bytes], log: Path, timeout: float = TIMEOUT) -> int:
    """The driver's exit code; a driver still running after ``timeout`` is killed: failure."""
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        pytest.fail(f"the driver did not exit within {timeout:.0f}s:\n{_tail(log)}")


def _wait_ids(proc: subprocess.Popen[bytes], out: Path, want: set[int], log: Path) -> None:
    def there() -> bool:
        if proc.poll() is not None:
            pytest.fail(f"the driver exited (rc {proc.returncode}):\n{_tail(log)}")
        return set(file_sink_ids(out)) == want

    try:
        wait_for(f"ids {min(want)}..{max(want)} in the sink", there, TIMEOUT, every=0.2)
    except AssertionError:
        kill_group(proc)
        raise


def _two_files_then_stopped(app: Path, args: list[str], indir: Path, out: Path, log: Path) -> None:
    """The job run on two files, each in an epoch of its own, then SIGTERM: SUSPENDED."""
    first = start_driver(app, *args, log=log)
    _put(indir, 0)
    _wait_ids(first, out, set(range(10)), log)
    _put(indir, 1)
    _wait_ids(first, out, set(range(20)), log)
    os.kill(first.pid, signal.SIGTERM)
    assert _wait_exit(first, log) == SUSPENDED_EXIT, _tail(log)


def _decided(store_url: str) -> list[int]:
    st = open_store(store_url)
    try:
        eps = st.list_epochs(job_id(JOB), 100_000)
        return sorted(e.epoch for e in eps if e.state != EpochState.PINNED)
    finally:
        st.close()


def _uid(store_url: str) -> str | None:
    st = open_store(store_url)
    try:
        return st.get_job(job_id(JOB)).uid
    finally:
        st.close()


@pytest.mark.parametrize(
    "store_at", [pytest.param("in-state-folder", marks=pytest.mark.variant), "outside"]
)
def test_a_lost_checkpoint_is_refused_and_reset_checkpoint_reads_everything_again(
    tmp_path: Path, store_at: str
) -> None:
    indir, out, state = tmp_path / "in", tmp_path / "out", tmp_path / "state"
    indir.mkdir()
    app = tmp_path / "app.py"
    app.write_text(APP.format(job=JOB, indir=str(indir), out=str(out)))
    store_file = state / "store.db" if store_at == "in-state-folder" else tmp_path / "store.db"
    store_url = f"sqlite:///{store_file}"
    args = [
        "-D",
        f"stoker.state_dir={state}",
        "-D",
        f"stoker.store={store_url}",
        "-D",
        "stoker.master=local[1]",
        "-D",
        "stoker.trigger=200ms",
        "-D",
        f"spark.driver.extraJavaOptions={JVM_OPTS}",
    ]

    # 1. Two files, each in an epoch of its own; then SIGTERM: SUSPENDED.
    _two_files_then_stopped(app, args, indir, out, tmp_path / "run-1.log")
    decided = _decided(store_url)
    assert len(decided) >= 2, decided
    old_uid = _uid(store_url)

    # 2. The checkpoint is lost (with the store outside it: the whole state folder), and
    #    three files arrive while the job is down.
    checkpoint = state / "checkpoint"
    assert checkpoint.is_dir()
    shutil.rmtree(checkpoint if store_at == "in-state-folder" else state)
    for k in (2, 3, 4):
        _put(indir, k)

    # 3. The same command: refused before Spark starts, naming both sides and the ways out.
    log2 = tmp_path / "run-2.log"
    again = start_driver(app, *args, log=log2)
    offsets = checkpoint / "offsets"
    wait_for("the driver's exit", lambda: again.poll() is not None or offsets.exists(), TIMEOUT)
    if again.poll() is None:
        kill_group(again)
        pytest.fail(f"a query started on the lost checkpoint:\n{_tail(log2)}")
    assert again.returncode == INVALID_EXIT, _tail(log2)
    text = _tail(log2)
    lo, hi = decided[0], decided[-1]
    assert f"the store has epochs {lo}..{hi} of job '{JOB}' (uid {old_uid}) decided" in text
    assert f"checkpoint folder '{checkpoint}'" in text
    assert "does not exist" in text or "has no offsets" in text
    assert "--from-savepoint" in text and "--reset-checkpoint" in text
    assert file_sink_ids(out) == Counter(range(20))  # nothing written
    assert not checkpoint.exists()  # no query started
    assert _decided(store_url) == decided

    # 4. --reset-checkpoint with the old job's output folder: the files sink refuses it (its
    #    epoch=0.. folders are the old uid's; the new job numbers its epochs from 0 again).
    log3 = tmp_path / "run-3.log"
    reset_args = [*args, "--reset-checkpoint"]
    refused = start_driver(app, *reset_args, log=log3)
    assert _wait_exit(refused, log3) == INVALID_EXIT, _tail(log3)
    assert "belongs to an earlier job of the same id" in _tail(log3)
    assert _uid(store_url) == old_uid and _decided(store_url) == decided

    # 5. The output folder emptied: the job starts over under a new uid and its files source
    #    reads every file from the beginning, f0 and f1 again and the three new ones.
    shutil.rmtree(out)
    log4 = tmp_path / "run-4.log"
    fresh = start_driver(app, *reset_args, log=log4)
    _wait_ids(fresh, out, set(range(50)), log4)
    os.kill(fresh.pid, signal.SIGTERM)
    assert _wait_exit(fresh, log4) == SUSPENDED_EXIT, _tail(log4)
    exactly_once(file_sink_ids(out), 50)
    new_uid = _uid(store_url)
    assert new_uid is not None and new_uid != old_uid
    said = log4.read_text(errors="replace")
    assert "--reset-checkpoint" in said and f"starts over as uid {new_uid}" in said
    assert f"files({str(indir)!r}" in said  # the source it reads again, named

    # 6. The same reset command once more: the checkpoint is whole now, nothing is reset (no
    #    new uid, nothing read again); the job resumes.
    log5 = tmp_path / "run-5.log"
    resumed = start_driver(app, *reset_args, log=log5)
    _put(indir, 5)
    _wait_ids(resumed, out, set(range(60)), log5)
    os.kill(resumed.pid, signal.SIGTERM)
    assert _wait_exit(resumed, log5) == SUSPENDED_EXIT, _tail(log5)
    exactly_once(file_sink_ids(out), 60)
    assert _uid(store_url) == new_uid
    assert "nothing to reset" in log5.read_text(errors="replace")


def test_a_lost_sources_folder_with_the_checkpoint_kept_is_refused_and_reset_reads_all_again(
    tmp_path: Path,
) -> None:
    """Issue 40: ``state/sources/`` lost while the checkpoint was kept. The files source's
    rebuilt log numbered new files from 0, below the checkpoint's offset, so they were never
    read: the job sat idle without an error. Now the start is refused at plan time, naming the
    checkpoint's offset and the missing log; ``--reset-checkpoint`` reads everything again."""
    indir, out, state = tmp_path / "in", tmp_path / "out", tmp_path / "state"
    indir.mkdir()
    app = tmp_path / "app.py"
    app.write_text(APP.format(job=JOB, indir=str(indir), out=str(out)))
    store_url = f"sqlite:///{state / 'store.db'}"
    args = ["-D", f"stoker.state_dir={state}", "-D", "stoker.master=local[1]"]
    args += ["-D", "stoker.trigger=200ms", "-D", f"spark.driver.extraJavaOptions={JVM_OPTS}"]

    _two_files_then_stopped(app, args, indir, out, tmp_path / "run-1.log")
    decided = _decided(store_url)
    old_uid = _uid(store_url)

    shutil.rmtree(state / "sources")
    for k in (2, 3, 4):
        _put(indir, k)

    log2 = tmp_path / "run-2.log"
    again = start_driver(app, *args, log=log2)
    assert _wait_exit(again, log2) == INVALID_EXIT, _tail(log2)
    text = " ".join(_tail(log2).split())
    log_file = state / "sources" / "s0.files.jsonl"
    assert f"has read files 0..1 of source s0, whose log {log_file} is missing" in text, text
    assert "--reset-checkpoint" in text and "never read" in text, text
    assert file_sink_ids(out) == Counter(range(20))  # nothing written
    assert _decided(store_url) == decided and _uid(store_url) == old_uid

    shutil.rmtree(out)  # the old uid's output: a new job's epochs are numbered from 0 again
    log3 = tmp_path / "run-3.log"
    fresh = start_driver(app, *args, "--reset-checkpoint", log=log3)
    _wait_ids(fresh, out, set(range(50)), log3)
    os.kill(fresh.pid, signal.SIGTERM)
    assert _wait_exit(fresh, log3) == SUSPENDED_EXIT, _tail(log3)
    exactly_once(file_sink_ids(out), 50)
    assert _uid(store_url) not in (None, old_uid)
