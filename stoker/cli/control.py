"""Control of a running job from the command line, ``flink``-like:

    stoker control JOB set min_amount=20 [--unset K] [--wait applied|committed]
    stoker control JOB rate-limit 500 [--per second|epoch|files]     (or: none)
    stoker control JOB log-level DEBUG [--logger NAME]
    stoker control JOB trigger 2s
    stoker control JOB event reload_rules --payload '{"x": 1}'
    stoker control JOB scaling auto:min=1,max=3      (fixed | reactive | auto:...; at once)
    stoker control JOB history [--limit N]
    stoker control JOB status CONTROL_ID
    stoker pause JOB / stoker resume JOB / stoker checkpoint JOB [--no-wait]
    stoker savepoint JOB [--stop] [--dir D] [--wait]
    stoker config JOB

With ``--server`` (or STOKER_SERVER) each is a REST call; without, the command writes the
event into the local job's store (``--state-dir`` / ``--store``: the store is the bus) through
:mod:`stoker.manager.control`, checked the same way, sent by ``local:<user>``. Each prints one
line per event (id, version, status, applied epoch); ``--json`` prints the event's JSON view.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from stoker.cli._common import (
    Duration,
    debug_option,
    guarded,
    server_opts,
    state_dir_opt,
    store_opt,
)
from stoker.cli.control_target import control_target, line, print_event
from stoker.errors import ALREADY_PAUSED, NOT_PAUSED, ControlConflict, InvalidInput

_RATE_KEYS = {
    "second": "rows_per_second",
    "epoch": "max_rows_per_epoch",
    "files": "max_files_per_epoch",
}


# options every event command takes ---------------------------------------------------------------
def _where(fn: Callable[..., Any]) -> Callable[..., Any]:
    fn = click.option("--json", "as_json", is_flag=True, help="Print the event's JSON view.")(fn)
    fn = server_opts(fn)
    fn = state_dir_opt(fn)
    return store_opt(fn)


def _sending(fn: Callable[..., Any]) -> Callable[..., Any]:
    fn = click.option(
        "--timeout",
        default=60.0,
        show_default=True,
        type=Duration(0),
        help="How long to wait at most (with --wait): 60s, 2m, or seconds.",
    )(fn)
    fn = click.option(
        "--request-id", default=None, help="Retry key: the same id and event are stored once."
    )(fn)
    return _where(fn)


_wait_opt = click.option(
    "--wait",
    type=click.Choice(["applied", "committed"]),
    default=None,
    help="Wait until the event applied at an epoch, or until that epoch committed.",
)


def _send(
    job: str,
    body: dict[str, Any],
    *,
    store: str | None,
    state_dir: str | None,
    server: str | None,
    token: str | None,
    as_json: bool,
    request_id: str | None,
    wait: str | None,
    timeout: float,
) -> dict[str, Any]:
    with control_target(job, server, token, store, state_dir) as t:
        v = t.send(body, request_id)
        if wait is not None:
            if not as_json:
                click.echo(line(v), err=True)  # stored: the id, in case the wait is cut short
            v = t.wait(str(v["control_id"]), wait, timeout)
        print_event(v, as_json)
        return v


def _where_args(kw: dict[str, Any]) -> list[str]:
    """The options that named where the job is, to repeat in a hint (never a token)."""
    out = []
    for key, flag in (("server", "--server"), ("state_dir", "--state-dir"), ("store", "--store")):
        value = kw.get(key)
        if value and not (key == "store" and "@" in str(value)):
            out.append(f" {flag} {value}")
    return out


def _value(text: str) -> Any:
    """A value given on the command line: JSON when it parses, else the string itself."""
    try:
        return json.loads(text)
    except ValueError:
        return text


# stoker control JOB ... ------------------------------------------------------------------------
@click.group("control")
@click.argument("job")
@click.pass_context
def control_group(ctx: click.Context, job: str) -> None:
    """Change a running job without stopping it: config, rate limit, log level, trigger,
    custom events, scaling; its control history. Changes apply at the job's next epoch
    boundary (scaling: at once)."""
    ctx.obj = job


def _job(ctx: click.Context) -> str:
    return str(ctx.obj)


@control_group.command("set")
@click.argument("pairs", nargs=-1, metavar="KEY=VALUE...")
@click.option("--unset", "unset", multiple=True, metavar="KEY", help="Back to its default.")
@_wait_opt
@_sending
@click.pass_context
@guarded
def set_cmd(ctx: click.Context, pairs: tuple[str, ...], unset: tuple[str, ...], **kw: Any) -> None:
    """Set config keys (values are JSON when they parse, else strings): min_amount=20 tag=x."""
    values: dict[str, Any] = {}
    for pair in pairs:
        key, eq, raw = pair.partition("=")
        if not eq or not key.strip():
            raise InvalidInput("set", f"expects KEY=VALUE, got {pair!r}")
        values[key.strip()] = _value(raw)
    body = {"kind": "config", "set": values, "unset": list(unset)}
    _send(_job(ctx), body, **kw)


@control_group.command("rate-limit")
@click.argument("limit", metavar="N|none")
@click.option(
    "--per",
    type=click.Choice(sorted(_RATE_KEYS)),
    default="second",
    show_default=True,
    help="rows per second, rows per epoch, or files per epoch.",
)
@_wait_opt
@_sending
@click.pass_context
@guarded
def rate_limit_cmd(ctx: click.Context, limit: str, per: str, **kw: Any) -> None:
    """Limit what the job's sources read from the next epoch on ('none': their own limit)."""
    value = None if limit.strip().lower() in ("none", "null") else _value(limit)
    _send(_job(ctx), {"kind": "rate_limit", _RATE_KEYS[per]: value}, **kw)


@control_group.command("log-level")
@click.argument("level")
@click.option("--logger", default=None, help="One logger (default: the root level).")
@_wait_opt
@_sending
@click.pass_context
@guarded
def log_level_cmd(ctx: click.Context, level: str, logger: str | None, **kw: Any) -> None:
    """Set the log level of the driver and the executors (DEBUG, INFO, WARN, ERROR, ...)."""
    body: dict[str, Any] = {"kind": "log_level", "level": level}
    if logger is not None:
        body["logger"] = logger
    _send(_job(ctx), body, **kw)


@control_group.command("trigger")
@click.argument("interval")
@_wait_opt
@_sending
@click.pass_context
@guarded
def trigger_cmd(ctx: click.Context, interval: str, **kw: Any) -> None:
    """Change the trigger interval of the running query: 2s, 500ms, 1m, 0."""
    _send(_job(ctx), {"kind": "trigger", "interval": interval}, **kw)


@control_group.command("event")
@click.argument("name")
@click.option("--payload", default=None, help="JSON given to the handler (default: {}).")
@_wait_opt
@_sending
@click.pass_context
@guarded
def event_cmd(ctx: click.Context, name: str, payload: str | None, **kw: Any) -> None:
    """Send a custom event to the handler the pipeline registered (@p.on_control(NAME))."""
    body: dict[str, Any] = {"kind": "event", "name": name}
    if payload is not None:
        try:
            body["payload"] = json.loads(payload)
        except ValueError as e:
            raise InvalidInput("--payload", f"is not JSON: {e}") from None
    _send(_job(ctx), body, **kw)


@control_group.command("scaling")
@click.argument("spec", metavar="SPEC")
@_wait_opt
@_sending
@click.pass_context
@guarded
def scaling_cmd(ctx: click.Context, spec: str, **kw: Any) -> None:
    """Change how the job (an application's job: its application; JOB may also be an
    application's id) scales, at once: fixed,
    reactive, or auto:min=1,max=4[,target_utilization=0.7,catch_up=5m,stabilization=1m,
    cooldown=2m]."""
    _send(_job(ctx), {"kind": "scaling", "scaling": spec}, **kw)


@control_group.command("history")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 1000))
@click.option("--before", default=None, type=click.IntRange(1), help="Versions below this.")
@click.option("--kind", default=None, help="Only events of this kind.")
@_where
@click.pass_context
@guarded
def history_cmd(
    ctx: click.Context,
    limit: int,
    before: int | None,
    kind: str | None,
    store: str | None,
    state_dir: str | None,
    server: str | None,
    token: str | None,
    as_json: bool,
) -> None:
    """The job's control events, newest first (one line each; --json: one JSON line each)."""
    with control_target(_job(ctx), server, token, store, state_dir) as t:
        page = t.history(limit, before, kind)
    for v in page["events"]:
        click.echo(json.dumps(v, sort_keys=True) if as_json else line(v))
    if page.get("next") is not None and not as_json:
        click.echo(f"(older events: --before {page['next']})", err=True)


@control_group.command("status")
@click.argument("control_id")
@_where
@click.pass_context
@guarded
def status_cmd(
    ctx: click.Context,
    control_id: str,
    store: str | None,
    state_dir: str | None,
    server: str | None,
    token: str | None,
    as_json: bool,
) -> None:
    """One control event and how far it got."""
    with control_target(_job(ctx), server, token, store, state_dir) as t:
        print_event(t.status(control_id), as_json)


# stoker pause / resume / checkpoint / savepoint / config JOB -------------------------------------
@click.command("pause")
@click.argument("job")
@_wait_opt
@_sending
@guarded
def pause_cmd(job: str, **kw: Any) -> None:
    """Pause a job: no epoch commits until it is resumed; it stays live (cancel still works).
    A paused job is left as it is (exit 0, with a note)."""
    _send_idempotent(job, {"kind": "pause"}, ALREADY_PAUSED, "paused already: nothing to do", **kw)


@click.command("resume")
@click.argument("job")
@_wait_opt
@_sending
@guarded
def resume_cmd(job: str, **kw: Any) -> None:
    """Resume a paused job from where it stopped. A job that is not paused is left as it is
    (exit 0, with a note)."""
    _send_idempotent(job, {"kind": "resume"}, NOT_PAUSED, "not paused: nothing to do", **kw)


def _send_idempotent(
    job: str, body: dict[str, Any], done_already: str, note: str, **kw: Any
) -> None:
    """:func:`_send`, where the refusal ``done_already`` means what was asked holds already:
    a note on stderr (JSON on stdout under --json) and exit 0, as ``kubectl`` and systemd
    treat a verb whose state holds (it was exit 9, "live with another
    spec")."""
    try:
        _send(job, body, **kw)
    except ControlConflict as e:
        if e.reason != done_already:
            raise
        if kw.get("as_json"):
            click.echo(json.dumps({"job_id": job, "kind": body["kind"], "note": note}))
        else:
            click.echo(f"stoker: job {job!r} is {note}", err=True)


@click.command("checkpoint")
@click.argument("job")
@click.option(
    "--wait/--no-wait",
    "wait",
    default=True,
    show_default=True,
    help="Wait until the epoch committed (and print its number).",
)
@_sending
@guarded
def checkpoint_cmd(job: str, wait: bool, **kw: Any) -> None:
    """Run an epoch now, without waiting for the trigger; prints the epoch once committed."""
    _send(job, {"kind": "checkpoint"}, wait="committed" if wait else None, **kw)


@click.command("savepoint")
@click.argument("job")
@click.option("--stop", is_flag=True, help="Stop the job after the savepoint.")
@click.option(
    "--dir",
    "folder",
    default=None,
    help="Folder to write (with --server: absolute, under one of the manager's --allow-dir; "
    "default: in the job's state folder).",
)
@click.option("--wait", is_flag=True, help="Wait until it is written (and print its folder).")
@_sending
@guarded
def savepoint_cmd(job: str, stop: bool, folder: str | None, wait: bool, **kw: Any) -> None:
    """Write the job's consistent state at the next epoch boundary (stoker run
    --from-savepoint starts a job from it)."""
    if folder is not None and not kw.get("server"):
        folder = str(Path(folder).resolve())  # the driver runs elsewhere: no relative path
    body = {"kind": "savepoint", "stop": stop, "dir": folder}
    v = _send(job, body, wait="committed" if wait else None, **kw)
    if not wait and not kw.get("as_json"):
        # The folder is known once the driver wrote it: say how to get it.
        where = "".join(_where_args(kw))
        click.echo(
            f"its folder, once written: stoker control {job} status {v['control_id']}{where} "
            "(or take it with --wait)",
            err=True,
        )


@click.command("config")
@click.argument("job")
@_where
@guarded
def config_cmd(
    job: str,
    store: str | None,
    state_dir: str | None,
    server: str | None,
    token: str | None,
    as_json: bool,
) -> None:
    """A job's effective config and control state now (paused, trigger, rate limit, levels)."""
    with control_target(job, server, token, store, state_dir) as t:
        v = t.config()
        started = None if v.get("trigger_s") is not None else t.job_view()
    if as_json:
        click.echo(json.dumps(v, indent=2, sort_keys=True))
        return
    levels = dict(v.get("log_level") or {})
    named = dict(levels.pop("loggers", None) or {})
    shown = [f"root={levels['root']}"] if levels.get("root") else []
    shown += [f"{k}={lv}" for k, lv in sorted(named.items())]
    rates = v.get("rate_limit") or {}
    click.echo(f"job        {v['job_id']} (control version {v['version']})")
    click.echo(f"config     {json.dumps(v['config'], sort_keys=True)}")
    click.echo(f"paused     {'yes' if v['paused'] else 'no'}")
    click.echo(f"trigger    {trigger_line(v, started)}")
    click.echo("rate limit " + (" ".join(f"{k}={x}" for k, x in sorted(rates.items())) or "-"))
    click.echo("log level  " + (" ".join(shown) or "-"))
    click.echo(f"pending    {v['pending']}")


def trigger_line(config: dict[str, Any], job: dict[str, Any] | None) -> str:
    """The trigger in force and where it comes from (``trigger -`` for a
    trigger set in the pipeline file): a control event's, else the one the job started with
    (``-D stoker.trigger``, the program's ``stoker.run(..., trigger=...)``, or the default)."""
    from stoker.settings import Settings

    if config.get("trigger_s") is not None:
        return f"{float(config['trigger_s']):g}s (set by control)"
    spec = (job or {}).get("spec") or {}
    started = spec.get("trigger_s")
    if started is None:
        return "- (the job has not started yet: its own setting once it runs)"
    conf = spec.get("conf") or {}
    if "stoker.trigger" in conf:
        where = f"-D stoker.trigger={conf['stoker.trigger']}"
    elif float(started) == Settings().trigger:
        where = "the default"
    else:
        where = "the program: stoker.run(..., trigger=...)"
    return f"{float(started):g}s (the job's own: {where})"


COMMANDS = [control_group, pause_cmd, resume_cmd, checkpoint_cmd, savepoint_cmd, config_cmd]
# --debug on the subcommands too (the group adds it to its own commands only).
for _cmd in control_group.commands.values():
    _cmd.params.append(debug_option())
