"""Running a user's application file: the ``stoker run`` CLI and a job manager's drivers."""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from stoker.errors import InvalidInput
from stoker.runtime import launch

if TYPE_CHECKING:
    from stoker.pipeline import Pipeline
    from stoker.runtime.runner import JobResult


def check_app_path(path: str | Path, field: str = "app") -> Path:
    """The resolved path of a readable ``.py`` file, or :class:`InvalidInput` naming why not."""
    p = Path(path)
    if not p.exists():
        raise InvalidInput(field, f"{str(path)!r} does not exist")
    if not p.is_file() or p.suffix != ".py":
        raise InvalidInput(field, f"{str(path)!r} is not a Python file (.py)")
    if not os.access(p, os.R_OK):
        raise InvalidInput(field, f"{str(path)!r} is not readable")
    return p.resolve()


def _pick(found: dict[str, Pipeline], app: Path, pipeline_name: str | None) -> Pipeline:
    if pipeline_name is not None:
        found = {k: v for k, v in found.items() if pipeline_name in (k, v.name)}
    if not found:
        raise InvalidInput("app", f"{app} neither ran a job nor defines a Pipeline")
    if len(found) > 1:
        raise InvalidInput(
            "app", f"{app} defines several pipelines ({', '.join(found)}); pick one by name"
        )
    return next(iter(found.values()))


def run_app(
    app: Path, argv: list[str] | None = None, pipeline_name: str | None = None
) -> list[JobResult]:
    """Run ``app`` as ``__main__`` (with ``sys.argv = [app, *argv]``).

    If it did not call ``stoker.run`` itself, run the Pipeline it defines at module level.
    Returns the result of every job it ran.
    """
    from stoker.pipeline import Pipeline
    from stoker.runtime.runner import run as run_pipeline

    results: list[JobResult] = []
    launch.on_result(results.append)
    sys.path.insert(0, str(app.parent))
    sys.argv = [str(app), *(argv or [])]
    namespace = runpy.run_path(str(app), run_name="__main__")
    if not results:
        found = {k: v for k, v in namespace.items() if isinstance(v, Pipeline)}
        run_pipeline(_pick(found, app, pipeline_name))  # reports its result to `results`
    return results


def pipeline_name_of(app: Path) -> str:
    """The name of the Pipeline ``app`` defines at module level, without running its main."""
    from stoker.pipeline import Pipeline

    sys.path.insert(0, str(app.parent))
    try:
        namespace = runpy.run_path(str(app), run_name="stoker_inspect")
    finally:
        sys.path.remove(str(app.parent))
    found = {k: v for k, v in namespace.items() if isinstance(v, Pipeline)}
    if len(found) != 1:
        raise InvalidInput(
            "job_id",
            f"{app} defines {len(found)} module-level pipelines; give the job id explicitly",
        )
    return next(iter(found.values())).name
