"""Identifier types; job, attempt, epoch and sink transaction states and their transition tables."""

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
    # Stopped gracefully by a signal (host shutdown, container stop): not an end. The job
    # resumes from its checkpoint when run again (Flink's SUSPENDED).
    SUSPENDED = "SUSPENDED"
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
        {
            JobState.FINISHED,
            JobState.CANCELING,
            JobState.RESTARTING,
            JobState.SUSPENDED,
            JobState.FAILED,
        }
    ),
    JobState.RESTARTING: frozenset({JobState.RUNNING, JobState.CANCELED, JobState.FAILED}),
    JobState.SUSPENDED: frozenset({JobState.RESTARTING, JobState.CANCELED, JobState.FAILED}),
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
    SUSPENDED = "SUSPENDED"  # stopped gracefully by a signal; the job may resume

    @property
    def ended(self) -> bool:
        """The attempt is over: nothing moves it again (a later end changes nothing)."""
        return not ATTEMPT_TRANSITIONS[self]


# Allowed moves of an attempt; None is "no record yet" (a job manager makes it STARTING, a
# driver run by hand RUNNING). A driver claims its STARTING attempt (-> RUNNING); either live
# state ends in one of the rest, which are final. FINISHED needs a driver that ran.
_ENDS = frozenset(
    {
        AttemptState.FAILED,
        AttemptState.CANCELED,
        AttemptState.SUPERSEDED,
        AttemptState.SUSPENDED,
    }
)
ATTEMPT_TRANSITIONS: dict[AttemptState | None, frozenset[AttemptState]] = {
    None: frozenset({AttemptState.STARTING, AttemptState.RUNNING}),
    AttemptState.STARTING: frozenset({AttemptState.RUNNING, *_ENDS}),
    AttemptState.RUNNING: frozenset({AttemptState.FINISHED, *_ENDS}),
    AttemptState.FINISHED: frozenset(),
    AttemptState.FAILED: frozenset(),
    AttemptState.CANCELED: frozenset(),
    AttemptState.SUPERSEDED: frozenset(),
    AttemptState.SUSPENDED: frozenset(),
}


def check_attempt_transition(current: AttemptState | None, target: AttemptState) -> None:
    """Raise :class:`InvalidTransition` unless an attempt may go ``current -> target``."""
    if target not in ATTEMPT_TRANSITIONS[current]:
        raise InvalidTransition(f"attempt {current or 'without a record'} cannot become {target}")


class EpochState(enum.StrEnum):
    """Lifecycle of one epoch record: PINNED -> DECIDED -> COMMITTED."""

    PINNED = "PINNED"
    DECIDED = "DECIDED"
    COMMITTED = "COMMITTED"


# Allowed moves of an epoch record; None is "no record yet". Marking a COMMITTED epoch
# committed again is allowed (recovery may repeat it); nothing goes back.
EPOCH_TRANSITIONS: dict[EpochState | None, frozenset[EpochState]] = {
    None: frozenset({EpochState.PINNED}),
    EpochState.PINNED: frozenset({EpochState.DECIDED}),
    EpochState.DECIDED: frozenset({EpochState.COMMITTED}),
    EpochState.COMMITTED: frozenset({EpochState.COMMITTED}),
}


def check_epoch_transition(current: EpochState | None, target: EpochState) -> None:
    """Raise :class:`InvalidTransition` unless an epoch may go ``current -> target``."""
    if target not in EPOCH_TRANSITIONS[current]:
        raise InvalidTransition(f"epoch {current or 'without a record'} cannot become {target}")


class TxnState(enum.StrEnum):
    """Lifecycle of one sink transaction: PREPARED -> COMMITTED | ABORTED."""

    PREPARED = "PREPARED"
    COMMITTED = "COMMITTED"
    ABORTED = "ABORTED"


# Allowed moves of a sink transaction record; None is "no record yet". A part can be aborted
# without a record (recovery found it in the sink, the crash came before it was recorded), but
# never committed without having been recorded PREPARED: that record holds what commit needs.
# Repeating a final state is allowed (commit and abort are idempotent).
TXN_TRANSITIONS: dict[TxnState | None, frozenset[TxnState]] = {
    None: frozenset({TxnState.PREPARED, TxnState.ABORTED}),
    TxnState.PREPARED: frozenset({TxnState.PREPARED, TxnState.COMMITTED, TxnState.ABORTED}),
    TxnState.COMMITTED: frozenset({TxnState.COMMITTED}),
    TxnState.ABORTED: frozenset({TxnState.ABORTED}),
}


def check_txn_transition(current: TxnState | None, target: TxnState) -> None:
    """Raise :class:`InvalidTransition` unless a sink transaction may go ``current -> target``."""
    if target not in TXN_TRANSITIONS[current]:
        raise InvalidTransition(
            f"sink transaction {current or 'without a record'} cannot become {target}"
        )


class ControlKind(enum.StrEnum):
    """What a control event changes (see :mod:`stoker.control.events`)."""

    CONFIG = "config"
    RATE_LIMIT = "rate_limit"
    LOG_LEVEL = "log_level"
    TRIGGER = "trigger"
    PAUSE = "pause"
    RESUME = "resume"
    CHECKPOINT = "checkpoint"
    EVENT = "event"
    SAVEPOINT = "savepoint"
    # The owner's scaling mode and bounds: applied by the job manager at once, not at an epoch.
    SCALING = "scaling"


class ControlStatus(enum.StrEnum):
    """Lifecycle of a control event: PENDING -> APPLIED (epoch N) -> COMMITTED, or REJECTED."""

    PENDING = "PENDING"
    APPLIED = "APPLIED"
    COMMITTED = "COMMITTED"
    REJECTED = "REJECTED"

    @property
    def ended(self) -> bool:
        return self in (ControlStatus.COMMITTED, ControlStatus.REJECTED)


CONTROL_TRANSITIONS: dict[ControlStatus | None, frozenset[ControlStatus]] = {
    None: frozenset({ControlStatus.PENDING}),
    ControlStatus.PENDING: frozenset({ControlStatus.APPLIED, ControlStatus.REJECTED}),
    ControlStatus.APPLIED: frozenset({ControlStatus.COMMITTED, ControlStatus.REJECTED}),
    ControlStatus.COMMITTED: frozenset(),
    ControlStatus.REJECTED: frozenset(),
}


def check_control_transition(current: ControlStatus | None, target: ControlStatus) -> None:
    """Raise :class:`InvalidTransition` unless a control event may go ``current -> target``."""
    if target not in CONTROL_TRANSITIONS[current]:
        raise InvalidTransition(
            f"control event {current or 'without a record'} cannot become {target}"
        )


class JobKind(enum.StrEnum):
    """What a record of the jobs table supervises.

    JOB: one pipeline. APPLICATION: a user program's driver, which runs the jobs that name it
    as their ``app_id``; its attempts fence theirs. Both share one id space, the job table's
    states and ``JOB_TRANSITIONS`` (an application goes CREATED -> RUNNING -> FINISHED |
    FAILED | CANCELED, through CANCELING, RESTARTING and SUSPENDED like a job).
    """

    JOB = "job"
    APPLICATION = "application"


class ClusterState(enum.StrEnum):
    """Lifecycle of a Spark standalone cluster stoker started."""

    STARTING = "STARTING"
    RUNNING = "RUNNING"
    STOPPING = "STOPPING"
    STOPPED = "STOPPED"
    FAILED = "FAILED"  # it could not start, or lost its master; its processes still go


CLUSTER_TRANSITIONS: dict[ClusterState, frozenset[ClusterState]] = {
    ClusterState.STARTING: frozenset(
        {ClusterState.RUNNING, ClusterState.STOPPING, ClusterState.FAILED}
    ),
    ClusterState.RUNNING: frozenset({ClusterState.STOPPING, ClusterState.FAILED}),
    ClusterState.STOPPING: frozenset({ClusterState.STOPPED, ClusterState.FAILED}),
    ClusterState.FAILED: frozenset({ClusterState.STOPPING, ClusterState.STOPPED}),
    ClusterState.STOPPED: frozenset(),
}


def check_cluster_transition(current: ClusterState, target: ClusterState) -> None:
    """Raise :class:`InvalidTransition` unless ``current -> target`` is in the table."""
    if target != current and target not in CLUSTER_TRANSITIONS[current]:
        raise InvalidTransition(f"cluster state {current} cannot become {target}")
