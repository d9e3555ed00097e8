"""Output modes and the sinks: what each sink accepts at validate, what its descriptor carries,
and the files sink's current snapshot in complete mode. Pure Python: no Spark, no server
(PostgreSQL upserts and replaces: tests/unit/sinks/test_pg_modes.py)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from stoker import sinks, sources
from stoker.errors import InvalidPipeline, InvalidSink
from stoker.pipeline import Pipeline
from stoker.sinks import from_descriptor
from stoker.sinks._files_current import CURRENT, current_epoch
from stoker.sinks.base import SinkOwner
from stoker.sinks.files import FilesSink
from stoker.sinks.postgres import PostgresSink
from stoker.types import AttemptNo, Epoch, JobId

DSN = "postgresql://nobody@127.0.0.1:1/none"  # never connected to by these tests
OWNER = SinkOwner(JobId("counts"), "aaaa1111")
ONE = AttemptNo(1)


def _pipeline(sink: Any, mode: str) -> Pipeline:
    return Pipeline("counts", output_mode=mode).source(sources.generator(total=10)).sink(sink)


# refusals at validate -------------------------------------------------------------------------


def test_update_into_files_is_refused_naming_the_upsert_and_complete(tmp_path: Path) -> None:
    p = _pipeline(sinks.files(str(tmp_path / "out")), "update")
    with pytest.raises(InvalidSink) as info:
        p.validate()
    assert info.value.field == "files.output_mode"
    assert "key=" in info.value.message and "output_mode='complete'" in info.value.message
    assert not (tmp_path / "out").exists()


def test_update_into_postgres_without_a_key_is_refused_naming_the_key() -> None:
    p = _pipeline(sinks.postgres(DSN, "counts"), "update")
    with pytest.raises(InvalidSink) as info:
        p.validate()
    assert info.value.field == "postgres.key"
    assert "key=['k']" in info.value.message, info.value.message


@pytest.mark.parametrize(
    "sink",
    [
        sinks.postgres(DSN, "counts", key=["k"]),
        sinks.postgres(DSN, "counts", key="k"),
    ],
)
def test_update_into_postgres_with_a_key_is_accepted(sink: PostgresSink) -> None:
    _pipeline(sink, "update").validate()
    assert sink.key == ("k",)
    assert "key=['k']" in sink.describe()


@pytest.mark.parametrize("mode", ["append", "complete"])
def test_complete_and_append_are_accepted_by_both_sinks(tmp_path: Path, mode: str) -> None:
    _pipeline(sinks.files(str(tmp_path / "out")), mode).validate()
    _pipeline(sinks.postgres(DSN, "counts"), mode).validate()


class _UserSink:
    """A user-defined sink: the protocol's methods, no accept_output_mode."""

    name = "mine"

    def prepare(self) -> None: ...
    def commit(self) -> None: ...
    def abort(self) -> None: ...
    def recover(self) -> None: ...
    def validate(self) -> None: ...
    def open(self) -> None: ...
    def describe(self) -> str:
        return "mine"


@pytest.mark.parametrize("mode", ["update", "complete"])
def test_a_user_sink_that_does_not_declare_the_mode_is_refused(mode: str) -> None:
    p = _pipeline(_UserSink(), mode)
    with pytest.raises(InvalidPipeline) as info:
        p.validate()
    assert info.value.field == "sinks[0]"
    assert f"output_mode={mode!r}" in info.value.message
    assert "accept_output_mode" in info.value.message and "sinks.postgres" in info.value.message


def test_a_user_sink_appends_as_before() -> None:
    _pipeline(_UserSink(), "append").validate()


@pytest.mark.parametrize("key", [[], [""], ["k", "k"], [1], b"k", True])
def test_a_bad_key_is_refused_when_the_sink_is_made(key: Any) -> None:
    with pytest.raises(InvalidSink) as info:
        sinks.postgres(DSN, "counts", key=key)
    assert info.value.field == "postgres.key"


# descriptors: the janitor rebuilds the mode ---------------------------------------------------


def test_the_postgres_descriptor_carries_the_key_and_the_mode() -> None:
    sink = sinks.postgres(DSN, "counts", key=["a", "b"])
    sink.accept_output_mode("update")
    again = from_descriptor(sink.descriptor())
    assert isinstance(again, PostgresSink)
    assert again.key == ("a", "b") and again._mode == "update" and again._staged
    # A descriptor recorded before modes existed: what that job wrote, appends.
    old = {k: v for k, v in sink.descriptor().items() if k not in ("key", "output_mode")}
    plain = from_descriptor(old)
    assert isinstance(plain, PostgresSink)
    assert plain.key is None and plain._mode == "append" and not plain._staged


def test_the_files_descriptor_carries_the_mode(tmp_path: Path) -> None:
    sink = sinks.files(str(tmp_path / "out"))
    sink.accept_output_mode("complete")
    again = from_descriptor(sink.descriptor())
    assert isinstance(again, FilesSink) and again._mode == "complete"


def test_a_descriptor_with_a_mode_its_sink_cannot_write_is_refused(tmp_path: Path) -> None:
    d = sinks.files(str(tmp_path / "out")).descriptor() | {"output_mode": "update"}
    with pytest.raises(InvalidSink):
        from_descriptor(d)


# files: the current snapshot ----------------------------------------------------------------


def _complete_sink(out: Path, state: Path) -> FilesSink:
    sink = FilesSink(path=str(out), format="json")
    sink.accept_output_mode("complete")
    sink.validate(OWNER)
    sink.open(OWNER, state)
    return sink


def _commit(sink: FilesSink, epoch: int, rows: str) -> None:
    staged = sink._staged(Epoch(epoch), ONE)
    staged.mkdir(parents=True)
    (staged / "part-0.json").write_text(rows)
    sink.commit(Epoch(epoch), ONE)


def _current(out: Path) -> str:
    """What a reader of ``<out>/current`` reads: its data files (not the manifest)."""
    files = sorted((out / CURRENT).iterdir())
    return "".join(p.read_text() for p in files if not p.name.startswith("_"))


def test_complete_into_files_swaps_current_to_each_snapshot_and_prunes(tmp_path: Path) -> None:
    out = tmp_path / "out"
    sink = _complete_sink(out, tmp_path / "state")
    _commit(sink, 0, '{"k": 0, "count": 1}\n')
    assert os.readlink(out / CURRENT) == "epoch=0"
    assert _current(out) == '{"k": 0, "count": 1}\n'
    for epoch in (1, 2, 3):
        _commit(sink, epoch, f'{{"k": 0, "count": {epoch + 1}}}\n')
    assert _current(out) == '{"k": 0, "count": 4}\n'
    # The current snapshot and the one before it (a reader may still be reading it).
    assert sorted(p.name for p in out.glob("epoch=*")) == ["epoch=2", "epoch=3"]
    assert not list(out.glob(".current*"))


def test_a_commit_again_after_a_crash_before_the_swap_swaps_and_never_back(tmp_path: Path) -> None:
    out = tmp_path / "out"
    sink = _complete_sink(out, tmp_path / "state")
    _commit(sink, 0, "a\n")
    _commit(sink, 1, "b\n")
    # A crash between the rename of epoch 1 and the swap: current still names epoch 0.
    os.replace(out / CURRENT, out / "kept")
    os.symlink("epoch=0", out / CURRENT)
    sink.commit(Epoch(1), ONE)  # recovery commits the decided epoch again
    assert current_epoch(out) == 1
    sink.commit(Epoch(0), ONE)  # an older epoch never moves it back
    assert current_epoch(out) == 1


def test_append_into_files_makes_no_current(tmp_path: Path) -> None:
    sink = FilesSink(path=str(tmp_path / "out"), format="json")
    sink.validate(OWNER)
    sink.open(OWNER, tmp_path / "state")
    _commit(sink, 0, "a\n")
    assert not (tmp_path / "out" / CURRENT).exists()
