"""Identifier types, job and epoch states, and the table of allowed job state transitions."""

from __future__ import annotations

import enum
import re
from typing import NewType

from stoker.errors import InvalidInput, InvalidTransition

JobId = NewType("JobId", str)
Epoch = NewType("Epoch", int)
AttemptNo = NewType("AttemptNo", int)
ControlVersion = NewType("ControlVersion", int)

# Job ids end up in file names, PostgreSQL prepared-transaction ids and URLs: keep them plain.
_JOB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def job_id(value: str) -> JobId:
    """Validate ``value`` as a job id and return it typed."""
    if not isinstance(value, str) or not _JOB_ID.fullmatch(value) or ".." in value:
        raise InvalidInput(
            "job_id",
            f"{value!r} is not a valid job id: use 1-100 characters of letters, digits, "
            "'.', '_' or '-', starting with a letter or digit",
        )
    return JobId(value)


class JobState(enum.StrEnum):
    """Lifecycle of a job (all of its attempts)."""

    CREATED = "CREATED"
    RUNNING = "RUNNING"
    RESTARTING = "RESTARTING"
    CANCELING = "CANCELING"
    FINISHED = "FINISHED"
    CANCELED = "CANCELED"
    FAILED = "FAILED"

    @property
    def terminal(self) -> bool:
        return self in _TERMINAL


_TERMINAL = frozenset({JobState.FINISHED, JobState.CANCELED, JobState.FAILED})

# The one table of allowed job transitions. A restart of a terminal job (explicitly asked for)
# goes back to RESTARTING; nothing else leaves a terminal state.
JOB_TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.CREATED: frozenset({JobState.RUNNING, JobState.CANCELED, JobState.FAILED}),
    JobState.RUNNING: frozenset(
        {JobState.FINISHED, JobState.CANCELING, JobState.RESTARTING, JobState.FAILED}
    ),
    JobState.RESTARTING: frozenset({JobState.RUNNING, JobState.CANCELED, JobState.FAILED}),
    JobState.CANCELING: frozenset({JobState.CANCELED, JobState.FINISHED, JobState.FAILED}),
    JobState.FINISHED: frozenset({JobState.RESTARTING}),
    JobState.CANCELED: frozenset({JobState.RESTARTING}),
    JobState.FAILED: frozenset({JobState.RESTARTING}),
}


def check_transition(current: JobState, target: JobState) -> None:
    """Raise :class:`InvalidTransition` unless ``current -> target`` is in the table."""
    if target != current and target not in JOB_TRANSITIONS[current]:
        raise InvalidTransition(f"job state {current} cannot become {target}")


class AttemptState(enum.StrEnum):
    """Lifecycle of one attempt (one run of the driver).

    STARTING: made by the job manager, its driver not yet up; RUNNING once the driver claims it.
    """

    STARTING = "STARTING"
    RUNNING = "RUNNING"
    FINISHED = "FINISHED"
    FAILED = "FAILED"
    CANCELED = "CANCELED"
    SUPERSEDED = "SUPERSEDED"  # fenced off by a newer attempt; it decided nothing after that


class EpochState(enum.StrEnum):
    """Lifecycle of one epoch record: PINNED -> DECIDED -> COMMITTED."""

    PINNED = "PINNED"
    DECIDED = "DECIDED"
    COMMITTED = "COMMITTED"


class TxnState(enum.StrEnum):
    """Lifecycle of one sink transaction: PREPARED -> COMMITTED | ABORTED."""

    PREPARED = "PREPARED"
    COMMITTED = "COMMITTED"
    ABORTED = "ABORTED"
