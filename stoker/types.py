"""Identifier types; job, attempt, epoch and sink transaction states and their transition tables."""

from __future__ import annotations

import enum
import re
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, NewType, TypeVar

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


S = TypeVar("S", bound=Hashable)


@dataclass(frozen=True)
class StateMachine(Generic[S]):
    """One state machine: its table of moves and its one rule for staying in a state.

    ``moves[current]`` is the set of states ``current`` may become; ``None`` as a current
    state is "no record yet". ``stay`` decides self-moves for the whole machine: True, moving
    to the state a record has already is always allowed (a no-op that changes nothing but the
    other fields the caller writes); False, only where the table lists the state among its own
    moves (an idempotent end, say). A state missing from the table may become nothing.
    """

    subject: str  # what the message names: "job state", "attempt", ...
    moves: Mapping[Any, frozenset[S]]  # keyed by S, and None where a record may be absent
    stay: bool

    def allows(self, current: S | None, target: S) -> bool:
        """Whether ``current -> target`` is allowed."""
        if self.stay and target == current:
            return True
        return target in self.moves.get(current, frozenset())

    def check(self, current: S | None, target: S) -> None:
        """Raise :class:`InvalidTransition` unless ``current -> target`` is allowed."""
        if not self.allows(current, target):
            was = "without a record" if current is None else current
            raise InvalidTransition(f"{self.subject} {was} cannot become {target}")


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
    # The job failed for good, but its driver's processes still run where the leader can see
    # them (it is killing them): not FAILED while anything of it may still write (Flink's
    # FAILING). FAILED once they are gone.
    FAILING = "FAILING"
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
            JobState.FAILING,
            JobState.FAILED,
        }
    ),
    JobState.RESTARTING: frozenset({JobState.RUNNING, JobState.CANCELED, JobState.FAILED}),
    JobState.SUSPENDED: frozenset({JobState.RESTARTING, JobState.CANCELED, JobState.FAILED}),
    # FAILING: an application whose main raised ends FAILED, not CANCELED, and waits there
    # while its driver's processes are still seen.
    JobState.CANCELING: frozenset(
        {JobState.CANCELED, JobState.FINISHED, JobState.FAILING, JobState.FAILED}
    ),
    JobState.FAILING: frozenset({JobState.FAILED}),
    JobState.FINISHED: frozenset({JobState.RESTARTING}),
    JobState.CANCELED: frozenset({JobState.RESTARTING}),
    JobState.FAILED: frozenset({JobState.RESTARTING}),
}


# A job asked to become the state it is in stays there (a cancel of a CANCELING job, a
# second RUNNING from a resumed driver): staying is allowed.
JOBS: StateMachine[JobState] = StateMachine("job state", JOB_TRANSITIONS, stay=True)


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


# No staying: a second claim of a RUNNING attempt is a second driver, refused (the fence);
# an end of an ended attempt is decided by the store (left as it ended), not by the table.
ATTEMPTS: StateMachine[AttemptState] = StateMachine("attempt", ATTEMPT_TRANSITIONS, stay=False)


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


# Staying only where the table says so: COMMITTED again (recovery repeats it). A DECIDED
# epoch decided again is another attempt's decision, refused.
EPOCHS: StateMachine[EpochState] = StateMachine("epoch", EPOCH_TRANSITIONS, stay=False)


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


# Staying as the table lists it: every state again (prepare, commit and abort are idempotent).
TXNS: StateMachine[TxnState] = StateMachine("sink transaction", TXN_TRANSITIONS, stay=False)


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


# No staying: an event APPLIED twice would be applied at two epochs.
CONTROLS: StateMachine[ControlStatus] = StateMachine(
    "control event", CONTROL_TRANSITIONS, stay=False
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


class SpecKind(enum.StrEnum):
    """Who starts a job record's attempts: its spec's ``kind`` key (stored as these strings).

    A spec without a ``kind`` is a pipeline ``stoker.run`` / ``stoker run`` runs in its own
    process: no job manager starts it. Not :class:`JobKind` (which table row: a job or an
    application) nor :class:`ClusterKind`.
    """

    # A job submitted to a job manager alone (REST, ``stoker run --server``): the manager's
    # driver runs its app file. Its spec's ``config`` is the values given at submission.
    MANAGED = "app"
    # A job an application's driver runs (its spec names the ``app_id``).
    IN_APP = "in_app"
    # An application: a user program's driver that the job manager starts.
    APPLICATION = "application"


def given_config(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The pipeline config given from outside (``--config``, REST ``"config"``) that a job's
    spec records, whoever made the spec: the one reader of the two stored layouts.

    A managed job's spec (``kind`` ``app``, made at submission) keeps it under ``config``;
    every other spec is made by the runtime from ``Pipeline.spec()``, whose ``config`` is the
    pipeline's declared defaults, and keeps it under ``submitted_config``. (Renaming the
    managed key would change stored specs, so resubmitting a live job would conflict, and
    the REST answers: the layouts stay, read here.)
    """
    key = "config" if spec.get("kind") == SpecKind.MANAGED else "submitted_config"
    return dict(spec.get(key) or {})


class ClusterKind(enum.StrEnum):
    """Whose a Spark standalone cluster stoker started is (stored as these strings)."""

    APP = "app"  # an application's own: started for ``owner_app``, torn down with it
    SESSION = "session"  # started by hand (``stoker cluster start``): outlives applications


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


# Staying is allowed: an update that changes a cluster's processes or URLs keeps its state.
CLUSTERS: StateMachine[ClusterState] = StateMachine("cluster state", CLUSTER_TRANSITIONS, stay=True)


class OperationState(enum.StrEnum):
    """Lifecycle of a long REST call run as an operation (``GET /v1/operations/{id}``)."""

    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"  # its error, or the manager that ran it stopped before it ended

    @property
    def terminal(self) -> bool:
        return self != OperationState.RUNNING


class StandbyState(enum.StrEnum):
    """Lifecycle of a job's warm standby driver (``standbys``, migration 0016): WARMING ->
    READY -> TAKEN, each move made by one statement's condition (``sql_standbys.py``)."""

    WARMING = "WARMING"  # started: importing the app, starting Spark, analyzing the plan
    READY = "READY"  # warm, waiting for an attempt, holding none
    TAKEN = "TAKEN"  # handed the job's next attempt: it is that attempt's driver now


class StandbyRole(enum.StrEnum):
    """Which of a job's standby drivers a ``standbys`` row is (migration 0017)."""

    STANDBY = "standby"  # the job's own, running the job's code (``"standby": true``)
    UPGRADE = "upgrade"  # an upgrade's: the new code, warm and checked until the swap


class UpgradeState(enum.StrEnum):
    """Lifecycle of an upgrade to new code (``upgrades``, migration 0017)."""

    PENDING = "PENDING"  # the new code warms and is checked; the old code runs
    SWAPPED = "SWAPPED"  # the new code runs, watched; the old code is kept warm
    CONFIRMED = "CONFIRMED"  # the new code ran through its watch window
    ROLLED_BACK = "ROLLED_BACK"  # the new code failed in its window: the old code runs again
    REFUSED = "REFUSED"  # a check failed, or the new code was lost before the swap

    @property
    def live(self) -> bool:
        return self in (UpgradeState.PENDING, UpgradeState.SWAPPED)


OPERATIONS: StateMachine[OperationState] = StateMachine(
    "operation",
    {
        None: frozenset({OperationState.RUNNING}),
        OperationState.RUNNING: frozenset({OperationState.SUCCEEDED, OperationState.FAILED}),
    },
    stay=False,
)
