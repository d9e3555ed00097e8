"""Where the lineage is read: the stores a check opens (the new job's, the savepoint's job's,
earlier restores'), each once; a store that cannot be opened is a refusal naming it, unless
the user said to go on without it. And what needs no store: a savepoint's key, whether it was
taken at its job's final epoch, which outputs two jobs share."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from stoker import checkpoint_layout
from stoker.errors import InvalidInput, StokerError
from stoker.redact import MASK, redact_text
from stoker.store import Store, open_store

log = logging.getLogger("stoker.savepoint")

FIELD = "from_savepoint"  # what a refused restore is named as, in every error
# The savepoint's job's store URL, when it is not the new job's store and has a password.
SAVEPOINT_STORE_ENV = "STOKER_SAVEPOINT_STORE_URL"
FORK_FLAG, FORK_FIELD = "--fork", "fork"
IGNORE_FLAG, IGNORE_FIELD = "--ignore-unreachable-stores", "ignore_unreachable_stores"
IGNORE = f"{IGNORE_FLAG} ({IGNORE_FIELD!r}: true in a submission)"
FORK = f'{FORK_FLAG} ("{FORK_FIELD}": true in a submission)'


def savepoint_key(manifest: dict[str, Any]) -> str:
    """What names a savepoint wherever its folder is copied: its job, uid and event."""
    made_by = manifest.get("control_id") or manifest.get("created_at") or manifest.get("epoch")
    return f"{manifest.get('job_id')}/{manifest.get('uid')}/{made_by}"


def sink_places(sinks: Iterable[Any]) -> tuple[dict[str, Any], ...]:
    """Each sink's name and, when it can tell, where it writes (its ``target()``)."""
    out = []
    for s in sinks:
        where = getattr(s, "target", None)
        out.append({"name": s.name, "target": where() if callable(where) else None})
    return tuple(out)


def overlap(mine: Iterable[dict[str, Any]], theirs: Iterable[dict[str, Any]]) -> list[str]:
    """My sinks that write what one of ``theirs`` writes: the same name, or the same target."""
    names = {t.get("name") for t in theirs}
    targets = {t.get("target") for t in theirs} - {None}
    return [
        str(m["name"])
        for m in mine
        if m.get("name") in names or (m.get("target") is not None and m["target"] in targets)
    ]


# the savepoint's end ----------------------------------------------------------------------------
def refuse_finished(manifest: dict[str, Any], folder: Path) -> None:
    """Refuse a savepoint taken at its job's final epoch: every source's offset in it says
    finished, so a job restored from it would plan no epoch and never end."""
    epoch = manifest.get("epoch")
    if epoch is None:
        return
    try:
        lines = checkpoint_layout.offset_lines(folder / "checkpoint", int(epoch))
    except OSError:
        return
    offsets = [_offset(line) for line in lines or []]
    if not offsets or not all(o is not None and o.get("finished") is True for o in offsets):
        return
    jid = manifest.get("job_id")
    raise InvalidInput(
        FIELD,
        f"the savepoint {str(folder)!r} was taken at job {jid!r}'s final epoch {epoch}: job "
        f"{jid!r} had finished (every source had read to its end), so a job restored from it "
        "would have nothing to read and never end. Nothing is left to go on with: start the "
        "job without --from-savepoint (its sources are read from their beginning), or from a "
        "savepoint taken before the end",
    )


def _offset(line: str) -> dict[str, Any] | None:
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) and "sid" in value else None


# the stores a check reads -----------------------------------------------------------------------
class Stores:
    """The stores one check reads, each opened once: the new job's own (``url``; None while
    it does not exist), the savepoint's job's and earlier restores'. A store that cannot be
    opened is a refusal naming it, or with ``ignore`` a warning (``skipped``)."""

    def __init__(self, url: str, ignore: bool = False, own: Store | None = None) -> None:
        self.url = canonical(url)
        self.ignore = ignore
        self.skipped: list[str] = []
        self._opened: dict[str, Store | None] = {}
        self._borrowed = own
        if own is not None:
            self._opened[redact_text(url)] = own

    def own(self) -> Store | None:
        """The new job's store; None while it does not exist (an SQLite file not made yet)."""
        shown = redact_text(self.url)
        if shown not in self._opened:
            self._opened[shown] = _open_existing(self.url)
        return self._opened[shown]

    def at(self, recorded: str, whose: str) -> Store | None:
        """The store ``recorded`` (a URL as a record shows it: its password hidden) that holds
        ``whose`` (for the messages); None when it is skipped (``ignore``)."""
        recorded = canonical(recorded)
        shown = redact_text(recorded)
        if shown == redact_text(self.url):
            return self.own()
        if shown in self._opened:
            return self._opened[shown]
        try:
            real = self._real_url(recorded, shown, whose)
            st = _open_existing(real)
            if st is None:
                raise _Unreachable(f"{shown} does not exist on this host")
        except _Unreachable as e:
            self._unreachable(shown, whose, str(e))
            st = None
        self._opened[shown] = st
        return st

    def _real_url(self, recorded: str, shown: str, whose: str) -> str:
        if MASK not in shown:
            return recorded
        given = os.environ.get(SAVEPOINT_STORE_ENV, "")
        if given and redact_text(given) == shown:
            return given
        why = (
            f"{SAVEPOINT_STORE_ENV} names another store ({redact_text(given)})"
            if given
            else f"{SAVEPOINT_STORE_ENV} is not set"
        )
        if self.ignore:
            raise _Unreachable(f"its password is not recorded and {why}")
        raise InvalidInput(
            FIELD,
            f"{whose} ran on the store {shown}, whose password the savepoint does not record, "
            f"and {why}: stoker cannot see whether that job has ended. Give that store's URL in "
            f"the environment variable {SAVEPOINT_STORE_ENV} (it is read, never written or "
            f"shown), or run the new job on that store; if you know that job is over and its "
            f"outputs resolved, {IGNORE} starts without looking",
        )

    def _unreachable(self, shown: str, whose: str, why: str) -> None:
        if not self.ignore:
            raise InvalidInput(
                FIELD,
                f"the store {shown} of {whose} cannot be opened ({why}): stoker cannot see "
                "whether that job has ended or what it wrote after the savepoint, and does not "
                "start without knowing. Make that store reachable from this host (run the new "
                "job where it is, or copy it here), or, if you know that job is over and its "
                f"outputs resolved, give {IGNORE}",
            )
        text = f"the store {shown} of {whose} cannot be opened ({why}): not checked, as {IGNORE}"
        log.warning("%s asks", text)
        self.skipped.append(text)

    def close(self) -> None:
        for st in self._opened.values():
            if st is not None and st is not self._borrowed:
                st.close()
        self._opened.clear()


def canonical(url: str | Path) -> str:
    """One spelling per store: an SQLite file as ``sqlite:///<absolute path>``."""
    text = str(url)
    if text.startswith(("postgresql://", "postgres://")) or "://" in text.replace(
        "sqlite:///", "", 1
    ):
        return text
    path = text[len("sqlite:///") :] if text.startswith("sqlite:///") else text
    return f"sqlite:///{Path(path).resolve()}"


class _Unreachable(Exception):
    """A store that cannot be opened here; why."""


def _open_existing(url: str) -> Store | None:
    """The store at ``url``; None for an SQLite file that does not exist (not created here);
    :class:`_Unreachable` when it cannot be opened."""
    if not url.startswith(("postgresql://", "postgres://")):
        path = Path(url[len("sqlite:///") :] if url.startswith("sqlite:///") else url)
        if not path.exists():
            return None
    try:
        return open_store(url)
    except StokerError as e:
        raise _Unreachable(str(e)) from e


def savepoint_store(stores: Stores, manifest: dict[str, Any]) -> Store | None:
    """The savepoint's job's store: the new job's own when the savepoint records none or the
    same one (None while that does not exist)."""
    recorded = manifest.get("store")
    if not isinstance(recorded, str) or not recorded:
        return stores.own()  # a savepoint that names no store: only this one can be looked at
    return stores.at(recorded, f"the savepoint's job {manifest.get('job_id')!r}")


__all__ = [
    "FIELD",
    "FORK",
    "FORK_FIELD",
    "FORK_FLAG",
    "IGNORE",
    "IGNORE_FIELD",
    "IGNORE_FLAG",
    "SAVEPOINT_STORE_ENV",
    "Stores",
    "canonical",
    "overlap",
    "refuse_finished",
    "savepoint_key",
    "savepoint_store",
    "sink_places",
]
