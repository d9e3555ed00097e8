"""``stoker server``: run a job manager (REST API, dispatcher, supervisor); ``stoker managers``:
the job managers of its store, the leader and the standbys (``GET /v1/managers``)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import click

from stoker.cli._common import (
    Duration,
    client,
    guarded,
    need_server,
    server_opts,
    store_option,
    when,
)
from stoker.errors import InvalidInput


@click.command("server")
@store_option("sqlite:///path (default: in --state-dir) or postgresql://...")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8081, show_default=True, type=click.IntRange(0, 65535))
@click.option("--state-dir", default=".stoker-server", show_default=True)
@click.option(
    "--token",
    envvar="STOKER_TOKEN",
    default=None,
    help="Require it for every call but /healthz (env STOKER_TOKEN).",
)
@click.option(
    "--read-token",
    envvar="STOKER_READ_TOKEN",
    default=None,
    help="A second token that may only read (env STOKER_READ_TOKEN); needs --token.",
)
@click.option(
    "--insecure-no-token",
    is_flag=True,
    help="Serve without any token: every caller on this host may submit, cancel and read "
    "(loopback --host only). Without --token and without this flag the manager uses the "
    "token in <state-dir>/token, made on its first start.",
)
@click.option(
    "--allow-host",
    "allow_hosts",
    multiple=True,
    help="A name the API answers to besides loopback names and --host (repeatable): the "
    "Host header of any other name is refused, 400 (DNS rebinding).",
)
@click.option(
    "--allow-dir",
    "allow_dirs",
    multiple=True,
    help="Folder entrypoints may come from (repeatable; default: the current folder).",
)
@click.option(
    "--leader-ttl",
    default=3.0,
    show_default=True,
    type=Duration(0.5),
    help="The leader lease: 3s, 500ms, or seconds.",
)
@click.option(
    "--lease-ttl",
    default=10.0,
    show_default=True,
    type=Duration(1.0),
    help="The attempt lease of the drivers it starts (-D stoker.lease_ttl for a local run).",
)
@click.option(
    "--startup-ttl",
    default=120.0,
    show_default=True,
    type=Duration(1.0),
    help="How long a driver it starts may take to hold its attempt (Python and stoker "
    "imported); from then on the driver renews its lease itself while the app imports and "
    "Spark starts, however long that takes.",
)
@click.option(
    "--max-starting",
    default=4,
    show_default=True,
    type=click.IntRange(0),
    help="Drivers (jobs' and applications') starting at once, at most (0: no bound); the others "
    "wait, oldest first. A host that restarts with many jobs starts them a few at a time.",
)
@click.option(
    "--cancel-timeout",
    default=60.0,
    show_default=True,
    type=Duration(0),
    help="How long a canceled job's driver may take to stop gracefully before it is killed.",
)
@click.option(
    "--retention-epochs",
    type=click.IntRange(1),
    default=None,
    help="Keep the last N epoch records of each ended job (default: all); the leader prunes.",
)
@click.option(
    "--retention-time",
    default=None,
    help="Keep ended jobs' epoch records committed within this window (7d, 12h, 30m, 90s).",
)
@click.option(
    "--retention-jobs",
    default=None,
    help="Delete the jobs and applications this manager ran, with their folders and logs, "
    "this long after they ended and were resolved (30d, 12h; default: kept).",
)
@click.option(
    "--control-rate",
    default=20.0,
    show_default=True,
    type=click.FloatRange(0),
    help="Control events per second per job, bursts of twice that (0: no limit); beyond it "
    "POST .../control and .../savepoints answer 429 with Retry-After.",
)
@click.option(
    "--scaler-window",
    default=60.0,
    show_default=True,
    type=Duration(1.0),
    help="Seconds (or 1m, 90s) of recent epochs (at least 10 epochs) the autoscaler's default "
    "policy reads signals from: shorter reacts sooner, longer is steadier.",
)
@click.option(
    "--api-only",
    is_flag=True,
    help="Serve the API and take submissions, never lead (no supervisor on this node).",
)
@click.option(
    "--allow-conf",
    "allow_conf",
    multiple=True,
    metavar="KEY",
    help="Allow a submitted conf key beyond the allow-list of tuning settings (sizes, cores, "
    "partitions, UI, timeouts, JVM options that only tune the VM): KEY (and its sub-keys), "
    "PREFIX* (every key so starting) or KEY=VALUE (that value only, e.g. "
    "spark.master=spark://host:7077). Anything else is refused (422 naming the key). "
    "Repeatable.",
)
@click.option(
    "--max-clusters",
    type=click.IntRange(0),
    default=4,
    show_default=True,
    help="Spark standalone clusters stoker may run on this host at once (session clusters and "
    "applications' own); a start beyond is refused (409).",
)
@click.option(
    "--max-workers",
    type=click.IntRange(0),
    default=8,
    show_default=True,
    help="Workers of those clusters in all.",
)
@click.option(
    "--max-worker-memory",
    default="16g",
    show_default=True,
    help="The memory of those workers in all (512m, 16g).",
)
@click.option(
    "--max-worker-cores",
    type=click.IntRange(0),
    default=16,
    show_default=True,
    help="The cores (Spark's task slots) of those workers in all.",
)
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default=None,
    help="text (default) or json: one JSON object a line (ts, level, logger, message; job, "
    "attempt, epoch when known), also for the drivers it starts. Env: STOKER_LOG_FORMAT.",
)
@guarded
def server_cmd(
    store: str | None,
    host: str,
    port: int,
    state_dir: str,
    token: str | None,
    read_token: str | None,
    insecure_no_token: bool,
    allow_hosts: tuple[str, ...],
    allow_dirs: tuple[str, ...],
    leader_ttl: float,
    lease_ttl: float,
    startup_ttl: float,
    max_starting: int,
    cancel_timeout: float,
    api_only: bool,
    retention_epochs: int | None,
    retention_time: str | None,
    retention_jobs: str | None,
    control_rate: float,
    scaler_window: float,
    allow_conf: tuple[str, ...],
    max_clusters: int,
    max_workers: int,
    max_worker_memory: str,
    max_worker_cores: int,
    log_format: str | None,
) -> None:
    """Run a job manager: REST API (docs at /docs), dispatcher and supervisor."""
    from stoker.manager.clusters import memory_mb
    from stoker.manager.clusters.budget import HostBudget
    from stoker.service import ServerOptions, serve
    from stoker.settings import parse_window
    from stoker.store import RetentionPolicy

    # Checked before anything is created (the state folder, the store).
    if read_token is not None and token is None:
        raise InvalidInput("--read-token", "needs --token too (the token that may change state)")
    if token is not None and token == read_token:
        raise InvalidInput("--read-token", "must differ from --token")
    if insecure_no_token:
        from stoker.server.guard import is_loopback

        if token is not None or read_token is not None:
            raise InvalidInput("--insecure-no-token", "contradicts the token given (--token)")
        if not is_loopback(host):
            raise InvalidInput(
                "--insecure-no-token",
                f"refused with --host {host}: a manager without a token listens on loopback "
                "only (give it a --token to listen on other addresses)",
            )
    budget = HostBudget(
        clusters=max_clusters,
        workers=max_workers,
        memory_mb=memory_mb(max_worker_memory, "--max-worker-memory"),
        cores=max_worker_cores,
    )
    retention = RetentionPolicy(
        epochs=retention_epochs,
        seconds=None
        if retention_time is None
        else parse_window(retention_time, "--retention-time"),
    )

    serve(
        ServerOptions(
            store=store,
            host=host,
            port=port,
            state_dir=Path(state_dir),
            token=token,
            read_token=read_token,
            insecure_no_token=insecure_no_token,
            allow_hosts=allow_hosts,
            allow_dirs=[Path(d) for d in allow_dirs] or [Path.cwd()],
            leader_ttl=leader_ttl,
            lease_ttl=lease_ttl,
            startup_ttl=startup_ttl,
            max_starting=max_starting,
            cancel_timeout=cancel_timeout,
            supervise=not api_only,
            retention=retention,
            retention_jobs=None
            if retention_jobs is None
            else parse_window(retention_jobs, "--retention-jobs"),
            control_rate=control_rate,
            scaler_window=scaler_window,
            log_format=log_format,
            budget=budget,
            allowed_conf=allow_conf,
        )
    )


def _ago(now: float, t: float) -> str:
    return f"{max(0.0, now - t):.0f}s ago"


def _manager_line(m: dict[str, Any], lease: dict[str, Any] | None, now: float) -> str:
    started = when(m["started_at"])
    token = f"  token {lease['token']}" if lease and lease["holder"] == m["holder"] else ""
    runs = (
        f"  stoker {m['stoker_version']} (schema {m.get('schema_version')})"
        if m.get("stoker_version")
        else "  stoker ? (before schema 20)"
        if "stoker_version" in m
        else ""
    )
    return (
        f"{m['role']:<8} {m['address'] or '-':<28} holder {m['holder']}  started {started}  "
        f"seen {_ago(now, m['seen_at'])}{token}{runs}"
    )


@click.command("managers")
@server_opts
@click.option("--json", "as_json", is_flag=True, help="Print the answer's JSON.")
@guarded
def managers_cmd(server: str | None, token: str | None, as_json: bool) -> None:
    """List the job managers of the server's store: the leader (it holds the leader lease) and
    the standbys, each with the address it serves at and when it was last seen. Any manager of
    the store answers the same; a lapsed lease names no leader."""
    with client(need_server(server, "the managers are read from one of them"), token) as c:
        out = c.managers()
    if as_json:
        click.echo(json.dumps(out, indent=2))
        return
    now = time.time()
    for m in out["managers"]:
        click.echo(_manager_line(m, out["leader"], now))
    if out["leader"] is None:
        click.echo("no leader: the leader lease has lapsed; a manager takes it within its TTL")
