"""What a job manager hands the processes it starts: one typed object, written by the manager and
read by the process, so the two sides cannot drift apart.

A driver (``stoker.runtime.driver``), an application's driver (``stoker.runtime.appdriver``)
and an ended job's cleanup (``stoker.runtime.cleanup``) are started with a command line and an
environment. The command line is readable by every user of the host (``/proc/<pid>/cmdline``),
so it carries the store URL and secret ``-D`` values only as redacted labels; the real ones travel
in the environment (:data:`STORE_URL_ENV`, :data:`SECRETS_ENV`), which the process reads and
removes before any user code runs. :class:`DriverArgs` writes both (:meth:`~DriverArgs.to_argv`,
:meth:`~DriverArgs.to_env`) and reads them back (:meth:`~DriverArgs.from_argv`).

A leaf without Spark: the manager (which never imports the runtime) and the runtime share it.
The command line's shape is kept from one version to the next: a driver of the previous version
is started by a manager of that version, but a store's records name it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from stoker.errors import InvalidInput
from stoker.redact import MASK, is_secret_entry, redact_url
from stoker.settings import parse_pairs

__all__ = [
    "FROM_SAVEPOINT_ENV",
    "MANAGER_URL_ENV",
    "REWRITE_OUTPUT_ENV",
    "SECRETS_ENV",
    "STORE_URL_ENV",
    "DriverArgs",
    "DriverRole",
]

# Where a started process finds the store URL and the secret conf values (a JSON object).
STORE_URL_ENV = "STOKER_STORE_URL"
SECRETS_ENV = "STOKER_DRIVER_SECRETS"
# A job submitted from a savepoint: its folder on every attempt, and whether to rewrite the
# output after it (read by stoker.runtime.launch when the app's job starts).
FROM_SAVEPOINT_ENV = "STOKER_FROM_SAVEPOINT"
REWRITE_OUTPUT_ENV = "STOKER_REWRITE_OUTPUT_AFTER_SAVEPOINT"
# The manager's address, for the hints a driver prints (stoker.runtime.job.result).
MANAGER_URL_ENV = "STOKER_MANAGER_URL"


class DriverRole(Enum):
    """The kind of process, as the module it runs and the flag that names what it runs."""

    JOB = ("stoker.runtime.driver", "--job")
    APP = ("stoker.runtime.appdriver", "--app")
    CLEANUP = ("stoker.runtime.cleanup", "--job")

    @property
    def module(self) -> str:
        return self.value[0]

    @property
    def flag(self) -> str:
        return self.value[1]


@dataclass(frozen=True, kw_only=True)
class DriverArgs:
    """One process a job manager starts: who it runs and how.

    ``attempt`` None is a warm standby (handed its attempt later; a cleanup has none);
    ``store`` and ``conf`` hold the real values (the command line shows them redacted);
    ``upgrade`` names the upgrade whose new code a standby runs.
    """

    role: DriverRole
    name: str
    store: str
    state_dir: Path
    attempt: int | None = None
    lease_ttl: float | None = None
    entrypoint: Path | None = None
    args: tuple[str, ...] = ()
    conf: Mapping[str, str] = field(default_factory=dict)
    upgrade: str | None = None
    from_savepoint: str | None = None
    rewrite_output: bool = False
    manager_url: str | None = None

    # the manager's side ------------------------------------------------------------------------
    def to_argv(self, python: str = sys.executable) -> list[str]:
        """The command line: a list, never a shell string (no user input is parsed); the store
        and secret ``-D`` values as redacted labels."""
        argv = [python, "-m", self.role.module, self.role.flag, self.name]
        if self.role is not DriverRole.CLEANUP:
            argv += ["--standby"] if self.attempt is None else ["--attempt", str(self.attempt)]
        argv += ["--store", redact_url(self.store), "--state-dir", str(self.state_dir)]
        if self.role is DriverRole.CLEANUP:
            return argv
        if self.lease_ttl is not None:
            argv += ["--lease-ttl", repr(float(self.lease_ttl))]
        if self.upgrade is not None:
            argv += ["--upgrade", self.upgrade]
        secrets = self._secrets()
        for k, v in sorted(self.conf.items()):
            argv += ["-D", f"{k}={MASK if k in secrets else v}"]
        if self.entrypoint is None:
            raise InvalidInput("entrypoint", f"a {self.role.name.lower()} driver needs one")
        return [*argv, "--", str(self.entrypoint), *self.args]

    def to_env(self) -> dict[str, str]:
        """What the command line must not carry: the store URL, the secret conf values, and
        the savepoint and manager the process is told of."""
        env = {STORE_URL_ENV: self.store}
        secrets = self._secrets()
        if secrets and self.role is not DriverRole.CLEANUP:
            env[SECRETS_ENV] = json.dumps(secrets)
        if self.from_savepoint:
            env[FROM_SAVEPOINT_ENV] = self.from_savepoint
            if self.rewrite_output:
                env[REWRITE_OUTPUT_ENV] = "1"
        if self.manager_url:
            env[MANAGER_URL_ENV] = self.manager_url
        return env

    def _secrets(self) -> dict[str, str]:
        # A secret key, or a URL password or password=... under any key: not in ``ps``.
        return {k: v for k, v in self.conf.items() if is_secret_entry(k, v)}

    # the process's side ------------------------------------------------------------------------
    @classmethod
    def from_argv(
        cls,
        role: DriverRole,
        argv: Sequence[str] | None = None,
        environ: MutableMapping[str, str] | None = None,
    ) -> DriverArgs:
        """Read back what :meth:`to_argv` and :meth:`to_env` wrote. The store URL and the
        secrets are taken out of ``environ`` (this process's environment by default), so no
        code the process runs later finds them there."""
        env = os.environ if environ is None else environ
        ns = _parser(role).parse_args(None if argv is None else list(argv))
        conf = parse_pairs(ns.defines)
        secrets = env.pop(SECRETS_ENV, None)
        if role is not DriverRole.CLEANUP:
            conf.update(_secrets(secrets))
        rest = list(ns.args)
        if rest[:1] == ["--"]:
            rest = rest[1:]
        entrypoint: str | None = getattr(ns, "entrypoint", None)
        return cls(
            role=role,
            name=getattr(ns, "app", None) or ns.job,
            store=env.pop(STORE_URL_ENV, "") or ns.store,
            state_dir=Path(ns.state_dir),
            attempt=getattr(ns, "attempt", None),
            lease_ttl=getattr(ns, "lease_ttl", None),
            entrypoint=None if entrypoint is None else Path(entrypoint),
            args=tuple(rest),
            conf=conf,
            upgrade=getattr(ns, "upgrade", None),
            from_savepoint=env.get(FROM_SAVEPOINT_ENV) or None,
            rewrite_output=env.get(REWRITE_OUTPUT_ENV) == "1",
            manager_url=env.get(MANAGER_URL_ENV) or None,
        )

    @property
    def standby(self) -> bool:
        return self.attempt is None and self.role is not DriverRole.CLEANUP


def _secrets(raw: str | None) -> dict[str, str]:
    if not raw:
        return {}
    try:
        secrets = json.loads(raw)
    except ValueError as e:
        raise InvalidInput(SECRETS_ENV, "must be a JSON object") from e
    if not isinstance(secrets, dict) or not all(isinstance(v, str) for v in secrets.values()):
        raise InvalidInput(SECRETS_ENV, "must be a JSON object of strings")
    return {str(k): v for k, v in secrets.items()}


def _parser(role: DriverRole) -> argparse.ArgumentParser:
    prog = {
        DriverRole.JOB: "stoker-driver",
        DriverRole.APP: "stoker-appdriver",
        DriverRole.CLEANUP: "stoker-cleanup",
    }
    parser = argparse.ArgumentParser(prog=prog[role])
    parser.add_argument(role.flag, dest="app" if role is DriverRole.APP else "job", required=True)
    parser.add_argument("--store", required=True)
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("-D", dest="defines", action="append", default=[])
    if role is DriverRole.CLEANUP:
        # Accepted from older managers, unused: no application file is loaded.
        parser.add_argument("args", nargs=argparse.REMAINDER)
        return parser
    who = parser.add_mutually_exclusive_group(required=True)
    who.add_argument("--attempt", type=int)
    who.add_argument("--standby", action="store_true")  # warm, until handed an attempt
    parser.add_argument("--lease-ttl", type=float, default=None)
    if role is DriverRole.JOB:
        parser.add_argument("--upgrade", default=None)  # a standby of this upgrade's new code
    parser.add_argument("entrypoint")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    return parser
