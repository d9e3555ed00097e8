"""A program whose ``main`` raises after its jobs run (tests/e2e/test_app_main_raises.py,
issue 39 item 7): two unbounded streams started with ``stoker.submit`` (generated ids into a
files sink each, ``<out>/<name>``), then, once each has committed ``epochs`` epochs, ``main``
raises RuntimeError while both jobs are healthy.

Settings are the program's arguments, ``key=value``:

- ``out``: the folder of the sinks (default: the environment's ``APP_OUT``);
- ``epochs``: committed epochs of each stream before ``main`` raises (default 2);
- ``once``: ``1``: ``main`` raises in its first run only (a marker file in ``out`` remembers
  it did); a ``main`` run again re-adopts the jobs and waits on them (default: every run);
- ``rate``, ``per_epoch``, ``trigger``: the streams' rows per second (default 10), largest
  epoch (default 10) and trigger (default 300ms).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import stoker
from stoker import Pipeline, sinks, sources

STREAMS = ("a", "b")


def settings(argv: list[str]) -> dict[str, str]:
    """``key=value`` arguments as a dict; anything else is refused (a test's typo)."""
    out: dict[str, str] = {}
    for arg in argv:
        key, eq, value = arg.partition("=")
        if not eq:
            raise SystemExit(f"app_main_raises_later: argument {arg!r} is not key=value")
        out[key] = value
    return out


def committed(folder: Path) -> int:
    """The files sink's committed epochs (its ``epoch=N`` folders)."""
    return len(list(folder.glob("epoch=*"))) if folder.exists() else 0


def main() -> None:
    s = settings(sys.argv[1:])
    out = Path(s.get("out") or os.environ["APP_OUT"])
    epochs = int(s.get("epochs", "2"))
    rate = float(s.get("rate", "10"))
    per_epoch = int(s.get("per_epoch", "10"))
    trigger = s.get("trigger", "300ms")
    handles = [
        stoker.submit(
            Pipeline(name)
            .source(
                sources.generator(rows_per_second=rate, max_rows_per_epoch=per_epoch, partitions=1)
            )
            .sink(sinks.files(str(out / name))),
            trigger=trigger,
        )
        for name in STREAMS
    ]
    while not all(committed(out / name) >= epochs for name in STREAMS):
        time.sleep(0.2)
    marker = out / "_main_raised"
    if s.get("once") != "1" or not marker.exists():
        marker.touch()
        raise RuntimeError(f"main gives up with its jobs running ({out.name})")
    for handle in handles:
        handle.wait()
