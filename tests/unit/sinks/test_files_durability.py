"""The files sink's commit publishes only what is on disk: every file and folder of the staged
part (the manifest too) is fsynced before the rename that makes the epoch visible, and the
output folder after it. Real folders and real fsyncs, recorded on the way (no Spark: the part
is staged by hand as Spark's writer leaves it; the write itself is covered by
tests/integration/test_files_durability.py)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from stoker.sinks.base import SinkOwner
from stoker.sinks.files import FilesSink
from stoker.types import AttemptNo, Epoch, JobId
from tests.support.fsyncs import FsyncLog, everything_under

OWNER = SinkOwner(JobId("durable"), "d00d1e55")


def test_commit_fsyncs_every_file_and_folder_before_the_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    sink = FilesSink(path=str(out))
    sink.validate(OWNER)
    sink.open(OWNER, tmp_path / "state")
    staged = sink.staging / f"epoch=3.attempt=1.owner={OWNER.uid}"
    for rel in ("part-0.parquet", ".part-0.parquet.crc", "_SUCCESS", "k=1/part-1.parquet"):
        (staged / rel).parent.mkdir(parents=True, exist_ok=True)
        (staged / rel).write_bytes(b"rows")
    expected = everything_under(staged) | {str(staged / "_manifest.json")}
    log = FsyncLog(monkeypatch)

    sink.commit(Epoch(3), AttemptNo(1))

    final = out / "epoch=3"
    assert (final / "_manifest.json").exists()
    renames = [path for what, path in log.events if what == "rename"]
    assert renames == [f"{staged} -> {final}"]
    # Every file and folder as it was staged, the manifest included, before the rename.
    assert expected - log.before_rename() == set()
    # The rename is durable with the output folder's fsync, after it.
    last = log.events[-1]
    assert last == ("fsync", str(out))


def test_a_full_disk_at_commit_is_a_sink_failure_and_the_next_commit_publishes(
    tmp_path: Path,
) -> None:
    """Found by the chaos harness (tests/chaos, a `disk_full` step): ENOSPC while the manifest
    was written escaped as an error stoker did not expect (exit 1) instead of the sink failing
    (SinkError, exit 16; the decided epoch is committed by the next run)."""
    from tests.chaos.nemesis import SmallDisk, can_mount

    if not can_mount():
        pytest.skip("a tmpfs of its own needs root")
    from stoker.errors import SinkError

    disk = SmallDisk(tmp_path / "disk", size_mb=4)
    try:
        out = disk.path / "out"
        sink = FilesSink(path=str(out))
        sink.validate(OWNER)
        sink.open(OWNER, tmp_path / "state")
        staged = sink.staging / f"epoch=0.attempt=1.owner={OWNER.uid}"
        staged.mkdir(parents=True)
        (staged / "part-0.parquet").write_bytes(b"rows")
        ballast = disk.path / ".ballast"
        with open(ballast, "wb", buffering=0) as f, contextlib.suppress(OSError):
            while True:
                f.write(b"\0" * (1 << 16))
        with pytest.raises(SinkError, match="could not be published"):
            sink.commit(Epoch(0), AttemptNo(1))
        assert not (out / "epoch=0").exists() and staged.exists()
        ballast.unlink()
        sink.commit(Epoch(0), AttemptNo(1))
        assert (out / "epoch=0" / "_manifest.json").exists()
    finally:
        disk.close()
