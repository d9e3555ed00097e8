"""What a new user meets in the first hour with ``stoker run`` (issue 8): one line per error with
the exit code of its kind, the traceback only on ``--debug``, no Java noise, progress from the
first second, a short summary at the end, and a module-level ``@udf("long")`` that works.

Driven through the real CLI in subprocesses (no tty: plain progress lines), on real Spark.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from stoker.runtime.job.result import program
from tests.support import LIGHT_JVM, file_sink_ids, stoker_cmd

pytestmark = pytest.mark.scenario

SPARK_RUN_TIMEOUT = 420.0  # a cold Spark driver on a loaded 2-core machine
QUICK_TIMEOUT = 120.0

# What Spark and py4j print that a stoker user cannot act on (see stoker/runtime/conf/).
NOISE = (
    "InterruptedException",
    "Interrupted while joining",
    "Received command",
    "Using Spark's default log4j profile",
    "NativeCodeLoader",
    "resolves to a loopback address",
    "SPARK_LOCAL_IP",
    "adaptive.enabled is not supported in streaming",
    "Traceback",
)

# A DDL-string return type at module level: PySpark parses it through the JVM when the file is
# imported, before stoker.run could start Spark.
UDF_APP = """\
from pyspark.sql.functions import col, udf

from stoker import Pipeline, sinks, sources

print("app imported", flush=True)


@udf("long")
def double(x):
    return x * 2


pipeline = (
    Pipeline("udf-job")
    .source(sources.generator(total=200, max_rows_per_epoch=100))
    .transform(lambda df: df.select(double(col("id")).alias("id")))
    .sink(sinks.files({out!r}))
)
"""

PLAIN_APP = """\
import stoker
from stoker import Pipeline, sinks, sources

p = Pipeline("never").source(sources.generator(total=10)).sink(sinks.files({out!r}))

if __name__ == "__main__":
    stoker.run(p)
"""


def _stoker(
    *args: str, cwd: Path, timeout: float = QUICK_TIMEOUT, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if k != "STOKER_DEBUG"}
    return subprocess.run(
        stoker_cmd(*args),
        cwd=str(cwd),
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**full_env, **(env or {})},
    )


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def _index(lines: list[str], part: str) -> int:
    found = [i for i, line in enumerate(lines) if part in line]
    assert found, f"no line with {part!r} in:\n" + "\n".join(lines)
    return found[0]


def test_a_syntax_error_exits_2_with_one_line_and_debug_shows_the_traceback(
    tmp_path: Path,
) -> None:
    app = tmp_path / "app.py"
    app.write_text("import stoker\nx = (\n")

    proc = _stoker("run", str(app), cwd=tmp_path)
    assert proc.returncode == 2
    assert _lines(proc.stderr) == [
        f"stoker: error: app: syntax error at {app}:2: '(' was never closed"
    ]
    assert not (tmp_path / ".stoker").exists()

    for extra, env in (("--debug", None), (None, {"STOKER_DEBUG": "1"})):
        args = ["run", str(app)] + ([extra] if extra else [])
        proc = _stoker(*args, cwd=tmp_path, env=env)
        assert proc.returncode == 2
        assert "Traceback (most recent call last)" in proc.stderr
        assert "SyntaxError" in proc.stderr
        assert _lines(proc.stderr)[-1] == (
            f"stoker: error: app: syntax error at {app}:2: '(' was never closed"
        )


def test_an_unexpected_error_in_the_app_is_one_line_naming_its_type(tmp_path: Path) -> None:
    app = tmp_path / "app.py"
    app.write_text("import json\njson.loads('{')\n")
    proc = _stoker("run", str(app), cwd=tmp_path)
    assert proc.returncode == 1
    assert _lines(proc.stderr) == [
        "stoker: error: JSONDecodeError: Expecting property name enclosed in double quotes: "
        "line 1 column 2 (char 1) (run with --debug or STOKER_DEBUG=1 for the traceback)"
    ]
    proc = _stoker("run", str(app), "--debug", cwd=tmp_path)
    assert proc.returncode == 1
    assert "Traceback (most recent call last)" in proc.stderr


def test_an_invalid_spark_setting_exits_2_with_one_line_and_leaves_no_store(
    tmp_path: Path,
) -> None:
    app = tmp_path / "app.py"
    app.write_text(PLAIN_APP.format(out=str(tmp_path / "out")))
    proc = _stoker(
        "run",
        str(app),
        "-D",
        "spark.sql.shuffle.partitions=abc",
        cwd=tmp_path,
        timeout=SPARK_RUN_TIMEOUT,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [line for line in _lines(proc.stderr) if line.startswith("stoker: error:")]
    assert errors == [
        "stoker: error: -D spark.sql.shuffle.partitions: The value 'abc' in the config "
        "\"spark.sql.shuffle.partitions\" is invalid. It should be a/an 'int' value."
    ]
    assert "\tat " not in proc.stderr  # no Java stack
    assert "job never: starting Spark (local[*])" in _lines(proc.stderr)[0]  # progress first
    # Spark is checked before the store is made: nothing to trip `status` later.
    assert not (tmp_path / ".stoker").exists()
    assert not (tmp_path / "out").exists()


def test_a_module_level_udf_with_a_ddl_type_runs_quietly_with_progress_and_a_summary(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    app = tmp_path / "app.py"
    app.write_text(UDF_APP.format(out=str(out)))

    proc = _stoker(
        "run",
        str(app),
        "-D",
        "stoker.trigger=100ms",
        # The user's own Java options: stoker's stack size and log4j2 file are added to them.
        "-D",
        f"spark.driver.extraJavaOptions={LIGHT_JVM}",
        cwd=tmp_path,
        timeout=600,
    )

    assert proc.returncode == 0, proc.stderr[-3000:]
    assert file_sink_ids(out) == Counter(2 * i for i in range(200))
    # Progress, in order, from before Spark is up to the final epoch (plain lines: no tty).
    err = _lines(proc.stderr)
    steps = [
        _index(err, "app.py needs Spark while it is imported: starting Spark (local[*])"),
        _index(err, "Spark started in "),
        _index(err, "job udf-job: attempt 1 started"),
        _index(err, "job udf-job: query started, first epoch on its way"),
        _index(err, "epoch 0 committed: 100 rows"),
        _index(err, "epoch 1 committed: 100 rows"),
    ]
    assert steps == sorted(steps), "\n".join(err)
    assert "(final)" in err[steps[-1]] or any("(final)" in line for line in err)
    for noise in NOISE:
        assert noise not in proc.stderr, f"{noise!r} in:\n{proc.stderr[-3000:]}"
    assert not [line for line in err if line.startswith("stoker: error")]
    # The file ran twice up to its udf line: once without Spark, once with.
    state = tmp_path / ".stoker" / "udf-job"
    assert _lines(proc.stdout) == [
        "app imported",
        "app imported",
        "job udf-job FINISHED (attempt 1): 2 epochs, 200 rows, last epoch 1",
        f"  output  files({str(out)!r}, format='parquet')",
        f"  state   {state}",
        f"  status  {program()} status udf-job --state-dir {state}",
    ]
    status = _stoker("status", "udf-job", "--state-dir", str(state), cwd=tmp_path)
    assert status.returncode == 0, status.stderr
    assert "state      FINISHED" in status.stdout

    # Run again: the job has ended; the refusal names the flag. (This file needs Spark to be
    # imported at all; a file without a module-level udf is refused before Spark starts: see
    # test_cli's second run.)
    again = _stoker("run", str(app), cwd=tmp_path)
    assert again.returncode == 5
    assert [line for line in _lines(again.stderr) if line.startswith("stoker: error:")] == [
        "stoker: error: job 'udf-job' has ended in state FINISHED; to run it again from its "
        'checkpoint ask for a restart: --restart (stoker run), "restart": true (REST), '
        "restart=True (stoker.run)"
    ]


def test_ctrl_c_while_starting_says_what_happened_and_how_to_go_on(tmp_path: Path) -> None:
    # Ctrl-C before any epoch (here: while the app is imported, no Spark yet). The in-run case
    # (the epoch in flight commits, SUSPENDED, exit 13) is tests/e2e/test_signals.py's.
    app = tmp_path / "app.py"
    app.write_text("import sys, time\nprint('importing', flush=True)\ntime.sleep(120)\n")
    proc = subprocess.Popen(
        stoker_cmd("run", str(app), "-D", "stoker.trigger=1s"),
        cwd=str(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline() == "importing\n"
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=QUICK_TIMEOUT)
    assert proc.returncode == 13
    assert _lines(err) == [
        "stoker: stopped by a signal while starting, before any epoch ran; to go on, run "
        f"the same command again: {program()} run {app} -D stoker.trigger=1s"
    ]
