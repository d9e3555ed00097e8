"""The Iceberg sink's commit marker: properties in the summary of each snapshot it commits,
``stoker.uid``, ``stoker.sink`` and ``stoker.epoch`` (Flink's Iceberg sink stamps
``flink.job-id`` and ``flink.max-committed-checkpoint-id`` the same way).

Epochs commit in order, so the newest snapshot of the current snapshot's ancestry that carries
this uid and sink names the newest epoch committed: every epoch up to it is in the table.
"""

from __future__ import annotations

from typing import Any

UID = "stoker.uid"
SINK = "stoker.sink"
EPOCH = "stoker.epoch"
ATTEMPT = "stoker.attempt"


def marker(uid: str, sink: str, epoch: int, attempt: int) -> dict[str, str]:
    """The summary properties of an epoch's snapshot."""
    return {UID: uid, SINK: sink, EPOCH: str(epoch), ATTEMPT: str(attempt)}


def _epoch_of(snapshot: Any, uid: str, sink: str) -> int | None:
    """The epoch a snapshot of (uid, sink) committed; None for any other snapshot."""
    summary = snapshot.summary
    if summary is None or summary.get(UID) != uid or summary.get(SINK) != sink:
        return None
    return int(summary.get(EPOCH))


def newest_epoch(table: Any, uid: str, sink: str) -> int | None:
    """The newest epoch of (uid, sink) in the ancestry of ``table``'s current snapshot."""
    from pyiceberg.table.snapshots import ancestors_of

    current = table.current_snapshot()
    if current is None:
        return None
    for snapshot in ancestors_of(current, table.metadata):
        e = _epoch_of(snapshot, uid, sink)
        if e is not None:
            return e
    return None


def epoch_files(table: Any, uid: str, sink: str, epoch: int) -> set[str]:
    """The data files the snapshots of (uid, sink, ``epoch``) in the current ancestry added
    (their paths as the table names them): what a clean-up of that epoch must keep. Reads
    only those snapshots' own manifests."""
    from pyiceberg.manifest import ManifestContent, ManifestEntryStatus
    from pyiceberg.table.snapshots import ancestors_of

    current = table.current_snapshot()
    if current is None:
        return set()
    found: set[str] = set()
    for snapshot in ancestors_of(current, table.metadata):
        e = _epoch_of(snapshot, uid, sink)
        if e is None:
            continue
        if e < epoch:
            break  # older epochs below: epochs commit in order
        if e != epoch:
            continue
        for manifest in snapshot.manifests(table.io):
            if manifest.content != ManifestContent.DATA:
                continue
            if manifest.added_snapshot_id != snapshot.snapshot_id:
                continue
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                if entry.status == ManifestEntryStatus.ADDED:
                    found.add(str(entry.data_file.file_path))
    return found


def current_files(table: Any) -> list[Any]:
    """Every data file of the current snapshot (``DataFile``s): what a complete-mode epoch
    replaces."""
    from pyiceberg.manifest import ManifestContent

    current = table.current_snapshot()
    if current is None:
        return []
    files: list[Any] = []
    for manifest in current.manifests(table.io):
        if manifest.content == ManifestContent.DATA:
            files.extend(
                e.data_file for e in manifest.fetch_manifest_entry(table.io, discard_deleted=True)
            )
    return files
