"""Which drivers a leadership term has judged: the records whose drivers the leader started, or
saw alive (their process on its host, or their lease renewed under its watch), recorded in the
store (``Store.mark_judged``, with the term's fencing token) once a tick. Until a record is, the
API shows it RECONCILING (``stoker.manager.jobs.reconciling``): after a manager restart or a
failover, a job is not RUNNING on the word of a leader that is gone."""

from __future__ import annotations

import logging

from stoker.errors import NotLeader, StokerError
from stoker.leases import LeaseWatch
from stoker.manager.launcher import DriverLauncher
from stoker.manager.leader import LeaderLease
from stoker.store import AttemptRecord, Store
from stoker.types import JobId

log = logging.getLogger("stoker.supervisor")


class JudgedDrivers:
    """The records this term has judged, and those still to record (leader only)."""

    def __init__(self, store: Store, lease: LeaderLease) -> None:
        self.store = store
        self.lease = lease
        self._judged: set[JobId] = set()
        self._token: int | None = None
        self._to_mark: list[JobId] = []

    def new_tick(self) -> None:
        """A new term (another token, or none) starts over: its drivers are judged anew."""
        if self.lease.token != self._token:
            self._judged, self._to_mark = set(), []
            self._token = self.lease.token

    def judge(self, jid: JobId) -> None:
        """This term has judged ``jid``'s driver: recorded at the end of the tick."""
        if jid not in self._judged:
            self._judged.add(jid)
            self._to_mark.append(jid)

    def record(self) -> bool:
        """Record the records judged this tick (one write); False if the lease was lost."""
        if not self._to_mark or not self.lease.held:
            return True
        marks, self._to_mark = self._to_mark, []
        try:
            self.store.mark_judged(marks, self.lease.fence)
        except NotLeader:
            log.warning("lost the leader lease while recording the drivers it judged")
            self.lease.lost()
            return False
        except StokerError as e:
            self._judged.difference_update(marks)  # judged again next tick
            log.info("could not record the drivers judged: %s", e)
        return True


def seen_alive(launcher: DriverLauncher, leases: LeaseWatch, attempt: AttemptRecord) -> bool:
    """Whether the leader has judged the attempt's driver alive: it started it, sees its process
    on this host, or saw its lease renewed (the value changed under its own watch)."""
    return (
        launcher.launched(attempt.job_id, attempt.attempt)
        or launcher.sees_alive(attempt.owner)
        or leases.renewed((attempt.job_id, attempt.attempt))
    )
