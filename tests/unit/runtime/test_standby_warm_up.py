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
