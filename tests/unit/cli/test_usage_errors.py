"""A usage error is one line on stderr, like every other error of stoker's (a newcomer walk
found click's four: usage, hint, a blank line, the error), exit 2; ``stoker`` alone, or a group
alone, still shows its help."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from stoker.cli import main


@pytest.mark.parametrize(
    ("argv", "what", "usage"),
    [
        (["run"], "Missing argument 'APP'.", "stoker run [OPTIONS] APP [ARGS]..."),
        (["status", "--bogus"], "No such option '--bogus'.", "stoker status [OPTIONS] JOB"),
        (["bogus"], "No such command 'bogus'.", "stoker [OPTIONS] COMMAND [ARGS]..."),
        (["app", "status"], "Missing argument 'APP'.", "stoker app status [OPTIONS] APP"),
        (["server", "--port", "x"], "'x' is not a valid integer", "stoker server [OPTIONS]"),
    ],
)
def test_a_usage_error_is_one_line_naming_it_and_the_usage(
    argv: list[str], what: str, usage: str
) -> None:
    r = CliRunner().invoke(main, argv, prog_name="stoker")
    assert r.exit_code == 2, r.output
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("stoker: error: ") and what in lines[0], lines[0]
    assert f"Usage: {usage}" in lines[0] and "--help)" in lines[0], lines[0]
    assert r.stdout == ""


@pytest.mark.parametrize("argv", [[], ["app"], ["cluster"]])
def test_a_group_alone_shows_its_help(argv: list[str]) -> None:
    r = CliRunner().invoke(main, argv, prog_name="stoker")
    assert r.exit_code == 0, r.output
    assert "Usage: stoker" in r.stdout and "Commands:" in r.stdout
    assert "stoker: error" not in r.output
