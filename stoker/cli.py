"""The ``stoker`` command line.

``stoker run app.py`` runs a pipeline file in this process on the embedded defaults;
``stoker status JOB`` and ``stoker epochs JOB`` read the job's store.
"""

from __future__ import annotations

import json
import logging
import os
import runpy
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from stoker.errors import InvalidInput, JobNotFound, StokerError, exit_code
from stoker.runtime import launch
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


@click.group()
@click.version_option(package_name="stoker")
def main() -> None:
    """stoker: run PySpark pipelines as supervised, exactly-once jobs."""


def _app_path(path: str) -> Path:
    p = Path(path)
    if not p.exists():
        raise InvalidInput("app", f"{path!r} does not exist")
    if not p.is_file() or p.suffix != ".py":
        raise InvalidInput("app", f"{path!r} is not a Python file (.py)")
    if not os.access(p, os.R_OK):
        raise InvalidInput("app", f"{path!r} is not readable")
    return p.resolve()


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
@_guarded
def run_cmd(
    app: str,
    job_id: str | None,
    restart: bool,
    defines: tuple[str, ...],
    pipeline_name: str | None,
    quiet: bool,
) -> None:
    """Run the pipeline file APP in this process until the job ends.

    APP either calls ``stoker.run(pipeline)`` itself or defines a Pipeline at module level.
    Ctrl-C stops the job (CANCELED); run it again with --restart to resume from its checkpoint.
    """
    path = _app_path(app)
    overrides = parse_pairs(list(defines))
    if job_id is not None:
        _job_id(job_id)
    launch.set_launch(overrides, job_id, restart)
    _setup_logging(quiet)
    from stoker.pipeline import Pipeline
    from stoker.runtime.runner import JobResult, describe
    from stoker.runtime.runner import run as run_pipeline

    results: list[JobResult] = []
    launch.on_result(results.append)
    sys.path.insert(0, str(path.parent))
    namespace = runpy.run_path(str(path), run_name="__main__")
    if not results:
        found = {k: v for k, v in namespace.items() if isinstance(v, Pipeline)}
        if pipeline_name is not None:
            found = {k: v for k, v in found.items() if pipeline_name in (k, v.name)}
        if not found:
            raise InvalidInput("app", f"{app} neither ran a job nor defines a Pipeline")
        if len(found) > 1:
            raise InvalidInput(
                "app",
                f"{app} defines several pipelines ({', '.join(found)}); pick one with --pipeline",
            )
        run_pipeline(next(iter(found.values())))  # reports its result to `results`
    for r in results:
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
            raise JobNotFound(f"{jid} (no store at {db}; give --store or --state-dir)")
        store = str(db)
    return jid, open_store(store)


_store_opt = click.option(
    "--store", default=None, help="Store URL (default: ./.stoker/JOB/store.db)."
)
_dir_opt = click.option("--state-dir", default=None, help="The job's state folder.")


def _ts(t: float | None) -> str:
    return "-" if t is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


@main.command("status")
@click.argument("job")
@_store_opt
@_dir_opt
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@_guarded
def status_cmd(job: str, store: str | None, state_dir: str | None, as_json: bool) -> None:
    """Show a job's state, its current attempt and its last epoch."""
    jid, st = _open(job, store, state_dir)
    try:
        rec = st.get_job(jid)
        attempt = st.get_attempt(jid, rec.current_attempt) if rec.current_attempt else None
        last = st.list_epochs(jid, limit=1)
        out = rec.to_dict()
        out["attempt"] = attempt.to_dict() if attempt else None
        out["last_epoch"] = last[0].to_dict() if last else None
    finally:
        st.close()
    if as_json:
        click.echo(json.dumps(out, indent=2))
        return
    click.echo(f"job        {rec.job_id}")
    click.echo(f"state      {rec.state}" + (f"  ({rec.last_error})" if rec.last_error else ""))
    if attempt:
        click.echo(
            f"attempt    {attempt.attempt} {attempt.state} pid {attempt.owner.pid} on "
            f"{attempt.owner.host}, started {_ts(attempt.started_at)}"
        )
    if last:
        e = last[0]
        click.echo(f"last epoch {e.epoch} {e.state} rows {e.rows_in} at {_ts(e.committed_at)}")
    click.echo(f"config v{rec.control_version}")


@main.command("epochs")
@click.argument("job")
@_store_opt
@_dir_opt
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 100000))
@click.option("--json", "as_json", is_flag=True, help="Print JSON lines.")
@_guarded
def epochs_cmd(
    job: str, store: str | None, state_dir: str | None, limit: int, as_json: bool
) -> None:
    """List a job's most recent epochs, newest first."""
    jid, st = _open(job, store, state_dir)
    try:
        st.get_job(jid)
        epochs = st.list_epochs(jid, limit=limit)
    finally:
        st.close()
    if as_json:
        for e in epochs:
            click.echo(json.dumps(e.to_dict()))
        return
    click.echo(f"{'epoch':>7} {'state':<10} {'rows':>9} {'ctl':>4} {'by':>3}  committed")
    for e in epochs:
        rows = "-" if e.rows_in is None else str(e.rows_in)
        flag = " final" if e.final else ""
        click.echo(
            f"{e.epoch:>7} {e.state!s:<10} {rows:>9} {e.control_version:>4} "
            f"{e.decided_by or '-':>3}  {_ts(e.committed_at)}{flag}"
        )


if __name__ == "__main__":  # pragma: no cover
    main()
