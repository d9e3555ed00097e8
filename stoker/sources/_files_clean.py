"""A file source's clean-up: once the epoch that read a file has committed, the file is moved
into ``archive_dir`` (``clean_source="archive"``) or removed (``"delete"``); and the checks of
those options when the source is validated."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

from stoker.errors import InvalidSource
from stoker.sources._filelog import Entry

CLEAN_SOURCE = ("archive", "delete")


def clean_file(e: Entry, clean_source: str | None, archive_dir: Path | None) -> None:
    """Archive or delete the file of log entry ``e``, if it is still the one that was read."""
    path = Path(e.path)
    try:
        st = path.stat()
    except FileNotFoundError:
        return  # cleaned before a crash, or removed by someone else
    if e.mtime is not None and st.st_mtime_ns != e.mtime:
        return  # another file under the same name now: not the one that was read
    if clean_source == "delete":
        path.unlink(missing_ok=True)
        return
    assert archive_dir is not None
    archive_dir.mkdir(parents=True, exist_ok=True)
    target = archive_dir / path.name
    if target.exists():
        target = archive_dir / f"{path.name}.{e.seq}"
    try:
        os.rename(path, target)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        shutil.move(str(path), str(target))  # another file system: copy, then remove


def check_clean(clean_source: str | None, archive_dir: str | None, folder: Path) -> None:
    """``clean_source`` and ``archive_dir`` of a source reading ``folder``: InvalidSource naming
    the option that cannot work."""
    if clean_source is None:
        if archive_dir is not None:
            raise InvalidSource("files.archive_dir", "only used with clean_source='archive'")
        return
    if clean_source not in CLEAN_SOURCE:
        raise InvalidSource(
            "files.clean_source",
            f"unknown value {clean_source!r}; use one of {', '.join(CLEAN_SOURCE)} "
            "(or leave it out to keep the files)",
        )
    if not os.access(folder, os.W_OK):
        raise InvalidSource("files.clean_source", f"input folder {str(folder)!r} is not writable")
    if clean_source == "delete":
        if archive_dir is not None:
            raise InvalidSource("files.archive_dir", "only used with clean_source='archive'")
        return
    if not archive_dir:
        raise InvalidSource("files.archive_dir", "clean_source='archive' needs an archive_dir")
    archive = Path(archive_dir).resolve()
    if archive == folder.resolve():
        raise InvalidSource("files.archive_dir", "must not be the input folder itself")
    if archive.exists() and not archive.is_dir():
        raise InvalidSource("files.archive_dir", f"{str(archive)!r} is not a folder")
    probe = archive
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not os.access(probe, os.W_OK | os.X_OK):
        raise InvalidSource("files.archive_dir", f"{str(archive)!r} is not writable")
