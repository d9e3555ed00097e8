"""Zero-downtime upgrades: a running job moves to new code at an epoch boundary,
with no cold start, and back to its old code if the new one fails while it is watched.

An upgrade (``upgrades``, PENDING -> SWAPPED -> CONFIRMED | ROLLED_BACK, or REFUSED):

1. **Asked** (``POST /v1/jobs/{id}/upgrade``, ``stoker upgrade``): checked at once where no
   Spark is needed (:func:`plan_upgrade`): the job is a running lone job on a local master
   (or a standalone one with ``spark.cores.max``: the new code's standby has executors of its
   own), the new file is allowed and is not the file the job runs now (that file is what a rollback
   runs), its config is valid, and its sources are the running job's (read in a child process,
   as a submission's are): 422 naming the difference, nothing recorded. Recorded PENDING.
2. **Warmed and checked**: the leader starts the new code as a standby of role ``upgrade``
   (``manager/standbys.py``), and keeps the old code warm too (the job's own standby, started
   for the upgrade if the job has none). The new code's standby checks the state schema of
   every stateful operator against the checkpoint's (``runtime/job/upgrade_check.py``); a
   difference ends the upgrade REFUSED with it, the old code running on.
3. **Swapped**: with both standbys READY, the leader asks the running driver to stop
   (SIGTERM: the epoch in flight commits, the attempt ends SUSPENDED). The dispatcher then
   moves the upgrade to SWAPPED and the job's spec to the new one in one transaction, and
   hands the next attempt to the new code's standby: it recovers and starts the query from the
   same checkpoint, outputs and store records, exactly once as any attempt.
4. **Watched**: once the new code committed ``watch_epochs`` epochs (or ``watch_seconds``
   passed, for a job given no data) the upgrade is CONFIRMED and the old code's standby is
   replaced by one of the new code (or stopped). An attempt of the new code that fails in the
   window is rolled back (``JobReconciler.fail``): ROLLED_BACK and the old spec in one
   transaction, the next attempt handed to the old code's standby, no failure counted.

Every step reads and writes the store only, so a leader that fails over mid-upgrade leaves
the next one where it stopped.
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
import time
from pathlib import Path
from typing import Any

from stoker.errors import (
    InvalidInput,
    InvalidTransition,
    JobTerminal,
    StokerError,
    TooManyRequests,
    UpgradeConflict,
    UpgradeNotFound,
)
from stoker.manager.appinspect import inspect_app
from stoker.manager.launcher import DriverLauncher
from stoker.manager.standbys import StandbyKeeper
from stoker.manager.submissions import check_standby_master
from stoker.manager.submit import check_allowed
from stoker.paths import check_app_path
from stoker.store import JobRecord, Store
from stoker.store.fleet_records import UpgradeRecord
from stoker.types import AttemptState, JobId, JobState, SpecKind, StandbyRole, UpgradeState

log = logging.getLogger("stoker.upgrade")

WATCH_EPOCHS = 3  # epochs the new code commits before its upgrade is confirmed (default)
WATCH_SECONDS = 60.0  # or this long after the swap, for a job given no data (default)
WATCH_EPOCHS_MAX = 10_000
WATCH_SECONDS_MAX = 86_400.0
# The old code's driver asked to stop: killed if its attempt has not ended after this (an
# epoch that hangs); the next attempt is the new code's all the same.
STOP_TIMEOUT = 60.0
# The new code's standby must be READY (and checked) within this after the upgrade was asked.
READY_TIMEOUT = 600.0
SWAP_TICK = 0.05  # s between the leader's steps while a swap is under way
INSPECTING_MAX = 2  # upgrade requests reading a new file at once (child processes)
_inspecting = threading.BoundedSemaphore(INSPECTING_MAX)


def plan_upgrade(
    store: Store,
    jid: str,
    body: dict[str, Any],
    allowed_dirs: list[Path],
) -> UpgradeRecord:
    """Check an upgrade request (``entrypoint``, ``config``, ``watch_epochs``,
    ``watch_seconds``) and record it PENDING. :class:`InvalidInput` names the field at fault
    (the difference, for sources); nothing is recorded then."""
    job = store.get_job(JobId(jid))  # JobNotFound: 404
    if job.state.terminal:
        raise JobTerminal(job.job_id, str(job.state))
    if job.spec.get("kind") != SpecKind.MANAGED:
        raise InvalidInput(
            "job_id",
            f"{jid!r} is not a job submitted alone to this manager (an application's job "
            "changes with its application; a job run by `stoker run` without --server has no "
            "manager to swap it)",
        )
    # The new code warms as a standby: on a standalone master, executors of its own (a cap).
    check_standby_master(dict(job.spec.get("conf") or {}), standalone=True)
    live = store.live_upgrade(job.job_id)
    if live is not None:  # before the new file is read (a child process)
        raise UpgradeConflict(job.job_id, f"upgrade {live.upgrade_id} is under way ({live.state})")
    entry = body.get("entrypoint")
    if not isinstance(entry, str) or not entry or "\x00" in entry:
        raise InvalidInput("entrypoint", f"expects a file path, got {entry!r}")
    where = Path(entry).resolve()
    check_allowed(where, entry, allowed_dirs, "entrypoint")
    path = check_app_path(entry, "entrypoint")
    check_allowed(path, entry, allowed_dirs, "entrypoint")
    if path == Path(str(job.spec.get("entrypoint"))).resolve():
        raise InvalidInput(
            "entrypoint",
            f"{entry!r} is the file the job runs now: give the new code as another file (the "
            "running file is what a rollback runs, so it must stay as it is)",
        )
    config = body.get("config") or {}
    if not isinstance(config, dict):
        raise InvalidInput("config", "expects an object of pipeline config values")
    watch_epochs = _bounded_int(body.get("watch_epochs", WATCH_EPOCHS), "watch_epochs")
    watch_seconds = _bounded_seconds(body.get("watch_seconds", WATCH_SECONDS))
    given = {**dict(job.spec.get("config") or {}), **config}
    if not _inspecting.acquire(blocking=False):
        raise TooManyRequests(jid, 2.0, "").with_message(
            f"{INSPECTING_MAX} upgrade requests are being checked already: retry in a moment"
        )
    try:
        name, _start, new = inspect_app(path, given)
    finally:
        _inspecting.release()
    running = _running_pipeline(store, job)
    checks = compare_pipelines(running, new)
    new_spec = {**job.spec, "entrypoint": str(path)}
    if given:
        new_spec["config"] = dict(sorted(given.items()))
    checks["pipeline"] = name
    upgrade_id = f"up-{time.strftime('%Y%m%d%H%M%S')}-{secrets.token_hex(3)}"
    try:
        rec = store.add_upgrade(
            job.job_id, upgrade_id, job.spec, new_spec, watch_epochs, watch_seconds, checks
        )
    except InvalidTransition as e:
        raise UpgradeConflict(job.job_id, str(e).split(": ", 1)[-1]) from None
    log.info("job %s: upgrade %s to %s asked for", job.job_id, upgrade_id, path)
    return rec


def _bounded_int(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= WATCH_EPOCHS_MAX:
        raise InvalidInput(field, f"expects a whole number from 1 to {WATCH_EPOCHS_MAX}")
    return value


def _bounded_seconds(value: Any) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 <= value <= WATCH_SECONDS_MAX
    ):
        raise InvalidInput("watch_seconds", f"expects seconds from 0 to {WATCH_SECONDS_MAX:.0f}")
    return float(value)


def _running_pipeline(store: Store, job: JobRecord) -> dict[str, Any] | None:
    """The running code's pipeline description, as its driver declared it (None: no driver
    has declared one yet)."""
    try:
        snap = store.control_snapshot(job.job_id)
    except StokerError:
        return None
    found = snap.state.get("pipeline")
    return found if isinstance(found, dict) else None


def compare_pipelines(running: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    """What the new code's pipeline keeps of the running one's; :class:`InvalidInput` when a
    difference makes the swap unsafe. Sources are the checkpoint's inputs (Spark records
    offsets per source, in order): they must be the same. The output mode must be the same
    (the state and what the sinks hold depend on it). Sinks may come and go: a removed sink's
    last epochs are resolved as after any restart, an added one starts with the next epoch."""
    if running is None:
        raise InvalidInput(
            "job_id", "the running job has not declared its pipeline yet: upgrade it once it runs"
        )
    old_src = [str(s) for s in running.get("sources") or []]
    new_src = [str(s) for s in new.get("sources") or []]
    if old_src != new_src:
        raise InvalidInput(
            "entrypoint",
            f"the new code reads other sources: {_listed(new_src)} vs {_listed(old_src)} "
            "(running); the checkpoint's offsets are per source, so an upgrade keeps them",
        )
    old_mode = running.get("output_mode", "append")
    new_mode = new.get("output_mode", "append")
    if old_mode != new_mode:
        raise InvalidInput(
            "entrypoint",
            f"the new code's output_mode is {new_mode!r}, the running job's {old_mode!r}",
        )
    old_sinks = [str(s) for s in running.get("sinks") or []]
    new_sinks = [str(s) for s in new.get("sinks") or []]
    return {
        "sources": old_src,
        "sinks_kept": [s for s in new_sinks if s in old_sinks],
        "sinks_added": [s for s in new_sinks if s not in old_sinks],
        "sinks_removed": [s for s in old_sinks if s not in new_sinks],
        "output_mode": new_mode,
    }


def _listed(items: list[str]) -> str:
    return "[" + ", ".join(items) + "]" if items else "none"


class UpgradeKeeper:
    """The leader's upgrades, one step per tick: the swap asked for once both codes are
    warm, a stop that hangs enforced, the watch window judged, upgrades of ended jobs ended."""

    def __init__(self, store: Store, launcher: DriverLauncher, standbys: StandbyKeeper) -> None:
        self.store = store
        self.launcher = launcher
        self.standbys = standbys
        # A swap under way (the old code asked to stop, the new one not handed its attempt
        # yet): the leader steps more often until it is done (SWAP_TICK).
        self.swapping = False

    def tend(self, live: list[JobRecord], upgrades: list[UpgradeRecord]) -> None:
        """One step over the live ``upgrades`` (read once for the leader's step: each move
        below is conditional in the store, so one ended meanwhile moves no further)."""
        jobs = {j.job_id: j for j in live}
        for up in upgrades:
            try:
                self._tend(up, jobs.get(up.job_id))
            except StokerError as e:
                log.warning("upgrade %s: %s", up.upgrade_id, e)
        self.swapping = any(up.swapping for up in upgrades)

    def _tend(self, up: UpgradeRecord, job: JobRecord | None) -> None:
        now = self.store.clock.now()
        if job is None or job.state.terminal:
            state = job.state if job is not None else "deleted"
            if up.state == UpgradeState.PENDING:
                self.refuse(up, f"the job ended ({state}) before the swap")
            else:
                self._end(up, UpgradeState.CONFIRMED, f"the job ended {state} in the watch window")
            return
        if up.state == UpgradeState.PENDING:
            self._tend_pending(up, job, now)
        else:
            self._watch(up, job, now)

    def _tend_pending(self, up: UpgradeRecord, job: JobRecord, now: float) -> None:
        att = (
            self.store.get_attempt(job.job_id, job.current_attempt) if job.current_attempt else None
        )
        if up.stop_attempt is not None:
            # Asked to stop: the dispatcher swaps once the attempt has ended. One that hangs
            # is killed (the epoch in flight is then recovered by the new code, exactly once).
            live = att is not None and att.attempt == up.stop_attempt and not att.state.ended
            if live and att is not None and now - (up.stop_at or now) > STOP_TIMEOUT:
                log.warning(
                    "job %s: attempt %d did not stop in %.0f s for upgrade %s: killed",
                    job.job_id,
                    att.attempt,
                    STOP_TIMEOUT,
                    up.upgrade_id,
                )
                self.launcher.kill(att.owner)
            return
        if now - up.created_at > READY_TIMEOUT:
            self.refuse(
                up, f"the new code was not ready (warm and checked) in {READY_TIMEOUT:.0f} s"
            )
            return
        new = self.standbys.ready(job.job_id, StandbyRole.UPGRADE)
        old = self.standbys.ready(job.job_id, StandbyRole.STANDBY, job.spec)
        if new is None or old is None:
            return  # both codes warm first: the new one to swap to, the old one to go back to
        if att is None or att.state != AttemptState.RUNNING or job.state != JobState.RUNNING:
            return  # between attempts: the swap waits for a running one to stop
        if self.store.upgrade_stopping(up.upgrade_id, att.attempt) is None:
            return
        log.info(
            "job %s: upgrade %s: both codes warm; attempt %d (pid %d) stops at its epoch boundary",
            job.job_id,
            up.upgrade_id,
            att.attempt,
            att.owner.pid,
        )
        self.launcher.terminate(att.owner)

    def _watch(self, up: UpgradeRecord, job: JobRecord, now: float) -> None:
        if up.swap_attempt is None or up.swapped_at is None:
            return  # the dispatcher hands the new code its attempt first
        committed = [
            e
            for e in self.store.list_epochs(job.job_id, limit=up.watch_epochs)
            if e.committed_at is not None and (e.decided_by or 0) >= up.swap_attempt
        ]
        if len(committed) >= up.watch_epochs:
            self._end(
                up,
                UpgradeState.CONFIRMED,
                f"the new code committed {len(committed)} epochs (up to {committed[0].epoch})",
            )
        elif now - up.swapped_at >= up.watch_seconds:
            self._end(
                up,
                UpgradeState.CONFIRMED,
                f"the new code ran {up.watch_seconds:g} s without a failure "
                f"({len(committed)} epochs committed)",
            )

    def refuse(self, up: UpgradeRecord, why: str) -> None:
        self._end(up, UpgradeState.REFUSED, why)

    def _end(self, up: UpgradeRecord, state: UpgradeState, why: str) -> None:
        if self.store.end_upgrade(up.upgrade_id, state, why) is not None:
            log.info("job %s: upgrade %s %s: %s", up.job_id, up.upgrade_id, state, why)


def upgrade_view(up: UpgradeRecord) -> dict[str, Any]:
    """An upgrade as the REST API answers it."""
    return dict(json.loads(json.dumps(up.to_dict(), default=str)))


def ask(store: Store, job: JobRecord, body: dict[str, Any], allowed: list[Path]) -> dict[str, Any]:
    """``POST /v1/jobs/{id}/upgrade``: :func:`plan_upgrade`, as the API answers it."""
    return upgrade_view(plan_upgrade(store, job.job_id, body, allowed))


def history(store: Store, job: JobRecord, limit: int) -> list[dict[str, Any]]:
    """The job's upgrades, newest first."""
    return [upgrade_view(u) for u in store.list_upgrades(job.job_id, limit)]


def one(store: Store, job: JobRecord, upgrade_id: str) -> dict[str, Any]:
    """One upgrade of the job; :class:`UpgradeNotFound` when it has none of that id."""
    rec = store.get_upgrade(upgrade_id)
    if rec is None or rec.job_id != job.job_id:
        raise UpgradeNotFound(job.job_id, upgrade_id)
    return upgrade_view(rec)
