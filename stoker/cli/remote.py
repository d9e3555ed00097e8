"""``stoker run --server``: submit to a job manager and follow the job until it ends."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click

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
    restart_strategy: dict[str, Any] | None = None,
    scaling: str | None = None,
) -> int:
    """Submit; unless ``detached``, print state changes and committed epochs until the job
    ends. Ctrl-C detaches: the job keeps running under the manager."""
    c = Client(server, token)
    sub = c.submit(
        str(path),
        job_id=job_id,
        args=args,
        conf=conf,
        restart=restart,
        config=config,
        from_savepoint=from_savepoint,
        restart_strategy=restart_strategy,
        scaling=scaling,
    )
    jid = sub.job_id
    what = {"created": "submitted", "restarted": "restarted"}.get(sub.outcome, "already live")
    click.echo(f"job {jid}: {what} ({sub.job['state']})", err=True)
    if detached:
        click.echo(jid)
        return 0
    seen_epoch = -1
    state = None
    try:
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
    except KeyboardInterrupt:
        click.echo(
            f"\ndetached; job {jid} keeps running: stoker status {jid} --server {server}", err=True
        )
        return 0
    finally:
        c.close()
