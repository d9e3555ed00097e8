"""A program of one endless job whose work per row is slow and parallel, for the autoscaler's
end-to-end test (tests/e2e/test_autoscaling.py), run by ``stoker run --driver``.

``generator(rows_per_second=rate)`` -> every partition sleeps ``cost_ms`` per row (work that
more executors relieve even on one machine, where CPU work on 2 cores would not) -> files sink
``<out>/<pipeline name>``. The rate is changed at runtime through the control plane (a
``rate_limit`` event with ``rows_per_second``), which is the load step.

Settings are ``key=value`` arguments: ``out`` (required), ``rate`` (rows per second, default
10), ``cost_ms`` (default 20), ``trigger`` (default 1s), ``name`` (default ``stream``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from typing import Any

import stoker
from stoker import Pipeline, sinks, sources


def settings(argv: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for arg in argv:
        key, eq, value = arg.partition("=")
        if not eq:
            raise SystemExit(f"app_scaling: argument {arg!r} is not key=value")
        out[key] = value
    return out


def slow(cost_s: float) -> Any:
    def work(batches: Iterator[Any]) -> Iterator[Any]:
        for batch in batches:
            time.sleep(cost_s * len(batch))
            yield batch

    return work


def main() -> None:
    s = settings(sys.argv[1:])
    cost_s = float(s.get("cost_ms", "20")) / 1000.0
    name = s.get("name", "stream")

    def transform(df: Any, ctx: Any) -> Any:
        return df.mapInPandas(slow(cost_s), schema=df.schema)

    p = (
        Pipeline(name)
        .source(sources.generator(rows_per_second=float(s.get("rate", "10"))))
        .transform(transform)
        .sink(sinks.files(f"{s['out']}/{name}"))
    )
    stoker.submit(p, trigger=s.get("trigger", "1s")).wait()
