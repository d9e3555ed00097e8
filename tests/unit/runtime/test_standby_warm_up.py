"""A standby killed while it warms up leaves its warm-up folder (its ``finally`` never ran): the
next standby's warm-up removes the folders whose standby is gone, and only those."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from stoker import procs
from stoker.runtime.job import standby


def test_the_warm_up_folders_of_dead_standbys_are_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dead = tmp_path / f"{standby.WARM_UP_PREFIX}{gone.pid}-abc"
    live = tmp_path / f"{standby.WARM_UP_PREFIX}{os.getpid()}-def"
    other = tmp_path / "stoker-warm-up-notapid"
    for d in (dead, live, other):
        (d / "checkpoint").mkdir(parents=True)
    procs.remove_orphaned_folders(standby.WARM_UP_PREFIX)
    assert not dead.exists()
    assert live.exists() and other.exists()


@pytest.mark.parametrize(
    ("raw", "epochs"),
    [(None, 20), ("", 20), ("1", 1), (" 7 ", 7), ("50", 50), ("0", 20), ("51", 20), ("x", 20)],
)
def test_the_warm_up_epochs_come_from_the_environment_within_bounds(
    raw: str | None, epochs: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    if raw is None:
        monkeypatch.delenv(standby.WARM_UP_EPOCHS, raising=False)
    else:
        monkeypatch.setenv(standby.WARM_UP_EPOCHS, raw)
    assert standby.warm_up_epochs() == epochs
