"""The log a socket source keeps of the lines it received (see :mod:`stoker.sources.textsocket`):
files ``<first>-<count>.jsonl`` in one folder, each written whole."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from stoker.errors import SourceError
from stoker.sources import _flock as flock
from stoker.sources._filelog import fsync_dir

LOCK_TIMEOUT_S = 60.0
_SUFFIX = ".jsonl"


@dataclass(frozen=True)
class Segment:
    """One file of the log: lines ``first .. first + count - 1``."""

    first: int
    count: int
    path: Path

    @property
    def end(self) -> int:
        return self.first + self.count


class LineLog:
    """The lines a socket source received, numbered from 0, in files ``<first>-<count>.jsonl``
    of one folder. A file is written whole under a temporary name, fsynced, then renamed: a
    crash leaves either all of it or none (a temporary file left behind is ignored)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def segments(self) -> list[Segment]:
        out = []
        with contextlib.suppress(FileNotFoundError):
            for entry in os.scandir(self.folder):
                name = entry.name
                if not name.endswith(_SUFFIX) or name.startswith("."):
                    continue
                first, _, count = name[: -len(_SUFFIX)].partition("-")
                if first.isdigit() and count.isdigit():
                    out.append(Segment(int(first), int(count), Path(entry.path)))
        out.sort(key=lambda s: s.first)
        return out

    def end(self) -> int:
        segs = self.segments()
        return segs[-1].end if segs else 0

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        with flock.exclusive(self.folder / ".lock", "socket.log", LOCK_TIMEOUT_S):
            yield

    def append(self, first: int, lines: list[tuple[str, int]]) -> Segment:
        """Lines (text, microseconds since the epoch received) as the file starting at
        ``first``; call under :meth:`locked`."""
        name = f"{first:020d}-{len(lines)}{_SUFFIX}"
        final = self.folder / name
        tmp = self.folder / f".{name}.tmp"
        data = "".join(json.dumps(pair, ensure_ascii=False) + "\n" for pair in lines)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            view = memoryview(data.encode("utf-8"))
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, final)
        fsync_dir(self.folder)
        return Segment(first, len(lines), final)

    def read(self, a: int, b: int) -> list[tuple[str, int]]:
        """Lines ``a .. b - 1``; a :class:`SourceError` naming the gap if any is not here."""
        out: list[tuple[str, int]] = []
        at = a
        gap_end = b
        for seg in self.segments():
            if seg.end <= at or seg.first >= b:
                continue
            if seg.first > at:
                gap_end = seg.first
                break
            with open(seg.path, encoding="utf-8") as fh:
                for i, line in enumerate(fh, start=seg.first):
                    if i >= b:
                        break
                    if i >= at:
                        text, micros = json.loads(line)
                        out.append((str(text), int(micros)))
            at = min(seg.end, b)
            if at >= b:
                break
        if at < b:
            raise SourceError(
                "socket.log",
                f"lines {at}..{gap_end - 1} of the epoch are not in {self.folder} (deleted, or the "
                "folder lost while the checkpoint was kept): the epoch cannot be read again",
            )
        return out

    def drop_below(self, n: int) -> int:
        """Delete the files wholly below line ``n``, never the newest; how many."""
        segs = self.segments()
        gone = 0
        for seg in segs[:-1]:
            if seg.end <= n:
                with contextlib.suppress(FileNotFoundError):
                    seg.path.unlink()
                gone += 1
        return gone
