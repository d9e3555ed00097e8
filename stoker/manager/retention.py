"""The leader prunes the epoch records of ended jobs (``stoker server --retention-*``).

A running job prunes its own epochs (its driver's thread, ``-D stoker.retention.*`` in its
conf). An ended job has no driver: the leader applies the server's policy to it (a job of an
application too; application records have no epochs), every ``every`` seconds, a few batches
per job per look, so that the supervisor's loop stays responsive (a task the supervisor owns
and steps while it leads). What is kept is the store's rule (``stoker/store/_retention.py``):
the final and latest epochs, anything not committed, anything with a prepared sink part.
"""

from __future__ import annotations

import logging
import time

from stoker.errors import StokerError
from stoker.store import RetentionPolicy, Store
from stoker.types import JobKind

log = logging.getLogger("stoker.retention")

BATCH = 1000  # epochs per store transaction
BATCHES_PER_LOOK = 5  # per job and look: the rest waits for the next look


class Retention:
    """Prunes the ended jobs' epoch records under the server's policy, every ``every`` s."""

    def __init__(self, store: Store, policy: RetentionPolicy, every: float) -> None:
        self.store = store
        self.policy = policy
        self.every = every
        self._last: float | None = None  # time.monotonic() of the last look

    def sweep(self) -> int:
        """Prune the ended jobs if the server has a policy and it is time; epochs deleted."""
        if not self.policy.enabled:
            return 0
        now = time.monotonic()
        if self._last is not None and now - self._last < self.every:
            return 0
        self._last = now
        deleted = 0
        for job in self.store.list_jobs(kind=JobKind.JOB):
            if not job.state.terminal:
                continue
            try:
                done = self.store.prune_epochs(job.job_id, self.policy, BATCH, BATCHES_PER_LOOK)
            except StokerError as e:
                log.warning("job %s: pruning epochs failed: %s", job.job_id, e)
                continue
            deleted += done.epochs
            if done.epochs:
                log.info("job %s: pruned %d epochs", job.job_id, done.epochs)
        return deleted
