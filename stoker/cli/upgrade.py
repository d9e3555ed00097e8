"""Upgrades from the command line: ``stoker upgrade JOB NEW_FILE`` moves a job
running under a job manager to new code at an epoch boundary and follows the upgrade to its
end; ``stoker upgrades JOB`` lists a job's upgrades.

``stoker upgrade`` exits 0 once the upgrade is CONFIRMED, 1 when it was ROLLED_BACK (the old
code runs again), 2 when it was REFUSED (a check found a difference: the old code runs on,
nothing changed); with ``--no-wait`` it prints the upgrade's id and returns at once.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import click

from stoker.cli._common import client, guarded, server_opts, use_server, when
from stoker.cli._run_args import parse_config_pairs
from stoker.errors import InvalidInput
from stoker.redact import redact_answer
from stoker.types import job_id as _job_id

_EXIT = {"CONFIRMED": 0, "ROLLED_BACK": 1, "REFUSED": 2}
ENDED = frozenset(_EXIT)
POLL = 0.5  # s between looks at the upgrade


def _need_server(server: str | None) -> str:
    found = use_server(server)
    if not found:
        raise InvalidInput(
            "--server",
            "an upgrade is carried out by a job manager: give --server (or STOKER_SERVER)",
        )
    return found


def upgrade_line(up: dict[str, Any]) -> str:
    """One line for an upgrade: its id, state, the files, and why it ended so."""
    src = (up.get("from") or {}).get("entrypoint")
    dst = (up.get("to") or {}).get("entrypoint")
    line = f"upgrade {up['upgrade_id']}: {up['state']} ({src} -> {dst})"
    if up.get("detail"):
        line += f": {up['detail']}"
    return line


@click.command("upgrade")
@click.argument("job")
@click.argument("new_file", type=click.Path(dir_okay=False))
@click.option(
    "--config",
    "config_pairs",
    multiple=True,
    metavar="KEY=VALUE",
    help="A pipeline config value for the new code (repeatable), on top of the job's.",
)
@click.option(
    "--watch-epochs",
    type=click.IntRange(1, 10_000),
    default=None,
    help="Confirm once the new code has committed this many epochs (default 3).",
)
@click.option(
    "--watch-seconds",
    type=click.FloatRange(0, 86_400),
    default=None,
    help="... or once it has run this long without a failure (default 60).",
)
@click.option("--no-wait", is_flag=True, help="Print the upgrade's id and return at once.")
@click.option("--json", "as_json", is_flag=True, help="Print the upgrade as JSON at its end.")
@server_opts
@guarded
def upgrade_cmd(
    job: str,
    new_file: str,
    config_pairs: tuple[str, ...],
    watch_epochs: int | None,
    watch_seconds: float | None,
    no_wait: bool,
    as_json: bool,
    server: str | None,
    token: str | None,
) -> None:
    """Move a running JOB to the code in NEW_FILE without a restart: the new code warms up
    beside the old, is checked (sources, sinks, state schema), takes over at an epoch
    boundary and is watched; if it fails, the old code (kept warm) takes over again.

    NEW_FILE must be another file than the one the job runs (that one is what a rollback
    runs)."""
    url = _need_server(server)
    jid = _job_id(job)
    c = client(url, token)
    up = c.upgrade(
        str(jid),
        str(Path(new_file).resolve()),
        config=parse_config_pairs(list(config_pairs)),
        watch_epochs=watch_epochs,
        watch_seconds=watch_seconds,
    )
    click.echo(upgrade_line(up), err=True)
    if no_wait:
        click.echo(up["upgrade_id"])
        return
    seen = up["state"]
    try:
        while up["state"] not in ENDED:
            time.sleep(POLL)
            up = c.get_upgrade(str(jid), up["upgrade_id"])
            if up["state"] != seen:
                seen = up["state"]
                click.echo(upgrade_line(up), err=True)
    except KeyboardInterrupt:
        click.echo(
            f"\ndetached; upgrade {up['upgrade_id']} goes on: stoker upgrades {jid}", err=True
        )
        return
    if as_json:
        click.echo(json.dumps(redact_answer(up)))
    sys.exit(_EXIT[up["state"]])


@click.command("upgrades")
@click.argument("job")
@click.option("--limit", type=click.IntRange(1, 1000), default=20, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON, one upgrade per line.")
@server_opts
@guarded
def upgrades_cmd(
    job: str, limit: int, as_json: bool, server: str | None, token: str | None
) -> None:
    """A job's upgrades, newest first: state, the code before and after, and why."""
    url = _need_server(server)
    for up in client(url, token).upgrades(str(_job_id(job)), limit):
        if as_json:
            click.echo(json.dumps(redact_answer(up)))
        else:
            click.echo(f"{when(up['created_at'])}  {upgrade_line(up)}")


COMMANDS = [upgrade_cmd, upgrades_cmd]
