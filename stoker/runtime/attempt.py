"""An attempt's ownership of its job: starting it, renewing its lease, noticing it was fenced."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from stoker.errors import DuplicateJob, JobNotFound, StaleAttempt, StoreError
from stoker.leases import FALLBACK_TTL, wait_for_lapse
from stoker.procs import is_this_host, owner_is_dead, process_start_marker, this_owner
from stoker.store import AttemptRecord, JobRecord, Owner, Store, open_store
from stoker.types import AttemptNo, AttemptState, EpochState, JobId, JobState

log = logging.getLogger("stoker.attempt")

_LIVE = (AttemptState.STARTING, AttemptState.RUNNING)

# Process identity lives in stoker.procs (the manager needs it without Spark); re-exported.
__all__ = [
    "LeaseKeeper",
    "existing_job",
    "hold_start",
    "owner_is_dead",
    "process_start_marker",
    "start_attempt",
    "this_owner",
]


def start_attempt(
    store: Store, job: JobId, lease_ttl: float, restart: bool = False, owner: Owner | None = None
) -> AttemptRecord:
    """Become the job's owner: a new attempt, numbered one above the last.

    A previous attempt still live is taken over when its process is seen dead on this host, or
    once its lease is seen unrenewed for a whole TTL on this process's monotonic clock (up to a
    TTL of waiting, see :func:`lease_lapsed`); otherwise :class:`~stoker.errors.DuplicateJob`
    is raised.
    """
    rec = store.get_job(job)
    current = rec.current_attempt
    dead = False
    lapsed = None
    if current:
        prev = store.get_attempt(job, current)
        dead = prev is not None and prev.state == AttemptState.RUNNING and owner_is_dead(prev.owner)
        if prev is not None and not dead and prev.state in _LIVE:
            try:
                lapsed = lease_lapsed(store, prev)
            except DuplicateJob:
                if rec.state != JobState.CANCELING:
                    raise
                # Its live driver carries the cancel out: the store says so below.
        if rec.state == JobState.CANCELING and prev is not None:
            _end_orphaned_cancel(store, job, prev, dead or lapsed is not None)
    return store.start_attempt(
        job,
        owner or this_owner(),
        lease_ttl,
        current,
        previous_dead=dead,
        restart=restart,
        lapsed=lapsed,
    )


def lease_lapsed(store: Store, prev: AttemptRecord) -> tuple[int, float] | None:
    """The live attempt ``prev``'s lease value (``lease_seen``) once seen unrenewed for its
    whole TTL by this process's monotonic clock, or None as soon as it is seen renewed or ended
    (its holder lives, or let go). A holder alive on this host whose lease its own wall clock
    still calls valid is refused at once (:class:`DuplicateJob`, as before): refusing is always
    safe, and only taking over must not trust a wall clock (stoker.leases)."""
    if is_this_host(prev.owner.host) and not owner_is_dead(prev.owner):
        left = prev.lease_expires_at - store.clock.now()
        if left > 0:
            raise DuplicateJob(
                prev.job_id,
                f"attempt {prev.attempt} runs as pid {prev.owner.pid} on {prev.owner.host}, "
                f"lease valid for {left:.1f}s",
            )
    ttl = prev.lease_ttl if prev.lease_ttl is not None else FALLBACK_TTL
    log.info(
        "job %s: attempt %d (pid %d on %s) may still run: watching its lease for up to %.0fs",
        prev.job_id,
        prev.attempt,
        prev.owner.pid,
        prev.owner.host,
        ttl,
    )

    def look() -> tuple[int, float] | None:
        att = store.get_attempt(prev.job_id, prev.attempt)
        if att is None or att.state not in _LIVE:
            return None
        return att.lease_seen

    return wait_for_lapse(look, ttl)


def _end_orphaned_cancel(store: Store, job: JobId, prev: AttemptRecord, gone: bool) -> None:
    """A cancel asked for while no driver of a job run without a manager lives (it died, or
    froze past its lease, before or while the cancel came: ``gone``): nobody else carries it out,
    and the job stayed CANCELING for good, each start refused as "being canceled" (chaos, seed
    172). This start carries it out: the dead attempt ends FAILED and the job CANCELED (what a
    job manager's leader does); the start is then refused as that of an ended job, and
    ``--restart`` runs it again from its checkpoint. A live holder is left to cancel it."""
    if prev.state not in _LIVE or not gone:
        return
    after = store.attempt_failed(
        job, prev.attempt, "its driver was gone while the job was being canceled", None
    )
    log.warning(
        "job %s: canceled while attempt %d's driver was gone; the job is now %s",
        job,
        prev.attempt,
        after.state,
    )


def hold_start(store_url: str, job: str, attempt: int, ttl: float) -> Callable[[], None]:
    """Hold the STARTING attempt a job manager made for this process: this process is its
    owner and renews its lease from now on, until the run claims it (the returned call stops
    the hold). A start that lasts longer than the manager's start lease is then no failure; a
    driver frozen or dead while it starts still lets the lease lapse. Raises
    :class:`~stoker.errors.StaleAttempt` (exit 6) when the attempt is no longer this driver's
    to run (the manager gave it up, a newer attempt exists)."""
    st = open_store(store_url)
    try:
        rec = st.hold_start(JobId(job), AttemptNo(attempt), this_owner(), ttl)
    except BaseException:
        st.close()
        raise
    keeper = LeaseKeeper(st, rec, ttl)
    keeper.start()
    released = threading.Event()

    def release() -> None:
        if not released.is_set():
            released.set()
            keeper.stop()
            st.close()

    return release


class LeaseKeeper:
    """Renews the attempt's lease in the background; fences the attempt when renewal fails.

    ``check()`` is the fence step of every epoch. The authoritative fence is in the store's
    decide statement; this one lets a stale attempt stop before doing work.
    """

    def __init__(
        self,
        store: Store,
        attempt: AttemptRecord,
        lease_ttl: float,
        on_fenced: Callable[[str], None] | None = None,
    ) -> None:
        self.store = store
        self.job = attempt.job_id
        self.attempt: AttemptNo = attempt.attempt
        self.ttl = lease_ttl
        self._on_fenced = on_fenced
        self._fenced: str | None = None
        self._expires = time.monotonic() + lease_ttl
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stoker-lease", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    @property
    def fenced(self) -> str | None:
        return self._fenced

    def check(self) -> None:
        """Raise :class:`StaleAttempt` if this attempt no longer owns its job."""
        if self._fenced is None and time.monotonic() >= self._expires:
            self._fence(f"lease of attempt {self.attempt} lapsed without renewal")
        if self._fenced is not None:
            raise StaleAttempt(self._fenced)

    def renew(self) -> bool:
        t0 = time.monotonic()
        try:
            ok = self.store.renew_lease(self.job, self.attempt, self.ttl)
        except StoreError as e:
            log.warning("lease renewal failed: %s", e)
            return False
        if ok:
            self._expires = t0 + self.ttl
        else:
            self._fence(
                f"attempt {self.attempt} of job {self.job!r} lost its lease "
                "(a newer attempt owns the job)"
            )
        return ok

    def _fence(self, why: str) -> None:
        if self._fenced is None:
            self._fenced = why
            log.error("fenced: %s", why)
            if self._on_fenced is not None:
                self._on_fenced(why)

    def _run(self) -> None:
        period = max(0.2, self.ttl / 3)
        while not self._stop.wait(period):
            if self._fenced is not None:
                return
            try:
                self.renew()
            except Exception:  # keep renewing; a broken store shows up as a lapsed lease
                log.exception("unexpected error renewing the lease")


def existing_job(store_url: str | Path, jid: JobId, refuse_live: bool = False) -> JobRecord | None:
    """Job ``jid`` if a store already holds it; None for a job not made yet.

    An SQLite store file that does not exist is not created here: bad input must leave nothing.
    ``refuse_live``: a job whose current attempt holds a live lease of a live process is
    :class:`~stoker.errors.DuplicateJob` (exit 4) now, before Spark starts (20-30 s on a loaded
    machine), as the store would refuse it once Spark is up; the store's own
    check when the attempt starts stays the one that counts.
    """
    text = str(store_url)
    if not text.startswith(("postgresql://", "postgres://")):
        path = Path(text[len("sqlite:///") :] if text.startswith("sqlite:///") else text)
        if not path.exists():
            return None
    st = open_store(store_url)
    try:
        try:
            job = st.get_job(jid)
        except JobNotFound:
            return None
        if refuse_live and job.current_attempt:
            _refuse_live(st, job)
        return job
    finally:
        st.close()


def committed_nothing(store_url: str | Path, jid: JobId) -> bool:
    """Whether job ``jid`` decided no epoch at all (nothing of it reached a sink's output):
    a FAILED such job runs again as it is, without ``--restart`` (every
    fix-and-rerun of a mistake needed it)."""
    st = open_store(store_url)
    try:
        epochs = st.list_epochs(jid, limit=1000)
    finally:
        st.close()
    return not any(e.state in (EpochState.DECIDED, EpochState.COMMITTED) for e in epochs)


def _refuse_live(st: Store, job: JobRecord) -> None:
    """Only a holder seen alive on this host is refused early: another host's holder may be
    gone with its lease about to lapse, which the store's own check, once Spark is up,
    decides (as before)."""
    prev = st.get_attempt(job.job_id, job.current_attempt)
    now = st.clock.now()
    if prev is None or prev.state not in (AttemptState.RUNNING, AttemptState.STARTING):
        return
    if prev.lease_expires_at <= now or not is_this_host(prev.owner.host):
        return
    if owner_is_dead(prev.owner):
        return
    raise DuplicateJob(
        job.job_id,
        f"attempt {prev.attempt} runs as pid {prev.owner.pid} on {prev.owner.host}, lease "
        f"valid for {prev.lease_expires_at - now:.1f}s",
    )
