"""What a restore from a savepoint (:mod:`stoker.runtime.restore`) checks about the savepoint's
job and its outputs before anything is written.

- **The old job is settled.** It has ended (``savepoint --stop``, a cancel), and its outputs
  are resolved: no epoch DECIDED and not committed, no sink transaction still PREPARED, its
  resolution recorded since it ended. A decided epoch is committed by whoever resolves the
  job (its driver at its end, a job manager's janitor): output after the savepoint, written
  while the new job writes the same epochs. The restore refuses and says how the old job gets
  resolved, rather than resolve it itself: resolving writes (it commits the decided parts),
  a check writes nothing, and a janitor may be resolving it at the same time.
- **The old job's store can be read.** The savepoint records its store's URL with the
  password hidden. When that is the store the new job runs on, the new job's URL (which has
  the password) reads it; otherwise the operator gives the old store's URL in
  ``STOKER_SAVEPOINT_STORE_URL`` (read from the environment, never written or shown), and
  without it the restore is refused: a job that cannot be looked at might still be running.
- **No output is ahead of the savepoint.** Every sink is asked which epochs of the
  savepoint's uid it holds (:func:`stoker.sinks.committed_epochs_of`); one past the
  savepoint's epoch means the old job went on after the savepoint was taken, and the new job
  would write those epochs' rows again. Refused, unless the user asks for exactly that
  (``--rewrite-output-after-savepoint``); a files sink is refused even then, as it never
  writes an epoch folder over an existing one.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stoker.errors import InvalidInput, JobNotFound
from stoker.redact import MASK, redact_text
from stoker.runtime.savepoint import FIELD
from stoker.sinks import committed_epochs_of, descriptor_of
from stoker.sinks.base import SinkOwner
from stoker.store import open_store
from stoker.types import Epoch, EpochState, JobState, TxnState

if TYPE_CHECKING:
    from stoker.pipeline import Pipeline
    from stoker.sinks.base import TwoPhaseSink
    from stoker.store import JobRecord, Store

log = logging.getLogger("stoker.savepoint")

# The savepoint's job's store URL, when it is not the new job's store and has a password.
SAVEPOINT_STORE_ENV = "STOKER_SAVEPOINT_STORE_URL"
REWRITE_FLAG = "--rewrite-output-after-savepoint"
REWRITE_FIELD = "rewrite_output_after_savepoint"


# the old job -----------------------------------------------------------------------------------
def refuse_unsettled(
    previous: SinkOwner, manifest: dict[str, Any], store_url: str, shared: list[str]
) -> None:
    """The savepoint's job must have ended, its outputs resolved, before another job takes
    over the outputs it wrote (``shared``, by sink name): two jobs writing them would each
    commit what the other did not read."""
    for url in stores_to_check(manifest, store_url):
        st = _open_existing(url)
        if st is None:
            continue
        try:
            _refuse_in(st, previous, manifest, shared)
        finally:
            st.close()


def stores_to_check(manifest: dict[str, Any], current: str) -> list[str]:
    """The stores that may hold the savepoint's job: the new job's, and the savepoint's own
    when that is another one, with a URL that can be opened (see the module's docstring)."""
    urls = [current]
    recorded = manifest.get("store")
    if not isinstance(recorded, str) or not recorded:
        return urls  # a savepoint that names no store: only the new job's can be looked at
    shown = redact_text(recorded)
    if shown == redact_text(current):
        return urls  # the same store: the new job's URL has the password
    if MASK not in shown:
        return [*urls, recorded]
    given = os.environ.get(SAVEPOINT_STORE_ENV, "")
    if given and redact_text(given) == shown:
        return [*urls, given]
    why = (
        f"{SAVEPOINT_STORE_ENV} names another store ({redact_text(given)})"
        if given
        else f"{SAVEPOINT_STORE_ENV} is not set"
    )
    raise InvalidInput(
        FIELD,
        f"the savepoint's job {manifest.get('job_id')!r} ran on the store {shown}, whose "
        f"password the savepoint does not record, and {why}: stoker cannot see whether that "
        f"job has ended. Give that store's URL in the environment variable {SAVEPOINT_STORE_ENV} "
        "(it is read, never written or shown), or run the new job on that store",
    )


def _open_existing(url: str) -> Store | None:
    """The store at ``url``; None for an SQLite file that does not exist (not created here)."""
    if not url.startswith(("postgresql://", "postgres://")):
        path = Path(url[len("sqlite:///") :] if url.startswith("sqlite:///") else url)
        if not path.exists():
            return None
    return open_store(url)


def _refuse_in(st: Store, previous: SinkOwner, manifest: dict[str, Any], shared: list[str]) -> None:
    jid = previous.job_id
    try:
        job = st.get_job(jid)
    except JobNotFound:
        return
    if job.uid and job.uid != previous.uid:
        return  # another job of that id (the savepoint's store is gone)
    if not job.state.terminal:
        stop = (
            f"stoker savepoint {jid} --stop, or stoker cancel {jid}"
            if job.state != JobState.SUSPENDED
            else f"stoker cancel {jid}: it is suspended, no driver runs it"
        )
        raise InvalidInput(
            FIELD,
            f"the savepoint's job {jid!r} is still {job.state} (not ended) and the new job "
            f"would take over its outputs ({', '.join(shared)}): either stop it first ({stop}),"
            " then start the new job from a savepoint, or give the new job outputs of its own "
            "(another folder or table): a fork to new outputs needs nothing of the old job",
        )
    pending = _pending(st, job)
    if pending:
        raise InvalidInput(
            FIELD,
            f"the savepoint's job {jid!r} has ended ({job.state}) but its outputs are not "
            f"resolved yet ({'; '.join(pending)}): resolving it may commit output after the "
            "savepoint. Start the new job once it is resolved: a job manager resolves an "
            "ended job's sinks shortly after its end; without one, run "
            f"python -m stoker.runtime.cleanup --job {jid} --store {redact_text(st.url)} "
            f"--state-dir {manifest.get('state_dir') or '<its state folder>'}",
        )


def _pending(st: Store, job: JobRecord) -> list[str]:
    """What is owed of an ended job's resolution, one phrase each."""
    out = []
    decided = [e.epoch for e in st.epochs_in_state(job.job_id, str(EpochState.DECIDED))]
    if decided:
        out.append(f"epoch(s) {', '.join(map(str, decided))} DECIDED and not committed")
    prepared = sorted(
        {(t.epoch, t.sink, t.attempt) for t in st.list_txns(job.job_id, TxnState.PREPARED)}
    )
    if prepared:
        parts = ", ".join(f"{s} epoch {e} attempt {a}" for e, s, a in prepared)
        out.append(f"sink transactions still PREPARED: {parts}")
    if not out and job.resolved_at is None:
        out.append("no resolution of its sinks is recorded since it ended")
    return out


# outputs after the savepoint -------------------------------------------------------------------
def outputs_ahead(
    manifest: dict[str, Any],
    folder: Path,
    pipeline: Pipeline,
    previous: SinkOwner,
    rewrite: bool,
) -> tuple[str, ...]:
    """Refuse when a sink holds output of the savepoint's uid after its epoch, unless
    ``rewrite`` (then: what will be written again, one line per sink, for the log)."""
    epoch = manifest.get("epoch")
    first = 0 if epoch is None else int(epoch) + 1
    ahead: list[tuple[TwoPhaseSink, Epoch]] = []
    for sink in pipeline.sinks:
        held = committed_epochs_of(sink, previous)
        if held is None:
            log.warning(
                "sink %r cannot tell which epochs it holds: if job %s went on after the "
                "savepoint's epoch %s, the new job writes those epochs' rows to it again",
                sink.name,
                previous.job_id,
                epoch,
            )
            continue
        later = [e for e in held if e >= first]
        if later:
            ahead.append((sink, later[-1]))
    if not ahead:
        return ()
    # Epochs commit in order: holding epoch N means holding every epoch up to it.
    held_text = "; ".join(f"sink {s.name!r} holds epochs {first}..{last}" for s, last in ahead)
    went_on = (
        f"{held_text}, after the savepoint's epoch {epoch} (job {previous.job_id!r} went on "
        f"after {str(folder)!r} was taken)"
    )
    files = [s.name for s, _ in ahead if descriptor_of(s).get("kind") == "files"]
    if files:
        raise InvalidInput(
            FIELD,
            f"{went_on}: a files sink never writes an epoch folder over an existing one; start "
            "from a later savepoint, write to another folder, or delete the epoch folders "
            f"after the savepoint's from {', '.join(map(repr, files))} first",
        )
    if not rewrite:
        raise InvalidInput(
            FIELD,
            f"{went_on}: the new job would write the rows of those epochs again. Start from a "
            "later savepoint or write to other outputs; to write them again on purpose, give "
            f"{REWRITE_FLAG} ({REWRITE_FIELD} in a submission)",
        )
    return tuple(
        f"{REWRITE_FLAG}: sink {s.name!r} holds epochs {first}..{last} of job "
        f"{previous.job_id!r}; their rows will be written to it again"
        for s, last in ahead
    )


__all__ = [
    "REWRITE_FIELD",
    "REWRITE_FLAG",
    "SAVEPOINT_STORE_ENV",
    "outputs_ahead",
    "refuse_unsettled",
    "stores_to_check",
]
