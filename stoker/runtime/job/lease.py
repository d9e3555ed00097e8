"""The attempt of a job of an application, and its lease fenced with the application's attempt."""

from __future__ import annotations

from collections.abc import Callable

from stoker.runtime.attempt import LeaseKeeper, owner_is_dead, this_owner
from stoker.store import AttemptRecord, Store
from stoker.types import AttemptNo, AttemptState, JobId


def start_in_app(
    store: Store, jid: JobId, lease_ttl: float, app_attempt: AttemptNo
) -> AttemptRecord:
    """A new attempt of an application's job, made under the application's attempt.

    The store supersedes a live attempt made under an older application attempt (that
    driver can decide nothing any more); one whose process is provably gone is taken over
    whatever made it.
    """
    current = store.get_job(jid).current_attempt
    dead = False
    if current:
        prev = store.get_attempt(jid, current)
        live = prev is not None and prev.state in (AttemptState.STARTING, AttemptState.RUNNING)
        dead = live and prev is not None and owner_is_dead(prev.owner)
    return store.start_attempt(
        jid, this_owner(), lease_ttl, current, previous_dead=dead, app_attempt=app_attempt
    )


class ScopedLease(LeaseKeeper):
    """A job attempt's lease that also ends when its application's attempt is fenced: the
    job's own renewal would notice too (the store refuses it), but only at its next period."""

    def __init__(
        self,
        store: Store,
        attempt: AttemptRecord,
        lease_ttl: float,
        app_fenced: Callable[[], str | None],
    ) -> None:
        super().__init__(store, attempt, lease_ttl)
        self._app_fenced = app_fenced

    @property
    def fenced(self) -> str | None:
        own = super().fenced
        return own if own is not None else self._app_fenced()

    def check(self) -> None:
        why = self._app_fenced()
        if why is not None:
            self._fence(why)
        super().check()
