"""The ``stoker`` command line, driven in subprocesses as a user would.

One real job runs on Spark (a bounded generator into a files sink); every other command either
reads its store or fails before Spark starts, so the module stays fast.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from tests.support import file_sink_ids, stoker_cmd
from tests.support.core import venv_over_this_python

pytestmark = pytest.mark.scenario

JOB = "cli-job"
SPARK_RUN_TIMEOUT = 420.0  # a cold Spark driver on a loaded 2-core machine
QUICK_TIMEOUT = 120.0

# Calls stoker.run itself, as most application files do.
APP = """\
import stoker
from stoker import Pipeline, sinks, sources

p = (
    Pipeline({job!r})
    .source(sources.generator(total=300, max_rows_per_epoch=100))
    .sink(sinks.files({out!r}))
)

if __name__ == "__main__":
    stoker.run(p)
    print("the app's own line")
"""

# Only defines the pipeline: the CLI finds and runs it.
APP_DEFINES_ONLY = """\
from stoker import Pipeline, sinks, sources

pipeline = (
    Pipeline({job!r})
    .source(sources.generator(total=300, max_rows_per_epoch=100))
    .sink(sinks.files({out!r}))
)
"""


def _stoker(
    *args: str, cwd: Path, timeout: float = QUICK_TIMEOUT, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        stoker_cmd(*args),
        cwd=str(cwd),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=None if env is None else {**os.environ, **env},
    )


def _error_lines(proc: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.startswith("stoker: error:")]


class _Ran:
    """The module's one real run, shared by the tests that read what it left behind."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.state = root / "state"
        self.out = root / "out"
        self.app = root / "app.py"
        self.app.write_text(APP.format(job=JOB, out=str(self.out)))
        self.proc = _stoker(
            "run",
            str(self.app),
            "--json",
            "-D",
            f"stoker.state_dir={self.state}",
            "-D",
            "stoker.trigger=100ms",
            cwd=root,
            timeout=SPARK_RUN_TIMEOUT,
        )

    def dir_args(self) -> list[str]:
        return ["--state-dir", str(self.state)]


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> _Ran:
    return _Ran(tmp_path_factory.mktemp("cli"))


def test_run_of_a_bounded_app_exits_0_and_prints_its_result(ran: _Ran) -> None:
    assert ran.proc.returncode == 0, ran.proc.stderr[-3000:]
    # --json: stdout holds the JSON line only; the program's own prints went to stderr.
    [line] = ran.proc.stdout.strip().splitlines()
    assert "the app's own line" in ran.proc.stderr
    assert json.loads(line) == {
        "job_id": JOB,
        "state": "FINISHED",
        "attempt": 1,
        "epochs": 3,
        "rows": 300,
        "last_epoch": 2,
    }
    assert file_sink_ids(ran.out) == Counter(range(300))
    assert _error_lines(ran.proc) == []


def test_run_shows_progress_in_order_from_before_spark_starts(ran: _Ran) -> None:
    # Not a terminal here: one plain line per step, on stderr.
    lines = ran.proc.stderr.splitlines()

    def at(part: str) -> int:
        found = [i for i, line in enumerate(lines) if part in line]
        assert found, f"no {part!r} in:\n{ran.proc.stderr[-3000:]}"
        return found[0]

    steps = [
        at(f"job {JOB}: starting Spark (local[*])"),
        at(f"job {JOB}: attempt 1 started"),
        at(f"job {JOB}: query started, first epoch on its way"),
        at("epoch 0 committed: 100 rows"),
        at("epoch 1 committed: 100 rows"),
        at("epoch 2 committed: 100 rows"),
    ]
    assert steps == sorted(steps)
    assert steps[0] == 0  # the very first line, before anything of Spark's
    assert lines[steps[-1]].endswith("(final)")
    for noise in (
        "InterruptedException",
        "Received command",
        "Using Spark's default log4j",
        "Failed to cancel job group",  # issue 23 item 8: twice at the end of every run
    ):
        assert noise not in ran.proc.stderr


def test_status_shows_the_finished_job(ran: _Ran) -> None:
    proc = _stoker("status", JOB, *ran.dir_args(), cwd=ran.root)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == f"job        {JOB}"
    assert lines[1] == "state      FINISHED"
    assert lines[2].startswith("attempt    1 FINISHED pid ")
    assert lines[3].startswith("last epoch 2 COMMITTED rows 100 at ")
    assert lines[4] == "config v0"
    assert lines[5] == "partitions 8 (state partitions: the max parallelism)"
    assert lines[6] == "trigger    0.1s"  # what the attempt ran with
    assert lines[7].startswith("conf       ") and "stoker.trigger=100ms" in lines[7]
    assert len(lines) == 8

    proc = _stoker("status", JOB, *ran.dir_args(), "--json", cwd=ran.root)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert (doc["job_id"], doc["state"], doc["current_attempt"], doc["last_error"]) == (
        JOB,
        "FINISHED",
        1,
        None,
    )
    assert (doc["attempt"]["attempt"], doc["attempt"]["state"]) == (1, "FINISHED")
    assert (doc["last_epoch"]["epoch"], doc["last_epoch"]["state"], doc["last_epoch"]["final"]) == (
        2,
        "COMMITTED",
        True,
    )


def test_epochs_lists_every_epoch_newest_first(ran: _Ran) -> None:
    proc = _stoker("epochs", JOB, *ran.dir_args(), "--json", cwd=ran.root)
    assert proc.returncode == 0, proc.stderr
    epochs = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [
        (e["epoch"], e["state"], e["rows"], e["final"], e["decided_by"], e["control_version"])
        for e in epochs
    ] == [
        (2, "COMMITTED", 100, True, 1, 0),
        (1, "COMMITTED", 100, False, 1, 0),
        (0, "COMMITTED", 100, False, 1, 0),
    ]

    proc = _stoker("epochs", JOB, *ran.dir_args(), "--limit", "1", cwd=ran.root)
    assert proc.returncode == 0, proc.stderr
    header, row = proc.stdout.splitlines()
    assert header.split() == ["epoch", "state", "rows", "ctl", "by", "committed"]
    assert row.split()[:5] == ["2", "COMMITTED", "100", "0", "1"]
    assert row.endswith(" final")
    # The next page: the epochs below the last one seen (issue 21 item 9).
    proc = _stoker("epochs", JOB, *ran.dir_args(), "--before", "2", "--json", cwd=ran.root)
    assert [json.loads(x)["epoch"] for x in proc.stdout.splitlines()] == [1, 0], proc.stderr


def test_a_second_run_of_an_ended_job_exits_5_with_one_line(ran: _Ran) -> None:
    proc = _stoker("run", str(ran.app), "-D", f"stoker.state_dir={ran.state}", cwd=ran.root)
    assert proc.returncode == 5
    assert proc.stderr.strip().splitlines() == [
        f"stoker: error: job '{JOB}' has ended in state FINISHED; to run it again from its "
        'checkpoint ask for a restart: --restart (stoker run), "restart": true (REST), '
        "restart=True (stoker.run)"
    ]
    assert proc.stdout == ""


def test_restart_runs_the_ended_job_again_without_rereading(ran: _Ran, tmp_path: Path) -> None:
    # On a copy of the finished job, so that the other tests see it as the run left it.
    state, out = tmp_path / "state", tmp_path / "out"
    shutil.copytree(ran.state, state)
    shutil.copytree(ran.out, out)
    app = tmp_path / "defines_only.py"  # only defines the pipeline: the CLI finds and runs it
    app.write_text(APP_DEFINES_ONLY.format(job=JOB, out=str(out)))
    before = sorted(str(p.relative_to(out)) for p in out.rglob("*"))

    proc = _stoker(
        "run",
        str(app),
        "--restart",
        "--json",
        "-D",
        f"stoker.state_dir={state}",
        cwd=tmp_path,
        timeout=SPARK_RUN_TIMEOUT,
    )

    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {
        "job_id": JOB,
        "state": "FINISHED",
        "attempt": 2,
        "epochs": 0,
        "rows": 0,
        "last_epoch": None,
    }
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == before
    assert file_sink_ids(out) == Counter(range(300))
    status = _stoker("status", JOB, "--state-dir", str(state), "--json", cwd=tmp_path)
    doc = json.loads(status.stdout)
    assert (doc["state"], doc["current_attempt"], doc["attempt"]["state"]) == (
        "FINISHED",
        2,
        "FINISHED",
    )


# failures before anything runs ---------------------------------------------------------------


def test_run_of_a_missing_file_exits_2(tmp_path: Path) -> None:
    proc = _stoker("run", "missing.py", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["stoker: error: app: 'missing.py' does not exist"]


def test_run_of_a_file_that_is_not_python_exits_2(tmp_path: Path) -> None:
    (tmp_path / "app.txt").write_text("print(1)\n")
    proc = _stoker("run", "app.txt", cwd=tmp_path)
    assert proc.returncode == 2
    assert _error_lines(proc) == ["stoker: error: app: 'app.txt' is not a Python file (.py)"]


def test_a_typo_in_a_keyword_exits_2_naming_file_and_line(tmp_path: Path) -> None:
    """Issue 23 item 3: it was exit 1 with a bare TypeError and no file or line."""
    (tmp_path / "app.py").write_text(
        "from stoker import Pipeline, sinks, sources\n"
        "p = Pipeline('typo').source(sources.generator(total=10))\n"
        f"p.sink(sinks.files({str(tmp_path / 'out')!r}, fromat='json'))\n"
    )
    proc = _stoker("run", "app.py", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert _error_lines(proc) == [
        f"stoker: error: app: {tmp_path / 'app.py'}:3: files() got an unexpected keyword "
        "argument 'fromat'"
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.py"]


def test_an_output_folder_that_cannot_be_made_exits_2_before_spark(tmp_path: Path) -> None:
    """Issue 23 item 3: an output path under a file said "No such file or directory" after
    Spark started (15 s); it is refused before."""
    (tmp_path / "a-file").write_text("x")
    app = tmp_path / "app.py"
    app.write_text(APP.format(job="nofolder", out=str(tmp_path / "a-file" / "out")))
    proc = _stoker("run", str(app), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "is a file, not a folder" in proc.stderr, proc.stderr
    assert "starting Spark" not in proc.stderr and "Spark started" not in proc.stderr


def test_a_python_worker_spark_cannot_start_fails_the_run_with_8_and_what_spark_said(
    tmp_path: Path,
) -> None:
    """Found by the chaos harness (seed 41): a Python worker killed while Spark opened a
    source made `stoker run` exit 1 with "Py4JJavaError: An error occurred while calling
    o68.load", an unexpected error. A Python that cannot start (``PYSPARK_PYTHON=/bin/false``)
    is the same failure, for real and every time: exit 8, Spark's own words, nothing made."""
    app = tmp_path / "app.py"
    app.write_text(APP.format(job="noworker", out=str(tmp_path / "out")))
    proc = _stoker(
        "run",
        str(app),
        cwd=tmp_path,
        timeout=SPARK_RUN_TIMEOUT,
        env={"PYSPARK_PYTHON": "/bin/false"},
    )
    assert proc.returncode == 8, proc.stderr[-3000:]
    (line,) = _error_lines(proc)
    assert line.startswith("stoker: error: source s0 could not be opened, Spark failed: "), line
    assert "Py4JJavaError" not in line and "org.apache.spark" in line, line
    assert not (tmp_path / "out").exists()


def test_a_venv_that_is_not_activated_runs_spark_workers_with_its_own_python(
    tmp_path: Path,
) -> None:
    """Issue 23 item 1: Spark starts its Python workers with ``python3`` from ``PATH``. Run
    from a venv that is not activated (``.venv/bin/stoker``, as services run it), with another
    ``python3`` first on ``PATH`` (here one that cannot run anything), every worker must still
    be the venv's interpreter: the run finishes."""
    import sys

    env_dir = tmp_path / "venv"
    venv_over_this_python(env_dir)
    bin_dir = tmp_path / "elsewhere"
    bin_dir.mkdir()
    fake = bin_dir / "python3"
    fake.write_text("#!/bin/sh\necho 'not the python stoker runs with' >&2\nexit 1\n")
    fake.chmod(0o755)
    app = tmp_path / "app.py"
    app.write_text(APP.format(job="venv-run", out=str(tmp_path / "out")))
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "VIRTUAL_ENV")}
    java = shutil.which("java")
    path = [str(bin_dir), "/usr/bin", "/bin"] + ([str(Path(java).parent)] if java else [])
    env["PATH"] = os.pathsep.join(path)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p and "site-packages" not in p)
    proc = subprocess.run(
        [str(env_dir / "bin" / "python"), "-m", "stoker.cli", "run", str(app)],
        cwd=str(tmp_path),
        capture_output=True,
        text=True,
        timeout=SPARK_RUN_TIMEOUT,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert Counter(file_sink_ids(tmp_path / "out")) == Counter(range(300))


def test_a_malformed_define_exits_2(tmp_path: Path) -> None:
    app = tmp_path / "app.py"
    app.write_text(APP.format(job="never", out=str(tmp_path / "out")))
    proc = _stoker("run", str(app), "-D", "badkey", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["stoker: error: -D: 'badkey' is not key=value"]
    assert not (tmp_path / ".stoker").exists()


def test_an_unknown_setting_exits_2_and_writes_nothing(tmp_path: Path) -> None:
    app = tmp_path / "app.py"
    app.write_text(APP.format(job="never", out=str(tmp_path / "out")))
    proc = _stoker("run", str(app), "-D", "stoker.nope=1", cwd=tmp_path)
    assert proc.returncode == 2
    assert _error_lines(proc) == [
        "stoker: error: stoker.nope: unknown stoker setting; known: "
        "trigger, state_dir, store, master, lease_ttl, retention.epochs, retention.time, "
        "retention.interval, paced_trigger, progress_timeout, cancel_timeout, startup_timeout"
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.py"]


def test_a_bad_job_id_exits_2(tmp_path: Path) -> None:
    app = tmp_path / "app.py"
    app.write_text(APP.format(job="never", out=str(tmp_path / "out")))
    proc = _stoker("run", str(app), "--job-id", "no/slashes", cwd=tmp_path)
    assert proc.returncode == 2
    assert len(_error_lines(proc)) == 1
    assert _error_lines(proc)[0].startswith("stoker: error: job_id: 'no/slashes' is not a valid")


def test_status_of_an_unknown_job_exits_3(tmp_path: Path) -> None:
    proc = _stoker("status", "nosuchjob", cwd=tmp_path)
    assert proc.returncode == 3
    assert proc.stderr.strip().splitlines() == [
        "stoker: error: job 'nosuchjob' not found (no store at .stoker/nosuchjob/store.db; "
        "give --store or --state-dir)"
    ]
    proc = _stoker("epochs", "nosuchjob", cwd=tmp_path)
    assert proc.returncode == 3


def test_status_of_a_job_missing_from_an_existing_store_exits_3(ran: _Ran) -> None:
    proc = _stoker("status", "other-job", *ran.dir_args(), cwd=ran.root)
    assert proc.returncode == 3
    assert proc.stderr.strip().splitlines() == ["stoker: error: job 'other-job' not found"]
    proc = _stoker("epochs", "other-job", *ran.dir_args(), cwd=ran.root)
    assert proc.returncode == 3


def test_stoker_store_is_read_by_every_command_with_store_and_an_explicit_store_wins(
    ran: _Ran,
) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("STOKER_SERVER", "STOKER_STORE")}
    env["STOKER_STORE"] = f"sqlite:///{ran.state / 'store.db'}"

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            stoker_cmd(*args),
            cwd=str(ran.root),
            capture_output=True,
            text=True,
            timeout=QUICK_TIMEOUT,
            env=env,
        )

    status = run("status", JOB, "--json")  # no --state-dir: the store comes from the env
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["state"] == "FINISHED"
    listed = run("list")
    assert listed.returncode == 0 and JOB in listed.stdout, listed.stderr
    empty = f"sqlite:///{ran.root / 'empty.db'}"
    assert run("status", JOB, "--store", empty).returncode == 3  # --store wins over the env


def test_version_and_help(tmp_path: Path) -> None:
    proc = _stoker("--version", cwd=tmp_path)
    assert proc.returncode == 0
    assert "0.1.0" in proc.stdout
    proc = _stoker("run", "--help", cwd=tmp_path)
    assert proc.returncode == 0
    assert "--restart" in proc.stdout


BAD_COLUMN_APP = """\
import stoker
from stoker import Pipeline, sinks, sources

p = Pipeline("badcol").source(sources.generator(total=100)).sink(sinks.files({out!r}))
p.transform(lambda df: df.select("nope"))

if __name__ == "__main__":
    stoker.run(p)
"""


def test_a_bad_column_says_so_in_stokers_line_without_spark_noise(tmp_path: Path) -> None:
    """Issue 23 item 8: an analysis error in a user's transform printed an 11.5 KB JSON line
    of PySpark's query context before stoker's own one-line error, and every run ended with
    two WARN lines of the DAG scheduler. The run's stderr holds stoker's lines only (and the
    JVM's one incubator-module warning, which no setting of its own turns off)."""
    app = tmp_path / "app.py"
    app.write_text(BAD_COLUMN_APP.format(out=str(tmp_path / "out")))
    proc = _stoker(
        "run", str(app), "-D", f"stoker.state_dir={tmp_path / 'state'}", cwd=tmp_path,
        timeout=SPARK_RUN_TIMEOUT,
    )  # fmt: skip
    # Issue 23 item 3: found before the job is recorded, as bad input (it was exit 8 after
    # the first epoch failed).
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert _error_lines(proc)[0].startswith("stoker: error: transform: Spark cannot analyse")
    assert "UNRESOLVED_COLUMN" in _error_lines(proc)[0]
    foreign = [
        line
        for line in proc.stderr.splitlines()
        if line.strip()
        and not re.match(r"\d\d:\d\d:\d\d job badcol: ", line)
        and not line.startswith("stoker: error:")
        and line != "WARNING: Using incubator modules: jdk.incubator.vector"
    ]
    assert foreign == [], foreign
    assert len(proc.stderr) < 2000, len(proc.stderr)
    # Bad input changes nothing: the store this first run had made is taken back with its
    # folder (a newcomer walk found an empty store.db left behind).
    assert not (tmp_path / "state").exists(), sorted((tmp_path / "state").rglob("*"))
