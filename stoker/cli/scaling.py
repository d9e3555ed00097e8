"""Scaling from the command line: ``stoker rescales JOB`` (the owner's scaling and its
rescale history) and ``stoker resources JOB --min N --max M`` (new executor bounds).

Scaling is its owner's: a lone job's, or the application's whose job JOB is (JOB may also
be an application's id). With ``--server`` (or STOKER_SERVER) each is a REST call; without,
the command reads or writes the job's store (``--state-dir`` / ``--store``) through
:mod:`stoker.manager.rescales`, checked the same way, sent by ``local:<user>``. A mode is
changed with ``stoker control JOB scaling SPEC``.
"""

from __future__ import annotations

import getpass
import json
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
    use_server,
    when,
)
from stoker.errors import InvalidInput
from stoker.redact import redact_answer
from stoker.types import job_id as _job_id


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def _count(n: Any) -> str:
    return "-" if n is None else str(n)


def rescale_line(r: dict[str, Any]) -> str:
    """One rescale in one line: when, kind, status, from -> to, how long until in use, who,
    why."""
    took = r.get("seconds_to_in_use")
    extra = f" in use after {took:.1f}s" if took is not None else ""
    who = f" by {r['sender']}" if r.get("sender") else ""
    added = (r.get("workers") or {}).get("added") or []
    removed = (r.get("workers") or {}).get("removed") or []
    workers = ""
    if added or removed:
        workers = f" workers +{len(added)}/-{len(removed)}"
    error = f" error: {r['error']}" if r.get("error") else ""
    return (
        f"{when(r['at'])} #{r['rescale_id']} {r['kind']:<8} {r['status']:<10} "
        f"{_count(r.get('from_executors'))} -> {_count(r.get('to_executors'))}"
        f"{workers}{extra}{who}: {r['reason']}{error}"
    )


def _header(view: dict[str, Any]) -> None:
    owner = view["owner"]
    whose = "" if owner == view["job_id"] else f" (its application {owner})"
    if view.get("kind") == "application":
        click.echo(f"application {view['job_id']}")
    else:
        click.echo(f"job        {view['job_id']}{whose}")
    click.echo(f"scaling    {scaling_line(view) or 'fixed'}")


@click.command("rescales")
@click.argument("job")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 1000))
@store_opt
@state_dir_opt
@server_opts
@click.option("--json", "as_json", is_flag=True, help="Print the answer as JSON.")
@guarded
def rescales_cmd(
    job: str,
    limit: int,
    store: str | None,
    state_dir: str | None,
    server: str | None,
    token: str | None,
    as_json: bool,
) -> None:
    """Show how a job scales and its rescale history, newest first: autoscaler decisions
    with their signals, executors that came or went, bounds changed by users."""
    if server := use_server(server):
        with client(server, token) as c:
            view = c.rescales(_job_id(job), limit)
    else:
        from stoker.manager.rescales import rescales_view

        jid, st = open_job_store(job, store, state_dir)
        try:
            view = redact_answer(rescales_view(st, st.get_job(jid), limit))
        finally:
            st.close()
    if as_json:
        click.echo(json.dumps(view, indent=2, sort_keys=True))
        return
    _header(view)
    if not view["rescales"]:
        click.echo("no rescales yet")
    for r in view["rescales"]:
        click.echo(rescale_line(r))


@click.command("resources")
@click.argument("job")
@click.option("--min", "min_executors", type=int, default=None, help="The fewest executors.")
@click.option("--max", "max_executors", type=int, default=None, help="The most executors.")
@store_opt
@state_dir_opt
@server_opts
@click.option("--json", "as_json", is_flag=True, help="Print the answer as JSON.")
@guarded
def resources_cmd(
    job: str,
    min_executors: int | None,
    max_executors: int | None,
    store: str | None,
    state_dir: str | None,
    server: str | None,
    token: str | None,
    as_json: bool,
) -> None:
    """Change the executor bounds of a running job (an application's job: of its
    application); its scaling mode stays. Kept in the rescale history."""
    from stoker.manager.rescales import parse_bounds

    body = {
        k: v
        for k, v in (("min_executors", min_executors), ("max_executors", max_executors))
        if v is not None
    }
    try:
        parse_bounds(body)  # the same checks here, named as the options
    except InvalidInput as e:
        flag = {"min_executors": "--min", "max_executors": "--max"}.get(e.field, e.field)
        message = e.message.replace("min_executors, max_executors", "--min, --max")
        raise InvalidInput(flag, message) from None
    if server := use_server(server):
        with client(server, token) as c:
            out = c.set_resources(_job_id(job), min_executors, max_executors)
    else:
        from stoker.manager.rescales import set_bounds

        jid, st = open_job_store(job, store, state_dir)
        try:
            out = redact_answer(
                set_bounds(
                    st, st.get_job(jid), min_executors, max_executors, sender=f"local:{_user()}"
                )
            )
        finally:
            st.close()
    if as_json:
        click.echo(json.dumps(out, indent=2, sort_keys=True))
        return
    _header(out)
    click.echo(rescale_line(out["rescale"]))


COMMANDS = [rescales_cmd, resources_cmd]
