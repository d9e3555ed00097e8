"""The leader prunes the epoch records of ended jobs (``stoker server --retention-*``).

A running job prunes its own epochs (its driver's thread, ``-D stoker.retention.*`` in its
conf). An ended job has no driver: the leader applies the server's policy to it (a job of an
application too; application records have no epochs), every
``every`` seconds, a few batches per job per look, so that the supervisor's loop stays
responsive. What is kept is the store's rule (``stoker/store/_retention.py``): the final and
latest epochs, anything not committed, anything with a prepared sink part.
"""

from __future__ import annotations

import logging
import time
import weakref
from typing import TYPE_CHECKING

from stoker.errors import StokerError
from stoker.types import JobKind

if TYPE_CHECKING:
    from stoker.manager.supervisor import Supervisor

log = logging.getLogger("stoker.retention")

BATCH = 1000  # epochs per store transaction
BATCHES_PER_LOOK = 5  # per job and look: the rest waits for the next look

_last_look: weakref.WeakKeyDictionary[Supervisor, float] = weakref.WeakKeyDictionary()


def sweep(sup: Supervisor) -> int:
    """Prune the ended jobs if the server has a policy and it is time; epochs deleted."""
    policy, every = sup.cfg.retention, sup.cfg.retention_every
    if not policy.enabled:
        return 0
    now = time.monotonic()
    last = _last_look.get(sup)
    if last is not None and now - last < every:
        return 0
    _last_look[sup] = now
    deleted = 0
    for job in sup.store.list_jobs(kind=JobKind.JOB):
        if not job.state.terminal:
            continue
        try:
            done = sup.store.prune_epochs(job.job_id, policy, BATCH, BATCHES_PER_LOOK)
        except StokerError as e:
            log.warning("job %s: pruning epochs failed: %s", job.job_id, e)
            continue
        deleted += done.epochs
        if done.epochs:
            log.info("job %s: pruned %d epochs", job.job_id, done.epochs)
    return deleted
