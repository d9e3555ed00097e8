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
    """Issue 23 item 13: the quick start makes `.venv`; the test command then runs in it, else
    in python3. CI makes the `.venv` itself when there is none (issue 42: a Debian-managed
    python3 refuses `pip install` under PEP 668) and installs into it."""
    choice = "py=python3\nif [ -x .venv/bin/python ]; then\n    py=.venv/bin/python\nfi\n"
    check = (REPO / ".ci" / "check").read_text()
    assert choice in check
    assert check.index(choice) < check.index("pip install") < check.index('"$py" -m ruff')
    run = (REPO / ".ci" / "run").read_text()
    made = "if [ ! -x .venv/bin/python ]; then"
    assert made in run and "python3 -m venv .venv" in run
    assert run.index(made) < run.index("py=.venv/bin/python") < run.index("-m pip install")
