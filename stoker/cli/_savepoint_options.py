"""``stoker run``'s options of a start from a savepoint, in one place: the folder, and what the
start may do about the output and the lineage it finds (:mod:`stoker.lineage`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from stoker.errors import InvalidInput

_OPTIONS = [
    click.option(
        "--from-savepoint",
        "from_savepoint",
        default=None,
        type=click.Path(),
        metavar="DIR",
        help="Start the job from a savepoint folder (stoker savepoint JOB [--stop]): a new job "
        "id (or one without a checkpoint) going on from the savepoint's epoch, exactly once. A "
        "savepoint goes on in one job: restored before, it is refused, naming that job.",
    ),
    click.option(
        "--rewrite-output-after-savepoint",
        "rewrite_output",
        is_flag=True,
        help="With --from-savepoint: when the savepoint's job went on after the savepoint and "
        "a sink holds that later output, start anyway and write the rows of those epochs to "
        "it again (without it the start is refused, naming the sink and the epochs).",
    ),
    click.option(
        "--fork",
        "fork",
        is_flag=True,
        help="With --from-savepoint: start a fork, under a uid of its own, to outputs of its "
        "own (a sink writing the savepoint's job's or an earlier restore's is refused); for a "
        "savepoint restored before, once that job has ended with its outputs resolved.",
    ),
    click.option(
        "--ignore-unreachable-stores",
        "ignore_unreachable_stores",
        is_flag=True,
        help="A store the lineage check of a start from a savepoint (a resume of a restored "
        "job too) must read and cannot open (the savepoint's job's SQLite file on another host, "
        "a server that is down) is skipped with a warning instead of refusing the start. Only "
        "when that job is known to be over; a restore keeps it for the job's later starts.",
    ),
]

# How each flag that only goes with --from-savepoint is named when given without it.
FLAGS = {"rewrite_output": "--rewrite-output-after-savepoint", "fork": "--fork"}


def savepoint_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """Add the options of a start from a savepoint to the command ``f``."""
    for option in reversed(_OPTIONS):
        f = option(f)
    return f


def check_savepoint_flags(from_savepoint: str | None, **flags: bool) -> None:
    """A flag of a start from a savepoint given without ``--from-savepoint`` is refused."""
    for name, given in flags.items():
        if given and from_savepoint is None:
            raise InvalidInput(
                FLAGS[name],
                "is given without --from-savepoint: it says how a job starts from a savepoint",
            )
