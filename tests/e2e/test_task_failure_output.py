"""What a user sees when their code fails in Spark's tasks (issue 41, newcomer walk): Spark
reports a failed task four or five times, each with the whole Python traceback and a Java
stack (369 lines on stderr for one ZeroDivisionError); stoker's log4j2 configuration folds
those loggers' events to one line each, and a local run in a terminal drops them (they still
came before stoker's line, ten of them, in a later walk): stoker's own last line names the
error and the user's line. With --debug they are back."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.support.cli_runs import LIGHT, RUN_TIMEOUT
from tests.support.core import APPS, stoker_cmd

pytestmark = [pytest.mark.timeout(900)]


def test_a_failing_udf_is_a_few_lines_on_stderr_and_one_that_names_the_users_line(
    tmp_path: Path,
) -> None:
    app = APPS / "udf_fails_app.py"
    argv = stoker_cmd("run", str(app), *LIGHT, "-D", f"stoker.state_dir={tmp_path / 'state'}")
    env = {**os.environ, "UDF_FAILS_OUT": str(tmp_path / "out")}
    done = subprocess.run(
        argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT
    )
    err = done.stderr.splitlines()
    assert done.returncode != 0, done.stderr
    last = err[-1]
    assert "ZeroDivisionError" in last and f"{app}, line 14" in last, done.stderr
    stack = [line for line in err if line.lstrip().startswith(("at ", "... "))]
    assert stack == [], done.stderr  # no Java stack
    assert len(err) < 40, done.stderr  # was 369
    assert sum("ZeroDivisionError" in line for line in err) == 1, done.stderr
    spark = [line for line in err if re.match(r"\d\d:\d\d:\d\d (ERROR|WARN) ", line)]
    assert spark == [], done.stderr  # Spark's task-failure reports: stoker's line says it

    again = subprocess.run(
        [*argv, "--restart", "--debug"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
    )
    assert again.returncode != 0, again.stderr
    assert "TaskSetManager: " in again.stderr, again.stderr[-3000:]  # everything, when asked
