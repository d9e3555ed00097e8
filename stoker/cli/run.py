"""``stoker run APP``: run a pipeline file in this process, or submit it to a job manager
(``--server``: as a job; ``--driver``: the whole program, as an application)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shlex
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import click

from stoker.cli._common import STORE_ENV, STORE_FILE_ENV, guarded, need_server, server_opts
from stoker.cli._run_args import RunArgs
from stoker.cli._savepoint_options import check_savepoint_flags, savepoint_options
from stoker.errors import InvalidInput, JobSuspended
from stoker.paths import check_app_path
from stoker.redact import redact_answer, redact_url
from stoker.scalespec import parse_scaling
from stoker.types import JobState
from stoker.types import job_id as _job_id

if TYPE_CHECKING:
    from stoker.runtime.job.result import JobResult


@click.command("run")
@click.argument("app", type=click.Path())  # completes file names
@click.argument("positional_args", nargs=-1, metavar="[ARGS]...")
@click.option(
    "--driver",
    is_flag=True,
    help="Hand the whole program to the job manager (--server) as an application: its main "
    "runs in a driver the manager supervises, with every job it starts.",
)
@click.option(
    "--app-id", default=None, help="With --driver: the application's id (default: the file's name)."
)
@click.option(
    "--cluster",
    default=None,
    help="With --driver: local (default), standalone:workers=2,cores=1,memory=1g, "
    "spark://host:port, or a session cluster's name.",
)
@click.option(
    "--scaling",
    default=None,
    metavar="SPEC",
    help="With --server or --driver: fixed (default), reactive, or "
    "auto:min=1,max=4[,target_utilization=0.7,catch_up=5m,stabilization=1m,cooldown=2m].",
)
@click.option("--driver-memory", default=None, help="With --driver: e.g. 2g.")
@click.option("--driver-cores", default=None, type=click.IntRange(1), help="With --driver.")
@click.option(
    "--restart-strategy",
    "restart_strategy",
    default=None,
    metavar="JSON",
    help='With --server: e.g. \'{"strategy": "fixed-delay", "attempts": 3, "delay": 1}\'.',
)
@click.option("--job-id", default=None, help="Job id (default: the pipeline's name).")
@click.option(
    "--restart", is_flag=True, help="Run a job that has ended again, from its checkpoint."
)
@click.option(
    "--reset-checkpoint",
    "reset_checkpoint",
    is_flag=True,
    help="When the job's checkpoint has lost epochs its store decided (stoker run refuses to "
    "start it, exit 2): start the job over under a new uid, its sources read again from their "
    "beginning, its sinks written as a new job's. Does nothing to a job whose checkpoint is "
    "whole.",
)
@savepoint_options
@click.option(
    "-D",
    "defines",
    multiple=True,
    metavar="KEY=VALUE",
    help="spark.<conf> or stoker.<trigger|state_dir|store|master|lease_ttl|progress_timeout|"
    "cancel_timeout|startup_timeout|retention.<epochs|time|interval>> (README).",
)
@click.option(
    "--config",
    "config_pairs",
    multiple=True,
    metavar="KEY=VALUE",
    help="A declared pipeline config key (repeatable); the value is JSON if it parses, "
    "else a string, and must have its default's type.",
)
@click.option(
    "--pipeline",
    "pipeline_name",
    default=None,
    help="Which Pipeline of the file to run when it defines several.",
)
@click.option(
    "--standby",
    is_flag=True,
    help="With --server: keep a warm standby driver beside the running one (the app imported, "
    "Spark up); its first epoch commits about 1.5 s after the running driver dies. Costs a "
    "second driver's memory (on a spark:// master, with -D spark.cores.max, executors of its "
    "own up to that cap). With --driver: the application's (cluster local), which runs "
    "main up to its first job and goes on from there when it takes over.",
)
@click.option("--quiet", is_flag=True, help="Do not print epoch progress.")
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default=None,
    help="A local run's progress and logs on stderr: text (default) or json (one object a "
    "line: ts, level, logger, message, job, attempt, epoch). Env: STOKER_LOG_FORMAT.",
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print the result as JSON (one line per job)."
)
@click.option("-d", "--detached", is_flag=True, help="With --server: submit and return at once.")
@click.option("--arg", "app_args", multiple=True, help="An argument for the app (repeatable).")
@server_opts
@guarded
def run_cmd(**params: Any) -> None:
    """Run the pipeline file APP in this process until the job ends.

    APP either calls ``stoker.run(pipeline)`` itself or defines a Pipeline at module level.
    Ctrl-C or SIGTERM stops the job gracefully (the epoch in flight commits) and leaves it
    SUSPENDED, exit code 13: the same command again resumes it from its checkpoint.

    With ``--driver --server URL`` the program runs in the job manager as an application
    (ARGS are its arguments): attached by default, following it and its jobs until it ends
    (exit 0 FINISHED or CANCELED, 8 FAILED; Ctrl-C detaches), ``-d`` returns at once.
    """
    a = RunArgs(**params)
    path = check_app_path(a.app)
    a.overrides, a.config  # noqa: B018 - bad -D or --config refused first, in that order
    strategy = _json_object(a.restart_strategy, "--restart-strategy")
    if a.scaling is not None:
        parse_scaling(a.scaling, "--scaling")  # named as given here, before anything is sent
    check_mode(run_mode(a.driver, a.server), a.flags_given(strategy))
    if a.driver:
        sys.exit(_run_application(a, path, strategy))
    check_savepoint_flags(a.from_savepoint, rewrite_output=a.rewrite_output, fork=a.fork)
    if a.job_id is not None:
        _job_id(a.job_id)
    if a.server:
        sys.exit(_submit_job(a, path, strategy))
    _run_here(a, path)


def _run_application(a: RunArgs, path: Path, strategy: dict[str, Any] | None) -> int:
    """``--driver``: the whole program to the job manager as an application."""
    from stoker.cli.apps import submit_and_follow_application

    return submit_and_follow_application(
        need_server(a.server),
        a.token,
        str(path),
        _app_id(a.app_id, path),
        a.args,
        a.overrides,
        a.cluster,
        strategy,
        a.driver_memory,
        a.driver_cores,
        a.restart,
        a.detached,
        a.quiet,
        a.as_json,
        scaling=a.scaling,
        standby=a.standby,
    )


def _submit_job(a: RunArgs, path: Path, strategy: dict[str, Any] | None) -> int:
    """``--server``: the file's pipeline to the job manager as a job."""
    from stoker.cli.remote import submit_and_follow

    assert a.server is not None
    return submit_and_follow(
        a.server,
        a.token,
        path,
        a.job_id,
        a.args,
        a.overrides,
        a.restart,
        a.detached,
        a.quiet,
        config=a.config,
        from_savepoint=str(Path(a.from_savepoint).resolve()) if a.from_savepoint else None,
        rewrite_output_after_savepoint=a.rewrite_output,
        restart_strategy=strategy,
        scaling=a.scaling,
        standby=a.standby,
        fork=a.fork,
        ignore_unreachable_stores=a.ignore_unreachable_stores,
    )


def _run_here(a: RunArgs, path: Path) -> None:
    """A local run: the one place the command line reaches the runtime (and so Spark)."""
    from stoker.runtime import launch
    from stoker.runtime.appfile import run_app
    from stoker.runtime.job.result import describe
    from stoker.runtime.session import want_source_zygote

    ctx = launch.LaunchContext(
        overrides=local_overrides(a.overrides, os.environ),
        job_id=a.job_id,
        restart=a.restart,
        config=dict(a.config),
        from_savepoint=str(a.from_savepoint) if a.from_savepoint else None,
        rewrite_output_after_savepoint=a.rewrite_output,
        fork=a.fork,
        ignore_unreachable_stores=a.ignore_unreachable_stores,
        reset_checkpoint=a.reset_checkpoint,
    )
    _setup_logging(a.quiet, a.log_format)
    want_source_zygote()  # Spark's Python processes forked warm (runtime/zygote.py)

    # SIGTERM before the job runs (while the app is imported) stops this process the way
    # Ctrl-C does; while it runs, stoker.run's own handlers stop it gracefully.
    signal.signal(signal.SIGTERM, _interrupt)
    # Under --json, stdout carries the JSON lines only: what the program itself prints goes
    # to stderr (the example's summary came first on stdout).
    program_out = contextlib.redirect_stdout(sys.stderr) if a.as_json else contextlib.nullcontext()
    try:
        with program_out:
            results = run_app(path, ctx, a.args, a.pipeline_name)
    except KeyboardInterrupt:
        raise JobSuspended(
            "stopped by a signal while starting, before any epoch ran; to go on, run the same "
            f"command again: {_this_command()}"
        ) from None
    for r in results:
        if a.as_json:
            click.echo(json.dumps(redact_answer(describe(r))))  # a store URL's password: hidden
        else:
            click.echo(summary(r))
    _raise_if_suspended(results)


def _raise_if_suspended(results: list[JobResult]) -> None:
    """A job a signal stopped ends the command with JobSuspended (exit 13), saying how to go
    on."""
    suspended = [r for r in results if r.state == JobState.SUSPENDED]
    if not suspended:
        return
    done = ", ".join(
        f"{r.job_id} after epoch {r.last_epoch}" if r.last_epoch is not None else r.job_id
        for r in suspended
    )
    if all(r.last_epoch is None for r in suspended):
        how = "no epoch had run yet"
    elif any(r.stopped_at_once for r in suspended):
        how = "a second signal did not wait for the epoch in flight: it runs again on resume"
    else:
        how = "the epoch in flight committed"
    raise JobSuspended(
        f"stopped by a signal: job {done} is SUSPENDED ({how}); to resume it from its "
        f"checkpoint, run the same command again (no --restart): {_this_command()}"
    )


def local_overrides(overrides: dict[str, str], environ: Mapping[str, str]) -> dict[str, str]:
    """A local run's ``-D`` settings: the URL in the file STOKER_STORE_FILE names, else
    STOKER_STORE, is its store, as it is every ``--store``'s, unless ``-D stoker.store=URL``
    names one (the explicit setting wins)."""
    if "stoker.store" in overrides:
        return overrides
    named = environ.get(STORE_FILE_ENV)
    if named:
        from stoker.tokens import read_token

        return {**overrides, "stoker.store": read_token(Path(named), STORE_FILE_ENV)}
    env = environ.get(STORE_ENV)
    if env:
        return {**overrides, "stoker.store": env}
    return overrides


# stoker run's three modes: the file runs here (local), is submitted to a job manager as a
# job (--server), or as an application (--driver, with --server).
LOCAL, SERVER, DRIVER = "local", "--server", "--driver"
_APPLICATION = "runs a program as an application: add --driver"
_ONE_JOB = (
    "is an option of one job; with --driver the program names its jobs "
    "(stoker.submit(p, job_id=..., config=...))"
)
# The one table of which options each mode takes, checked once (check_mode), in this order:
# an option not listed (-D, --restart, --quiet, --json, --arg, ...) is every mode's. For the
# others: the modes that take it, and what a mode that does not says.
MODE_OPTIONS: dict[str, tuple[frozenset[str], str]] = {
    "--app-id": (frozenset({DRIVER}), _APPLICATION),
    "--cluster": (frozenset({DRIVER}), _APPLICATION),
    "--driver-memory": (frozenset({DRIVER}), _APPLICATION),
    "--driver-cores": (frozenset({DRIVER}), _APPLICATION),
    "--job-id": (frozenset({LOCAL, SERVER}), _ONE_JOB),
    "--pipeline": (frozenset({LOCAL, SERVER}), _ONE_JOB),
    "--config": (frozenset({LOCAL, SERVER}), _ONE_JOB),
    "--from-savepoint": (frozenset({LOCAL, SERVER}), _ONE_JOB),
    "--rewrite-output-after-savepoint": (frozenset({LOCAL, SERVER}), _ONE_JOB),
    "--fork": (frozenset({LOCAL, SERVER}), _ONE_JOB),
    "--ignore-unreachable-stores": (frozenset({LOCAL, SERVER}), _ONE_JOB),
    # A job manager's submissions do not carry it: its attempts would each start over.
    "--reset-checkpoint": (
        frozenset({LOCAL}),
        "is a local run's: a job manager's submission does not carry it",
    ),
    "--restart-strategy": (frozenset({SERVER, DRIVER}), "is the job manager's: add --server"),
    "--scaling": (
        frozenset({SERVER, DRIVER}),
        "is the job manager's (its scaler decides, its clusters grow): add --server URL, "
        "or --driver --server URL for a program",
    ),
    "--standby": (
        frozenset({SERVER, DRIVER}),
        "is a job manager's: add --server URL (or --driver --server URL for a program)",
    ),
}


def run_mode(driver: bool, server: str | None) -> str:
    """The mode a ``stoker run`` command line asks for (``--driver`` needs ``--server`` too:
    checked after the options, by ``need_server``)."""
    return DRIVER if driver else SERVER if server else LOCAL


def check_mode(mode: str, given: Mapping[str, bool]) -> None:
    """Refuse the first option given (``given[flag]`` true) that ``mode`` does not take, in
    :data:`MODE_OPTIONS`' order: :class:`InvalidInput` naming the option (exit 2)."""
    for flag, (modes, why) in MODE_OPTIONS.items():
        if given.get(flag) and mode not in modes:
            raise InvalidInput(flag, why)


def _app_id(given: str | None, path: Path) -> str:
    """The application's id: given, or the file's name without ``.py``."""
    if given is not None:
        return _job_id(given)
    try:
        return _job_id(path.stem)
    except InvalidInput:
        raise InvalidInput(
            "--app-id", f"the file name {path.stem!r} is not a valid application id: give --app-id"
        ) from None


def _json_object(text: str | None, name: str) -> dict[str, Any] | None:
    """A JSON object given on the command line, or None when not given."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError as e:
        raise InvalidInput(name, f"is not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise InvalidInput(name, f"expects a JSON object, got {text!r}")
    return value


def summary(r: JobResult) -> str:
    """A finished run in a few lines: the job, how it ended, where its output and state are."""
    last = "" if r.last_epoch is None else f", last epoch {r.last_epoch}"
    lines = [
        f"job {r.job_id} {r.state} (attempt {r.attempt}): "
        f"{r.epochs} epoch{'' if r.epochs == 1 else 's'}, {r.rows} rows{last}"
    ]
    lines += [f"  output  {o}" for o in r.outputs]
    store = redact_url(str(r.store_url))
    in_state_dir = store.removeprefix("sqlite:///") == str(r.state_dir / "store.db")
    lines.append(f"  state   {r.state_dir}" + ("" if in_state_dir else f" (store {store})"))
    lines.append(f"  status  {r.command('status')}")
    return "\n".join(lines)


# The command line as given (run_app replaces sys.argv with the app's own).
_ARGV = tuple(sys.argv[1:])


def _this_command() -> str:
    """The command that ran, as the shell finds it: ``.venv/bin/stoker`` when ``stoker`` is
    not on PATH (the README's first command runs it so)."""
    from stoker.runtime.job.result import program

    return " ".join([program(), shlex.join(_ARGV)]).strip()


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


class _Progress(logging.StreamHandler):
    """Progress on stderr: a line per step (starting Spark, attempt N, recovering, each epoch).

    On a terminal the epoch lines rewrite one status line in place; any other line (and
    anything not on a terminal, such as a log file or a test) gets plain lines.
    """

    def __init__(self, tty: bool = True) -> None:
        super().__init__(sys.stderr)
        self.tty = tty and sys.stderr.isatty()
        self._open = False  # a status line is on screen without its newline

    def emit(self, record: logging.LogRecord) -> None:
        try:
            msg = self.format(record)
            live = self.tty and record.name == "stoker.epoch" and record.levelno == logging.INFO
            if live:
                self.stream.write("\r\x1b[K" + msg)
            else:
                self.stream.write(("\n" if self._open else "") + msg + "\n")
            self._open = live
            self.flush()
        except Exception:
            self.handleError(record)


def _setup_logging(quiet: bool, log_format: str | None = None) -> None:
    from stoker import logformat

    level = logging.WARNING if quiet else logging.INFO
    json_lines = logformat.check_format(log_format) == "json"
    if json_lines:
        os.environ[logformat.ENV] = "json"  # and so for any process this one starts
    handler = _Progress(tty=not json_lines)  # a JSON line is never rewritten in place
    handler.setFormatter(
        logformat.JsonFormatter()
        if json_lines
        else logformat.TextFormatter("%(asctime)s %(message)s", "%H:%M:%S")
    )
    root = logging.getLogger("stoker")
    root.setLevel(level)
    root.addHandler(handler)
