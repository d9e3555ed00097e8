"""The job manager's facade: the only code the REST API calls, and the only code of the
manager that talks to the store."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from stoker.errors import InvalidInput, JobConflict, JobNotFound, JobTerminal
from stoker.manager.batch import CreateBatcher
from stoker.manager.processes import child_env
from stoker.manager.submit import ASSIGNED_STATE_DIR, spec_difference, validate_submission
from stoker.store import AttemptRecord, EpochRecord, JobRecord, Store
from stoker.types import AttemptNo, JobId, JobState, job_id


@dataclass(frozen=True)
class SubmitResult:
    """A submission's outcome: the job, and whether it was created, already live, or restarted."""

    job: JobRecord
    outcome: str  # "created" | "duplicate" | "restarted"


class JobManager:
    """Submissions, queries and cancels over one store."""

    def __init__(self, store: Store, state_dir: Path, allowed_dirs: list[Path]) -> None:
        self.store = store
        self.allowed_dirs = [d.resolve() for d in allowed_dirs]
        self.jobs_dir = (state_dir / "jobs").resolve()
        self._batcher = CreateBatcher(store)

    def submit(
        self,
        jid: str | None,
        entrypoint: str,
        args: list[str] | None = None,
        conf: dict[str, str] | None = None,
        restart: bool = False,
        restart_strategy: dict[str, Any] | None = None,
        config: dict[str, Any] | None = None,
    ) -> SubmitResult:
        """Create the job, or return the live one; never a second live instance.

        The store's primary key decides between concurrent submissions of one id, whichever
        manager receives them.
        """
        name, spec, start = self._plan(jid, entrypoint, args, conf, restart_strategy, config)
        job, created = self.store.create_job(name, name, spec, start)
        return self._settle(name, spec, job, created, restart)

    async def submit_async(
        self,
        jid: str | None,
        entrypoint: str,
        args: list[str] | None = None,
        conf: dict[str, str] | None = None,
        restart: bool = False,
        restart_strategy: dict[str, Any] | None = None,
        config: dict[str, Any] | None = None,
    ) -> SubmitResult:
        """:meth:`submit` for an event loop: the insert joins the next group commit.

        Only the common path runs on the loop (validation is a few file-system calls); an
        omitted id (a child process reads the pipeline's name) and a restart run in a thread.
        """
        if jid is None or config:  # a child process reads the app's pipeline
            return await asyncio.to_thread(
                self.submit, jid, entrypoint, args, conf, restart, restart_strategy, config
            )
        name, spec, start = self._plan(jid, entrypoint, args, conf, restart_strategy, None)
        job, created = await asyncio.wrap_future(self._batcher.create(name, name, spec, start))
        if not created and job.state.terminal and restart:
            return await asyncio.to_thread(self._settle, name, spec, job, created, restart)
        return self._settle(name, spec, job, created, restart)

    def _plan(
        self,
        jid: str | None,
        entrypoint: str,
        args: list[str] | None,
        conf: dict[str, str] | None,
        restart_strategy: dict[str, Any] | None,
        config: dict[str, Any] | None,
    ) -> tuple[JobId, dict[str, Any], dict[str, Any]]:
        """The job's id, spec and starting config, every field checked; nothing is written.

        The starting config (version 0) is the pipeline's declared defaults with the submitted
        ``config`` on top; the manager learns the defaults only when it reads the app (an id
        omitted, or a config given), otherwise the driver declares them.
        """
        sub = validate_submission(
            entrypoint, list(args or []), dict(conf or {}), restart_strategy, self.allowed_dirs
        )
        start: dict[str, Any] = {}
        if jid is None or config:
            found, start = _inspect_app(sub.entrypoint, dict(config or {}))
            name = job_id(jid) if jid is not None else job_id(found)
            sub = replace(sub, config=dict(config or {}))
        else:
            name = job_id(jid)
        spec = sub.spec()
        # The job's folder (Spark checkpoint, sink state) is chosen once, by the manager that
        # creates the job, and kept in the store: every attempt runs in it, whichever manager
        # leads when the attempt starts. A folder per launching manager would start a job that
        # failed over from an empty checkpoint.
        spec[ASSIGNED_STATE_DIR] = str(self.jobs_dir / name)
        return name, spec, start

    def _settle(
        self, name: JobId, spec: dict[str, Any], job: JobRecord, created: bool, restart: bool
    ) -> SubmitResult:
        """What the submission amounts to, given what the store holds for its id."""
        if created:
            return SubmitResult(job, "created")
        if job.state.terminal:
            if not restart:
                raise JobTerminal(name, str(job.state))
            # From the job's last checkpoint: its folder stays the one it ran in.
            kept = job.spec.get(ASSIGNED_STATE_DIR) or spec[ASSIGNED_STATE_DIR]
            job = self.store.restart_job(name, {**spec, ASSIGNED_STATE_DIR: kept})
            if job.state == JobState.RESTARTING:
                return SubmitResult(job, "restarted")
        diff = spec_difference(job.spec, spec)
        if diff is not None:
            raise JobConflict(name, diff)
        return SubmitResult(job, "duplicate")

    def close(self) -> None:
        """Stop the group-commit thread (the store stays open: the caller owns it)."""
        self._batcher.close()

    def list_jobs(self, state: JobState | None = None) -> list[JobRecord]:
        return self.store.list_jobs(state)

    def view(self, jid: str) -> dict[str, Any]:
        """Everything about one job: state, attempt (pid, host, lease), last epoch, timings."""
        job = self.store.get_job(job_id(jid))
        out = job.to_dict()
        att = (
            self.store.get_attempt(job.job_id, job.current_attempt) if job.current_attempt else None
        )
        out["attempt"] = att.to_dict() if att else None
        last = self.store.list_epochs(job.job_id, limit=1)
        out["last_epoch"] = last[0].to_dict() if last else None
        return out

    def attempts(self, jid: str) -> list[AttemptRecord]:
        job = self.store.get_job(job_id(jid))
        return self.store.list_attempts(job.job_id)

    def epochs(self, jid: str, limit: int = 100) -> list[EpochRecord]:
        job = self.store.get_job(job_id(jid))
        return self.store.list_epochs(job.job_id, limit=limit)

    def cancel(self, jid: str) -> JobRecord:
        """Ask the job to stop after its current epoch; the leader enforces a timeout."""
        return self.store.request_cancel(job_id(jid))

    def attempt_log(self, jid: str, attempt: int, tail: int | None = None) -> str:
        """The driver log of one attempt (the last ``tail`` bytes if given)."""
        job = self.store.get_job(job_id(jid))
        att = self.store.get_attempt(job.job_id, AttemptNo(attempt))
        if att is None:
            raise JobNotFound(f"{jid} attempt {attempt}")
        if not att.log_path:
            raise InvalidInput("attempt", f"attempt {attempt} was not started by a job manager")
        path = Path(att.log_path)
        if not path.exists():
            return ""
        with open(path, "rb") as fh:
            if tail is not None:
                size = path.stat().st_size
                fh.seek(max(0, size - tail))
            return fh.read().decode("utf-8", errors="replace")


def _inspect_app(entrypoint: Path, config: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The name of the Pipeline the file runs and its starting config (declared defaults with
    ``config`` on top, checked), found in a child process: user code never runs inside the
    manager. A refusal is :class:`InvalidInput` naming the field once."""
    code = (
        "import json, sys\n"
        "from stoker.errors import InvalidInput\n"
        "from stoker.runtime.appfile import check_app_path, inspect_app\n"
        "try:\n"
        "    name, config = inspect_app(check_app_path(sys.argv[1]), json.loads(sys.argv[2]))\n"
        "except InvalidInput as e:\n"
        "    print(json.dumps({'field': e.field, 'message': e.message}))\n"
        "    sys.exit(2)\n"
        "print(json.dumps({'name': name, 'config': config}))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(entrypoint), json.dumps(config)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(entrypoint.parent),
        env=child_env(),  # user code: not the manager's tokens
    )
    answer: dict[str, Any] = {}
    lines = proc.stdout.strip().splitlines()
    if lines:
        try:
            answer = json.loads(lines[-1])
        except ValueError:
            answer = {}
    if proc.returncode == 2 and "field" in answer:
        field = str(answer["field"])
        if not field.startswith("config"):
            field = "job_id" if field == "job_id" else "entrypoint"
        raise InvalidInput(field, str(answer["message"]))
    if proc.returncode != 0 or "name" not in answer:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise InvalidInput("entrypoint", f"reading the app's pipeline failed: {last}")
    return str(answer["name"]), dict(answer["config"])
