"""The durable list of input files a file source has discovered, in the order it reads them.

Offsets of the file source are sequence numbers in this list. Files are appended (and fsynced)
before an offset that covers them is returned to Spark, so a replayed epoch finds the same files.
A bounded source lists its folder once, at the job's first start, and seals the list.

Several processes may hold the same log open: the reader of the current attempt and, for a
while, a zombie of an older one (SIGSTOPped, then resumed). Every change happens under an
exclusive ``flock`` of ``<log>.lock``, after re-reading what others appended; a sequence number
is one more than the last one *on disk*, never a count kept in memory.

Lines (JSON):
- ``{"seq": 7, "path": "/in/a.json", "size": 10, "mtime": <ns>}``: an input file
- ``{"sealed": true}``: a bounded source's list is complete
- ``{"cleaned": 57}``: ``clean_source`` has archived or deleted the files below seq 57
- ``{"compacted": {"base": .., "next": .., "watermark": .., "cleaned": .., "sealed": ..}}``: the
  first line of a compacted log (below)

Loading checks the order: sequence numbers must grow. A number that does not grow means two
writers numbered entries on their own (a log written before the lock existed): which file an
offset meant is then unknowable, so loading refuses with :class:`SourceError` naming the line.
The same path twice inside the look-back window (a file read once already) is repaired: the
later entry becomes a hole that reads nothing, so the file is not read twice.

Compaction (:meth:`FileLog.committed`): once Spark has committed an offset, entries below it
are never read again. The log is rewritten (a temporary file, fsync, rename) as a header plus
the entries still needed: those at or past the committed offset, and those within the
look-back window of the watermark (they keep a late duplicate out). Entries keep their
sequence numbers, so an offset means the same file before and after.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from stoker.errors import SourceError
from stoker.sources import _flock as flock

log = logging.getLogger("stoker.sources.files")

# Files as discovery hands them over: (mtime in ns, absolute path, size in bytes).
Found = tuple[int, str, int]


@dataclass(frozen=True)
class Entry:
    seq: int
    path: str
    size: int
    mtime: int | None = None  # ns; None in logs written before mtimes were recorded


def _visible(name: str) -> bool:
    # Like Spark: names starting with '.' or '_' are in-progress or metadata files.
    return not name.startswith((".", "_"))


def list_folder(folder: Path, suffix: str | None) -> list[Found]:
    """(mtime ns, path, size) of the visible files directly in ``folder``, oldest first."""
    found = []
    with os.scandir(folder) as it:
        for e in it:
            if not e.is_file() or not _visible(e.name):
                continue
            if suffix and not e.name.endswith(suffix):
                continue
            st = e.stat()
            found.append((st.st_mtime_ns, e.path, st.st_size))
    found.sort()
    return found


class FolderScan:
    """Finds the files that appeared in a folder since the last scan, statting only those.

    The cost that must not grow with the files already taken is the ``stat`` per file and the
    memory per file: a scan reads the folder's names (``readdir``, which no flat folder can
    avoid; ``clean_source`` keeps the folder small) and stats only names it did not see in the
    previous scan. When the folder's own mtime has not moved since a scan that began well after
    it last moved, nothing was added or renamed in: the scan is skipped (O(1) when idle).
    """

    # A directory's mtime comes from a coarse kernel clock: trust "unchanged" only when the
    # last change was this long before the previous scan began.
    SETTLE_NS = 2_000_000_000

    def __init__(self, folder: Path, suffix: str | None) -> None:
        self.folder = folder
        self.suffix = suffix
        self.scans = 0  # completed scans (the first one after a start sees every name as new)
        self._seen: set[str] = set()
        self._quiet: tuple[int, int] | None = None  # (ino, mtime_ns) of a settled folder
        # (names to add; the whole listing when some seen name left; the folder's sig)
        self._pending: tuple[set[str], list[str] | None, tuple[int, int] | None] | None = None

    def scan(self) -> list[Found]:
        """Files whose names are new since the last :meth:`accept`-ed scan, oldest first."""
        started = time.time_ns()
        st = os.stat(self.folder)
        sig = (st.st_ino, st.st_mtime_ns)
        if sig == self._quiet:
            self._pending = None
            return []
        # Names only (no DirEntry objects, no stat), the new ones picked by a set lookup each.
        listing = os.listdir(self.folder)
        seen = self._seen
        new = {n for n in listing if n not in seen}
        # Some seen names left the folder (cleaned, moved away): rebuild from this listing, so
        # memory follows the folder and a name that comes back is looked at again.
        shrunk = len(listing) - len(new) < len(seen)
        found: list[Found] = []
        suffix = self.suffix
        for name in list(new):
            if not _visible(name) or (suffix and not name.endswith(suffix)):
                continue
            path = os.path.join(self.folder, name)
            try:
                s = os.stat(path)
            except FileNotFoundError:
                new.discard(name)  # gone between listing and stat: looked at next time
                continue
            if stat.S_ISREG(s.st_mode):
                found.append((s.st_mtime_ns, path, s.st_size))
        settled = st.st_mtime_ns < started - self.SETTLE_NS
        self._pending = (new, listing if shrunk else None, sig if settled else None)
        found.sort()
        return found

    def accept(self) -> None:
        """The last scan's files are in the log: do not stat those names again."""
        if self._pending is None:
            return
        new, listing, self._quiet = self._pending
        self._pending = None
        if listing is not None:
            old = self._seen
            self._seen = {n for n in listing if n in old}
        if new:
            self._seen |= new
        self.scans += 1


class FileLog:
    """The append-only (and compacted) log of one file source; see the module docstring."""

    LOCK_TIMEOUT = 60.0

    def __init__(
        self,
        path: Path,
        *,
        lookback_ns: int | None = None,
        compact_every: int = 10_000,
    ) -> None:
        self.path = path
        self.lock_path = path.with_name(path.name + ".lock")
        # None: no window (a bounded source, or no age limit): every path is remembered.
        self.lookback_ns = lookback_ns
        self.compact_every = max(1, compact_every)
        self._reset()
        self.refresh()

    # state ---------------------------------------------------------------------------------
    def _reset(self) -> None:
        self.sealed = False
        self.next_seq = 0
        self._last = -1  # the last seq read: seqs must grow
        self.base = 0  # entries below this seq are committed; compaction may drop them
        self.cleaned = 0  # clean_source has handled every entry below this seq
        self.watermark: int | None = None  # newest mtime of any entry ever appended
        self._entries: dict[int, Entry] = {}
        self._recent: dict[str, int | None] = {}  # path -> mtime, for duplicate checks
        self.repaired: list[int] = []  # seqs turned into holes (a path seen twice)
        self._ino: int | None = None
        self._pos = 0  # bytes of whole lines consumed
        self._lines = 0  # lines in the file (for compaction)
        self._torn: tuple[int, int] | None = None  # (pos, size) of a torn tail

    @property
    def entries(self) -> list[Entry]:
        """The entries in memory (uncommitted ones and the look-back window), by seq."""
        return [self._entries[s] for s in sorted(self._entries)]

    def entry(self, seq: int) -> Entry | None:
        return self._entries.get(seq)

    def known(self, path: str) -> bool:
        """Whether ``path`` was taken (within the look-back window; a bounded log: ever)."""
        return path in self._recent

    def files(self, start: int, end: int) -> list[Entry]:
        """The entries of seqs ``start..end-1`` (holes read nothing)."""
        if end > self.next_seq:
            self.refresh()
        if end > self.next_seq:
            # Offsets come from this log; a shorter log means it was removed or damaged.
            raise SourceError(
                "files.log", f"{self.path} ends at seq {self.next_seq}, the epoch needs {end}"
            )
        missing = [
            s for s in range(start, end) if s not in self._entries and s < self.base
        ]  # compacted away: only committed offsets are, and Spark never asks for those again
        if missing:
            raise SourceError(
                "files.log",
                f"{self.path}: seqs {missing[0]}..{missing[-1]} were compacted after their "
                f"epoch committed, yet an epoch asks for {start}..{end - 1}",
            )
        return [self._entries[s] for s in range(start, end) if s in self._entries]

    def _in_window(self, mtime: int | None) -> bool:
        if mtime is None or self.lookback_ns is None or self.watermark is None:
            return True
        return mtime >= self.watermark - self.lookback_ns

    def too_old(self, mtime: int) -> bool:
        """A new file this much older than the newest file taken is past the look-back."""
        return not self._in_window(mtime)

    def _apply(self, rec: dict[str, object], where: str) -> None:
        if "seq" in rec:
            seq = _int(rec["seq"])
            if seq <= self._last:
                raise SourceError(
                    "files.log",
                    f"{where}: seq {seq} after seq {self._last}: two writers numbered "
                    "entries on their own, so which file an offset meant is unknowable; stop "
                    "the job and remove this log and the checkpoint to read the folder anew",
                )
            mt = rec.get("mtime")
            e = Entry(seq, str(rec["path"]), _int(rec["size"]), None if mt is None else _int(mt))
            self._last = seq
            self.next_seq = max(self.next_seq, seq + 1)
            if e.path in self._recent and self._in_window(self._recent[e.path]):
                # The same file again (a race of an old, unlocked writer): a hole, read nothing.
                self.repaired.append(seq)
                log.warning("%s: %s listed twice; seq %d reads nothing", where, e.path, seq)
                return
            self._entries[seq] = e
            self._recent[e.path] = e.mtime
            if e.mtime is not None and (self.watermark is None or e.mtime > self.watermark):
                self.watermark = e.mtime
        elif rec.get("sealed"):
            self.sealed = True
        elif "cleaned" in rec:
            self.cleaned = max(self.cleaned, _int(rec["cleaned"]))
        elif "compacted" in rec:
            h = rec["compacted"]
            assert isinstance(h, dict)
            self.base = int(h["base"])
            self.next_seq = int(h["next"])
            self.cleaned = int(h.get("cleaned", 0))
            self.sealed = bool(h.get("sealed", False))
            wm = h.get("watermark")
            self.watermark = None if wm is None else int(wm)

    # reading ------------------------------------------------------------------------------
    def refresh(self) -> None:
        """Read what was appended since the last read (all of it after a compaction)."""
        try:
            fh = open(self.path, "rb")  # noqa: SIM115 - closed below
        except FileNotFoundError:
            if self._ino is not None:
                raise SourceError("files.log", f"{self.path} disappeared") from None
            return
        with fh:
            st = os.fstat(fh.fileno())
            if st.st_ino != self._ino or st.st_size < self._pos:
                keep_base = self.base
                self._reset()  # new file (compacted by someone): read it whole
                self.base = keep_base
                self._ino = st.st_ino
            fh.seek(self._pos)
            data = fh.read()
        pos = 0
        while (end := data.find(b"\n", pos)) >= 0:  # a line without its newline is torn
            line = data[pos:end]
            if line.strip():
                try:
                    rec = json.loads(line)
                except ValueError:
                    break  # a torn line after a crash: it was never acknowledged
                self._apply(rec, f"{self.path}:{self._lines + 1}")
            self._lines += 1
            pos = end + 1
        self._pos += pos
        self._torn = (self._pos, self._pos + len(data) - pos) if pos < len(data) else None
        self._prune()

    def _prune(self) -> None:
        """Forget what neither an offset nor the duplicate check can need any more."""
        if self.lookback_ns is None or self.watermark is None:
            return
        if len(self._recent) > 2 * max(1024, len(self._entries)):
            self._recent = {p: m for p, m in self._recent.items() if self._in_window(m)}
        for seq in [s for s in self._entries if s < self.base]:
            if not self._in_window(self._entries[seq].mtime):
                del self._entries[seq]

    # writing ------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with flock.exclusive(self.lock_path, "files.log", self.LOCK_TIMEOUT, 0o644):
            self.refresh()
            yield

    def _write(self, lines: list[str]) -> None:
        data = "".join(line + "\n" for line in lines).encode("utf-8")
        created = not self.path.exists()
        with open(self.path, "ab") as fh:
            if self._torn is not None and fh.tell() == self._torn[1]:
                fh.truncate(self._torn[0])  # a tail torn by a crash, never acknowledged
            self._torn = None
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
            st = os.fstat(fh.fileno())
        if created:
            fsync_dir(self.path.parent)
        # What we wrote is applied from the file itself: the next refresh reads it back.
        self.refresh()
        assert self._ino == st.st_ino

    def append(
        self,
        files: list[Found],
        seal: bool = False,
        guard: Callable[[], None] | None = None,
    ) -> tuple[list[Entry], list[Found]]:
        """Add the files not yet known, in the given order; fsync before returning.

        Under the lock: re-read the tail, run ``guard`` (raises when this writer is fenced
        off), skip known paths and files past the look-back window. Returns (the entries
        added, the files ignored as too old).
        """
        if not files and (not seal or self.sealed):
            self.refresh()
            return [], []
        with self._locked():
            if guard is not None:
                guard()
            lines: list[str] = []
            old: list[Found] = []
            seq = self.next_seq
            known = self._recent
            taken: set[str] = set()
            # In the given order (discovery gives oldest first). The age test uses the
            # watermark before this batch, so a batch never ages out its own members.
            for mtime, path, size in files:
                if path in taken or (path in known and self._in_window(known[path])):
                    continue
                if self.too_old(mtime):
                    old.append((mtime, path, size))
                    continue
                taken.add(path)
                lines.append(json.dumps({"seq": seq, "path": path, "size": size, "mtime": mtime}))
                seq += 1
            if seal and not self.sealed:
                lines.append(json.dumps({"sealed": True}))
            if not lines:
                return [], old
            first = self.next_seq
            self._write(lines)
            added = [e for s in range(first, self.next_seq) if (e := self._entries.get(s))]
            return added, old

    def committed(
        self, seq: int, clean: Callable[[Entry], None] | None = None, compact: bool = True
    ) -> None:
        """Spark committed every offset below ``seq``: clean those files, maybe compact."""
        if seq <= self.base and (clean is None or seq <= self.cleaned):
            return
        with self._locked():
            if clean is not None and self.cleaned < seq:
                for s in range(self.cleaned, seq):
                    e = self._entries.get(s)
                    if e is not None:
                        clean(e)
                self._write([json.dumps({"cleaned": seq})])
            self.base = max(self.base, seq)
            self._prune()
            # Every entry still in memory is one compaction keeps; the other lines it drops.
            # Rewrite only when that frees compact_every lines, not at every epoch.
            if compact and self._lines - 1 - len(self._entries) >= self.compact_every:
                self._compact()

    def _compact(self) -> None:
        """Rewrite the log as a header and the entries still needed (under the lock)."""
        keep = [
            e
            for s, e in sorted(self._entries.items())
            if s >= self.base or self._in_window(e.mtime)
        ]
        header = {
            "base": self.base,
            "next": self.next_seq,
            "watermark": self.watermark,
            "cleaned": self.cleaned,
            "sealed": self.sealed,
        }
        lines = [json.dumps({"compacted": header})]
        for e in keep:
            rec: dict[str, object] = {"seq": e.seq, "path": e.path, "size": e.size}
            if e.mtime is not None:
                rec["mtime"] = e.mtime
            lines.append(json.dumps(rec))
        tmp = self.path.with_name(f".{self.path.name}.compact")
        with open(tmp, "wb") as fh:
            fh.write("".join(line + "\n" for line in lines).encode("utf-8"))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)
        fsync_dir(self.path.parent)
        self.refresh()


def _int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise SourceError("files.log", f"expected a number, found {value!r}")
    return int(value)


def fsync_dir(folder: Path) -> None:
    """Make a folder's entries (a rename, a new file) durable."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
