"""The durable list of input files a file source has discovered, in the order it reads them.

Offsets of the file source are positions in this list. Files are appended (and fsynced) before
an offset that covers them is returned to Spark, so a replayed epoch finds the same files. A
bounded source lists its folder once, at the job's first start, and seals the list.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Entry:
    seq: int
    path: str
    size: int


def _visible(name: str) -> bool:
    # Like Spark: names starting with '.' or '_' are in-progress or metadata files.
    return not name.startswith((".", "_"))


def list_folder(folder: Path, suffix: str | None) -> list[tuple[float, str, int]]:
    """(mtime, path, size) of the visible files directly in ``folder``, oldest first."""
    found = []
    with os.scandir(folder) as it:
        for e in it:
            if not e.is_file() or not _visible(e.name):
                continue
            if suffix and not e.name.endswith(suffix):
                continue
            st = e.stat()
            found.append((st.st_mtime, e.path, st.st_size))
    found.sort()
    return found


class FileLog:
    """Append-only JSON-lines file: one line per discovered input file, plus a seal line."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries: list[Entry] = []
        self.sealed = False
        self._known: set[str] = set()
        # (whole lines' bytes, file size) when the file ends in a line torn by a crash (never
        # fsynced, so never acknowledged): append() cuts the torn tail off before writing, or
        # the next line would be glued to it and lost on the following reload.
        self._torn: tuple[int, int] | None = None
        if path.exists():
            data = path.read_bytes()
            pos = 0
            while (end := data.find(b"\n", pos)) >= 0:  # a line without its newline is torn
                line = data[pos:end]
                if line.strip():
                    try:
                        rec = json.loads(line)
                    except ValueError:
                        break  # a torn line after a crash: it was never acknowledged
                    if rec.get("sealed"):
                        self.sealed = True
                    else:
                        self._add(Entry(int(rec["seq"]), rec["path"], int(rec["size"])))
                pos = end + 1
            if pos < len(data):
                self._torn = (pos, len(data))

    def _add(self, e: Entry) -> None:
        self.entries.append(e)
        self._known.add(e.path)

    def append(self, files: list[tuple[float, str, int]], seal: bool = False) -> None:
        """Add the files not yet known (in the given order); fsync before returning."""
        new = [f for f in files if f[1] not in self._known]
        if not new and not (seal and not self.sealed):
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lines = []
        for _mtime, path, size in new:
            e = Entry(len(self.entries), path, size)
            self._add(e)
            lines.append(json.dumps({"seq": e.seq, "path": e.path, "size": e.size}))
        if seal and not self.sealed:
            self.sealed = True
            lines.append(json.dumps({"sealed": True}))
        data = "".join(line + "\n" for line in lines).encode("utf-8")
        with open(self.path, "ab") as fh:
            if self._torn is not None and fh.tell() == self._torn[1]:
                fh.truncate(self._torn[0])  # the torn tail seen on load, still untouched
            self._torn = None
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
