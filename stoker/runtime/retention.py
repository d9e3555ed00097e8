"""The driver's pruning thread: the job's old epoch records go, off the epoch's critical path.

Every ``interval`` seconds it asks the store to prune the job's epochs under the policy, one
batch (one short transaction) at a time with a pause between batches, so that the epoch loop's
own writes (pin, decide, commit) get the store's write lock in between. What it keeps is the
store's business (``stoker/store/_retention.py``): every epoch recovery still needs.
"""

from __future__ import annotations

import logging
import threading

from stoker.settings import Settings
from stoker.store import RetentionPolicy, Store
from stoker.types import JobId

log = logging.getLogger("stoker.retention")

BATCH = 1000  # epochs per store transaction
PAUSE = 0.05  # seconds between two batches of one round


def policy_of(settings: Settings) -> RetentionPolicy:
    """The retention policy that ``-D stoker.retention.*`` asked for (default: keep all)."""
    return RetentionPolicy(epochs=settings.retention_epochs, seconds=settings.retention_time)


class Pruner:
    """Prunes one job's epochs on a thread of its own while the attempt runs."""

    def __init__(
        self,
        store: Store,
        job: JobId,
        policy: RetentionPolicy,
        interval: float,
        batch: int = BATCH,
    ) -> None:
        self.store = store
        self.job = job
        self.policy = policy
        self.interval = interval
        self.batch = batch
        self.pruned = 0  # epochs deleted by this pruner
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="stoker-retention", daemon=True)

    def start(self) -> None:
        """Start pruning (nothing to do, and no thread, when the policy keeps everything)."""
        if self.policy.enabled:
            self._thread.start()

    def stop(self) -> None:
        """Stop the thread (a round in progress ends after its current batch)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)

    def final_round(self) -> None:
        """Prune once more, to the end, on the caller's thread: the attempt has ended, nothing
        competes for the store any more, and a short job is left as small as a long one."""
        if self.policy.enabled:
            self._round(pause=0.0)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._round(pause=PAUSE)

    def _round(self, pause: float) -> None:
        try:
            while True:
                done = self.store.prune_epochs(self.job, self.policy, self.batch, max_batches=1)
                self.pruned += done.epochs
                if done.epochs:
                    log.debug("job %s: pruned %d epochs", self.job, done.epochs)
                if not done.more or (pause and self._stop.wait(pause)):
                    return
        except Exception:
            # Pruning is housekeeping: a failed round (a store hiccup) must not fail the job.
            # The next round starts over from what the store holds.
            log.warning(
                "job %s: pruning epochs failed; retried next round", self.job, exc_info=True
            )
