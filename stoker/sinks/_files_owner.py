"""Who owns a files sink's output folder: the marker ``<path>/_stoker_owner.json``.

A folder is owned by one job: its id and the uid of its record in the store (the uid tells a
job from an earlier job of the same id whose store is gone; both would number their epochs
from 0 and take each other's ``epoch=N`` folders for their own). The first job to open the
folder claims it by creating the marker, atomically and only if absent; every other job is
refused, naming the owner.

Folders written before markers existed (no marker, ``epoch=N`` folders whose manifests name a
job id but no uid) are refused to any other job id, and *adopted* by a job of that id only when
it resumes from its own state folder (its Spark checkpoint exists, so it will not number epochs
from 0 again); a fresh start of that id is refused. A folder with only staged leftovers of an
earlier version is adopted. See :func:`legacy_content`.
"""

from __future__ import annotations

import errno
import json
import os
import re
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stoker.errors import InvalidSink, OwnedElsewhere, SinkError
from stoker.sinks.base import SinkOwner

MARKER = "_stoker_owner.json"
MANIFEST = "_manifest.json"
FIELD = "files.path"
# A uid goes into folder names: keep it to characters that are safe in any file system.
_UID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_EPOCH = re.compile(r"^epoch=(\d+)$")
# Staged folders: `epoch=N.attempt=A.owner=UID`; without `.owner=` they predate markers.
STAGED = re.compile(r"^epoch=(\d+)\.attempt=(\d+)(?:\.owner=([A-Za-z0-9_-]+))?$")
# Link failures that mean "this file system has no hard links", not "someone else won".
_NO_LINKS = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.ENOSYS}


@dataclass(frozen=True)
class Claim:
    """The content of an output folder's marker."""

    job_id: str
    uid: str
    claimed_at: float
    host: str = ""
    pid: int = 0
    adopted: bool = False  # claimed over outputs written before markers existed

    def owned_by(self, owner: SinkOwner) -> bool:
        return (self.job_id, self.uid) == (owner.job_id, owner.uid)

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.claimed_at))
        where = f" on {self.host} (pid {self.pid})" if self.host else ""
        return f"job {self.job_id!r} (uid {self.uid}), which claimed it at {when}{where}"

    def to_json(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "uid": self.uid,
            "claimed_at": self.claimed_at,
            "host": self.host,
            "pid": self.pid,
            "adopted": self.adopted,
        }


def check_uid(owner: SinkOwner) -> None:
    if not _UID.match(owner.uid):
        raise InvalidSink("files.owner", f"job uid {owner.uid!r} is not 1-64 of [A-Za-z0-9_-]")


def read_claim(root: Path) -> Claim | None:
    """The folder's marker, or None when it has none. A marker that cannot be read is an error:
    guessing would risk two owners."""
    path = root / MARKER
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        d = json.loads(text)
        return Claim(
            job_id=str(d["job_id"]),
            uid=str(d["uid"]),
            claimed_at=float(d["claimed_at"]),
            host=str(d.get("host", "")),
            pid=int(d.get("pid", 0)),
            adopted=bool(d.get("adopted", False)),
        )
    except (ValueError, KeyError, TypeError) as e:
        raise SinkError(
            FIELD,
            f"the owner marker {str(path)!r} cannot be read ({e}); it says which job owns the "
            "folder: restore it, or delete the folder (its outputs go with it) to start over",
        ) from e


def refusal(root: Path, claim: Claim, owner: SinkOwner) -> OwnedElsewhere:
    """The error for ``owner`` finding ``root`` owned by ``claim``: who, since when, what to do."""
    who = claim.describe()
    if claim.job_id == owner.job_id:
        who = (
            f"an earlier job of the same id: {who}; this job (uid {owner.uid}) is not that "
            "job's record (its store or state folder is another), it would number its epochs "
            "from 0 again and collide with that job's"
        )
    return OwnedElsewhere(
        FIELD,
        f"output folder {str(root)!r} belongs to {who}; job {owner.job_id!r} cannot write to "
        "it: choose another path, or delete the folder (the committed epochs in it go with it) "
        "to start over",
    )


def claim_folder(root: Path, owner: SinkOwner, adopted: bool = False) -> Claim:
    """Make ``owner`` the owner of ``root`` unless someone already is; return the owner.

    The marker is written to a temporary file, then hard-linked to its name: a link fails if
    the name exists, so of two jobs racing to claim a fresh folder exactly one wins, and a
    reader never sees a half-written marker. (File systems without hard links: ``O_EXCL``.)
    """
    mine = Claim(
        job_id=owner.job_id,
        uid=owner.uid,
        claimed_at=time.time(),
        host=socket.gethostname(),
        pid=os.getpid(),
        adopted=adopted,
    )
    data = json.dumps(mine.to_json(), sort_keys=True).encode()
    marker = root / MARKER
    tmp = root / f".{MARKER}.{owner.uid}.{os.getpid()}.tmp"
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    try:
        os.link(tmp, marker)
    except FileExistsError:
        pass  # someone holds it (perhaps us, from an earlier run): read below
    except OSError as e:
        if e.errno not in _NO_LINKS:
            raise
        _create_exclusive(marker, data)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(root)
    claim = read_claim(root)
    assert claim is not None
    return claim


def _create_exclusive(marker: Path, data: bytes) -> None:
    try:
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(folder: Path) -> None:
    """Every file under ``folder``, then every folder bottom-up (so a folder's entries are on
    disk before the entry naming it): what Spark's writer left in the page cache is durable."""
    for dirpath, _dirs, files in os.walk(folder, topdown=False):
        for name in files:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(Path(dirpath))


def read_manifest(folder: Path) -> dict[str, Any] | None:
    try:
        d = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return d if isinstance(d, dict) else None


def manifest_is(manifest: dict[str, Any] | None, owner: SinkOwner, attempt: int) -> bool:
    """Whether a committed folder's manifest names ``owner`` and ``attempt``.

    A manifest without a uid predates markers: it is this job's when it names this job id
    (the folder's adoption checked the rest)."""
    if manifest is None or manifest.get("job_id") != owner.job_id:
        return False
    if manifest.get("uid", owner.uid) != owner.uid:
        return False
    return bool(manifest.get("attempt") == attempt)


def manifest_owner(manifest: dict[str, Any] | None) -> str:
    if manifest is None:
        return "no readable manifest"
    uid = manifest.get("uid")
    return (
        f"job {manifest.get('job_id')!r}"
        + (f" (uid {uid})" if uid else "")
        + f", attempt {manifest.get('attempt')}"
    )


@dataclass(frozen=True)
class Legacy:
    """Stoker outputs in a folder that has no marker (written before markers existed)."""

    epochs: dict[int, dict[str, Any] | None]  # epoch -> its manifest (None: unreadable)
    staged: list[str]  # staged folder names

    def __bool__(self) -> bool:
        return bool(self.epochs or self.staged)

    def foreign(self, owner: SinkOwner) -> str | None:
        """What in the folder is not ``owner``'s job's, if anything: a description."""
        for epoch, m in sorted(self.epochs.items()):
            if (
                m is None
                or m.get("job_id") != owner.job_id
                or m.get("uid") not in (None, owner.uid)
            ):
                return f"epoch={epoch} holds {manifest_owner(m)}"
        for name in self.staged:
            named = STAGED.match(name)
            if named and named.group(3) not in (None, owner.uid):
                return f"_staging/{name} was staged by a job of uid {named.group(3)}"
        return None


def epoch_folders(root: Path) -> dict[int, dict[str, Any] | None]:
    """The ``epoch=N`` folders of ``root``: epoch -> its manifest (None: unreadable)."""
    epochs: dict[int, dict[str, Any] | None] = {}
    if not root.is_dir():
        return epochs
    for entry in root.iterdir():
        m = _EPOCH.match(entry.name)
        if m and entry.is_dir():
            epochs[int(m.group(1))] = read_manifest(entry)
    return epochs


def legacy_content(root: Path) -> Legacy:
    """The stoker outputs of a folder without a marker."""
    staged: list[str] = []
    if not root.is_dir():
        return Legacy({}, staged)
    epochs = epoch_folders(root)
    staging = root / "_staging"
    if staging.is_dir():
        staged = sorted(e.name for e in staging.iterdir() if STAGED.match(e.name))
    return Legacy(epochs, staged)
