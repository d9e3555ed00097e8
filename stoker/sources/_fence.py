"""Whether the driver a file source's reader works for still owns its job.

``latestOffset`` runs in a Python process the driver's JVM starts, not in the driver's own
process, and it starts before the driver's attempt exists: the reader cannot be told its
attempt number up front. It is told who its driver is instead (host, pid and the pid's start
marker, the identity the store records as an attempt's owner), and asks the store, at each
append: is the job's current attempt owned by my driver, RUNNING, with a live lease? A zombie
driver (stopped, then resumed after a new attempt took over) fails that check, whatever files
it may find: its attempt is no longer the current one, and the new one is owned by another
process. The check runs under the log's lock, so no append can slip between it and the write.
"""

from __future__ import annotations

import json

from stoker.errors import StaleAttempt
from stoker.store import Store, open_store
from stoker.store.records import Owner
from stoker.types import AttemptState, JobId


def owner_to_json(owner: Owner) -> str:
    return json.dumps({"host": owner.host, "pid": owner.pid, "pid_started": owner.pid_started})


def owner_from_json(text: str) -> Owner:
    d = json.loads(text)
    return Owner(host=str(d["host"]), pid=int(d["pid"]), pid_started=str(d["pid_started"]))


class AttemptFence:
    """Raises :class:`StaleAttempt` unless ``owner`` runs the job's current, leased attempt."""

    def __init__(
        self,
        store_url: str,
        job_id: str,
        owner: Owner,
    ) -> None:
        self.store_url = store_url
        self.job_id = JobId(job_id)
        self.owner = owner
        self._store: Store | None = None

    def check(self, ended_ok: bool = False) -> None:
        """``ended_ok``: the attempt may have ended too (a reader writing what it received as
        its query stops): no other attempt took the job over, so no one else writes."""
        if self._store is None:
            self._store = open_store(self.store_url)  # kept: the reader process is long-lived
        job = self._store.get_job(self.job_id)
        att = self._store.get_attempt(self.job_id, job.current_attempt)
        who = f"driver pid {self.owner.pid} on {self.owner.host}"
        if att is None or att.owner != self.owner:
            raise StaleAttempt(
                f"job {self.job_id!r}: attempt {job.current_attempt} is not run by {who}; "
                "a stale driver may not append to the file log"
            )
        # The attempt number is the fence; its lease is judged by its driver on its own
        # monotonic clock, never here by a wall clock (stoker.leases).
        if att.state != AttemptState.RUNNING and not ended_ok:
            raise StaleAttempt(
                f"job {self.job_id!r}: attempt {att.attempt} of {who} is {att.state}; "
                "it may not append to the file log"
            )

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None
