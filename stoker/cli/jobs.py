"""Commands on existing jobs: ``status``, ``epochs``, ``list``, ``cancel``, ``logs``.

Each reads or changes the job through its store (``--store`` / ``--state-dir``) or through a
job manager (``--server``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from stoker.cli._common import (
    client,
    guarded,
    open_job_store,
    scaling_line,
    server_opts,
    state_dir_opt,
    store_opt,
    store_option,
    use_server,
    when,
)
from stoker.cli.display import backlog_line
from stoker.errors import InvalidInput
from stoker.redact import redact_answer
from stoker.types import given_config
from stoker.types import job_id as _job_id

_open = open_job_store
_store_opt = store_opt
_dir_opt = state_dir_opt


def _view(st: Any, jid: Any) -> dict[str, Any]:
    """The job as the API shows it: the one view, read from the store here."""
    from stoker.manager.jobs import job_view

    return job_view(st, str(jid))


@click.command("status")
@click.argument("job")
@_store_opt
@_dir_opt
@server_opts
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option(
    "--verbose",
    "-v",
    is_flag=True,
    help="Show an error whole (Spark's text, every traceback), not only the exception and "
    "the line of code that raised it.",
)
@guarded
def status_cmd(
    job: str,
    store: str | None,
    state_dir: str | None,
    server: str | None,
    token: str | None,
    as_json: bool,
    verbose: bool,
) -> None:
    """Show a job's state, its current attempt and its last epoch.

    An error shows as its exception and the line of the job's code that raised it; --verbose
    adds the whole text (the driver's log has it too)."""
    from stoker.cli.errortext import status_lines

    if server := use_server(server):
        out = client(server, token).job(_job_id(job))
    else:
        jid, st = _open(job, store, state_dir)
        try:
            out = redact_answer(_view(st, jid))  # as the API shows it: no secrets
        finally:
            st.close()
    if as_json:
        click.echo(json.dumps(out, indent=2))
        return
    click.echo(f"job        {out['job_id']}")
    click.echo(f"state      {out['state']}")
    # The error first, once: the user's exception and their line.
    last_error = out.get("last_error")
    if last_error:
        for line in status_lines(last_error, verbose):
            click.echo(line)
    _echo_attempt(out, last_error, verbose)
    _echo_epoch(out)
    _echo_settings(out)


def _echo_attempt(out: dict[str, Any], last_error: Any, verbose: bool) -> None:
    """``stoker status``'s lines of the current attempt, its standby and its upgrade."""
    from stoker.cli.errortext import status_lines

    a = out.get("attempt")
    if a:
        click.echo("attempt    " + attempt_line(a))
        if _driver_gone(a):
            click.echo(
                f"  driver   gone: pid {a['pid']} no longer runs on this host (killed or "
                "crashed); the job is taken over or resumed once its lease ends"
            )
        if a.get("error") and a["error"] != last_error:  # the job's error is the attempt's
            for line in status_lines(a["error"], verbose, "  error"):
                click.echo(line)
    sb = out.get("standby")
    if sb:
        click.echo("standby    " + standby_line(sb))
    up = out.get("upgrade")
    if up:
        to = (up.get("to") or {}).get("entrypoint")
        click.echo(f"upgrade    {up['upgrade_id']} {up['state']} to {to}")


def attempt_line(a: dict[str, Any]) -> str:
    """An attempt as ``stoker status`` shows it: a live one with its lease, an ended one with
    its end (its lease means nothing any more); the host by its name, "this host" for this
    one (the record's id adds the boot and the pid namespace, for machines, not people)."""
    from stoker.procs import is_this_host

    host = str(a.get("host") or "")
    where = "this host" if is_this_host(host) else (host.split("/", 1)[0] or "an unknown host")
    head = f"{a['attempt']} {a['state']} pid {a['pid']} on {where}, started {when(a['started_at'])}"
    if a.get("ended_at") is not None:
        return f"{head}, ended {when(a['ended_at'])}"
    return f"{head}, lease until {when(a['lease_expires_at'])}"


def _echo_epoch(out: dict[str, Any]) -> None:
    """The last epoch's line and, for a job that still reads its sources, its backlog."""
    e = out.get("last_epoch")
    # What the sources had beyond the epoch: for a job that still reads them, not an ended one.
    job_ended = out["state"] in ("FINISHED", "CANCELED", "FAILED")
    if e and e.get("committed_at") is not None:
        rows = "-" if e.get("rows") is None else e["rows"]
        at = when(e["committed_at"])
        click.echo(f"last epoch {e['epoch']} {e['state']} rows {rows} at {at}")
    elif e and job_ended:
        # Pinned by an attempt that ended before its decision: nothing of it counts; a restart
        # replays it (the job's state says whether one will come).
        click.echo(f"last epoch {e['epoch']} {e['state']}: not committed when the job ended")
    elif e:
        click.echo(f"last epoch {e['epoch']} {e['state']} (not committed yet)")
    if e and not job_ended and (behind := backlog_line(e)):
        click.echo(f"backlog    {behind}")


def _echo_settings(out: dict[str, Any]) -> None:
    """What the job runs with: config version, scaling, partitions, trigger, delivery, conf."""
    click.echo(f"config v{out['control_version']}")
    scaling = scaling_line(out)
    if scaling:
        click.echo(
            f"scaling    {scaling}"
            + (f" (application {out['app_id']})" if out.get("app_id") else "")
        )
    if out.get("max_parallelism") is not None:
        click.echo(f"partitions {out['max_parallelism']} (state partitions: the max parallelism)")
    spec = out.get("spec") or {}
    trigger = out.get("trigger_s", spec.get("trigger_s"))  # in force (a manager before: spec)
    if trigger is not None:
        click.echo(f"trigger    {float(trigger):g}s")
    weak = spec.get("at_least_once_sources")
    if weak:  # chosen with sources.spark(..., at_least_once=True)
        click.echo(
            "delivery   at least once, not exactly once: "
            f"{', '.join(map(str, weak))} cannot replay an epoch after a crash"
        )
    if spec.get("conf"):  # what the current attempt runs with (-D / "conf"), secrets hidden
        click.echo("conf       " + " ".join(f"{k}={v}" for k, v in sorted(spec["conf"].items())))
    given = given_config(spec)  # pipeline config given at submission
    if given:
        click.echo("config set " + json.dumps(given, sort_keys=True))


def _driver_gone(attempt: dict[str, Any]) -> bool:
    """Whether a live attempt's driver process is seen gone on this host (a ``kill -9``): its
    record says RUNNING until its lease ends."""
    from stoker.procs import UNKNOWN, owner_is_dead
    from stoker.store import Owner

    if attempt.get("state") not in ("STARTING", "RUNNING") or attempt.get("pid") is None:
        return False
    owner = Owner(
        host=str(attempt.get("host")),
        pid=int(attempt["pid"]),
        pid_started=str(attempt.get("pid_started") or UNKNOWN),
    )
    return owner_is_dead(owner)


def standby_line(sb: dict[str, Any]) -> str:
    """A job's warm standby in words: READY pid 123 (since 12:00:01), WARMING ..., none."""
    state = sb.get("state")
    if state == "NONE":
        return "none now (a new one is started once the job's driver runs)"
    line = f"{state} pid {sb.get('pid')} on {sb.get('host')}"
    if state == "READY" and sb.get("ready_at"):
        line += f", ready since {when(sb['ready_at'])}"
    elif state == "TAKEN" and sb.get("attempt"):
        line += f", running attempt {sb['attempt']}"
    return line


@click.command("epochs")
@click.argument("job")
@_store_opt
@_dir_opt
@server_opts
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 100000))
@click.option(
    "--before", default=None, type=click.IntRange(0), help="Only epochs below this one (a page)."
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON lines.")
@guarded
def epochs_cmd(
    job: str,
    store: str | None,
    state_dir: str | None,
    server: str | None,
    token: str | None,
    limit: int,
    before: int | None,
    as_json: bool,
) -> None:
    """List a job's most recent epochs, newest first (--before N: the ones below epoch N)."""
    if server := use_server(server):
        epochs = client(server, token).epochs(_job_id(job), limit, before)
    else:
        jid, st = _open(job, store, state_dir)
        try:
            st.get_job(jid)
            epochs = [e.to_dict() for e in st.list_epochs(jid, limit=limit, before=before)]
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
            f"{e['decided_by'] or '-':>3}  {when(e['committed_at'])}{flag}"
        )


@click.command("list")
@server_opts
@store_option("Read a store directly instead of a server.")
@click.option(
    "--state-dir",
    default=None,
    help="Local jobs: a job's state folder, or a folder of them (default ./.stoker).",
)
@click.option("--state", default=None, help="Only jobs in this state.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON lines.")
@guarded
def list_cmd(
    server: str | None,
    token: str | None,
    store: str | None,
    state_dir: str | None,
    state: str | None,
    as_json: bool,
) -> None:
    """List jobs with their states: a job manager's (--server), one store's (--store), or
    the local runs' under ./.stoker (or --state-dir)."""
    from stoker.types import JobState

    if state is not None and state not in {str(s) for s in JobState}:
        raise InvalidInput("--state", f"{state!r} is not one of {', '.join(map(str, JobState))}")
    if server := use_server(server):
        jobs = client(server, token).jobs(state)
    else:
        stores = [store] if store else _local_stores(Path(state_dir or ".stoker"))
        if not stores:
            raise InvalidInput(
                "--server",
                f"no local job under {state_dir or '.stoker'}: give --state-dir DIR (a job's "
                "-D stoker.state_dir), --store URL, or --server (or STOKER_SERVER)",
            )
        jobs = [j for url in stores for j in _store_jobs(url, state)]
    for j in jobs:
        if as_json:
            click.echo(json.dumps(j))
        else:
            click.echo(f"{j['job_id']:<30} {j['state']:<11} attempt {j['current_attempt']}")


def _local_stores(folder: Path) -> list[str]:
    """The stores of local runs: ``folder/store.db`` (a job's state folder), else each
    ``folder/*/store.db`` (``./.stoker`` holds a folder per job); only files that exist."""
    if (folder / "store.db").is_file():
        return [str(folder / "store.db")]
    return [str(p) for p in sorted(folder.glob("*/store.db")) if p.is_file()]


def _store_jobs(url: str, state: str | None) -> list[dict[str, Any]]:
    from stoker.store import open_store
    from stoker.types import JobState

    st = open_store(url)
    try:
        listed = st.list_jobs(JobState(state) if state else None)
        return [redact_answer(j.to_dict()) for j in listed]
    finally:
        st.close()


@click.command("cancel")
@click.argument("job")
@_store_opt
@_dir_opt
@server_opts
@guarded
def cancel_cmd(
    job: str, store: str | None, state_dir: str | None, server: str | None, token: str | None
) -> None:
    """Cancel a job gracefully: its current epoch completes and commits, then it stops."""
    if server := use_server(server):
        out = client(server, token).cancel(_job_id(job))
    else:
        jid, st = _open(job, store, state_dir)
        try:
            out = st.request_cancel(jid).to_dict()
        finally:
            st.close()
    click.echo(f"{out['job_id']}: {out['state']}")


@click.command("logs")
@click.argument("job")
@server_opts
@click.option("--attempt", type=int, default=None, help="Default: the current attempt.")
@click.option(
    "--tail",
    type=click.IntRange(1),
    default=None,
    help="Only the last N lines (default: the last 1 MiB, from a line start).",
)
@guarded
def logs_cmd(
    job: str, server: str | None, token: str | None, attempt: int | None, tail: int | None
) -> None:
    """Print the driver log of a job's attempt (from the job manager)."""
    if not server:
        raise InvalidInput(
            "--server",
            "logs are kept by the job manager: give --server (a local stoker run logs to its "
            "own stderr; stoker status JOB --verbose has an error whole)",
        )
    c = client(server, token)
    n = attempt if attempt is not None else int(c.job(_job_id(job))["current_attempt"])
    click.echo(c.log(_job_id(job), n, tail), nl=False)
