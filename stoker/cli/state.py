"""A job's state from the command line: ``stoker state repartition JOB N`` changes the number
of state partitions (the job's maximum parallelism, fixed when it was created) of a stopped
job, offline, through Spark's checkpoint repartitioning.

With ``--server`` (or STOKER_SERVER) the job manager does it on its host; without, this
process does it for a job in ``--store`` / ``--state-dir`` (a child process runs a local
Spark for the rewrite).
"""

from __future__ import annotations

import json

import click

from stoker.cli._common import (
    client,
    guarded,
    open_job_store,
    server_opts,
    state_dir_opt,
    store_opt,
    use_server,
)
from stoker.durations import parse_partitions
from stoker.types import job_id as _job_id


@click.group("state")
def state_group() -> None:
    """A job's state: its state partitions (maximum parallelism)."""


@state_group.command("repartition", context_settings={"ignore_unknown_options": True})
@click.argument("job")
@click.argument("partitions", metavar="N")
@store_opt
@state_dir_opt
@server_opts
@click.option("--json", "as_json", is_flag=True, help="Print the answer as JSON.")
@guarded
def repartition_cmd(
    job: str,
    partitions: str,
    store: str | None,
    state_dir: str | None,
    server: str | None,
    token: str | None,
    as_json: bool,
) -> None:
    """Give the stopped job JOB N state partitions (its maximum parallelism).

    The job must not run: stop it first (stoker cancel JOB, or SIGTERM / Ctrl-C to its
    driver). Its state store must be RocksDB (Spark cannot repartition the HDFS-backed one).
    Epochs Spark planned and stoker never decided are skipped: their input is read again when
    the job runs next, under N partitions.
    """
    n = parse_partitions(partitions, "N")
    if server := use_server(server):
        with client(server, token) as c:
            out = c.repartition_state(_job_id(job), n)
    else:
        from stoker.manager.state import repartition

        jid, st = open_job_store(job, store, state_dir)
        try:
            out = repartition(st, jid, n)
        finally:
            st.close()
    if as_json:
        click.echo(json.dumps(out, indent=2, sort_keys=True))
        return
    skipped = out.get("skipped") or []
    note = (
        f"; planned epochs {', '.join(map(str, skipped))} skipped (read again)" if skipped else ""
    )
    click.echo(
        f"job {out['job_id']}: state partitions {out.get('from')} -> {out['to']} "
        f"(checkpoint epoch {out.get('batch')}){note}; run the job again to go on"
    )


COMMANDS = [state_group]
