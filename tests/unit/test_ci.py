"""CI's lint, format and type checks run as their own steps (.ci/check), before the tests."""

from __future__ import annotations

import os

from tests.support import REPO


def test_ci_runs_the_checks_then_the_tests() -> None:
    check = REPO / ".ci" / "check"
    assert os.access(check, os.X_OK)
    text = check.read_text()
    assert "set -euo pipefail" in text
    lines = [line.split()[:4] for line in text.splitlines() if line.startswith('"$py" -m ')]
    assert lines == [
        ['"$py"', "-m", "ruff", "check"],
        ['"$py"', "-m", "ruff", "format"],
        ['"$py"', "-m", "mypy"],
        ['"$py"', "-m", "pytest", "-q"],
    ]
    run = (REPO / ".ci" / "run").read_text()
    assert "set -euo pipefail" in run
    assert run.index("pip install") < run.index("\n.ci/check"), "installs first, then the checks"


def test_check_and_run_use_the_readme_venv_when_there_is_one() -> None:
    """Issue 23 item 13: the quick start makes `.venv`; the test command then runs in it (and
    CI's install goes into the interpreter the checks use), else in python3."""
    choice = "py=python3\nif [ -x .venv/bin/python ]; then\n    py=.venv/bin/python\nfi\n"
    for name in ("check", "run"):
        assert choice in (REPO / ".ci" / name).read_text(), name
    check = (REPO / ".ci" / "check").read_text()
    assert check.index(choice) < check.index("pip install") < check.index('"$py" -m ruff')
