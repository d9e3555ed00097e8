"""Which stoker may use a store: its schema version against the code's.

Drivers outlive their manager and managers are upgraded one at a time, so two versions of
stoker meet on one store. Every migration from 0020 on says on its first line what it does to
the stoker before it: ``-- kind: expand`` (new tables, new nullable columns: the previous
version keeps working) or ``-- kind: contract`` (a column dropped or renamed, a meaning
changed: it does not). The store records each migration's kind and the stoker that applied it
(``schema_migrations``), so that an older stoker can judge the migrations it does not know,
as Delta Lake's readers judge a table by its ``minReaderVersion``:

- a store whose unknown migrations are all expand is used as it is;
- one with an unknown contract migration is refused (:class:`~stoker.errors.StoreTooNew`, exit
  2), naming both versions, before anything is read or written: not an outage to retry.

Expand, then contract in a later release: a contract migration is applied only while no older
stoker leads or stands by (their heartbeat rows carry the schema they know), otherwise the new
stoker refuses to apply it (:class:`~stoker.errors.MigrationRefused`) and says how to go on.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from stoker.errors import MigrationRefused, StoreTooNew
from stoker.redact import redact_url
from stoker.version import __version__

KINDS = ("expand", "contract")
# The first migration that records kinds and versions; the ones before it have no kind line.
VERSIONED_FROM = 20
_KIND = re.compile(r"\A--\s*kind:\s*(\S+)\s*$", re.MULTILINE)

# A manager seen within this many leader TTLs counts as running (as GET /v1/managers counts it).
_FRESH_TTLS = 3.0
_DEFAULT_TTL = 10.0  # the leader TTL of a lease row written before TTLs were recorded


def stoker_version() -> str:
    """This stoker's version (the package's ``__version__``)."""
    return __version__


def kind_of(number: int, script: str) -> str | None:
    """A migration's kind from its first line; None for the migrations before kinds."""
    m = _KIND.match(script)
    if m is None:
        if number >= VERSIONED_FROM:
            raise ValueError(f"migration {number:04d} has no '-- kind: expand|contract' first line")
        return None
    kind = m.group(1)
    if kind not in KINDS:
        raise ValueError(f"migration {number:04d}: kind {kind!r} is not one of {', '.join(KINDS)}")
    return kind


@dataclass(frozen=True)
class AppliedMigration:
    """A row of ``schema_migrations`` this stoker does not know."""

    version: int
    kind: str | None
    stoker_version: str | None
    applied_at: float

    def describe(self) -> str:
        by = (
            f"stoker {self.stoker_version}"
            if self.stoker_version
            else "a stoker that did not record its version"
        )
        when = datetime.datetime.fromtimestamp(self.applied_at, datetime.UTC)
        kind = self.kind or "kind not recorded"
        return f"migration {self.version} ({kind}, applied by {by} at {when:%Y-%m-%d %H:%M} UTC)"


@dataclass(frozen=True)
class RunningManager:
    """A manager's heartbeat row, as the contract check reads it."""

    holder: str
    address: str
    stoker_version: str | None
    schema_version: int | None
    leads: bool

    def describe(self) -> str:
        role = "the leader" if self.leads else "a standby"
        runs = (
            f"stoker {self.stoker_version}, schema {self.schema_version}"
            if self.schema_version is not None
            else "a stoker from before schema 20, which records no version"
        )
        return f"{role} {self.holder} at {self.address} ({runs})"


Query = Callable[[str, dict[str, Any]], Sequence[Any]]


def refuse_if_too_new(url: str, store_version: int, known: int, query: Query) -> None:
    """Raise :class:`StoreTooNew` if the store holds a contract migration newer than ``known``
    (the newest this stoker has); a store ahead by expand migrations only is fine."""
    rows = query("newer_migrations", {"known": known})
    unknown = [
        AppliedMigration(int(r[0]), r[1], r[2], float(r[3]))
        for r in rows
        if r[1] != "expand"  # contract, or a kind this stoker cannot read: not usable
    ]
    if not unknown:
        return
    first = unknown[0]
    newest = max((m.stoker_version for m in unknown if m.stoker_version), default=None)
    run = f"stoker {newest} or later" if newest else "the stoker that migrated it, or a later one"
    raise StoreTooNew(
        f"the store {redact_url(url)} has schema version {store_version}, newer than this "
        f"stoker ({stoker_version()}, schema {known}) can use: {first.describe()} changed it "
        f"in a way older versions cannot read. Run {run} against this store; nothing was "
        "changed",
        store_version=store_version,
        known=known,
        written_by=newest,
    )


def refuse_contract_under_older(
    url: str, pending: Sequence[tuple[int, str | None]], now: float, query: Query
) -> None:
    """Raise :class:`MigrationRefused` when a pending contract migration would break a manager
    that is still running an older stoker (leading, or standing by to lead)."""
    contract = [n for n, kind in pending if kind == "contract"]
    if not contract:
        return
    needs = max(contract)
    lease = query("leader_for_schema", {})
    ttl = _DEFAULT_TTL
    leader = None
    if lease:
        holder, expires_at, renewals, lease_ttl = lease[0]
        ttl = float(lease_ttl) if lease_ttl else _DEFAULT_TTL
        # A wall-clock judgement, on purpose: this is advice to an operator, not a fence.
        if int(renewals) >= 0 and float(expires_at) + ttl > now:
            leader = str(holder)
    rows = query("managers_for_schema", {"since": now - _FRESH_TTLS * ttl})
    older = [
        RunningManager(
            holder=str(r[0]),
            address=str(r[1]),
            stoker_version=r[2],
            schema_version=None if r[3] is None else int(r[3]),
            leads=str(r[0]) == leader,
        )
        for r in rows
        if r[3] is None or int(r[3]) < needs
    ]
    if leader is not None and not any(str(r[0]) == leader for r in rows):
        # A leader with no fresh heartbeat row: a stoker from before managers had rows.
        older.insert(0, RunningManager(leader, "?", None, None, True))
    if not older:
        return
    older.sort(key=lambda m: not m.leads)
    names = "; ".join(m.describe() for m in older)
    raise MigrationRefused(
        f"stoker {stoker_version()} must apply migration {needs} (contract: a stoker older "
        f"than schema {needs} cannot use the store after it) to {redact_url(url)}, but an "
        f"older stoker still runs on it: {names}. Nothing was changed. To go on: stop those "
        "managers (SIGTERM; the drivers they started keep running), then start this version's "
        "managers: the first one applies the migration and leads, and adopts the drivers. Or "
        "keep the older version until you can."
    )
