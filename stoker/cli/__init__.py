"""The ``stoker`` command line.

``stoker run app.py`` runs a pipeline file in this process on the embedded defaults (or, with
``--server``, submits it to a job manager); ``stoker status JOB``, ``epochs``, ``list``,
``cancel`` and ``logs`` read or change a job through its store or a job manager;
``stoker control``, ``pause``, ``resume``, ``checkpoint``, ``savepoint`` and ``config`` change
a running job or show its control state (through a job manager or the job's store);
``stoker run --driver app.py --server URL`` hands a whole program to a job manager as an
application, and ``stoker apps``, ``stoker app status|cancel|logs`` follow it;
``stoker cluster start|list|status|add-worker|remove-worker|stop`` manage session clusters;
``stoker rescales`` and ``stoker resources`` show and bound how a job scales;
``stoker state repartition`` changes a stopped job's state partitions;
``stoker server`` runs a job manager and ``stoker managers`` lists the managers of its store.

Modules: :mod:`.run` (the run command), :mod:`.jobs` (commands on existing jobs),
:mod:`.control` (control of a running job), :mod:`.remote` (submit to a server and follow the
job), :mod:`.apps` (applications), :mod:`.clusters` (session clusters), :mod:`.scaling`
(rescale history and executor bounds), :mod:`.state` (state partitions), :mod:`.server` (the
server and managers commands).
"""

from __future__ import annotations

import click

from stoker.cli import apps, clusters, control, jobs, run, scaling, server, state, upgrade
from stoker.cli._common import OneLineUsage, debug_option
from stoker.cli.terminal import protect_stdout


@click.group(cls=OneLineUsage)
@click.version_option(package_name="stoker")
def main() -> None:
    """stoker: run PySpark pipelines as supervised, exactly-once jobs."""
    protect_stdout()  # server text on a terminal as text, never as escape sequences


main.add_command(run.run_cmd)
for _cmd in (jobs.status_cmd, jobs.epochs_cmd, jobs.list_cmd, jobs.cancel_cmd, jobs.logs_cmd):
    main.add_command(_cmd)
for _cmd in (
    *control.COMMANDS,
    *apps.COMMANDS,
    *clusters.COMMANDS,
    *scaling.COMMANDS,
    *upgrade.COMMANDS,
):
    main.add_command(_cmd)
main.add_command(state.state_group)
main.add_command(server.server_cmd)
main.add_command(server.managers_cmd)
# --debug (full tracebacks) on the group and on every command: `stoker run app.py --debug`.
main.params.append(debug_option())
for _cmd in main.commands.values():
    _cmd.params.append(debug_option())
    for _sub in getattr(_cmd, "commands", {}).values():  # `stoker app status X --debug`
        if not any(p.name == "debug" for p in _sub.params):
            _sub.params.append(debug_option())

__all__ = ["main"]
