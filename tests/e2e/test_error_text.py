"""A task's failure as the CLI shows it (issue 41 item 5): the user's exception and the line
of their code that raised it, first; the whole text (Spark's, with the traceback) only with
``stoker status --verbose`` (and in a job manager's driver log). Real Spark: the traceback
comes from a Python worker, inside Spark's error."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support import LIGHT_JVM, REPO, stoker_cmd

pytestmark = [pytest.mark.scenario, pytest.mark.timeout(900)]

JOB_TIMEOUT = 600.0

# Spark's own examples raise from a function the task calls: the user's frame is the innermost
# (line 11, in check), below the one that called it (line 6, in parse).
APP = """\
from stoker import Pipeline, sinks, sources


def parse(batches):
    for b in batches:
        check(b)
        yield b


def check(b):
    raise ValueError("boom: a bad record")


def transform(df, ctx):
    return df.mapInArrow(parse, df.schema)


pipeline = (
    Pipeline("fails")
    .source(sources.generator(total=300, max_rows_per_epoch=100))
    .transform(transform)
    .sink(sinks.files({out!r}))
)
"""


def _stoker(*args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        stoker_cmd(*args), cwd=str(REPO), capture_output=True, text=True, timeout=timeout
    )


def test_a_failing_task_shows_the_users_exception_and_line_first(tmp_path: Path) -> None:
    app = tmp_path / "fails.py"
    app.write_text(APP.format(out=str(tmp_path / "out")))
    state = tmp_path / "state"
    run = _stoker(
        "run",
        str(app),
        "-D",
        f"stoker.state_dir={state}",
        "-D",
        "stoker.master=local[1]",
        "-D",
        f"spark.driver.extraJavaOptions={LIGHT_JVM}",
        timeout=JOB_TIMEOUT,
    )
    assert run.returncode == 8, run.stdout + run.stderr[-5000:]
    errors = [ln for ln in run.stderr.splitlines() if ln.startswith("stoker: error:")]
    where = f"{app}, line 11, in check"
    assert len(errors) == 1, run.stderr[-5000:]
    assert errors[0].startswith(
        f"stoker: error: job 'fails' failed: ValueError: boom: a bad record (at {where})"
    ), errors
    # Spark's own reports of the failed task are dropped from a local run's terminal: the whole
    # text is stoker status --verbose's (below); a job manager's driver log keeps them.
    assert "Traceback (most recent call last):" not in run.stderr, run.stderr[-5000:]

    status = _stoker("status", "fails", "--state-dir", str(state))
    assert status.returncode == 0, status.stderr
    lines = status.stdout.splitlines()
    assert lines[1:4] == [
        "state      FAILED",
        "error      ValueError: boom: a bad record",
        f'  at       {where}: raise ValueError("boom: a bad record")',
    ], status.stdout
    assert "Traceback" not in status.stdout, status.stdout
    assert status.stdout.count("boom: a bad record") == 2, status.stdout  # once, and its line

    verbose = _stoker("status", "fails", "--state-dir", str(state), "--verbose")
    assert verbose.returncode == 0, verbose.stderr
    assert verbose.stdout.count("Traceback (most recent call last):") == 1, verbose.stdout
    assert f'File "{app}", line 6, in parse' in verbose.stdout, verbose.stdout
