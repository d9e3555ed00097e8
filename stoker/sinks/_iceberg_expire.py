"""The Iceberg sink's snapshot expiry (``sinks.iceberg(..., keep_snapshots=N)``): pyiceberg
copies the whole table metadata, every snapshot in it, several times per commit, so a table
that only grows makes each epoch's commit slower (15 ms at the first epoch, 88 ms at the 25th,
docs/benchmarks.md 23). With ``keep_snapshots``, each time the current snapshot's ancestry has
grown to twice that, the snapshots beyond the newest ``keep_snapshots`` are expired.

Never expired: the newest snapshot carrying any stoker marker (this job's or another job's
on the same table) and every snapshot after it in the ancestry (the marker is found by walking
the ancestry from the current snapshot, which stops at the first snapshot that is gone: an
expiry that dropped it, or a link before it, would let a commit done again after a crash add
its epoch twice); branch heads and tags. Expiry removes snapshots from the metadata only: data
files stay on disk (an append-only table's current snapshot still names them all).
"""

from __future__ import annotations

import logging
from typing import Any

from stoker.sinks._iceberg_marker import SINK, UID

log = logging.getLogger("stoker.sinks.iceberg")


def expirable(table: Any, keep: int) -> list[int]:
    """The ids of the snapshots of ``table``'s current ancestry an expiry keeping ``keep``
    may remove (oldest last), or none while the ancestry is shorter than twice ``keep``."""
    from pyiceberg.table.snapshots import ancestors_of

    current = table.current_snapshot()
    if current is None:
        return []
    chain = list(ancestors_of(current, table.metadata))  # newest first
    if len(chain) < 2 * keep:
        return []
    boundary = keep
    newest_marks: set[tuple[str, str]] = set()
    for i, snapshot in enumerate(chain):
        summary = snapshot.summary
        if summary is None or summary.get(UID) is None:
            continue
        mark = (str(summary.get(UID)), str(summary.get(SINK)))
        if mark not in newest_marks:
            newest_marks.add(mark)  # the newest snapshot of this (uid, sink): kept, with
            boundary = max(boundary, i + 1)  # everything between it and the current one
    protected = {ref.snapshot_id for ref in table.metadata.refs.values()}
    return [s.snapshot_id for s in chain[boundary:] if s.snapshot_id not in protected]


def expire(table: Any, keep: int, name: str) -> int:
    """Expire :func:`expirable` snapshots of ``table``; how many went. Best effort: a failure
    (another writer's commit in between, the catalog unreachable) is logged and tried again
    after a later epoch; the epoch's commit is done whatever happens here."""
    try:
        ids = expirable(table, keep)
        if not ids:
            return 0
        table.maintenance.expire_snapshots().by_ids(ids).commit()
    except Exception as e:  # the commit before stands; this waits for a later epoch
        log.warning("%s: expiring old snapshots failed, tried again later: %s", name, e)
        return 0
    log.info("%s: expired %d snapshots (keep_snapshots=%d)", name, len(ids), keep)
    return len(ids)
