"""The error hierarchy. Each subclass is a failure a caller can act on.

Mapping to CLI exit codes lives in exactly one place: :data:`EXIT_CODES`.
"""

from __future__ import annotations

from typing import Self


class StokerError(Exception):
    """Root of every error stoker raises on purpose."""

    def with_message(self, message: str) -> Self:
        """The same error (its class, so its exit code and HTTP status, and its fields) saying
        ``message`` instead: the words of whoever knows better (the job manager's answer)."""
        new = type(self).__new__(type(self))
        new.__dict__.update(self.__dict__)
        new.args = (message,)
        return new

    def with_hint(self, hint: str) -> Self:
        """The same error with ``hint`` after its message: ``job 'x' not found (hint)``."""
        return self.with_message(f"{self} ({hint})")


class FieldError(StokerError):
    """An error about one named field (a setting, a sink's path): ``field: message``."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class InvalidInput(FieldError):
    """Bad input from a user: names the field and says what is allowed. Nothing was changed."""


class InvalidPipeline(InvalidInput):
    """The pipeline definition cannot run (no source, no sink, bad transform, ...)."""


class CheckpointBehind(InvalidInput):
    """A job's Spark checkpoint has lost epochs its store decided (wiped, another host's
    folder, a store kept outside the state folder): Spark would number them again and the
    store would take them as replays, dropping their input. Refused before anything runs;
    the message names the store's epochs, the checkpoint, and the ways out (a savepoint, or
    ``--reset-checkpoint``). Exit 2, HTTP 422, as other input that cannot run."""


class SourceError(FieldError):
    """A source failed while the job ran: its data changed under the job (a file log removed,
    damaged or locked by another process). Not the user's input: exit 16, HTTP 503.
    :class:`InvalidSource` is the kind found before anything runs."""


class SinkError(FieldError):
    """A sink failed while the job ran: the external system is unreachable, or a part of an
    epoch decided for it is lost or was overwritten. Not the user's input: exit 16, HTTP 503.
    :class:`InvalidSink` is the kind found before anything runs."""


class InvalidSource(InvalidInput, SourceError):
    """A source the user described cannot be read (a missing folder, an unknown format, a bad
    schema): found when the pipeline is checked, before anything is written. Bad input (exit
    2, HTTP 422) first, and a :class:`SourceError` too, so ``except SourceError`` still
    catches everything about a source."""


class InvalidSink(InvalidInput, SinkError):
    """A sink the user described cannot be written (an unknown format, a path that is not a
    folder or is another job's, a server configured without prepared transactions): found
    when the pipeline is checked or the sink opened, before the job writes. Bad input (exit 2,
    HTTP 422) first, and a :class:`SinkError` too."""


class OwnedElsewhere(InvalidSink):
    """A sink's output (a files sink's folder, a PostgreSQL table for this job id) belongs to
    another job: claimed by another id or uid, or handed over to a new job by a restore from a
    savepoint. The job that asked may not write it, nor resolve parts in it."""


class JobNotFound(StokerError):
    """No job with that id exists in the store."""

    def __init__(self, job_id: str) -> None:
        super().__init__(f"job {job_id!r} not found")
        self.job_id = job_id


class DuplicateJob(StokerError):
    """The job id is live already; a second live instance is refused."""

    def __init__(self, job_id: str, detail: str) -> None:
        super().__init__(f"job {job_id!r} is already live: {detail}")
        self.job_id = job_id


class JobConflict(StokerError):
    """The job id is live with a different spec; the submission is refused."""

    def __init__(self, job_id: str, difference: str) -> None:
        super().__init__(f"job {job_id!r} is live with a different spec: {difference}")
        self.job_id = job_id
        self.difference = difference


class JobTerminal(StokerError):
    """The job has ended; it is not re-run unless a restart is asked for explicitly.
    ``difference``: it was submitted again with another spec (the same one is returned)."""

    def __init__(self, job_id: str, state: str, difference: str | None = None) -> None:
        other = "" if difference is None else f" and was submitted with another spec ({difference})"
        super().__init__(
            f"job {job_id!r} has ended in state {state}{other}; to run it again from its "
            'checkpoint ask for a restart: --restart (stoker run), "restart": true (REST), '
            "restart=True (stoker.run)"
        )
        self.job_id = job_id
        self.state = state
        self.difference = difference


class ControlNotFound(StokerError):
    """No control event (or savepoint) with that id exists for the job."""

    def __init__(self, job_id: str, control_id: str) -> None:
        super().__init__(f"job {job_id!r} has no control event {control_id!r}")
        self.job_id = job_id
        self.control_id = control_id


# The reasons of the two ControlConflicts a CLI verb takes as done already:
# `stoker pause` of a paused job and `stoker resume` of a running one exit 0 with a note.
ALREADY_PAUSED = "is paused already"
NOT_PAUSED = "is not paused: there is nothing to resume"


class ControlConflict(StokerError):
    """A control event that cannot be taken in the job's present control state (pause of a
    paused job, a request_id reused with another body). Nothing was stored."""

    def __init__(self, job_id: str, reason: str) -> None:
        super().__init__(f"job {job_id!r}: {reason}")
        self.job_id = job_id
        self.reason = reason


class TooManyRequests(StokerError):
    """Control traffic to one job beyond its rate limit; retry after ``retry_after`` seconds."""

    def __init__(self, job_id: str, retry_after: float, limit: str) -> None:
        super().__init__(
            f"job {job_id!r}: too many control events ({limit}); retry in {retry_after:.1f} s"
        )
        self.job_id = job_id
        self.retry_after = retry_after


class TooManyStreams(TooManyRequests):
    """Every event stream the manager keeps open is taken; retry after ``retry_after``."""

    def __init__(self, limit: int, retry_after: float = 5.0, of: str = "") -> None:
        StokerError.__init__(
            self,
            f"too many event streams open{of} ({limit} at most): close one, or read the "
            f"state over REST; retry in {retry_after:.0f} s",
        )
        self.job_id = None  # type: ignore[assignment]
        self.retry_after = retry_after
        self.limit = str(limit)


class ApplicationNotFound(JobNotFound):
    """No application with that id exists in the store."""

    def __init__(self, app_id: str) -> None:
        StokerError.__init__(self, f"application {app_id!r} not found")
        self.job_id = app_id
        self.app_id = app_id


class JobOwnedElsewhere(StokerError):
    """The id is taken by another kind of record or another application's job: an
    application's job id is never run by a second application or as a job submitted alone."""

    def __init__(self, job_id: str, owner: str) -> None:
        super().__init__(f"id {job_id!r} is taken: {owner}")
        self.job_id = job_id
        self.owner = owner


class OperationNotFound(StokerError):
    """No operation with that id is recorded (never made, or dropped by retention)."""

    def __init__(self, op_id: str) -> None:
        super().__init__(f"operation {op_id!r} not found")
        self.op_id = op_id


class UpgradeConflict(StokerError):
    """The job cannot take this upgrade now (another one is under way): HTTP 409."""

    def __init__(self, job_id: str, reason: str) -> None:
        super().__init__(f"job {job_id!r}: {reason}")
        self.job_id = job_id


class UpgradeNotFound(StokerError):
    """The job has no upgrade of that id."""

    def __init__(self, job_id: str, upgrade_id: str) -> None:
        super().__init__(f"job {job_id!r} has no upgrade {upgrade_id!r}")
        self.job_id = job_id
        self.upgrade_id = upgrade_id


class ClusterNotFound(StokerError):
    """No cluster with that name is recorded."""

    def __init__(self, name: str) -> None:
        super().__init__(f"cluster {name!r} not found")
        self.name = name


class RescaleNotFound(StokerError):
    """No rescale (scaling decision or observation) with that id is recorded."""

    def __init__(self, rescale_id: int) -> None:
        super().__init__(f"rescale {rescale_id!r} not found")
        self.rescale_id = rescale_id


class ClusterError(StokerError):
    """A cluster could not be started, changed or stopped; what is left was torn down."""


class ClusterConflict(ClusterError):
    """The cluster cannot take this change in its state (it exists already, it is not
    RUNNING, it belongs to an application): HTTP 409, nothing was changed."""


class StaleAttempt(StokerError):
    """This attempt no longer owns its job (a newer attempt exists or its lease lapsed)."""


class NotLeader(StokerError):
    """This job manager no longer holds the leader lease; it must not start attempts."""


class Unauthorized(StokerError):
    """The job manager refused the call: token missing or wrong."""


class ManagerUnavailable(StokerError):
    """The job manager cannot be reached."""


class InvalidTransition(StokerError):
    """A state change that the transition table does not allow."""


class StoreError(StokerError):
    """The store cannot be opened or used."""


class StoreTooNew(StokerError):
    """The store's schema has a migration this stoker does not know and cannot use (a
    contract one, applied by a newer stoker): refused before anything is read or written,
    naming both versions. Not an outage: retrying cannot help (exit 2)."""

    def __init__(
        self, message: str, *, store_version: int, known: int, written_by: str | None
    ) -> None:
        super().__init__(message)
        self.store_version = store_version
        self.known = known
        self.written_by = written_by


class MigrationRefused(StokerError):
    """A contract migration was not applied because a manager of an older stoker still runs
    on the store (it could not use the store after it): says how to go on (exit 2)."""


class JobFailed(StokerError):
    """The job's query stopped with an error."""


class QueryStalled(JobFailed):
    """The job's query made no progress for longer than ``stoker.progress_timeout``: no
    epoch, no progress or idle event, no task completing (a Python process Spark waits on
    without a timeout, say). The attempt fails (exit 8) and the restart strategy decides."""


class DriverLost(StokerError):
    """The Spark driver JVM of this process is gone (killed, out of memory, crashed): nothing
    here can run a query any more. In an application the attempt ends FAILED without using up
    a job's restart strategy, and the job manager's strategy for the application starts a new
    driver, which re-adopts the jobs."""


class StartupTimedOut(StokerError):
    """A driver's start (the app's import, its code before ``stoker.run``, opening, recovery;
    Spark's own start not counted) outlasted ``stoker.startup_timeout``: the driver ended its
    attempt FAILED, naming the phase and where it hung, and exited (runtime/startwatch.py)."""


class JobSuspended(StokerError):
    """A signal (SIGTERM, SIGINT) stopped the run gracefully; the job is SUSPENDED, not ended:
    running the same command again resumes it."""


EXIT_CODES: dict[type[StokerError], int] = {
    InvalidInput: 2,
    JobNotFound: 3,
    DuplicateJob: 4,
    JobTerminal: 5,
    StaleAttempt: 6,
    StoreError: 7,
    JobFailed: 8,
    JobConflict: 9,
    UpgradeConflict: 9,
    NotLeader: 10,
    Unauthorized: 11,
    ManagerUnavailable: 12,
    JobSuspended: 13,
    ControlNotFound: 3,
    ControlConflict: 9,
    TooManyRequests: 14,
    JobOwnedElsewhere: 9,
    ClusterNotFound: 3,
    OperationNotFound: 3,
    UpgradeNotFound: 3,
    RescaleNotFound: 3,
    ClusterError: 15,
    ClusterConflict: 15,
    # After InvalidInput in InvalidSink's and InvalidSource's MRO: those stay 2.
    SinkError: 16,
    SourceError: 16,
    DriverLost: 17,
    StartupTimedOut: 18,
    StoreTooNew: 2,
    MigrationRefused: 2,
}


def exit_code(err: BaseException) -> int:
    """The CLI exit code for ``err`` (1 for anything unexpected)."""
    for cls in type(err).__mro__:
        if cls in EXIT_CODES:
            return EXIT_CODES[cls]
    return 1
