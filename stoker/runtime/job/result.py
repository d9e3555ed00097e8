"""How a job's run ended, as ``stoker.run`` returns it."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stoker import driverargs
from stoker.redact import redact_url
from stoker.types import JobId, JobState

# Set by a job manager for the drivers it starts: the URL its API answers on.
MANAGER_URL_ENV = driverargs.MANAGER_URL_ENV


@dataclass(frozen=True)
class JobResult:
    """How a run ended."""

    job_id: JobId
    state: JobState
    attempt: int
    epochs: int  # epochs committed by this attempt
    rows: int  # rows written by this attempt
    last_epoch: int | None
    state_dir: Path
    store_url: str
    outputs: tuple[str, ...] = ()  # each sink, described (no credentials)
    # A second signal stopped it without waiting for the epoch in flight (it runs again).
    stopped_at_once: bool = False
    # The job manager that started this driver (None: run in this process, no manager).
    manager_url: str | None = field(default_factory=lambda: os.environ.get(MANAGER_URL_ENV))

    def command(self, verb: str) -> str:
        """The CLI command that reads this job where it ran (``verb``: status, epochs, ...):
        ``--server`` under a job manager, else ``--state-dir`` when the store is the state
        folder's own, else ``--store`` (its password never shown). A hint
        names what is true where the job runs."""
        if self.manager_url:
            where = f"--server {shlex.quote(self.manager_url)}"
        else:
            store = redact_url(str(self.store_url))
            if store.removeprefix("sqlite:///") == str(self.state_dir / "store.db"):
                where = f"--state-dir {shlex.quote(str(self.state_dir))}"
            elif store != str(self.store_url):
                where = "--store ..."  # a password: not printed
            else:
                where = f"--store {shlex.quote(store)}"
        return f"{program()} {verb} {self.job_id} {where}"


def program() -> str:
    """How to call stoker's CLI where this runs: ``stoker`` when that is on ``PATH``, else the
    script of this interpreter's environment, as typed when it is the one running
    (``.venv/bin/stoker`` from a venv that is not activated, as the README's first command
    runs it): a hint that names a command the shell cannot find helps nobody."""
    if shutil.which("stoker"):
        return "stoker"
    running = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    for script in (running, Path(sys.executable).parent / "stoker"):
        if script is not None and script.name == "stoker" and script.is_file():
            return shlex.quote(str(script))
    return "stoker"


def describe(result: JobResult) -> dict[str, Any]:
    return {
        "job_id": result.job_id,
        "state": str(result.state),
        "attempt": result.attempt,
        "epochs": result.epochs,
        "rows": result.rows,
        "last_epoch": result.last_epoch,
    }
