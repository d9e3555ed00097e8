"""A program that submits a job stoker must refuse (tests/e2e/test_driver_mode.py).

Arguments, ``key=value``:

- ``out``: where the job's files sink would write (required);
- ``job_id``: the job id to submit under (e.g. one another application owns);
- ``state_dir``: the job's state folder (e.g. a relative one, refused on a cluster).

The refusal is raised by ``stoker.submit`` before the job runs, and ends ``main`` with it.
"""

from __future__ import annotations

import sys
from typing import Any

import stoker
from stoker import Pipeline, sinks, sources


def main() -> None:
    s = dict(arg.partition("=")[::2] for arg in sys.argv[1:])
    p = Pipeline("misused").source(sources.generator(total=10, partitions=1))
    p.sink(sinks.files(s["out"]))
    kwargs: dict[str, Any] = {}
    if "job_id" in s:
        kwargs["job_id"] = s["job_id"]
    if "state_dir" in s:
        kwargs["state_dir"] = s["state_dir"]
    stoker.submit(p, **kwargs).wait()
