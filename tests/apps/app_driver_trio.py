"""A program of several jobs for tests/e2e/test_driver_mode.py, run by ``stoker run --driver``.

A bounded backfill run with ``stoker.run`` (it blocks until the job ends), then unbounded
streams started with ``stoker.submit`` (they run at once, side by side); each job reads
generated ids (0, 1, 2, ... in order: a replayed epoch reads the same ids) and writes them to
a files sink of its own, ``<out>/<pipeline name>``. Job ids are the default
``<app id>.<pipeline name>``.

Settings are the program's arguments, ``key=value`` (no leading dashes: the CLI hands them
over as they are):

- ``out``: the folder of the sinks (required);
- ``backfill``: rows of the backfill (default 200; 0: no backfill);
- ``streams``: the streams' names, comma-separated (default ``stream-a,stream-b``; empty: none);
- ``rate``: rows per second each stream produces (default 10);
- ``per_epoch``: a stream's largest epoch (default 20 rows);
- ``trigger``: every job's trigger (default 500ms).
"""

from __future__ import annotations

import sys

import stoker
from stoker import Pipeline, sinks, sources


def settings(argv: list[str]) -> dict[str, str]:
    """``key=value`` arguments as a dict; anything else is refused (a test's typo)."""
    out: dict[str, str] = {}
    for arg in argv:
        key, eq, value = arg.partition("=")
        if not eq:
            raise SystemExit(f"app_driver_trio: argument {arg!r} is not key=value")
        out[key] = value
    return out


def pipeline(
    name: str, out: str, total: int | None, per_epoch: int, rate: float | None
) -> Pipeline:
    return (
        Pipeline(name)
        .source(
            sources.generator(
                total=total, rows_per_second=rate, max_rows_per_epoch=per_epoch, partitions=1
            )
        )
        .sink(sinks.files(f"{out}/{name}"))
    )


def main() -> None:
    s = settings(sys.argv[1:])
    out = s["out"]
    trigger = s.get("trigger", "500ms")
    backfill = int(s.get("backfill", "200"))
    if backfill > 0:
        stoker.run(pipeline("backfill", out, backfill, 100, None), trigger=trigger)
    names = [n for n in s.get("streams", "stream-a,stream-b").split(",") if n]
    rate = float(s.get("rate", "10"))
    per_epoch = int(s.get("per_epoch", "20"))
    handles = [
        stoker.submit(pipeline(name, out, None, per_epoch, rate), trigger=trigger) for name in names
    ]
    for handle in handles:
        handle.wait()
