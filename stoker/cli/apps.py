"""Applications from the command line: ``stoker run --driver`` (submit a program and follow
it), ``stoker apps``, ``stoker app status|cancel|logs``.

An application lives in a job manager (its driver is the manager's to run and restart), so
every command here is a REST call: ``--server`` (or STOKER_SERVER) is required, the token
comes from ``--token`` / STOKER_TOKEN as for every other command.
"""

from __future__ import annotations

import json
import time
from typing import Any

import click

from stoker import errortext
from stoker.cli._common import (
    Duration,
    client,
    guarded,
    need_server,
    scaling_line,
    server_opts,
    when,
)
from stoker.cli.display import (
    RATE_EPOCHS,
    LiveView,
    job_status,
    live_wanted,
    render_view,
    submitted,
)
from stoker.cli.jobs import standby_line
from stoker.errors import InvalidInput
from stoker.types import JobState
from stoker.types import job_id as _job_id

# How the attached CLI exits for each terminal state of the application.
_EXIT = {"FINISHED": 0, "CANCELED": 0, "FAILED": 8}
_TERMINAL = frozenset(_EXIT)


# stoker run --driver ------------------------------------------------------------------------
def submit_and_follow_application(
    server: str,
    token: str | None,
    entrypoint: str,
    app_id: str | None,
    args: list[str],
    conf: dict[str, str],
    cluster: str | None,
    restart_strategy: dict[str, Any] | None,
    driver_memory: str | None,
    driver_cores: int | None,
    restart: bool,
    detached: bool,
    quiet: bool = False,
    as_json: bool = False,
    poll: float = 0.5,
    scaling: str | None = None,
    standby: bool = False,
) -> int:
    """Submit the program; unless ``detached``, print the state changes of the application
    and of each of its jobs (on stderr; none with ``quiet``) until the application ends
    (exit 0 FINISHED or CANCELED, 8 FAILED). Ctrl-C detaches: the application keeps running
    under the manager. stdout gets the application's id, or its view as JSON (``as_json``)."""
    c = client(server, token)
    try:
        sub = c.submit_application(
            entrypoint,
            app_id=app_id,
            args=args,
            conf=conf,
            cluster=cluster,
            restart_strategy=restart_strategy,
            driver_memory=driver_memory,
            driver_cores=driver_cores,
            restart=restart,
            scaling=scaling,
            standby=standby,
        )
        aid = sub.app_id
        what = submitted(sub.outcome, sub.app["state"], f", cluster {sub.app['cluster']['spec']}")
        click.echo(f"application {aid}: {what}", err=True)
        if detached:
            click.echo(json.dumps(sub.app) if as_json else aid)
            return 0
        try:
            view = _follow(c, aid, poll, quiet)
        except KeyboardInterrupt:
            click.echo(
                f"\ndetached; application {aid} keeps running: follow it with "
                f"stoker app status {aid} --server {server}",
                err=True,
            )
            return 0
        click.echo(json.dumps(view) if as_json else aid)
        return _EXIT[view["state"]]
    finally:
        c.close()


def _follow(c: Any, aid: str, poll: float, quiet: bool) -> dict[str, Any]:
    """Print what changes (the application's state and attempt, each job's state) until the
    application has ended; its last view."""
    if not quiet and live_wanted():
        with LiveView() as live:
            return _follow_live(c, aid, poll, live)
    shown: dict[str, Any] = {}
    say = (lambda line: None) if quiet else (lambda line: click.echo(line, err=True))
    while True:
        view = dict(c.application(aid))
        # Jobs first: they end before their application does.
        for job in view["jobs"]:
            if shown.get(job["job_id"]) != job["state"]:
                shown[job["job_id"]] = job["state"]
                say(f"  job {job['job_id']}: {job['state']}")
        drv = view.get("driver") or {}
        key = (view["state"], view["attempt"], drv.get("pid"))
        if shown.get(aid) != key:
            shown[aid] = key
            extra = ""
            if view["attempt"] and view["state"] not in _TERMINAL:
                extra = f" attempt {view['attempt']}"
                extra += f" pid {drv['pid']} on {drv['host']}" if drv else ""
            say(f"application {aid}: {view['state']}{extra}")
        if view["state"] in _TERMINAL:
            if view.get("error"):
                click.echo(f"application {aid}: {_error_line(aid, view['error'])}", err=True)
            return view
        time.sleep(poll)


def _error_line(aid: str, error: str) -> str:
    """An application's error on one line: the exception first and where the program raised
    it (its ``main``'s traceback is in the error), and how to see the whole of it."""
    line = errortext.one_line(error)
    if line != error.strip():
        line += f" (the whole error: stoker app status {aid} --json)"
    return line


def _follow_live(c: Any, aid: str, poll: float, live: LiveView) -> dict[str, Any]:
    """On a terminal: the application's state and a redrawn line per job (state, epoch,
    rows/s, backlog, last control event); a printed line per state change of either."""
    shown: dict[str, Any] = {}
    while True:
        view = dict(c.application(aid))
        statuses = []
        for job in view["jobs"]:
            jid = job["job_id"]
            if shown.get(jid) != job["state"]:
                shown[jid] = job["state"]
                live.say(f"  job {jid}: {job['state']}")
            events = c.control_history(jid, limit=1).get("events", [])
            statuses.append(job_status(c.job(jid), c.epochs(jid, limit=RATE_EPOCHS), events))
        if shown.get(aid) != view["state"]:
            shown[aid] = view["state"]
            live.say(f"application {aid}: {view['state']}")
        title = f"application {aid}: {view['state']} (attempt {view['attempt']})"
        live.update(render_view(title, statuses))
        if view["state"] in _TERMINAL:
            if view.get("error"):
                live.say(f"application {aid}: {_error_line(aid, view['error'])}")
            return view
        time.sleep(poll)


# stoker apps / stoker app ... --------------------------------------------------------------------
@click.command("apps")
@server_opts
@click.option("--state", default=None, help="Only applications in this state.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON lines.")
@guarded
def apps_cmd(server: str | None, token: str | None, state: str | None, as_json: bool) -> None:
    """List the applications of a job manager."""
    if state is not None and state not in {str(s) for s in JobState}:
        raise InvalidInput("--state", f"{state!r} is not one of {', '.join(map(str, JobState))}")
    with client(need_server(server), token) as c:
        apps = c.applications(state)
    for a in apps:
        if as_json:
            click.echo(json.dumps(a))
        else:
            click.echo(
                f"{a['app_id']:<30} {a['state']:<11} attempt {a['attempt']} jobs {a['jobs']} "
                f"cluster {a['cluster']}"
            )


@click.group("app")
def app_group() -> None:
    """An application of a job manager: status, cancel, logs."""


def print_status(view: dict[str, Any]) -> None:
    """An application's view in a few lines: state, driver attempt, cluster, its jobs."""
    err = f"  ({errortext.one_line(view['error'])})" if view.get("error") else ""
    click.echo(f"application {view['app_id']}")
    click.echo(f"state       {view['state']}{err}")
    current = next((a for a in view["attempts"] if a["attempt"] == view["attempt"]), None)
    if current is not None:
        where = f" pid {current['pid']} on {current['host']}" if current["pid"] else ""
        click.echo(
            f"attempt     {current['attempt']} {current['state']}{where}, "
            f"started {when(current['started_at'])}"
        )
        if current.get("error"):  # main's error: its traceback whole with --json
            click.echo(f"  error     {_error_line(view['app_id'], current['error'])}")
    cl = view["cluster"]
    detail = [str(x) for x in (cl.get("name"), cl.get("state"), cl.get("master_url")) if x]
    if cl.get("workers") is not None:
        detail.append(f"{cl['workers']} workers")
    click.echo(f"cluster     {cl['spec']}" + (f" ({', '.join(detail)})" if detail else ""))
    shown = scaling_line(view)
    if shown:
        click.echo(f"scaling     {shown}")
    sb = view.get("standby")
    if sb:
        click.echo("standby     " + standby_line(sb))
    click.echo(f"jobs        {len(view['jobs'])}")
    for j in view["jobs"]:
        epoch = "-" if j["last_epoch"] is None else j["last_epoch"]
        click.echo(f"  {j['job_id']:<40} {j['state']:<11} last epoch {epoch}")


@app_group.command("status")
@click.argument("app")
@server_opts
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@guarded
def app_status_cmd(app: str, server: str | None, token: str | None, as_json: bool) -> None:
    """Show an application: state, driver attempt, cluster, each job with its last epoch."""
    with client(need_server(server), token) as c:
        view = c.application(_job_id(app))
    if as_json:
        click.echo(json.dumps(view, indent=2))
    else:
        print_status(view)


@app_group.command("cancel")
@click.argument("app")
@server_opts
@click.option("--wait", is_flag=True, help="Wait until the application has ended.")
@click.option(
    "--timeout", default=600.0, show_default=True, type=Duration(0), help="With --wait: 10m, 90s."
)
@guarded
def app_cancel_cmd(
    app: str, server: str | None, token: str | None, wait: bool, timeout: float
) -> None:
    """Cancel an application: every job stops after its epoch in flight commits, then the
    driver ends (its own cluster is torn down)."""
    aid = _job_id(app)
    with client(need_server(server), token) as c:
        view = c.cancel_application(aid)
        click.echo(f"{aid}: {view['state']}")
        if not wait or view["state"] in _TERMINAL:
            return
        deadline = time.monotonic() + timeout
        while view["state"] not in _TERMINAL:
            if time.monotonic() > deadline:
                raise InvalidInput(
                    "--timeout", f"application {aid} is still {view['state']} after {timeout:g} s"
                )
            time.sleep(0.5)
            view = c.application(aid)
        click.echo(f"{aid}: {view['state']}")


@app_group.command("stop")
@click.argument("app")
@server_opts
@click.option("--savepoint", is_flag=True, help="A savepoint of each live job first.")
@click.option("--dir", "folder", default=None, help="Where the savepoints go (absolute).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@guarded
def app_stop_cmd(
    app: str,
    server: str | None,
    token: str | None,
    savepoint: bool,
    folder: str | None,
    as_json: bool,
) -> None:
    """Stop an application to resume it later (stoker app resume): with --savepoint each
    live job writes a savepoint first; then every job stops after its epoch in flight
    commits. Waits until the savepoints are written and the stop is asked."""
    aid = _job_id(app)
    with client(need_server(server), token) as c:
        out = c.stop_application(aid, savepoint, folder)
    if as_json:
        click.echo(json.dumps(out, indent=2, sort_keys=True))
        return
    for job, path in sorted((out.get("savepoints") or {}).items()):
        click.echo(f"{job}: savepoint {path}")
    click.echo(f"{aid}: {out['state']} (resume: stoker app resume {aid})")


@app_group.command("resume")
@click.argument("app")
@server_opts
@guarded
def app_resume_cmd(app: str, server: str | None, token: str | None) -> None:
    """Run an ended application again: its cancelled and failed jobs resume from their
    checkpoints."""
    aid = _job_id(app)
    with client(need_server(server), token) as c:
        view = c.resume_application(aid)
    click.echo(f"{aid}: {view['state']}")


@app_group.command("logs")
@click.argument("app")
@server_opts
@click.option("--attempt", type=click.IntRange(1), default=None, help="Default: the current one.")
@click.option(
    "--tail",
    type=click.IntRange(1),
    default=None,
    help="Only the last N lines (default: the last 1 MiB, from a line start).",
)
@guarded
def app_logs_cmd(
    app: str, server: str | None, token: str | None, attempt: int | None, tail: int | None
) -> None:
    """Print the driver log of an application's attempt."""
    with client(need_server(server), token) as c:
        click.echo(c.application_log(_job_id(app), attempt, tail), nl=False)


COMMANDS = [apps_cmd, app_group]
