"""A driver killed while Spark wrote the first entry of its offset log leaves a hidden
temporary file there; Spark then refuses to start the query on batch 0 for good. The runner
removes such leftovers when the log holds no batch, and never touches a log that does."""

from __future__ import annotations

from pathlib import Path

from stoker.runtime.runner import clear_half_written_logs


def _touch(path: Path, text: str = "v1") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_leftovers_of_a_first_entry_are_removed(tmp_path: Path) -> None:
    cp = tmp_path / "checkpoint"
    tmp = _touch(cp / "offsets" / ".0.5f3e.tmp")
    crc = _touch(cp / "offsets" / "..0.5f3e.tmp.crc")
    commit_tmp = _touch(cp / "commits" / ".0.77aa.tmp")
    metadata = _touch(cp / "metadata", '{"id": "q"}')
    removed = clear_half_written_logs(cp)
    assert sorted(removed) == sorted([tmp, crc, commit_tmp])
    assert list((cp / "offsets").iterdir()) == [] and list((cp / "commits").iterdir()) == []
    assert metadata.exists()  # the query's id stays


def test_a_log_with_a_batch_is_left_alone(tmp_path: Path) -> None:
    cp = tmp_path / "checkpoint"
    first = _touch(cp / "offsets" / "0")
    tmp = _touch(cp / "offsets" / ".1.9c1d.tmp")
    assert clear_half_written_logs(cp) == []
    assert first.exists() and tmp.exists()


def test_no_checkpoint_yet(tmp_path: Path) -> None:
    assert clear_half_written_logs(tmp_path / "checkpoint") == []
