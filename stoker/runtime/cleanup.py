"""Resolving the sinks of an ended job in a short-lived process (the job manager's janitor).

``python -m stoker.runtime.cleanup --job J --store URL --state-dir D``

The job manager cannot import Spark or the user's sinks, so it starts this. No application
file is loaded and no user code runs (an app's ``main`` may do anything before
``stoker.run``: delete a folder, send a message): the sinks are rebuilt from the descriptors
the job's last attempt recorded in the store when it opened them (``jobs.sinks``, see
:func:`stoker.sinks.from_descriptor`). They are opened for the job, then
:func:`~stoker.runtime.recovery.recover` commits the parts of decided epochs and aborts every
other prepared part, and the job is marked resolved. Recovery needs no Spark (psycopg,
renames), and none is started. The store URL arrives as it does for a driver
(``STOKER_STORE_URL``; the ``--store`` argument is its redacted label).

A job with no recorded descriptors (no driver ever opened its sinks) has nothing to resolve: it
is marked resolved. A sink recorded without a descriptor (a user-defined sink class) or with one
this version cannot rebuild is named in the log and left to the job's next recovery; the
others are resolved (a decided epoch's parts are committed, but the epoch stays DECIDED so the
next recovery commits the part of the sink left out).

A sink whose output belongs to another job now (a files sink's folder handed over to a new
job by a restore from a savepoint, or claimed by another job) is left out, named in the log:
the restore waited for this job's resolution, so nothing of this job's is left in it, and the
new owner's recovery answers for what is there (such a cleanup used to fail
with exit 2, and be retried by every manager start).

A job that is not ended (restarted meanwhile) is left alone: its live attempt recovers at its
own start, and its parts in flight are not ours to abort. The cleanup works under the job's
recovery hold (see :mod:`stoker.runtime.recovery_hold`; the job's state is read again once it
is taken) and touches parts of the job's last attempt and earlier ones only: an attempt started
meanwhile waits for the hold, and a cleanup that stalled past it leaves that attempt's parts
alone.

Older managers passed ``-D`` pairs and ``-- app.py [args ...]``: both are still accepted and
ignored.

Exit codes: 0 resolved (or nothing to do), 2 bad input, 3 job not found, 7 store unavailable,
1 anything else (the janitor tries again later).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stoker import logformat
from stoker.driverargs import DriverArgs, DriverRole
from stoker.errors import OwnedElsewhere, SinkError, StokerError, exit_code
from stoker.redact import redact_logs, redact_text

if TYPE_CHECKING:
    from collections.abc import Callable

    from stoker.sinks.base import TwoPhaseSink
    from stoker.store import JobRecord, Store

log = logging.getLogger("stoker.cleanup")


def _rebuild(descriptors: list[dict[str, Any]]) -> tuple[list[TwoPhaseSink], list[str]]:
    """The sinks the descriptors rebuild, and the names of those they cannot (logged)."""
    from stoker.sinks import from_descriptor

    sinks: list[TwoPhaseSink] = []
    left: list[str] = []
    for d in descriptors:
        name = str(d.get("name") or "?")
        if d.get("kind") is None:
            log.warning(
                "cannot resolve sink %r (%s): it records no descriptor; it is left for the "
                "job's next recovery",
                name,
                d.get("class") or "a user-defined sink",
            )
            left.append(name)
            continue
        try:
            sinks.append(from_descriptor(d))
        except SinkError as e:
            log.warning(
                "cannot resolve sink %r: %s; it is left for the job's next recovery", name, e
            )
            left.append(name)
    return sinks, left


def resolve(job: str, store_url: str, state_dir: Path) -> bool:
    """Resolve the sinks of ended job ``job`` as its last attempt recorded them.

    True when they were resolved (or there were none); False when the job is not ended
    (nothing done).
    """
    from stoker.errors import StaleAttempt
    from stoker.runtime.recovery_hold import Hold
    from stoker.store import open_store
    from stoker.types import job_id

    jid = job_id(job)
    st = open_store(store_url)
    try:
        record = st.get_job(jid)
        if not _ended(record):
            return False
        try:
            last = record.current_attempt
            with Hold(st, jid, last, HOLD_TTL) as hold:
                record = st.get_job(jid)  # again, under the hold: a restart may have come
                if not _ended(record) or record.current_attempt != last:
                    return False
                _resolve_held(st, record, state_dir, hold.check)
        except StaleAttempt as e:
            log.info("job %s: a newer attempt resolves it: %s", jid, e)
            return False
        return True
    finally:
        st.close()


# How long a cleanup's hold outlives the cleanup if it stalls: a driver's default lease.
HOLD_TTL = 30.0


def _ended(record: JobRecord) -> bool:
    if not record.state.terminal:
        log.info("job %s is %s, not ended: its own attempt recovers", record.job_id, record.state)
    return record.state.terminal


def _resolve_held(st: Store, record: JobRecord, state_dir: Path, fence: Callable[[], None]) -> None:
    """Recover the job's sinks as recorded, up to its last attempt; mark it resolved."""
    from stoker.runtime.recovery import recover
    from stoker.sinks.base import SinkOwner

    jid = record.job_id
    descriptors = st.get_job_sinks(jid)
    if not descriptors:
        log.info("job %s: no attempt opened its sinks; nothing to resolve", jid)
        st.set_resolved(jid)
        return
    rebuilt, left = _rebuild(descriptors)
    owner = SinkOwner(jid, record.uid)
    sinks = []
    for sink in rebuilt:
        try:
            sink.open(owner, state_dir)
        except OwnedElsewhere as e:
            # Handed over to a new job by a restore from a savepoint (which waited for this
            # job's resolution first), or claimed by another: not this job's to resolve.
            log.info("job %s: sink %r is not this job's any more: %s", jid, sink.name, e)
            continue
        sinks.append(sink)
    # Logs what it committed and aborted. A sink left out: a decided epoch stays DECIDED
    # (that sink still holds its part) and only the rebuilt sinks' records follow.
    recover(
        st,
        jid,
        sinks,
        up_to=record.current_attempt,
        phase="cleanup",
        fence=fence,
        complete=not left,
    )
    st.set_resolved(jid)


def main(argv: list[str] | None = None) -> int:
    try:  # the command line and environment the job manager wrote (stoker.driverargs)
        ns = DriverArgs.from_argv(DriverRole.CLEANUP, argv)
    except StokerError as e:
        print(redact_text(f"stoker cleanup: {type(e).__name__}: {e}"), file=sys.stderr, flush=True)
        return exit_code(e)
    logformat.configure()  # STOKER_LOG_FORMAT: the manager's --log-format
    redact_logs()
    if ns.args:
        log.info("application arguments ignored: the sinks come from the store")
    try:
        done = resolve(ns.name, ns.store, ns.state_dir.resolve())
    except StokerError as e:
        print(redact_text(f"stoker cleanup: {type(e).__name__}: {e}"), file=sys.stderr, flush=True)
        return exit_code(e)
    print(
        f"stoker cleanup: job {ns.name} " + ("resolved" if done else "not ended: nothing done"),
        file=sys.stderr,
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
