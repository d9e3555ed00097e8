"""Savepoint lineage: which job each savepoint went on in, kept in the stores (migration 0019)
and checked at every start of a restored job, and at every start of a job whose savepoint
went elsewhere. Spark-free: the runtime's restore and a job manager's submission both use it.

A savepoint of job A (uid U) at epoch E goes on in one job. The restore that uses it records
itself (:class:`~stoker.store.SavepointRestore`: job id, uid, state folder, store, when, the
sinks it writes) in A's store, where any other restore of the savepoint looks, and in its own.
The record's key is (savepoint, uid), so a second restore under U finds the first one's row
and is refused, even when the two race. What a start is refused for, each refusal naming the
job ids and the way out, before anything is written:

- **A had finished at E** (every source had read to its end): a job restored from it would
  have nothing to read and never end.
- **A store that cannot be opened**: A's, or that of an earlier restore the check must look
  at. Never skipped without a word: ``ignore_unreachable_stores`` (``--ignore-unreachable-
  stores``) goes on without it, with a warning naming what was not checked.
- **Restored before** under U into another job (another id, or the same id in another state
  folder or store): two jobs would each write the epochs after E. The way out is a fork
  (``fork``: a uid of its own) once the earlier restores have ended with their outputs
  resolved; a fork writes outputs of its own, none of A's or of an earlier restore's.
- **Another job of the same uid** (a restore of another savepoint of A, say) that is live, not
  resolved, or committed past E into an output this job writes.
- **A itself**, when the new job takes its outputs over: not ended, or not resolved (a job of
  the same id counts unless it is this very record, in this job's own store); on a resumed
  start, A having committed an epoch after this job's restore.

And a job's own start (not a restore) is refused when a savepoint of it was restored into
another job that took its outputs over (:func:`refuse_taken_over`): its epochs after the
savepoint are that job's now.
"""

from stoker.lineage.checks import (
    Checked,
    Start,
    check,
    pending,
    record,
    refuse_taken_over,
)
from stoker.lineage.stores import (
    FIELD,
    FORK_FIELD,
    FORK_FLAG,
    IGNORE_FIELD,
    IGNORE_FLAG,
    SAVEPOINT_STORE_ENV,
    Stores,
    canonical,
    overlap,
    refuse_finished,
    savepoint_key,
    savepoint_store,
    sink_places,
)

__all__ = [
    "FIELD",
    "FORK_FIELD",
    "FORK_FLAG",
    "IGNORE_FIELD",
    "IGNORE_FLAG",
    "SAVEPOINT_STORE_ENV",
    "Checked",
    "Start",
    "Stores",
    "canonical",
    "check",
    "overlap",
    "pending",
    "record",
    "refuse_finished",
    "refuse_taken_over",
    "savepoint_key",
    "savepoint_store",
    "sink_places",
]
