"""A job's maximum parallelism: its number of state partitions, fixed when it is created and
changed only offline, on a stopped job (``stoker state repartition JOB N``).

Spark-free: the rewrite of the state runs in a child process (``python -m
stoker.runtime.repartition``, on local Spark); this module checks the request against the
store, names the epochs Spark may skip, runs the child and records the new value in the
job's spec.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from stoker import checkpoint_layout
from stoker.checkpoint_layout import SHUFFLE_PARTITIONS
from stoker.durations import parse_partitions
from stoker.errors import InvalidInput, JobFailed, StokerError
from stoker.procs import owner_is_dead, this_owner
from stoker.store import Owner, Store
from stoker.types import AttemptState, Epoch, EpochState, JobId, JobKind, JobState
from stoker.types import job_id as _job_id

DEFAULT_MAX_PARALLELISM = 8  # stoker's drivers' default (stoker.runtime.session.DEFAULT_CONF)

# A repartition reads and writes every key of the state once; a large state takes a while.
DEFAULT_TIMEOUT_S = 3600.0

# The repartition lock, in the job's state folder (stoker.runtime.repartition.LOCK_NAME).
LOCK_NAME = "repartition.lock"

# A job in these states is about to run, or still stopping: its checkpoint is not at rest.
_MOVING = frozenset({JobState.CREATED, JobState.RESTARTING, JobState.CANCELING})


def max_parallelism_of(conf: Mapping[str, str], field: str = "conf") -> int:
    """The maximum parallelism a job records when it is created from these ``-D`` settings:
    ``spark.sql.shuffle.partitions``, else 8. :class:`InvalidInput` naming
    ``<field>.spark.sql.shuffle.partitions`` when it is not a whole number of at least 1."""
    given = conf.get(SHUFFLE_PARTITIONS)
    if given is None:
        return DEFAULT_MAX_PARALLELISM
    return parse_partitions(given, f"{field}.{SHUFFLE_PARTITIONS}")


def keep_max_parallelism(new_spec: dict[str, Any], old_spec: Mapping[str, Any]) -> dict[str, Any]:
    """``new_spec`` (a resubmission's) with the maximum parallelism the job has already: it
    was fixed when the job was created (or by a repartition), not by the new ``-D``."""
    if "max_parallelism" in old_spec:
        return {**new_spec, "max_parallelism": old_spec["max_parallelism"]}
    return new_spec


def repartition(
    store: Store,
    job: str,
    partitions: int | str,
    *,
    python: str | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    clock: Callable[[], float] = time.time,
) -> dict[str, Any]:
    """Change the state partitions of the stopped job ``job`` to ``partitions``.

    Refused with :class:`InvalidInput` (nothing changed) when ``partitions`` is not a whole
    number >= 1 or is the job's number already, when the job is live (an attempt running, a
    start or stop under way, its application running), when it has no checkpoint or no state,
    when its state store provider or operators are ones Spark cannot repartition, or when an
    epoch stoker decided is not in Spark's commit log. :class:`JobNotFound` for an unknown id.

    Returns ``{"job_id", "from", "to", "max_parallelism", "batch", "skipped", "seconds"}``:
    ``batch`` is the checkpoint's new (repartition) epoch, ``skipped`` the planned epochs
    Spark marked skipped (undecided: their input is read again after the restart).
    """
    jid, n, state_dir = check_repartition(store, job, partitions, clock)
    with _locked(state_dir, jid, n):
        # Under the lock, the store again: a driver that started before the lock was taken
        # is seen here; one that starts after it finds the lock and stops (it checks after
        # claiming its attempt).
        _refuse_if_live(store, jid, clock())
        return _repartition(store, jid, state_dir, n, python, timeout)


def check_repartition(
    store: Store, job: str, partitions: int | str, clock: Callable[[], float] = time.time
) -> tuple[JobId, int, Path]:
    """What :func:`repartition` refuses at once, before its lock and Spark: the job's id, the
    partitions and its state folder, or the refusal (:class:`InvalidInput`,
    :class:`JobNotFound`). The checks of the checkpoint itself come after, under the lock."""
    n = parse_partitions(partitions)
    jid = _job_id(job)
    rec = store.get_job(jid)  # JobNotFound
    if rec.kind == JobKind.APPLICATION:
        raise InvalidInput(
            "job", f"{jid!r} is an application: repartition the state of one of its jobs"
        )
    _refuse_if_live(store, rec.job_id, clock())
    state_dir = rec.spec.get("state_dir")
    if not state_dir:
        raise InvalidInput("job", f"job {jid!r} records no state folder: it has never run")
    checkpoint = Path(str(state_dir)) / "checkpoint"
    if checkpoint_layout.has_offset_log(checkpoint) and not checkpoint_layout.has_state(checkpoint):
        raise InvalidInput(
            "job",
            f"job {jid!r}: its query keeps no state (no stateful operator in its checkpoint): "
            "Spark's repartitioning rewrites state only, there is nothing to repartition",
        )
    if rec.spec.get("max_parallelism") == n:
        raise InvalidInput("partitions", f"job {jid!r} has {n} state partitions already")
    return rec.job_id, n, Path(str(state_dir))


def _repartition(
    store: Store, jid: JobId, state_dir: Path, n: int, python: str | None, timeout: float
) -> dict[str, Any]:
    rec = store.get_job(jid)
    checkpoint = state_dir / "checkpoint"
    if not checkpoint_layout.has_offset_log(checkpoint):
        raise InvalidInput(
            "job",
            f"job {jid!r} has no checkpoint yet ({checkpoint}): there is no state to "
            "repartition. A new job takes its state partitions from "
            "-D spark.sql.shuffle.partitions",
        )
    skip = _skippable(store, rec.job_id, checkpoint)
    answer = _run_child(checkpoint, n, skip, python or sys.executable, timeout)
    if answer.get("refused"):
        raise InvalidInput(str(answer.get("field", "job")), str(answer.get("message")))
    if not answer.get("ok"):
        pending = answer.get("unfinished")
        hint = (
            f" The checkpoint now ends with an unfinished repartition to {pending}: the job "
            f"cannot start until `stoker state repartition {jid} {pending}` succeeds."
            if pending
            else " The checkpoint is as it was."
        )
        raise JobFailed(
            f"job {jid!r}: Spark's repartition to {n} failed: {answer.get('error')}.{hint}"
        )
    # Spark's checkpoint pins the new number from its repartition epoch on; the spec shows it
    # (a crash before this line leaves the spec behind: each attempt reads the checkpoint's).
    current = store.get_job(rec.job_id)
    store.set_job_spec(rec.job_id, {**current.spec, "max_parallelism": n})
    return {
        "job_id": rec.job_id,
        "from": answer.get("from"),
        "to": n,
        "max_parallelism": n,
        "batch": answer.get("batch"),
        "skipped": answer.get("skipped", []),
        "seconds": answer.get("seconds"),
    }


@contextlib.contextmanager
def _locked(state_dir: Path, jid: JobId, n: int) -> Iterator[None]:
    """Hold the job's repartition lock (``<state folder>/repartition.lock``: the holder's
    host, pid and pid start marker, as JSON) while the checkpoint is rewritten. Drivers check
    it after claiming an attempt (:func:`stoker.runtime.repartition.repartitioning`) and do not
    start the query while a live process holds it; a lock whose process is gone is taken over.
    """
    path = state_dir / LOCK_NAME
    me = this_owner()
    body = {"host": me.host, "pid": me.pid, "pid_started": me.pid_started, "partitions": n}
    for _ in range(3):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder = _lock_holder(path)
            if holder is None or owner_is_dead(holder):
                path.unlink(missing_ok=True)  # left by a process that is gone
                continue
            raise InvalidInput(
                "job",
                f"the state of job {jid!r} is being repartitioned already (pid {holder.pid} on "
                f"{holder.host})",
            ) from None
        except FileNotFoundError:
            raise InvalidInput(
                "job", f"job {jid!r}: its state folder {state_dir} does not exist"
            ) from None
        with os.fdopen(fd, "w") as fh:
            json.dump(body, fh)
        break
    else:
        raise StokerError(f"job {jid!r}: could not take the repartition lock {path}")
    try:
        yield
    finally:
        path.unlink(missing_ok=True)


# A lock that cannot be read is being written this instant; one older than this was left
# half-written by a process that died: nobody holds it.
_UNREADABLE_LOCK_S = 60.0


def repartition_holder(state_dir: Path) -> Owner | None:
    """The live process repartitioning the state of the job in ``state_dir`` now, or None (no
    lock, or the process that left it is gone). A lock being written (unreadable, younger than
    a minute) has a holder not known yet: the pid 0 owner."""
    path = state_dir / LOCK_NAME
    holder = _lock_holder(path)
    if holder is not None:
        return None if owner_is_dead(holder) else holder
    try:
        age = time.time() - path.stat().st_mtime
    except OSError:
        return None  # no lock
    return Owner("unknown", 0, "unknown") if age < _UNREADABLE_LOCK_S else None


def _lock_holder(path: Path) -> Owner | None:
    try:
        d = json.loads(path.read_text())
        return Owner(str(d["host"]), int(d["pid"]), str(d["pid_started"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _refuse_if_live(store: Store, jid: JobId, now: float) -> None:
    """:class:`InvalidInput` when something runs, or is about to run, the job's query."""
    rec = store.get_job(jid)
    stop_hint = (
        f"stop it first (stoker cancel {jid}, or SIGTERM / Ctrl-C to its driver: it ends "
        "SUSPENDED and resumes from its checkpoint when run again)"
    )
    if rec.app_id is not None:
        app = store.get_job(rec.app_id)
        if not app.state.terminal and app.state != JobState.SUSPENDED:
            raise InvalidInput(
                "job",
                f"job {jid!r} belongs to application {app.job_id!r}, which is "
                f"{app.state}: stop the application first",
            )
    if rec.state in _MOVING:
        raise InvalidInput(
            "job", f"job {jid!r} is {rec.state}: wait until it has stopped, or {stop_hint}"
        )
    att = store.get_attempt(rec.job_id, rec.current_attempt) if rec.current_attempt else None
    if att is not None and att.state in (AttemptState.STARTING, AttemptState.RUNNING):
        gone = owner_is_dead(att.owner) or att.lease_expires_at < now
        if not gone:
            raise InvalidInput(
                "job",
                f"job {jid!r} is live: attempt {att.attempt} runs (pid {att.owner.pid} on "
                f"{att.owner.host}); {stop_hint}",
            )
        leader = store.get_leader()
        if leader is not None and not leader.resigned and rec.state == JobState.RUNNING:
            # Its driver died; the leading job manager restarts it soon.
            raise InvalidInput(
                "job",
                f"job {jid!r} lost its driver and the job manager ({leader.address}) will "
                f"restart it: cancel it first (stoker cancel {jid})",
            )


def _skippable(store: Store, jid: JobId, checkpoint: Path) -> list[int]:
    """The epochs Spark planned and did not commit, each checked against the store: Spark may
    skip one only when stoker did not decide it (nothing of it stays in any sink)."""
    planned = checkpoint_layout.uncommitted(checkpoint)
    decided = []
    for b in planned:
        ep = store.get_epoch(jid, Epoch(b))
        if ep is not None and ep.state != EpochState.PINNED:
            decided.append(b)
    if decided:
        which = ", ".join(str(b) for b in decided)
        raise InvalidInput(
            "job",
            f"epoch {which} of job {jid!r} was decided (its output is committed) but Spark "
            "has not logged it as committed: skipping it would read its input again. Run the "
            "job once more and stop it gracefully (SIGTERM, Ctrl-C or stoker cancel) so that "
            "Spark logs it, then repartition",
        )
    return planned


def _run_child(
    checkpoint: Path, n: int, skip: list[int], python: str, timeout: float
) -> dict[str, Any]:
    cmd = [python, "-m", "stoker.runtime.repartition", str(checkpoint), str(n)]
    if skip:
        cmd += ["--skip", ",".join(str(b) for b in skip)]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its Spark JVM in its group: a timeout ends both
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise StokerError(
            f"the repartition of {checkpoint} to {n} took more than {timeout:.0f} s and was "
            "stopped; run it again (Spark resumes an unfinished repartition to the same number)"
        ) from None
    for line in reversed(out.splitlines()):
        if line.startswith("{"):
            try:
                return dict(json.loads(line))
            except ValueError:
                break
    tail = " | ".join(err.strip().splitlines()[-3:])
    return {"ok": False, "error": f"the repartition process ended with {proc.returncode}: {tail}"}


__all__ = [
    "DEFAULT_MAX_PARALLELISM",
    "keep_max_parallelism",
    "max_parallelism_of",
    "parse_partitions",
    "repartition",
]
