"""What every ``stoker`` command shares: error mapping, ``--debug``, the server options, a REST
client."""

from __future__ import annotations

import contextlib
import os
import re
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click

from stoker import tokens
from stoker.cli.terminal import clean
from stoker.errors import (
    InvalidInput,
    JobNotFound,
    JobSuspended,
    StokerError,
    Unauthorized,
    exit_code,
)
from stoker.errortext import DEBUG_ENV, MAX_LINE, MAX_PLAIN_LINE, debug_requested
from stoker.types import job_id as _job_id


def debug_enabled() -> bool:
    """``--debug`` was given, or ``STOKER_DEBUG`` is set to something other than 0/empty."""
    return debug_requested()


def _set_debug(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value:
        # Said in the environment, so that the runtime running in this process (it then keeps
        # Spark's own lines) reads the same answer.
        os.environ[DEBUG_ENV] = "1"


def debug_option() -> click.Option:
    """``--debug``: every command takes it (the group adds it to each)."""
    return click.Option(
        ["--debug"],
        is_flag=True,
        expose_value=False,
        is_eager=True,
        callback=_set_debug,
        help="Show the full traceback of an error (also STOKER_DEBUG=1).",
    )


def one_line(text: str, limit: int = MAX_LINE) -> str:
    """The first non-empty line of ``text``, cut to ``limit`` characters; for a text that
    carries a Python traceback (a task's failure inside Spark's error), the user's exception
    and the line of their code that raised it, not the traceback's header."""
    from stoker.cli import errortext

    if "Traceback (most recent call last):" in text:
        named = re.match(r"job '([^']+)'", text)
        job = named.group(1) if named else "JOB"
        return errortext.one_line(text) + f" (the whole error: stoker status {job} --verbose)"
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return first if len(first) <= limit else first[: limit - 3] + "..."


def _hint(err: BaseException) -> str:
    if isinstance(err, Unauthorized):
        return (
            " (the CLI sends the token given with --token or STOKER_TOKEN, else the one in "
            "the file STOKER_TOKEN_FILE names, else ./.stoker-server/token for a loopback URL)"
        )
    return ""


def _fail(err: BaseException) -> None:
    if isinstance(err, JobSuspended):
        # A graceful stop by a signal is what was asked for, not an error:
        # one plain line, and the exit code that says "suspended, run it again" (13).
        click.echo(f"stoker: {clean(one_line(str(err)))}", err=True)
        sys.exit(exit_code(err))
    if debug_enabled():
        traceback.print_exception(err, file=sys.stderr)
    if isinstance(err, StokerError):
        # stoker's own messages end with what to do (the way out, the flag, the job to name):
        # shown whole, up to a bound only a foreign text carried inside one could reach.
        msg = one_line(str(err), MAX_PLAIN_LINE) + _hint(err)
    else:
        # Not one of stoker's own errors: name its type, keep the one line, say how to see more.
        msg = f"{type(err).__name__}: {one_line(str(err))}"
        if not debug_enabled():
            msg += " (run with --debug or STOKER_DEBUG=1 for the traceback)"
    click.echo(f"stoker: error: {clean(msg)}", err=True)
    sys.exit(exit_code(err))


def _reader_gone() -> None:
    """The reader of stdout closed it (``stoker epochs JOB | head -2``): nothing more to say
    to anyone. Leave quietly, exit 0, with stdout pointed at /dev/null so that Python's own
    flush at exit does not complain."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    sys.exit(0)


class _UsageLine(click.ClickException):
    """A usage error (a missing argument, an unknown option) as one line, like every other
    error of stoker's: what is wrong, the command's usage, where the help is."""

    exit_code = 2

    def __init__(self, err: click.UsageError) -> None:
        super().__init__(err.format_message())
        self.ctx = err.ctx

    def show(self, file: Any = None) -> None:
        what = clean(one_line(self.format_message()))
        if self.ctx is not None:
            usage = one_line(self.ctx.get_usage().removeprefix("Usage: "))
            what += f" Usage: {clean(usage)} ({self.ctx.command_path} --help)"
        click.echo(f"stoker: error: {what}", err=True)


class OneLineUsage(click.Group):
    """The ``stoker`` group: a usage error of any command below it is one line on stderr, exit
    2, not click's three (usage, hint, a blank line, the error)."""

    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        with _usage_in_one_line():
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx: click.Context) -> Any:
        with _usage_in_one_line():
            return super().invoke(ctx)


@contextlib.contextmanager
def _usage_in_one_line() -> Iterator[None]:
    try:
        yield
    except click.exceptions.NoArgsIsHelpError as e:
        # `stoker`, `stoker app` alone: the help, as asked, on stdout (click's is stderr, 2).
        assert e.ctx is not None
        click.echo(e.ctx.get_help())
        raise click.exceptions.Exit(0) from None
    except click.UsageError as e:
        raise _UsageLine(e) from None


def guarded(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Map every error to a one-line message and the exit code of its class (1 for an error
    stoker did not expect); ``--debug`` adds the traceback."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            out = fn(*args, **kwargs)
            sys.stdout.flush()  # a closed pipe shows here, not at the interpreter's exit
            return out
        except BrokenPipeError:
            _reader_gone()
        except StokerError as e:
            _fail(e)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise  # click's own ways out keep their messages and codes
        except Exception as e:
            _fail(e)

    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper


def server_opts(fn: Callable[..., Any]) -> Callable[..., Any]:
    fn = click.option(
        "--token", envvar="STOKER_TOKEN", default=None, help="Token (env STOKER_TOKEN)."
    )(fn)
    return click.option(
        "--server",
        envvar="STOKER_SERVER",
        default=None,
        help="Job manager URL, e.g. http://127.0.0.1:8081 (env STOKER_SERVER).",
    )(fn)


class Duration(click.ParamType):
    """A duration flag in the syntax of ``-D stoker.*`` durations (:func:`parse_duration`):
    ``30s``, ``500ms``, ``2m``, or a plain number of seconds (``10``, ``0.5``); at least
    ``minimum`` seconds. The value is float seconds."""

    name = "duration"

    def __init__(self, minimum: float = 0.0) -> None:
        self.minimum = minimum

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from stoker.durations import parse_duration

        if isinstance(value, float | int) and not isinstance(value, bool):
            seconds = float(value)  # a default
        else:
            try:
                seconds = parse_duration(value, "duration")
            except InvalidInput as e:
                self.fail(e.message, param, ctx)
        if seconds < self.minimum:
            self.fail(f"{value!r} is less than the minimum {self.minimum:g}s", param, ctx)
        return seconds

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "DURATION"


def use_server(server: str | None) -> str | None:
    """``server``, unless it came from STOKER_SERVER while the command line names a local
    store (``--store``, ``--store-file`` or ``--state-dir``): what is typed wins over the
    environment. None: read the store."""
    if not server:
        return None
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return server
    typed = click.core.ParameterSource.COMMANDLINE
    if ctx.get_parameter_source("server") == typed:
        return server
    for name in ("store", "store_file", "state_dir"):
        if ctx.get_parameter_source(name) == typed:
            return None
    return server


def need_server(
    server: str | None, why: str = "applications and clusters live in a job manager"
) -> str:
    """``server``, or :class:`InvalidInput` on ``--server`` saying ``why`` it is required."""
    if not server:
        raise InvalidInput("--server", f"{why}: give --server URL (or STOKER_SERVER)")
    return server


def when(t: float | None) -> str:
    """A store timestamp as local time to the second, ``-`` for none."""
    return "-" if t is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def client(server: str, token: str | None) -> Any:
    from stoker.client import Client

    return Client(server, tokens.client_token(server, token))


def open_job_store(job: str, store: str | None, state_dir: str | None) -> Any:
    """(job id, store) of a local job: ``--store`` (its option reads STOKER_STORE), else the
    store in ``--state-dir`` (default ``./.stoker/JOB``); :class:`JobNotFound` naming where it
    looked."""
    from stoker.store import open_store

    jid = _job_id(job)
    if store is None:
        base = Path(state_dir) if state_dir else Path(".stoker") / jid
        db = base / "store.db"
        if not db.exists():
            # The hint after the quoted id, not inside it: "job 'x' not found (no store at ...)".
            raise JobNotFound(jid).with_hint(f"no store at {db}; give --store or --state-dir")
        store = str(db)
    return jid, open_store(store)


def scaling_line(view: dict[str, Any]) -> str | None:
    """A job's or application's scaling in one line, when it is not ``fixed``: its spec,
    the executors its driver reports (cores), the autoscaler's target."""
    from stoker.scalespec import parse_scaling

    raw = view.get("scaling")
    spec = parse_scaling(raw) if raw else None
    if spec is None or spec.mode == "fixed":
        return None
    res = view.get("resources") or {}
    parts = [spec.to_text()]
    if res.get("executors") is not None:
        cores = f" ({res['cores']} cores)" if res.get("cores") is not None else ""
        parts.append(f"executors {res['executors']}{cores}")
    if view.get("executor_target") is not None:
        parts.append(f"target {view['executor_target']}")
    return ", ".join(parts)


# Every --store reads STOKER_STORE when it is not given (an explicit --store wins).
STORE_ENV = "STOKER_STORE"


STORE_FILE_ENV = "STOKER_STORE_FILE"
_STORE_FILE_KEY = "stoker.store_file"


def _remember_store_file(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value:
        ctx.meta[_STORE_FILE_KEY] = value


def _store_from_file(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """``--store``, else the URL in ``--store-file`` (or STOKER_STORE_FILE), else STOKER_STORE:
    a URL with a password read from a file (0600) is on no command line."""
    path = ctx.meta.get(_STORE_FILE_KEY)
    if not path:
        return value
    if value is not None and value != os.environ.get(STORE_ENV):  # --store given, not the env
        raise click.BadParameter("give --store or --store-file, not both", ctx, param)
    from stoker.tokens import read_token

    try:
        return read_token(Path(path), "--store-file")
    except InvalidInput as e:
        raise click.BadParameter(e.message, ctx, param) from e


def store_option(help: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--store URL``, with ``help``; else ``--store-file PATH`` (the URL in a file, env
    STOKER_STORE_FILE), else STOKER_STORE."""

    def add(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn = click.option(
            "--store",
            envvar=STORE_ENV,
            default=None,
            callback=_store_from_file,
            help=f"{help} Env: {STORE_ENV}.",
        )(fn)
        return click.option(
            "--store-file",
            envvar=STORE_FILE_ENV,
            default=None,
            is_eager=True,
            expose_value=False,
            callback=_remember_store_file,
            help="A file whose first line is the store URL (a password in it stays off the "
            f"command line). Env: {STORE_FILE_ENV}.",
        )(fn)

    return add


store_opt = store_option("Store URL (default: ./.stoker/JOB/store.db).")
state_dir_opt = click.option("--state-dir", default=None, help="The job's state folder.")
