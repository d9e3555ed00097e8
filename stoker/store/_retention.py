"""Retention in SQL: delete what no recovery, savepoint or control history needs, in batches.

What is kept, always, whatever the policy says:

- every epoch that is not COMMITTED (PINNED: its replay reuses the pin; DECIDED: recovery
  commits its parts), and every epoch that still has a PREPARED sink transaction;
- the job's latest epoch (Spark may replay it if its commit log was not written: the replay
  must find it decided) and every epoch marked final (a restarted job reads it to know it is
  done);
- every PREPARED sink transaction (recovery and the janitor resolve it);
- every control version (one per control event or declared change, a small row each; each
  kept epoch's pinned version is among them, and a replay reads its config from it);
- every control event that has not ended (PENDING, APPLIED: an epoch will apply or commit it),
  and the events applied at the job's latest epoch (a replay of that epoch reads them again).

Of the ended control events (COMMITTED, REJECTED), the newest ``keep_control_events`` stay:
the job's control history is bounded. Rescales (migration 0008) are not pruned: a few rows
per scaling decision or change of executors. There is no job deletion in the store yet; one
must delete the job's control events (and versions) and its rescales before the job's row
(their foreign keys).

Of the rest (COMMITTED epochs and their COMMITTED / ABORTED sink transactions), the policy
keeps the last ``epochs`` epochs and / or those committed within the last ``seconds``: an
epoch is deleted only when it is outside every limit set. Deletion goes in batches, each its
own short transaction, so that pruning a million rows never holds the store's write lock for
long (on SQLite it is one lock for every writer of the file).
"""

from __future__ import annotations

from dataclasses import dataclass

from stoker.errors import InvalidInput
from stoker.store._sqlbase import SqlBase
from stoker.types import JobId

# A bound above every committed_at when no time window is set (portable: no SQL infinity).
_NO_TIME_LIMIT = 1e300


@dataclass(frozen=True)
class RetentionPolicy:
    """How many committed epochs (and ended control events) to keep beyond what recovery needs.

    ``epochs``: keep the last N epochs of the job. ``seconds``: keep epochs committed within
    that window. Both None: keep everything (no retention). Both set: an epoch goes only when
    it is outside both. ``keep_control_events``: the newest N ended control events of a job
    stay when the policy is enabled.
    """

    epochs: int | None = None
    seconds: float | None = None
    # Ended control events kept per job (the newest); None keeps them all. Pruned together
    # with the epochs: only when the policy is enabled.
    keep_control_events: int | None = 1000

    def __post_init__(self) -> None:
        keep = self.keep_control_events
        if keep is not None and (isinstance(keep, bool) or not isinstance(keep, int) or keep < 0):
            raise InvalidInput(
                "retention.keep_control_events", f"must be a whole number >= 0, got {keep!r}"
            )
        if self.epochs is not None and (not isinstance(self.epochs, int) or self.epochs < 1):
            raise InvalidInput(
                "retention.epochs", f"must be a whole number >= 1, got {self.epochs!r}"
            )
        if self.seconds is not None and not self.seconds > 0:
            raise InvalidInput(
                "retention.time", f"must be a positive duration, got {self.seconds!r}"
            )

    @property
    def enabled(self) -> bool:
        """Whether anything is ever deleted under this policy."""
        return self.epochs is not None or self.seconds is not None


@dataclass(frozen=True)
class PruneResult:
    """What one :meth:`RetentionMixin.prune_epochs` call deleted."""

    epochs: int = 0
    txns: int = 0
    batches: int = 0
    controls: int = 0  # ended control events deleted
    more: bool = False  # stopped at ``max_batches`` with more left to delete


class RetentionMixin(SqlBase):
    """Implements :class:`stoker.store.protocols.runs.RetentionStore`."""

    def prune_epochs(
        self,
        job_id: JobId,
        policy: RetentionPolicy,
        batch_size: int = 1000,
        max_batches: int | None = None,
    ) -> PruneResult:
        """Delete the job's epochs (and their sink transactions) that ``policy`` lets go.

        At most ``batch_size`` epochs per transaction; at most ``max_batches`` transactions
        per call (None: until nothing is left), so a caller can pace itself between them.
        """
        if batch_size < 1:
            raise InvalidInput("batch_size", f"must be >= 1, got {batch_size!r}")
        if not policy.enabled:
            return PruneResult()
        with self._tx(write=False) as cur:
            row = self._x(cur, "max_epoch", job_id=job_id).fetchone()
        if row is None or row[0] is None:
            # No epoch yet: only control events can go (none applied at an epoch, then).
            if policy.keep_control_events is None:
                return PruneResult()
            controls, n, more = self._prune_controls(
                job_id, policy.keep_control_events, -1, batch_size, max_batches
            )
            return PruneResult(batches=n, more=more, controls=controls)
        latest = int(row[0])
        # The latest epoch is kept whatever the policy: never prune at or above it.
        upto = latest - (policy.epochs if policy.epochs is not None else 1)
        before = self.clock.now() - policy.seconds if policy.seconds is not None else _NO_TIME_LIMIT
        bounds = {"job_id": job_id, "upto": upto, "before": before}
        epochs = txns = batches = 0
        after = -1  # a cursor: epochs kept below it are not scanned again
        # Candidates are found in read transactions (a job with nothing to prune never takes
        # the write lock); each delete re-checks the whole rule, so a candidate that changed
        # meanwhile is simply not deleted.
        while True:
            with self._tx(write=False) as cur:
                found = [
                    int(r[0])
                    for r in self._x(
                        cur, "prunable_epochs", after=after, limit=batch_size, **bounds
                    ).fetchall()
                ]
                orphans = self._x(cur, "orphan_txn", job_id=job_id, upto=upto).fetchone()
            if not found:
                break
            if max_batches is not None and batches >= max_batches:
                return PruneResult(epochs, txns, batches, more=True)
            lo, hi = found[0], found[-1]
            with self._tx() as cur:
                epochs += self._x(cur, "prune_epochs", lo=lo, hi=hi, **bounds).rowcount
                txns += self._x(cur, "prune_txns", job_id=job_id, lo=lo, hi=hi).rowcount
            batches += 1
            after = hi
        if orphans is not None:
            # Records a zombie attempt made for an epoch already pruned, aborted since: few.
            with self._tx() as cur:
                txns += self._x(cur, "prune_orphan_txns", job_id=job_id, upto=upto).rowcount
        if policy.keep_control_events is not None:
            left = None if max_batches is None else max_batches - batches
            controls, n, more = self._prune_controls(
                job_id, policy.keep_control_events, latest, batch_size, left
            )
            return PruneResult(epochs, txns, batches + n, more=more, controls=controls)
        return PruneResult(epochs, txns, batches, more=False)

    def _prune_controls(
        self, job_id: JobId, keep: int, latest: int, batch_size: int, max_batches: int | None
    ) -> tuple[int, int, bool]:
        """Delete the job's ended control events beyond the newest ``keep``, except those
        applied at epoch ``latest`` or later, in batches. (deleted, batches, more left)."""
        with self._tx(write=False) as cur:
            row = self._x(cur, "control_cutoff", job_id=job_id, keep=keep).fetchone()
        if row is None:
            return 0, 0, False  # at most ``keep`` ended events
        bounds = {"job_id": job_id, "cutoff": int(row[0]), "latest": latest}
        deleted = batches = 0
        after = -1
        while True:
            with self._tx(write=False) as cur:
                found = [
                    int(r[0])
                    for r in self._x(
                        cur, "prunable_controls", after=after, limit=batch_size, **bounds
                    ).fetchall()
                ]
            if not found:
                return deleted, batches, False
            if max_batches is not None and batches >= max_batches:
                return deleted, batches, True
            lo, hi = found[0], found[-1]
            with self._tx() as cur:
                # The delete repeats the whole rule: an event that changed meanwhile stays.
                deleted += self._x(cur, "prune_controls", lo=lo, hi=hi, **bounds).rowcount
            batches += 1
            after = hi
