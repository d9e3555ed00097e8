"""Driver processes: started in their own process group, with a log file per attempt.

Secrets stay off command lines (``/proc/<pid>/cmdline`` is readable by every user of the
host): the store URL and secret-looking conf values reach the driver through its environment
(:data:`STORE_URL_ENV`, :data:`SECRETS_ENV`); its argv carries them redacted, as labels. No
child inherits the manager's API tokens.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from stoker.procs import owner_is_dead
from stoker.redact import MASK, is_secret_entry, redact_url
from stoker.store import Owner

# Where a driver finds the store URL and the secret conf values (a JSON object).
STORE_URL_ENV = "STOKER_STORE_URL"
SECRETS_ENV = "STOKER_DRIVER_SECRETS"
# The manager's own credentials: never handed to a process it starts.
_SCRUBBED = ("STOKER_TOKEN", "STOKER_READ_TOKEN", STORE_URL_ENV, SECRETS_ENV)


class DriverArgv(list[str]):
    """A driver's argv, and the environment entries that carry what its argv must not."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        super().__init__(argv)
        self.env = env


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a process the manager starts: its own, minus its tokens."""
    env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED}
    env.update(extra or {})
    return env


# stoker.runtime.launch.FROM_SAVEPOINT_ENV (the manager does not import the runtime)
FROM_SAVEPOINT_ENV = "STOKER_FROM_SAVEPOINT"
REWRITE_OUTPUT_ENV = "STOKER_REWRITE_OUTPUT_AFTER_SAVEPOINT"  # launch.REWRITE_OUTPUT_ENV
MANAGER_URL_ENV = "STOKER_MANAGER_URL"  # stoker.runtime.job.result.MANAGER_URL_ENV


def driver_argv(
    job: str,
    attempt: int | None,
    store: str,
    state_dir: Path,
    entrypoint: Path,
    args: list[str],
    conf: dict[str, str],
    lease_ttl: float,
    from_savepoint: str | None = None,
    rewrite_output: bool = False,
    upgrade: str | None = None,
) -> DriverArgv:
    """argv of a driver for one attempt. A list, never a shell string: no user input is parsed.

    ``--store`` and secret ``-D`` values appear redacted; the real ones travel in ``.env``.
    A job submitted with a savepoint gets its folder in ``STOKER_FROM_SAVEPOINT`` on every
    attempt (a job restored already resumes as it is), and ``STOKER_REWRITE_OUTPUT_AFTER_SAVEPOINT``
    when it was submitted with ``rewrite_output_after_savepoint``. ``attempt`` None: the
    job's warm standby (``--standby``), which is handed its attempt later; with ``upgrade``,
    the standby of that upgrade's new code (``--upgrade ID``: it checks the new code first).
    """
    argv = _driver_head("stoker.runtime.driver", "--job", job, attempt, store, state_dir, lease_ttl)
    if upgrade is not None:
        argv += ["--upgrade", upgrade]
    out = _app_argv(argv, store, entrypoint, args, conf)
    if from_savepoint:
        out.env[FROM_SAVEPOINT_ENV] = from_savepoint
        if rewrite_output:
            out.env[REWRITE_OUTPUT_ENV] = "1"
    return out


def appdriver_argv(
    app: str,
    attempt: int | None,
    store: str,
    state_dir: Path,
    entrypoint: Path,
    args: list[str],
    conf: dict[str, str],
    lease_ttl: float,
) -> DriverArgv:
    """argv of an application's driver for one attempt (``stoker.runtime.appdriver``): the
    same shape and the same secrecy as :func:`driver_argv`, with ``--app``. ``state_dir`` is
    the application's folder (its jobs' folders are ``state_dir/jobs/<job id>``); ``conf``
    carries ``spark.master`` when the application runs on a cluster. ``attempt`` None: the
    application's warm standby (``--standby``), handed its attempt later."""
    argv = _driver_head(
        "stoker.runtime.appdriver", "--app", app, attempt, store, state_dir, lease_ttl
    )
    return _app_argv(argv, store, entrypoint, args, conf)


def _driver_head(
    module: str,
    flag: str,
    name: str,
    attempt: int | None,
    store: str,
    state_dir: Path,
    lease_ttl: float,
) -> list[str]:
    """The argv every driver kind shares: module, who it runs, the attempt, the store (as a
    redacted label), its folder and its lease."""
    return [
        sys.executable,
        "-m",
        module,
        flag,
        name,
        *(["--standby"] if attempt is None else ["--attempt", str(attempt)]),
        "--store",
        redact_url(store),
        "--state-dir",
        str(state_dir),
        "--lease-ttl",
        repr(float(lease_ttl)),
    ]


def cleanup_argv(job: str, store: str, state_dir: Path) -> DriverArgv:
    """argv of the cleanup process of an ended job (``stoker.runtime.cleanup``): it rebuilds
    the job's sinks from the descriptors in the store and resolves them; no application file
    is loaded. The real store URL travels in the environment, as for a driver."""
    argv = [
        sys.executable,
        "-m",
        "stoker.runtime.cleanup",
        "--job",
        job,
        "--store",
        redact_url(store),
        "--state-dir",
        str(state_dir),
    ]
    return DriverArgv(argv, {STORE_URL_ENV: store})


def _app_argv(
    argv: list[str], store: str, entrypoint: Path, args: list[str], conf: dict[str, str]
) -> DriverArgv:
    """``argv`` + the ``-D`` pairs (secrets masked) + ``-- app args``; the real store URL and
    secrets in ``.env``."""
    # A secret key, or a URL password or password=... under any key: not in ``ps``.
    secrets = {k: v for k, v in conf.items() if is_secret_entry(k, v)}
    for k, v in sorted(conf.items()):
        argv += ["-D", f"{k}={MASK if k in secrets else v}"]
    env = {STORE_URL_ENV: store}
    if secrets:
        env[SECRETS_ENV] = json.dumps(secrets)
    return DriverArgv([*argv, "--", str(entrypoint), *args], env)


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
