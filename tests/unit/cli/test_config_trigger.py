"""``stoker config`` shows the trigger in force and where it comes from (issue 41 item 6): it
showed ``trigger -`` for a trigger set in the pipeline file (``stoker.run(p, trigger=...)``),
which control had not changed."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from stoker.cli.control import trigger_line
from stoker.store import open_store
from stoker.types import job_id
from tests.support import REPO, stoker_cmd


def _config(tmp_path: Path, spec: dict[str, Any]) -> str:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = open_store(url)
    try:
        store.create_job(job_id("j"), "j", {"sinks": [], **spec}, {})
    finally:
        store.close()
    p = subprocess.run(
        stoker_cmd("config", "j", "--store", url),
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    return next(ln for ln in p.stdout.splitlines() if ln.startswith("trigger"))


@pytest.mark.parametrize(
    ("spec", "shown"),
    [
        (
            {"trigger_s": 2.0},
            "trigger    2s (the job's own: the program: stoker.run(..., trigger=...))",
        ),
        (
            {"trigger_s": 3.0, "conf": {"stoker.trigger": "3s"}},
            "trigger    3s (the job's own: -D stoker.trigger=3s)",
        ),
        ({"trigger_s": 0.5}, "trigger    0.5s (the job's own: the default)"),
    ],
)
def test_the_trigger_the_job_started_with_and_where_it_comes_from(
    tmp_path: Path, spec: dict[str, Any], shown: str
) -> None:
    assert _config(tmp_path, spec) == shown


def test_a_trigger_set_by_control_says_so() -> None:
    assert trigger_line({"trigger_s": 1.5}, None) == "1.5s (set by control)"
