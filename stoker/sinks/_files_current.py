"""The current snapshot of a files sink in ``output_mode='complete'``.

Every epoch of a complete-mode query is the whole result, committed as ``<path>/epoch=<N>``
like any epoch. ``<path>/current`` is a symbolic link to the newest committed one
(``epoch=<N>``, relative): it is made under a temporary name and renamed over the old link,
one atomic step, so a reader of ``<path>/current`` sees one whole snapshot, the previous or
the new. The snapshot before the current one is kept (a reader that resolved the link just
before a swap still finds its files); older ones are deleted.

The link moves forward only: a commit of an older epoch (a recovery finishing an epoch a crash
left between its rename and its swap, after later epochs went on) never moves it back.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from pathlib import Path

from stoker.errors import InvalidSink
from stoker.sinks._files_owner import epoch_folders, fsync_dir

log = logging.getLogger("stoker.sinks.files")

CURRENT = "current"
KEEP = 2  # the current snapshot and the one before it
_TARGET = re.compile(r"^epoch=(\d+)$")


def check_mode(mode: str) -> None:
    """The output modes a files sink writes as they mean; InvalidSink naming what to use."""
    if mode == "update":
        raise InvalidSink(
            "files.output_mode",
            "output_mode='update' gives each epoch's changed rows; files would pile them up "
            "as a changelog with no current value per key. Write it to PostgreSQL as an "
            "upsert, sinks.postgres(dsn, table, key=['k']), or use output_mode='complete' "
            "(each epoch a whole snapshot, read from <path>/current)",
        )
    if mode not in ("append", "complete"):
        raise InvalidSink("files.output_mode", f"must be append or complete, got {mode!r}")


def current_epoch(root: Path) -> int | None:
    """The epoch ``<root>/current`` names, or None when there is none yet."""
    try:
        target = os.readlink(root / CURRENT)
    except FileNotFoundError:
        return None
    m = _TARGET.match(target)
    return int(m.group(1)) if m else None


def publish(root: Path, epoch: int) -> None:
    """Point ``<root>/current`` at ``epoch=<epoch>`` (forward only), then prune."""
    now = current_epoch(root)
    if now is not None and now >= epoch:
        return
    tmp = root / f".{CURRENT}.{os.getpid()}.tmp"
    tmp.unlink(missing_ok=True)
    os.symlink(f"epoch={epoch}", tmp)
    os.replace(tmp, root / CURRENT)
    fsync_dir(root)
    _prune(root, epoch)


def _prune(root: Path, epoch: int) -> None:
    """Delete the committed snapshots older than the ``KEEP`` newest up to ``epoch``."""
    older = sorted(n for n in epoch_folders(root) if n <= epoch)[:-KEEP]
    for n in older:
        shutil.rmtree(root / f"epoch={n}", ignore_errors=True)
        log.debug("files: pruned snapshot epoch=%d of %s", n, root)
