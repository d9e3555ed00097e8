"""Settings handed from a launcher (the ``stoker`` CLI, a job manager's driver) to the
``stoker.run`` call inside the user's file: a :class:`LaunchContext`, installed once.

In *collect* mode (a job manager's cleanup process) ``stoker.run(p)`` runs nothing: it raises
:class:`Collected`, which hands ``p`` back to the launcher and stops the file's main there.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from stoker import driverargs


@dataclass(frozen=True)
class LaunchContext:
    """What the launcher decided for the ``stoker.run`` (or ``stoker.submit``) calls of the file
    it runs: given once, by the launcher (``stoker run``'s local path, a job manager's driver,
    an application's driver), and read once by each of those calls.

    ``overrides``: the ``-D`` settings; ``job_id``, ``restart``, ``config``, ``from_savepoint``,
    ``rewrite_output_after_savepoint``, ``fork``, ``ignore_unreachable_stores``,
    ``reset_checkpoint``: the launcher's options for its one job; ``attempt``: the attempt a
    job manager made for this driver (driver mode);
    ``collect``: ``stoker.run`` hands its pipeline back instead of running it;
    ``wanted_pipeline``: ``stoker run --pipeline NAME``, any other is refused; ``on_result``:
    called with the result of every job run; ``release_start``: a job manager's driver held
    its STARTING attempt (and renewed its lease) while the app imported and Spark started:
    called once the run has claimed the attempt, to stop that hold; ``standby``: the driver
    is a job's warm standby, with no attempt yet (``attempt`` is None until it is handed one).
    """

    overrides: Mapping[str, str] = field(default_factory=dict)
    job_id: str | None = None
    restart: bool = False
    attempt: int | None = None
    collect: bool = False
    config: Mapping[str, Any] = field(default_factory=dict)
    wanted_pipeline: str | None = None
    from_savepoint: str | None = None
    rewrite_output_after_savepoint: bool = False
    fork: bool = False
    ignore_unreachable_stores: bool = False
    reset_checkpoint: bool = False
    on_result: tuple[Callable[[Any], None], ...] = ()
    release_start: Callable[[], None] | None = None
    # A job manager's standby driver (runtime/job/standby.py's StandbyWait): stoker.run warms
    # up, waits for the attempt the leader hands it, then runs it.
    standby: Any = None

    def savepoint(self) -> str | None:
        """The savepoint folder the launcher asked the job to start from (``--from-savepoint``,
        or ``STOKER_FROM_SAVEPOINT`` in the environment); None for none. A job already restored
        from it resumes as it is, so every attempt of a job may be given the same folder."""
        return self.from_savepoint or os.environ.get(FROM_SAVEPOINT_ENV) or None

    def rewrites_output(self) -> bool:
        """Whether the launcher asked for the output that the savepoint's job wrote after the
        savepoint to be written again (``--rewrite-output-after-savepoint``, or
        ``STOKER_REWRITE_OUTPUT_AFTER_SAVEPOINT=1``) instead of refusing the restore."""
        return self.rewrite_output_after_savepoint or os.environ.get(REWRITE_OUTPUT_ENV) == "1"

    def forks(self, job: Any = None) -> bool:
        """Whether the launcher asked for a fork from the savepoint (``--fork``; a job manager's
        driver: its job's spec, ``"fork": true`` when submitted)."""
        return self.fork or bool(_spec_of(job).get(FORK_KEY))

    def ignores_unreachable(self, job: Any = None) -> bool:
        """Whether a store the lineage check cannot open is skipped with a warning
        (``--ignore-unreachable-stores``; a job manager's driver: its job's spec)."""
        return self.ignore_unreachable_stores or bool(_spec_of(job).get(IGNORE_KEY))

    def report(self, result: Any) -> None:
        for fn in self.on_result:
            fn(result)


# A job manager's driver (or any launcher in another process) passes the savepoint folder in
# the environment (stoker.driverargs); the CLI and in-process launchers set ``from_savepoint``.
FROM_SAVEPOINT_ENV = driverargs.FROM_SAVEPOINT_ENV
REWRITE_OUTPUT_ENV = driverargs.REWRITE_OUTPUT_ENV


# A job manager's job submitted with these keeps them in its spec (stoker.manager.submit); its
# drivers read them there (every attempt, a standby's too).
FORK_KEY = "fork"
IGNORE_KEY = "ignore_unreachable_stores"


def _spec_of(job: Any) -> Mapping[str, Any]:
    spec = getattr(job, "spec", None)
    return spec if isinstance(spec, Mapping) else {}


class Collected(BaseException):  # not an error: a way out of the user's main
    """Raised by ``stoker.run`` in collect mode, carrying the pipeline it was given.

    A BaseException, so that an application's ``except Exception`` does not swallow it.
    """

    def __init__(self, pipeline: Any) -> None:
        super().__init__("stoker.run in collect mode")
        self.pipeline = pipeline


class StandbyNotWanted(BaseException):  # not an error: a way out of the user's main
    """Raised by a standby driver's ``stoker.run`` when its row in the store is gone or is
    another process's (the job ended, the standby was replaced or froze past its lease): the
    process exits without touching anything. A BaseException, so that an application's
    ``except Exception`` does not swallow it."""


class AppEnding(BaseException):  # not an error: a way out of the program's main
    """Raised by ``stoker.submit`` and ``JobHandle.wait`` in an application whose driver is
    ending (canceled, stopped by a signal, fenced off by a newer attempt): no job may start,
    and the program's ``main`` is not to go on. A BaseException, so that an application's
    ``except Exception`` does not swallow it.
    """


# The one place a launcher leaves its context for the file it runs: set by the launcher
# (install), read by stoker.run and stoker.submit as they start (installed), nowhere else.
_installed = LaunchContext()


def install(ctx: LaunchContext) -> LaunchContext:
    """Give ``ctx`` to the ``stoker.run`` calls from now on; the context it replaces."""
    global _installed
    previous, _installed = _installed, ctx
    return previous


@contextlib.contextmanager
def launched(ctx: LaunchContext) -> Iterator[LaunchContext]:
    """``ctx`` installed for the block, the previous one put back after it."""
    previous = install(ctx)
    try:
        yield ctx
    finally:
        install(previous)


def installed() -> LaunchContext:
    """The launcher's context (read by ``stoker.run`` and ``stoker.submit`` as they start)."""
    return _installed
