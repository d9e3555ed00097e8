"""The ``stoker`` command line.

``stoker run app.py`` runs a pipeline file in this process on the embedded defaults;
``stoker status JOB`` and ``stoker epochs JOB`` read the job's store.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from stoker.errors import InvalidInput, JobNotFound, StokerError, exit_code
from stoker.runtime import launch
from stoker.runtime.appfile import check_app_path
from stoker.settings import parse_pairs
from stoker.types import job_id as _job_id


def _fail(err: BaseException) -> None:
    click.echo(f"stoker: error: {err}", err=True)
    sys.exit(exit_code(err))


def _guarded(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Map stoker's errors to a one-line message and the exit code of their class."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except StokerError as e:
            _fail(e)

    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper


def _server_opts(fn: Callable[..., Any]) -> Callable[..., Any]:
    fn = click.option(
        "--token", envvar="STOKER_TOKEN", default=None, help="Token (env STOKER_TOKEN)."
    )(fn)
    return click.option(
        "--server",
        envvar="STOKER_SERVER",
        default=None,
        help="Job manager URL, e.g. http://127.0.0.1:8081 (env STOKER_SERVER).",
    )(fn)


@click.group()
@click.version_option(package_name="stoker")
def main() -> None:
    """stoker: run PySpark pipelines as supervised, exactly-once jobs."""


@main.command("run")
@click.argument("app")
@click.option("--job-id", default=None, help="Job id (default: the pipeline's name).")
@click.option(
    "--restart", is_flag=True, help="Run a job that has ended again, from its checkpoint."
)
@click.option(
    "-D",
    "defines",
    multiple=True,
    metavar="KEY=VALUE",
    help="spark.<conf> or stoker.<trigger|state_dir|store|master|lease_ttl>.",
)
@click.option(
    "--pipeline",
    "pipeline_name",
    default=None,
    help="Which Pipeline of the file to run when it defines several.",
)
@click.option("--quiet", is_flag=True, help="Do not print epoch progress.")
@click.option("--detached", is_flag=True, help="With --server: submit and return at once.")
@click.option("--arg", "app_args", multiple=True, help="An argument for the app (repeatable).")
@_server_opts
@_guarded
def run_cmd(
    app: str,
    job_id: str | None,
    restart: bool,
    defines: tuple[str, ...],
    pipeline_name: str | None,
    quiet: bool,
    detached: bool,
    app_args: tuple[str, ...],
    server: str | None,
    token: str | None,
) -> None:
    """Run the pipeline file APP in this process until the job ends.

    APP either calls ``stoker.run(pipeline)`` itself or defines a Pipeline at module level.
    Ctrl-C stops the job (CANCELED); run it again with --restart to resume from its checkpoint.
    """
    path = check_app_path(app)
    overrides = parse_pairs(list(defines))
    if job_id is not None:
        _job_id(job_id)
    if server:
        from stoker.cli_remote import submit_and_follow

        sys.exit(
            submit_and_follow(
                server, token, path, job_id, list(app_args), overrides, restart, detached, quiet
            )
        )
    launch.set_launch(overrides, job_id, restart)
    _setup_logging(quiet)
    from stoker.runtime.appfile import run_app
    from stoker.runtime.runner import describe

    for r in run_app(path, list(app_args), pipeline_name):
        click.echo(json.dumps(describe(r)))


def _setup_logging(quiet: bool) -> None:
    level = logging.WARNING if quiet else logging.INFO
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s: %(message)s", "%H:%M:%S"))
    root = logging.getLogger("stoker")
    root.setLevel(level)
    root.addHandler(handler)


def _open(job: str, store: str | None, state_dir: str | None) -> Any:
    from stoker.store import open_store

    jid = _job_id(job)
    if store is None:
        store = os.environ.get("STOKER_STORE")
    if store is None:
        base = Path(state_dir) if state_dir else Path(".stoker") / jid
        db = base / "store.db"
        if not db.exists():
            err = JobNotFound(jid)
            # The hint after the quoted id, not inside it: "job 'x' not found (no store at ...)".
            err.args = (f"{err} (no store at {db}; give --store or --state-dir)",)
            raise err
        store = str(db)
    return jid, open_store(store)


_store_opt = click.option(
    "--store", default=None, help="Store URL (default: ./.stoker/JOB/store.db)."
)
_dir_opt = click.option("--state-dir", default=None, help="The job's state folder.")


def _ts(t: float | None) -> str:
    return "-" if t is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def _view(st: Any, jid: Any) -> dict[str, Any]:
    rec = st.get_job(jid)
    attempt = st.get_attempt(jid, rec.current_attempt) if rec.current_attempt else None
    last = st.list_epochs(jid, limit=1)
    out: dict[str, Any] = rec.to_dict()
    out["attempt"] = attempt.to_dict() if attempt else None
    out["last_epoch"] = last[0].to_dict() if last else None
    return out


def _client(server: str, token: str | None) -> Any:
    from stoker.client import Client

    return Client(server, token)


@main.command("status")
@click.argument("job")
@_store_opt
@_dir_opt
@_server_opts
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@_guarded
def status_cmd(
    job: str,
    store: str | None,
    state_dir: str | None,
    server: str | None,
    token: str | None,
    as_json: bool,
) -> None:
    """Show a job's state, its current attempt and its last epoch."""
    if server:
        out = _client(server, token).job(_job_id(job))
    else:
        jid, st = _open(job, store, state_dir)
        try:
            out = _view(st, jid)
        finally:
            st.close()
    if as_json:
        click.echo(json.dumps(out, indent=2))
        return
    err = f"  ({out['last_error']})" if out.get("last_error") else ""
    click.echo(f"job        {out['job_id']}")
    click.echo(f"state      {out['state']}{err}")
    a = out.get("attempt")
    if a:
        click.echo(
            f"attempt    {a['attempt']} {a['state']} pid {a['pid']} on {a['host']}, "
            f"started {_ts(a['started_at'])}, lease until {_ts(a['lease_expires_at'])}"
        )
    e = out.get("last_epoch")
    if e:
        click.echo(
            f"last epoch {e['epoch']} {e['state']} rows {e['rows']} at {_ts(e['committed_at'])}"
        )
    click.echo(f"config v{out['control_version']}")


@main.command("epochs")
@click.argument("job")
@_store_opt
@_dir_opt
@_server_opts
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 100000))
@click.option("--json", "as_json", is_flag=True, help="Print JSON lines.")
@_guarded
def epochs_cmd(
    job: str,
    store: str | None,
    state_dir: str | None,
    server: str | None,
    token: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """List a job's most recent epochs, newest first."""
    if server:
        epochs = _client(server, token).epochs(_job_id(job), limit)
    else:
        jid, st = _open(job, store, state_dir)
        try:
            st.get_job(jid)
            epochs = [e.to_dict() for e in st.list_epochs(jid, limit=limit)]
        finally:
            st.close()
    if as_json:
        for e in epochs:
            click.echo(json.dumps(e))
        return
    click.echo(f"{'epoch':>7} {'state':<10} {'rows':>9} {'ctl':>4} {'by':>3}  committed")
    for e in epochs:
        rows = "-" if e["rows"] is None else str(e["rows"])
        flag = " final" if e["final"] else ""
        click.echo(
            f"{e['epoch']:>7} {e['state']:<10} {rows:>9} {e['control_version']:>4} "
            f"{e['decided_by'] or '-':>3}  {_ts(e['committed_at'])}{flag}"
        )


@main.command("list")
@_server_opts
@click.option("--store", default=None, help="Read a store directly instead of a server.")
@click.option("--state", default=None, help="Only jobs in this state.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON lines.")
@_guarded
def list_cmd(
    server: str | None, token: str | None, store: str | None, state: str | None, as_json: bool
) -> None:
    """List jobs with their states."""
    from stoker.types import JobState

    if state is not None and state not in {str(s) for s in JobState}:
        raise InvalidInput("--state", f"{state!r} is not one of {', '.join(map(str, JobState))}")
    if server:
        jobs = _client(server, token).jobs(state)
    elif store or os.environ.get("STOKER_STORE"):
        from stoker.store import open_store

        st = open_store(store or os.environ["STOKER_STORE"])
        try:
            jobs = [j.to_dict() for j in st.list_jobs(JobState(state) if state else None)]
        finally:
            st.close()
    else:
        raise InvalidInput("--server", "give --server (or STOKER_SERVER) or --store")
    for j in jobs:
        if as_json:
            click.echo(json.dumps(j))
        else:
            click.echo(f"{j['job_id']:<30} {j['state']:<11} attempt {j['current_attempt']}")


@main.command("cancel")
@click.argument("job")
@_store_opt
@_dir_opt
@_server_opts
@_guarded
def cancel_cmd(
    job: str, store: str | None, state_dir: str | None, server: str | None, token: str | None
) -> None:
    """Cancel a job gracefully: its current epoch completes and commits, then it stops."""
    if server:
        out = _client(server, token).cancel(_job_id(job))
    else:
        jid, st = _open(job, store, state_dir)
        try:
            out = st.request_cancel(jid).to_dict()
        finally:
            st.close()
    click.echo(f"{out['job_id']}: {out['state']}")


@main.command("logs")
@click.argument("job")
@_server_opts
@click.option("--attempt", type=int, default=None, help="Default: the current attempt.")
@click.option("--tail", type=click.IntRange(1), default=None, help="Only the last N bytes.")
@_guarded
def logs_cmd(
    job: str, server: str | None, token: str | None, attempt: int | None, tail: int | None
) -> None:
    """Print the driver log of a job's attempt (from the job manager)."""
    if not server:
        raise InvalidInput("--server", "logs are kept by the job manager: give --server")
    c = _client(server, token)
    n = attempt if attempt is not None else int(c.job(_job_id(job))["current_attempt"])
    click.echo(c.log(_job_id(job), n, tail), nl=False)


@main.command("server")
@click.option("--store", default=None, help="sqlite:///path (default) or postgresql://...")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8081, show_default=True, type=click.IntRange(0, 65535))
@click.option("--state-dir", default=".stoker-server", show_default=True)
@click.option("--token", envvar="STOKER_TOKEN", default=None, help="Require it for mutating calls.")
@click.option(
    "--allow-dir",
    "allow_dirs",
    multiple=True,
    help="Folder entrypoints may come from (repeatable; default: the current folder).",
)
@click.option("--leader-ttl", default=3.0, show_default=True, type=click.FloatRange(0.5))
@click.option("--lease-ttl", default=10.0, show_default=True, type=click.FloatRange(1.0))
@click.option("--cancel-timeout", default=60.0, show_default=True, type=click.FloatRange(0))
@click.option(
    "--api-only",
    is_flag=True,
    help="Serve the API and take submissions, never lead (no supervisor on this node).",
)
@_guarded
def server_cmd(
    store: str | None,
    host: str,
    port: int,
    state_dir: str,
    token: str | None,
    allow_dirs: tuple[str, ...],
    leader_ttl: float,
    lease_ttl: float,
    cancel_timeout: float,
    api_only: bool,
) -> None:
    """Run a job manager: REST API (docs at /docs), dispatcher and supervisor."""
    from stoker.server.main import serve

    serve(
        store=store,
        host=host,
        port=port,
        state_dir=Path(state_dir),
        token=token,
        allow_dirs=[Path(d) for d in allow_dirs] or [Path.cwd()],
        leader_ttl=leader_ttl,
        lease_ttl=lease_ttl,
        cancel_timeout=cancel_timeout,
        supervise=not api_only,
    )


if __name__ == "__main__":  # pragma: no cover
    main()
