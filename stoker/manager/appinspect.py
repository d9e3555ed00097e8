"""What an application file declares, read in a child process: the manager imports no Spark
and runs no user code, so the Pipeline a file runs, its starting config and its description
come from ``python -c`` beside it."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from stoker.errors import InvalidInput
from stoker.manager.processes import child_env

# In a child process (the manager imports no Spark and no user code): the Pipeline the file
# runs, its starting config and its description.
_INSPECT = """\
import json, sys
from stoker.errors import InvalidInput
from stoker.runtime.appfile import check_app_path, inspect_pipeline

def inspect(app, config):
    pipeline = inspect_pipeline(app)
    return pipeline.name, pipeline.check_config(config), pipeline.spec()

try:
    name, config, spec = inspect(check_app_path(sys.argv[1]), json.loads(sys.argv[2]))
except InvalidInput as e:
    print(json.dumps({"field": e.field, "message": e.message}))
    sys.exit(2)
print(json.dumps({"name": name, "config": config, "spec": spec}))
"""


def inspect_app(
    entrypoint: Path, config: dict[str, Any]
) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """The name of the Pipeline the file runs, its starting config (declared defaults with
    ``config`` on top, checked) and its description (``Pipeline.spec()``: declared config,
    sources, registered control events), found in a child process: user code never runs
    inside the manager. A refusal is :class:`InvalidInput` naming the field once."""
    code = _INSPECT
    proc = subprocess.run(
        [sys.executable, "-c", code, str(entrypoint), json.dumps(config)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(entrypoint.parent),
        env=child_env(),  # user code: not the manager's tokens
    )
    answer: dict[str, Any] = {}
    lines = proc.stdout.strip().splitlines()
    if lines:
        try:
            answer = json.loads(lines[-1])
        except ValueError:
            answer = {}
    if proc.returncode == 2 and "field" in answer:
        field = str(answer["field"])
        if not field.startswith("config"):
            field = "job_id" if field == "job_id" else "entrypoint"
        raise InvalidInput(field, str(answer["message"]))
    if proc.returncode != 0 or "name" not in answer:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise InvalidInput("entrypoint", f"reading the app's pipeline failed: {last}")
    return str(answer["name"]), dict(answer["config"]), dict(answer["spec"])


class PipelineDescriptions:
    """Pipeline descriptions read from application files, by (path, mtime): a child process
    each, for control requests that come before a driver declared its own."""

    def __init__(self) -> None:
        self._described: dict[tuple[str, int], dict[str, Any]] = {}
        self._described_lock = threading.Lock()

    def describe(self, entry: Any) -> dict[str, Any]:
        """The description of the pipeline the file ``entry`` runs (``{}`` if the job's
        spec names no file); read once per version of the file."""
        if not isinstance(entry, str):
            return {}
        path = Path(entry)
        try:
            key = (str(path), path.stat().st_mtime_ns)
        except OSError:
            raise InvalidInput(
                "entrypoint", f"the job's application file {entry!r} cannot be read"
            ) from None
        with self._described_lock:
            found = self._described.get(key)
        if found is None:
            found = inspect_app(path, {})[2]
            with self._described_lock:
                if len(self._described) > 256:
                    self._described.clear()
                self._described[key] = found
        return found
