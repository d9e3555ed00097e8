"""Per-trigger discovery cost of the files source, before and after, at 1k, 100k and 1M files.

The folder holds N files that arrived long ago (mtimes spread over the 30 days before the
newest file taken) and were all read by committed epochs; each trigger one new file arrives.

- **before**: the code path of the previous version, copied below: list and ``stat`` every
  file, keep every discovered path (a set) and every entry (a list) in memory.
- **after**: :class:`FolderScan` (``readdir``; ``stat`` only names not seen in the previous
  scan) and :class:`FileLog` in its compacted steady state (the committed entries compacted
  away; ``max_file_age`` 1 h, so the look-back window holds the recent files only).

Per size: the median of ``--triggers`` triggers (one new file each), the first scan after a
start (the reader's first trigger: every name is new to it, so each is statted once), an idle
trigger (no arrival, the folder settled: not listed at all), and the Python memory each
algorithm retains between triggers (tracemalloc). Files are empty and live on /dev/shm when it
exists; the folder is removed afterwards.

    python benchmarks/file_discovery.py [--sizes 1000,100000,1000000] [--triggers 9]
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import arg_parser, fmt, machine, print_machine, table, write_json

from stoker.sources._filelog import FileLog, FolderScan

HOUR = 3600 * 10**9
DAY = 24 * HOUR


# the previous version's code path (stoker/sources/_filelog.py before the fenced log) -----------
def old_list_folder(folder: Path, suffix: str | None) -> list[tuple[float, str, int]]:
    found = []
    with os.scandir(folder) as it:
        for e in it:
            if not e.is_file() or e.name.startswith((".", "_")):
                continue
            if suffix and not e.name.endswith(suffix):
                continue
            st = e.stat()
            found.append((st.st_mtime, e.path, st.st_size))
    found.sort()
    return found


class OldLog:
    """In-memory part of the old FileLog: every entry and every known path, for ever."""

    def __init__(self) -> None:
        self.entries: list[tuple[int, str, int]] = []
        self.known: set[str] = set()

    def append(self, files: list[tuple[float, str, int]]) -> list[tuple[int, str, int]]:
        new = [f for f in files if f[1] not in self.known]
        out = []
        for _mtime, path, size in new:
            e = (len(self.entries), path, size)
            self.entries.append(e)
            self.known.add(path)
            out.append(e)
        return out  # the old code then wrote and fsynced the new lines: not timed here


# ----------------------------------------------------------------------------------------------
def make_folder(root: Path, n: int, newest: int) -> Path:
    folder = root / f"in-{n}"
    folder.mkdir()
    span = 30 * DAY
    for i in range(n):
        p = os.path.join(folder, f"part-{i:08d}.json")
        os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o644))
        t = newest - span + (span * i) // max(1, n - 1)
        os.utime(p, ns=(t, t))
    return folder


def retained(build: Callable[[], Any]) -> tuple[Any, int]:
    """What ``build()`` returns and the bytes of Python memory it keeps."""
    gc.collect()
    tracemalloc.start()
    obj = build()
    gc.collect()
    size, _peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return obj, size


def arrive(folder: Path, k: int) -> None:
    tmp = folder / f".new-{k}.tmp"
    tmp.write_bytes(b"")
    os.rename(tmp, folder / f"new-{k:06d}.json")


def bench_before(folder: Path, triggers: int) -> dict[str, Any]:
    def build() -> OldLog:
        log = OldLog()
        log.append(old_list_folder(folder, None))
        return log

    t0 = time.perf_counter()
    log = build()
    first = time.perf_counter() - t0
    _log, mem = retained(build)
    del _log
    times = []
    for k in range(triggers):
        arrive(folder, k)
        t0 = time.perf_counter()
        added = log.append(old_list_folder(folder, None))
        times.append(time.perf_counter() - t0)
        assert len(added) == 1, added
    t0 = time.perf_counter()
    assert log.append(old_list_folder(folder, None)) == []
    idle = time.perf_counter() - t0
    return {"trigger_s": times, "first_s": first, "idle_s": idle, "memory_b": mem}


def bench_after(folder: Path, state: Path, triggers: int, newest: int) -> dict[str, Any]:
    # The log's steady state: everything read so far is committed and compacted away.
    # What compaction keeps: a header, and the entries inside the look-back window (they keep
    # a late duplicate out), written as compaction writes them.
    path = state / f"log-{folder.name}.jsonl"
    files = sorted((e.stat().st_mtime_ns, e.path, 0) for e in os.scandir(folder))
    window = [f for f in files if f[0] >= newest - HOUR]
    n, w = len(files), len(window)
    header = {"base": n, "next": n - w, "watermark": newest, "cleaned": 0, "sealed": False}
    lines = [json.dumps({"compacted": header})]
    for i, (mtime, p, size) in enumerate(window):
        lines.append(json.dumps({"seq": n - w + i, "path": p, "size": size, "mtime": mtime}))
    path.write_text("".join(x + "\n" for x in lines))
    del files

    def build() -> tuple[FolderScan, FileLog]:
        log = FileLog(path, lookback_ns=HOUR)
        scan = FolderScan(folder, None)
        added, _old = log.append(scan.scan())
        assert added == [], added  # every file there is older than the look-back window
        scan.accept()
        return scan, log

    t0 = time.perf_counter()
    scan, log = build()
    first = time.perf_counter() - t0
    _built, mem = retained(build)
    del _built
    times = []
    for k in range(triggers):
        arrive(folder, 1000 + k)
        t0 = time.perf_counter()
        added, _old = log.append(scan.scan())
        scan.accept()
        times.append(time.perf_counter() - t0)
        assert len(added) == 1, added
    # Idle: no arrival; once the folder's last change is older than the settle time, a trigger
    # does not list it.
    time.sleep(FolderScan.SETTLE_NS / 1e9 + 0.2)
    log.append(scan.scan())
    scan.accept()
    t0 = time.perf_counter()
    assert log.append(scan.scan()) == ([], [])
    scan.accept()
    idle = time.perf_counter() - t0
    return {"trigger_s": times, "first_s": first, "idle_s": idle, "memory_b": mem}


def main() -> None:
    ap = arg_parser(__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,100000,1000000")
    ap.add_argument("--triggers", type=int, default=9)
    args = ap.parse_args()
    info = machine()
    print_machine(info)
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
    root = Path(tempfile.mkdtemp(prefix="stoker-discovery-", dir=base))
    print(f"files under {root}")
    results: dict[str, Any] = {"machine": info, "sizes": {}}
    rows = []
    try:
        for n in (int(x) for x in args.sizes.split(",")):
            newest = time.time_ns() - HOUR // 2
            t0 = time.perf_counter()
            folder = make_folder(root, n, newest)
            print(f"{n:,} files made in {time.perf_counter() - t0:.1f} s", flush=True)
            before = bench_before(folder, args.triggers)
            for p in folder.glob("new-*"):
                p.unlink()
            after = bench_after(folder, root, args.triggers, newest)
            results["sizes"][n] = {"before": before, "after": after}
            b, a = statistics.median(before["trigger_s"]), statistics.median(after["trigger_s"])
            rows.append(
                [
                    f"{n:,}",
                    fmt(b * 1000),
                    fmt(a * 1000),
                    f"{b / a:.1f}x",
                    fmt(before["first_s"] * 1000),
                    fmt(after["first_s"] * 1000),
                    fmt(before["idle_s"] * 1000, 2),
                    fmt(after["idle_s"] * 1000, 3),
                    fmt(before["memory_b"] / 2**20),
                    fmt(after["memory_b"] / 2**20),
                ]
            )
            shutil.rmtree(folder)
            print(table(HEADERS, rows[-1:]), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print()
    print(table(HEADERS, rows))
    results["loadavg_at_end"] = os.getloadavg()
    print(f"load average at end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    write_json(args.json, results)


HEADERS = [
    "files",
    "trigger ms before",
    "after",
    "ratio",
    "first scan ms before",
    "after",
    "idle ms before",
    "after",
    "memory MiB before",
    "after",
]

if __name__ == "__main__":
    sys.exit(main())
