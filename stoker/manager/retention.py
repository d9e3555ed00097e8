"""The leader prunes the epoch records of ended jobs (``stoker server --retention-*``).

A running job prunes its own epochs (its driver's thread, ``-D stoker.retention.*`` in its
conf). An ended job has no driver: the leader applies the server's policy to it (a job of an
application too; application records have no epochs), in a walk over the jobs begun every
``every`` seconds, a few batches per job, so that the supervisor's loop stays responsive (a
task the supervisor owns and steps while it leads). The walk reads the jobs a page at a time
and goes on while ``BUDGET`` seconds of the tick last, the rest in the next ticks: a tick's
share does not grow with the jobs the store keeps (one tick a minute read
every job and pruned every ended one). What is kept is the store's rule
(``stoker/store/_retention.py``): the final and latest epochs, anything not committed,
anything with a prepared sink part.
"""

from __future__ import annotations

import logging
import shutil
import time
import uuid
from pathlib import Path

from stoker.errors import JobNotFound, StokerError
from stoker.manager.submit import ASSIGNED_STATE_DIR, job_folder
from stoker.store import JobRecord, RetentionPolicy, Store
from stoker.types import JobId, JobKind, SpecKind

log = logging.getLogger("stoker.retention")

BATCH = 1000  # epochs per store transaction
BATCHES_PER_LOOK = 5  # per job and look: the rest waits for the next look
PAGE = 100  # jobs read at a time by the walk
BUDGET = 0.01  # seconds of a tick the walk may take (one page read at least)


class Retention:
    """Prunes the ended jobs' epoch records under the server's policy, every ``every`` s; and
    with ``jobs_after`` (``stoker server --retention-jobs``) deletes whole records that ended
    longer ago than that (jobs were never deleted), with their folders."""

    def __init__(
        self,
        store: Store,
        policy: RetentionPolicy,
        every: float,
        jobs_after: float | None = None,
        state_dir: Path | None = None,
    ) -> None:
        self.store = store
        self.policy = policy
        self.every = every
        self.jobs_after = jobs_after
        self.state_dir = state_dir
        self._last: float | None = None  # time.monotonic() of the last look
        self._walking = False
        self._cursor: tuple[float, str] | None = None  # the last job the walk looked at
        # Ended jobs pruned to the end under a count-only policy, and the end it was (their
        # updated_at): nothing more can go until they run and end again; no write per walk.
        self._done: dict[JobId, float] = {}

    def sweep(self) -> int:
        """Go on with the walk under way, or begin one if the server has a policy and it is
        time; epochs deleted in this tick."""
        if not self.policy.enabled and self.jobs_after is None:
            return 0
        now = time.monotonic()
        if not self._walking:
            if self._last is not None and now - self._last < self.every:
                return 0
            self._last = now
            if self.jobs_after is not None and self.state_dir is not None:
                try:
                    self.delete_ended(self.store.clock.now() - self.jobs_after)
                except StokerError as e:
                    log.warning("deleting ended jobs failed: %s", e)
            if not self.policy.enabled:
                return 0
            self._walking, self._cursor = True, None
        deleted = 0
        while True:
            page = self.store.list_jobs_page(JobKind.JOB, PAGE, self._cursor)
            for job in page:
                self._cursor = (job.created_at, job.job_id)
                if not job.state.terminal or self._done.get(job.job_id) == job.updated_at:
                    continue
                deleted += self._prune(job)
                if time.monotonic() - now >= BUDGET:
                    return deleted  # the rest in the next ticks
            if len(page) < PAGE:
                self._walking = False
                return deleted
            if time.monotonic() - now >= BUDGET:
                return deleted

    def _prune(self, job: JobRecord) -> int:
        jid = job.job_id
        try:
            done = self.store.prune_epochs(jid, self.policy, BATCH, BATCHES_PER_LOOK)
        except StokerError as e:
            log.warning("job %s: pruning epochs failed: %s", jid, e)
            return 0
        if done.epochs:
            log.info("job %s: pruned %d epochs", jid, done.epochs)
        if not done.more and self.policy.seconds is None:
            self._done[jid] = job.updated_at  # a window in time would let more go later
        return done.epochs

    def delete_ended(self, before: float, limit: int = 200) -> list[JobId]:
        """Delete the records this manager made (a job submitted to it, an application and its
        jobs) that ended before ``before`` and were resolved, and their folders under the
        manager's state folder: a later submission of the same id starts afresh, never from an
        old checkpoint. The folders go first (a crash then leaves a record without its folder,
        which the next look deletes; never a folder a new record of the id could resume)."""
        assert self.state_dir is not None
        gone: list[JobId] = []
        for jid in self.store.ended_before(before, limit):
            try:
                rec = self.store.get_job(jid)
            except JobNotFound:
                continue
            if rec.spec.get("kind") not in (SpecKind.MANAGED, SpecKind.APPLICATION):
                continue  # run by `stoker run` in its own folder: not this manager's to delete
            folders = [job_folder(rec, self.state_dir), self.state_dir / "logs" / rec.job_id]
            if rec.kind == JobKind.APPLICATION:
                folders[0] = Path(rec.spec.get(ASSIGNED_STATE_DIR) or self.state_dir / "apps" / jid)
                folders += [
                    self.state_dir / "logs" / j.job_id for j in self.store.list_jobs(app_id=jid)
                ]
            if not self._remove(folders):
                continue
            deleted = self.store.delete_ended(jid, before)
            if deleted:
                log.info("deleted ended %s (ended before the retention window)", ", ".join(deleted))
                gone += deleted
                for d in deleted:
                    self._done.pop(d, None)
        return gone

    def _remove(self, folders: list[Path]) -> bool:
        """Delete ``folders`` (only ones inside the state folder); False if one could not be."""
        assert self.state_dir is not None
        root = self.state_dir.resolve()
        for folder in folders:
            path = folder.resolve()
            if path == root or not path.is_relative_to(root):
                log.warning("not deleting %s: outside the state folder %s", path, root)
                return False
            if not path.exists():
                continue
            trash = path.with_name(f".deleting-{path.name}-{uuid.uuid4().hex[:8]}")
            try:
                path.rename(trash)
                shutil.rmtree(trash)
            except OSError as e:
                log.warning("cannot delete %s: %s", path, e)
                return False
        return True
