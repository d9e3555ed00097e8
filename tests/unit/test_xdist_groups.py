"""The suite's parallel runs rely on `--dist loadgroup` keeping a group on one process (the
`cluster` tests, each module's tests with its module fixtures). pytest 9.2 with pytest-xdist
3.8 silently stopped doing so: a module's tests ran on both processes, each with a fixture of
its own, and tests that expected the records of the tests before them failed (pyproject pins
pytest below 9.2). This runs a small suite the way the real one runs and checks where each
test ran."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

GROUPED = """\
import os
import pytest

pytestmark = [pytest.mark.xdist_group("together")]


@pytest.mark.parametrize("i", range(6))
def test_grouped(i):
    with open({log!r}, "a") as f:
        f.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")
"""

FILLER = """\
import pytest


@pytest.mark.parametrize("i", range(12))
def test_filler(i):
    pass
"""


def test_a_group_runs_on_one_process(tmp_path: Path) -> None:
    log = tmp_path / "workers.log"
    (tmp_path / "test_grouped.py").write_text(GROUPED.format(log=str(log)))
    (tmp_path / "test_filler.py").write_text(FILLER)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    p = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup",
         "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    workers = log.read_text().split()
    assert len(workers) == 6 and len(set(workers)) == 1, workers
