"""The per-job recovery hold: one recovery of a job at a time, and never beside the next
attempt's epochs.

Recovery aborts every part no decision names, and it runs with no attempt lease of its own:
at an attempt's end (its lease given up), by the janitor's cleanup, and at the next attempt's
start. Without a hold, the job manager may start the next attempt (at once after a
suspension) while an end-of-attempt recovery is still at work, and a recovery that stalls
(a frozen process, a slow store) would then abort the new attempt's parts in flight. So every
recovery takes the job's hold in the store first, renews it while it works, and gives it up
at the end; the next attempt takes it before its own recovery and its query, and waits while
a live holder keeps it. A holder that stops renewing loses it once it lapses (a dead one at
once, same host); it may still go on when it wakes, so recovery also bounds what it touches
to the attempts it resolves (``up_to``) and asks :meth:`Hold.check` between its steps.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from types import TracebackType

from stoker.errors import StaleAttempt, StoreError
from stoker.procs import owner_is_dead, this_owner
from stoker.store import Owner, RecoveryHold, Store
from stoker.types import AttemptNo, JobId

log = logging.getLogger("stoker.recovery")

POLL = 0.2  # seconds between looks at a hold someone else keeps


def _nothing() -> None:
    return None


class Hold:
    """The job's recovery hold for ``attempt`` (the newest attempt whose leftovers this
    recovery resolves), taken by :meth:`acquire` and renewed every ``ttl / 3`` until
    :meth:`release`. ``waiting`` runs between looks while another holder keeps it, and
    raises to stop waiting (an attempt fenced meanwhile)."""

    def __init__(
        self,
        store: Store,
        job: JobId,
        attempt: AttemptNo,
        ttl: float,
        owner: Owner | None = None,
        waiting: Callable[[], None] = _nothing,
    ) -> None:
        self.store, self.job, self.attempt, self.ttl = store, job, attempt, ttl
        self.owner = owner or this_owner()
        self._waiting = waiting
        self._held: RecoveryHold | None = None
        self._lost: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Hold:
        self.acquire()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        e: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def _mine(self, hold: RecoveryHold) -> bool:
        return hold.attempt == self.attempt and hold.owner == self.owner

    def acquire(self) -> None:
        """Take the hold, waiting while a live holder of this or an earlier attempt keeps it.

        Raises :class:`StaleAttempt` when a later attempt holds it: what this recovery would
        resolve is that attempt's to resolve now."""
        gone: RecoveryHold | None = None
        said = False
        while True:
            held = self.store.take_recovery_hold(self.job, self.attempt, self.owner, self.ttl, gone)
            if self._mine(held):
                break
            if held.attempt > self.attempt:
                raise StaleAttempt(
                    f"attempt {held.attempt} of job {self.job!r} recovers it now: what attempt "
                    f"{self.attempt} left is that attempt's to resolve"
                )
            if owner_is_dead(held.owner):
                log.warning(
                    "job %s: the recovery of attempt %d (pid %d on %s) is dead; taking it over",
                    self.job,
                    held.attempt,
                    held.owner.pid,
                    held.owner.host,
                )
                gone = held
                continue
            if not said:
                log.info(
                    "job %s: waiting for the recovery of attempt %d (pid %d on %s) to end, or "
                    "its hold to lapse (in %.1fs)",
                    self.job,
                    held.attempt,
                    held.owner.pid,
                    held.owner.host,
                    held.expires_at - self.store.clock.now(),
                )
                said = True
            self._waiting()
            time.sleep(POLL)
        if said:
            log.info("job %s: recovery hold taken (attempt %d)", self.job, self.attempt)
        self._held = held
        self._thread = threading.Thread(
            target=self._renew, name="stoker-recovery-hold", daemon=True
        )
        self._thread.start()

    def check(self) -> None:
        """Raise :class:`StaleAttempt` if the hold was lost (this process stalled past its
        lapse and a newer recovery took it): stop before the next step. Asks the store, by
        renewing, rather than trusting the renewal thread, which a process that just woke up
        has not run yet."""
        held = self._held
        if (
            self._lost is None
            and held is not None
            and not self.store.renew_recovery_hold(held, self.ttl)
        ):
            self._lost = self._lost_why()
            log.warning("job %s: %s", self.job, self._lost)
        if self._lost is not None:
            raise StaleAttempt(self._lost)

    def _lost_why(self) -> str:
        return (
            f"the recovery hold of job {self.job!r} (attempt {self.attempt}) lapsed and was "
            "taken over: another recovery resolves the job now"
        )

    def release(self) -> None:
        """Stop renewing and give the hold up (nothing if it was taken over)."""
        self._stop.set()
        if self._thread is not None and self._thread.is_alive():
            self._thread.join(timeout=5)
        held, self._held = self._held, None
        if held is None:
            return
        try:
            self.store.release_recovery_hold(held)
        except StoreError as e:  # it lapses by itself: the next recovery waits out the ttl
            log.warning("job %s: giving up the recovery hold failed: %s", self.job, e)

    def _renew(self) -> None:
        period = max(0.2, self.ttl / 3)
        while not self._stop.wait(period):
            held = self._held
            if held is None:
                return
            try:
                if self.store.renew_recovery_hold(held, self.ttl):
                    continue
            except StoreError as e:  # a store that stays away shows up as a lapsed hold
                log.warning("job %s: renewing the recovery hold failed: %s", self.job, e)
                continue
            self._lost = self._lost_why()
            log.warning("job %s: %s", self.job, self._lost)
            return
