"""Driver processes: started in their own process group, with a log file per attempt.

Secrets stay off command lines (``/proc/<pid>/cmdline`` is readable by every user of the
host): the store URL and secret-looking conf values reach the driver through its environment
(:data:`STORE_URL_ENV`, :data:`SECRETS_ENV`); its argv carries them redacted, as labels. No
child inherits the manager's API tokens.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path

from stoker import driverargs
from stoker.driverargs import DriverArgs, DriverRole
from stoker.procs import owner_is_dead
from stoker.store import Owner

# The environment entries a started process reads (stoker.driverargs, shared with the runtime).
STORE_URL_ENV = driverargs.STORE_URL_ENV
SECRETS_ENV = driverargs.SECRETS_ENV
FROM_SAVEPOINT_ENV = driverargs.FROM_SAVEPOINT_ENV
REWRITE_OUTPUT_ENV = driverargs.REWRITE_OUTPUT_ENV
MANAGER_URL_ENV = driverargs.MANAGER_URL_ENV
# The manager's own credentials: never handed to a process it starts.
_SCRUBBED = ("STOKER_TOKEN", "STOKER_READ_TOKEN", STORE_URL_ENV, SECRETS_ENV)


class DriverArgv(list[str]):
    """A driver's argv, and the environment entries that carry what its argv must not."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        super().__init__(argv)
        self.env = env

    @classmethod
    def of(cls, args: DriverArgs) -> DriverArgv:
        return cls(args.to_argv(), args.to_env())


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a process the manager starts: its own, minus its tokens."""
    env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED}
    env.update(extra or {})
    return env


def cleanup_argv(job: str, store: str, state_dir: Path) -> DriverArgv:
    """argv of the cleanup process of an ended job (``stoker.runtime.cleanup``): it rebuilds
    the job's sinks from the descriptors in the store and resolves them; no application file
    is loaded. The real store URL travels in the environment, as for a driver."""
    return DriverArgv.of(
        DriverArgs(role=DriverRole.CLEANUP, name=job, store=store, state_dir=state_dir)
    )


def spawn(argv: list[str], log_path: Path, cwd: Path) -> subprocess.Popen[bytes]:
    """Start a driver as the leader of a new process group (its JVM and workers join it).

    Its environment is the manager's without the API tokens, plus ``argv.env`` when ``argv``
    is a :class:`DriverArgv`.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=str(cwd),
            start_new_session=True,
            env=child_env({**getattr(argv, "env", {}), "PYTHONUNBUFFERED": "1"}),
        )


def kill_group(pgid: int, sig: int = signal.SIGKILL) -> None:
    """Signal a whole driver process group; no error if it is gone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def is_dead(owner: Owner) -> bool:
    """The attempt's process is provably gone (same host only)."""
    return owner_is_dead(owner)
