"""CI's lint, format and type checks run as their own steps (.ci/check), before the tests."""

from __future__ import annotations

import os

from tests.support import REPO


def test_ci_runs_the_checks_then_the_tests() -> None:
    check = REPO / ".ci" / "check"
    assert os.access(check, os.X_OK)
    text = check.read_text()
    assert "set -euo pipefail" in text
    lines = [line.split()[:4] for line in text.splitlines() if line and line[0].isalpha()]
    steps = [cmd[:4] for cmd in lines if cmd[0] == "python3"]
    assert steps == [
        ["python3", "-m", "ruff", "check"],
        ["python3", "-m", "ruff", "format"],
        ["python3", "-m", "mypy"],
        ["python3", "-m", "pytest", "-q"],
    ]
    run = (REPO / ".ci" / "run").read_text()
    assert "set -euo pipefail" in run
    assert run.index("pip install") < run.index("\n.ci/check"), "installs first, then the checks"
