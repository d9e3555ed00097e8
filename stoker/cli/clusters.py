"""Session clusters from the command line (Spark standalone clusters that outlive
applications, started by the job manager on its host):

    stoker cluster start [--name N] [--workers 2] [--cores 1] [--memory 1g]
    stoker cluster list [--all]
    stoker cluster status NAME
    stoker cluster add-worker NAME [--cores C] [--memory M]
    stoker cluster remove-worker NAME WORKER [--graceful]
    stoker cluster stop NAME

Each is a REST call (``--server`` / STOKER_SERVER, ``--token`` / STOKER_TOKEN); ``--json``
prints the answer's JSON. An application runs on one with ``stoker run --driver app.py
--cluster NAME``.
"""

from __future__ import annotations

import json
from typing import Any

import click

from stoker.cli._common import client, guarded, need_server, server_opts

_json_opt = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


def _line(c: dict[str, Any]) -> str:
    owner = f" (application {c['owner_app']})" if c.get("owner_app") else ""
    master = c.get("master_url") or "-"
    return (
        f"{c['name']:<24} {c['kind']:<8} {c['state']:<9} {master:<28} workers {c['workers']}{owner}"
    )


def _workers(c: dict[str, Any]) -> list[str]:
    return [
        f"  {p['id']:<12} {p.get('address', '-'):<12} pid {p.get('pid')} "
        f"cores {p.get('cores')} memory {p.get('memory')}"
        for p in c.get("processes", [])
        if p.get("role") == "worker"
    ]


@click.group("cluster")
def cluster_group() -> None:
    """Session clusters: Spark standalone clusters the job manager starts, shared by
    applications, with workers added and removed while jobs run."""


@cluster_group.command("start")
@click.option("--name", default=None, help="Default: cluster-<6 hex>.")
@click.option("--workers", default=2, show_default=True, type=click.IntRange(1))
@click.option("--cores", default=1, show_default=True, type=click.IntRange(1), help="Per worker.")
@click.option("--memory", default="1g", show_default=True, help="Per worker, e.g. 512m, 2g.")
@server_opts
@_json_opt
@guarded
def start_cmd(
    name: str | None,
    workers: int,
    cores: int,
    memory: str,
    server: str | None,
    token: str | None,
    as_json: bool,
) -> None:
    """Start a session cluster; returns once every worker is ALIVE."""
    with client(need_server(server), token) as c:
        out = c.start_cluster(name, workers, cores, memory)
    if as_json:
        click.echo(json.dumps(out, indent=2))
        return
    click.echo(
        f"cluster {out['name']}: {out['state']} at {out['master_url']} "
        f"(web {out['web_url']}), {out['workers']} workers"
    )


@cluster_group.command("list")
@click.option("--all", "include_stopped", is_flag=True, help="Also the STOPPED ones.")
@server_opts
@_json_opt
@guarded
def list_cmd(include_stopped: bool, server: str | None, token: str | None, as_json: bool) -> None:
    """List the clusters stoker started (session clusters and applications' own)."""
    with client(need_server(server), token) as c:
        found = c.clusters(include_stopped)
    for cl in found:
        click.echo(json.dumps(cl) if as_json else _line(cl))
    if not found and not as_json:
        click.echo(
            "no clusters" if include_stopped else "no live clusters (stopped ones too: --all)",
            err=True,
        )


@cluster_group.command("status")
@click.argument("name")
@server_opts
@_json_opt
@guarded
def status_cmd(name: str, server: str | None, token: str | None, as_json: bool) -> None:
    """Show a cluster: its processes, what its master says now, the applications on it."""
    with client(need_server(server), token) as c:
        out = c.cluster(name)
    if as_json:
        click.echo(json.dumps(out, indent=2))
        return
    click.echo(_line(out))
    if out.get("error"):
        click.echo(f"  error      {out['error']}")
    for line in _workers(out):
        click.echo(line)
    status = out.get("status") or {}
    if status.get("error"):
        click.echo(f"  master     {status['error']}")
    elif status:
        click.echo(f"  master     {master_line(status)}")
    if out.get("used_by"):
        click.echo(f"  used by    {', '.join(out['used_by'])}")


def master_line(status: dict[str, Any]) -> str:
    """What the master says of its workers: the live ones (and their cores), as the cluster's
    own line counts them; a removed worker stays in the master's list as DEAD for a while
    ("workers 2" beside "master 3 workers")."""
    workers = status.get("workers", [])
    alive = [w for w in workers if str(w.get("state", "ALIVE")).upper() == "ALIVE"]
    used = sum(int(w.get("coresused", 0)) for w in alive)
    total = sum(int(w.get("cores", 0)) for w in alive)
    gone = len(workers) - len(alive)
    out = f"{len(alive)} workers alive, cores {used}/{total} used"
    return out + (f" ({gone} gone, still listed by the master)" if gone else "")


@cluster_group.command("add-worker")
@click.argument("name")
@click.option("--cores", default=None, type=click.IntRange(1), help="Default: the cluster's.")
@click.option("--memory", default=None, help="Default: the cluster's, e.g. 1g.")
@server_opts
@_json_opt
@guarded
def add_worker_cmd(
    name: str,
    cores: int | None,
    memory: str | None,
    server: str | None,
    token: str | None,
    as_json: bool,
) -> None:
    """Start one more worker; applications on the cluster use it from their next epochs."""
    with client(need_server(server), token) as c:
        out = c.add_worker(name, cores, memory)
    if as_json:
        click.echo(json.dumps(out, indent=2))
        return
    w = out["worker"]
    click.echo(
        f"cluster {name}: worker {w['id']} at {w.get('address')} started "
        f"({out['cluster']['workers']} workers)"
    )


@cluster_group.command("remove-worker")
@click.argument("name")
@click.argument("worker")
@click.option(
    "--graceful",
    is_flag=True,
    help="Decommission it first (its work moves elsewhere, no task fails), then stop it.",
)
@server_opts
@_json_opt
@guarded
def remove_worker_cmd(
    name: str,
    worker: str,
    graceful: bool,
    server: str | None,
    token: str | None,
    as_json: bool,
) -> None:
    """Stop one worker (its id or address, as `stoker cluster status` shows)."""
    with client(need_server(server), token) as c:
        out = c.remove_worker(name, worker, graceful)
    if as_json:
        click.echo(json.dumps(out, indent=2))
        return
    how = "decommissioned and stopped" if graceful else "stopped"
    click.echo(f"cluster {name}: worker {worker} {how} ({out['workers']} workers left)")


@cluster_group.command("stop")
@click.argument("name")
@click.option(
    "--force",
    is_flag=True,
    help="Stop it even though live applications use it (they lose their executors).",
)
@server_opts
@_json_opt
@guarded
def stop_cmd(name: str, force: bool, server: str | None, token: str | None, as_json: bool) -> None:
    """Stop a session cluster and every process of it (one that live applications use: only
    with --force)."""
    with client(need_server(server), token) as c:
        out = c.stop_cluster(name, force)
    if as_json:
        click.echo(json.dumps(out, indent=2))
        return
    click.echo(f"cluster {name}: {out['state']}")
    if out.get("used_by"):
        click.echo(f"  applications still on it lost their executors: {', '.join(out['used_by'])}")


COMMANDS = [cluster_group]
