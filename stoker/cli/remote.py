"""``stoker run --server``: submit to a job manager and follow the job until it ends."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click

from stoker import tokens
from stoker.cli.display import (
    RATE_EPOCHS,
    LiveView,
    job_status,
    live_wanted,
    render_status,
    submitted,
)
from stoker.client import Client

# How the attached CLI exits for each terminal state.
_EXIT = {"FINISHED": 0, "CANCELED": 0, "FAILED": 8}


def submit_and_follow(
    server: str,
    token: str | None,
    path: Path,
    job_id: str | None,
    args: list[str],
    conf: dict[str, str],
    restart: bool,
    detached: bool,
    quiet: bool,
    poll: float = 0.5,
    config: dict[str, Any] | None = None,
    from_savepoint: str | None = None,
    rewrite_output_after_savepoint: bool = False,
    restart_strategy: dict[str, Any] | None = None,
    scaling: str | None = None,
    standby: bool = False,
    fork: bool = False,
    ignore_unreachable_stores: bool = False,
) -> int:
    """Submit; unless ``detached``, print state changes and committed epochs until the job
    ends. Ctrl-C detaches: the job keeps running under the manager."""
    c = Client(server, tokens.client_token(server, token))
    sub = c.submit(
        str(path),
        job_id=job_id,
        args=args,
        conf=conf,
        restart=restart,
        config=config,
        from_savepoint=from_savepoint,
        rewrite_output_after_savepoint=rewrite_output_after_savepoint,
        restart_strategy=restart_strategy,
        scaling=scaling,
        standby=standby,
        fork=fork,
        ignore_unreachable_stores=ignore_unreachable_stores,
    )
    jid = sub.job_id
    click.echo(f"job {jid}: {submitted(sub.outcome, sub.job['state'])}", err=True)
    if detached:
        click.echo(jid)
        return 0
    try:
        if quiet or not live_wanted():
            return _follow_plain(c, jid, poll, quiet)
        with LiveView() as live:
            return _follow_live(c, jid, poll, live)
    except KeyboardInterrupt:
        click.echo(
            f"\ndetached; job {jid} keeps running: stoker status {jid} --server {server}", err=True
        )
        return 0
    finally:
        c.close()


def _follow_plain(c: Client, jid: str, poll: float, quiet: bool) -> int:
    """Lines on stderr (each state change, each committed epoch) until the job ends; its
    exit code. What scripts and tests read: kept as it is."""
    seen_epoch = -1
    state = None
    while True:
        view = c.job(jid)
        if not quiet:
            for e in reversed(c.epochs(jid, limit=50)):
                if e["epoch"] > seen_epoch and e["state"] == "COMMITTED":
                    seen_epoch = e["epoch"]
                    click.echo(
                        f"  epoch {e['epoch']} committed: {e['rows']} rows"
                        + (" (final)" if e["final"] else ""),
                        err=True,
                    )
        if view["state"] != state:
            state = view["state"]
            a = view.get("attempt") or {}
            extra = f" attempt {a.get('attempt')} pid {a.get('pid')}" if a else ""
            click.echo(f"job {jid}: {state}{extra}", err=True)
        if state in _EXIT:
            if view.get("last_error"):
                click.echo(f"job {jid}: {view['last_error']}", err=True)
            click.echo(jid)
            return _EXIT[state]
        time.sleep(poll)


def _follow_live(c: Client, jid: str, poll: float, live: LiveView) -> int:
    """On a terminal: one redrawn line (state, attempt, epoch, rows/s, backlog, last control
    event), a printed line per state change; the job's exit code once it ends."""
    state = None
    while True:
        view = c.job(jid)
        epochs = c.epochs(jid, limit=RATE_EPOCHS)
        events = c.control_history(jid, limit=1).get("events", [])
        status = job_status(view, epochs, events)
        if view["state"] != state:
            state = view["state"]
            live.say(f"job {jid}: {state}")
        live.update(render_status(status))
        if state in _EXIT:
            live.update(render_status({**status, "error": None}))
            if view.get("last_error"):
                live.say(f"job {jid}: {view['last_error']}")
            click.echo(jid)
            return _EXIT[state]
        time.sleep(poll)
