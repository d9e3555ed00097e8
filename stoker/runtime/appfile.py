"""Running a user's application file: the ``stoker run`` CLI and a job manager's drivers."""

from __future__ import annotations

import logging
import re
import runpy
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stoker.errors import InvalidInput
from stoker.paths import check_app_path
from stoker.runtime import launch
from stoker.runtime.unported import own_queries_refused, refuse_unported_file

if TYPE_CHECKING:
    from stoker.pipeline import Pipeline
    from stoker.runtime.job.result import JobResult

log = logging.getLogger("stoker.appfile")

__all__ = [
    "check_app_path",
    "collect_pipeline",
    "inspect_app",
    "inspect_pipeline",
    "pipeline_name_of",
    "run_app",
    "run_program",
]


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
    app: Path,
    ctx: launch.LaunchContext,
    argv: list[str] | None = None,
    pipeline_name: str | None = None,
) -> list[JobResult]:
    """Run ``app`` as ``__main__`` (with ``sys.argv = [app, *argv]``), with the launcher's
    ``ctx`` installed for its ``stoker.run`` calls.

    If it did not call ``stoker.run`` itself, run the Pipeline it defines at module level.
    Returns the result of every job it ran.
    """
    from stoker.pipeline import Pipeline
    from stoker.runtime.job.api import run as run_pipeline

    refuse_unported_file(app)  # a program for Spark alone: refused before Spark starts
    results: list[JobResult] = []
    ctx = replace(ctx, on_result=(*ctx.on_result, results.append))
    sys.path.insert(0, str(app.parent))
    sys.argv = [str(app), *(argv or [])]
    # A streaming query the file starts itself (a Spark program not ported) is refused,
    # while it runs and while its module-level Pipeline does.
    with own_queries_refused():
        # A file's own stoker.run of another pipeline than --pipeline names is refused.
        with launch.launched(replace(ctx, wanted_pipeline=pipeline_name)):
            namespace = _import_main(app, ctx, results)
        if not results:
            found = {k: v for k, v in namespace.items() if isinstance(v, Pipeline)}
            with launch.launched(ctx):
                run_pipeline(_pick(found, app, pipeline_name))  # reports its result to `results`
    return results


def _import_main(
    app: Path, ctx: launch.LaunchContext, results: list[JobResult]
) -> dict[str, object]:
    """``app`` run as ``__main__``; once more with Spark started first when it needs a session
    while it is imported."""
    try:
        return _run_main(app)
    except Exception as e:
        if results or not _needs_session(e):
            raise
        # The file needs a SparkSession while it is imported (a module-level `@udf("long")`
        # parses its DDL return type through the JVM). Start Spark now, with the launcher's
        # settings, and run the file again: it stopped at module level, before stoker.run,
        # so only the lines above the failing one ran twice. Files without such a line
        # keep their bad input refused before Spark starts.
        from stoker.runtime.job.api import start_session_for_import

        start_session_for_import(app, ctx)
        return _run_main(app)


def run_program(
    app: Path,
    argv: list[str],
    submitted: Callable[[], int],
    name: str,
    ctx: launch.LaunchContext,
) -> None:
    """Run an application's program: ``app`` as ``__main__`` (``sys.argv = [app, *argv]``);
    then, if its top level submitted no job, its ``main()`` if it defines one, else the one
    Pipeline it defines at module level (submitted and waited for).

    ``submitted`` counts the jobs submitted so far; ``name`` names the Spark application
    should the file need a session while it is imported, with the launcher's ``ctx`` (the
    application's driver installed it for the program). A syntax error is
    :class:`InvalidInput` naming file and line; any other error of the program propagates.
    """
    refuse_unported_file(app)
    sys.path.insert(0, str(app.parent))
    sys.argv = [str(app), *argv]
    with own_queries_refused():  # a streaming query the program starts itself: not ported
        _run_program_file(app, submitted, name, ctx)


def _run_program_file(
    app: Path, submitted: Callable[[], int], name: str, ctx: launch.LaunchContext
) -> None:
    from stoker.pipeline import Pipeline

    try:
        namespace = _run_main(app)
    except Exception as e:
        if submitted() or not _needs_session(e):
            raise
        from stoker.runtime.job.api import start_session_for_import

        start_session_for_import(app, ctx, name)  # as run_app does: a module-level @udf("long")
        namespace = _run_main(app)
    if submitted():
        return
    main = namespace.get("main")
    if callable(main):
        main()
        return
    found = {k: v for k, v in namespace.items() if isinstance(v, Pipeline)}
    if not found:
        log.warning("%s submitted no job and defines neither main() nor a Pipeline", app)
        return
    from stoker.runtime.submission import submit

    submit(_pick(found, app, None)).wait()


def _run_main(app: Path) -> dict[str, object]:
    """Run ``app`` as ``__main__``; a syntax error in it (or in a module it imports) is bad
    input, named by file and line."""
    try:
        return runpy.run_path(str(app), run_name="__main__")
    except SyntaxError as e:
        where = f"{e.filename or app}:{e.lineno}" if e.lineno else str(e.filename or app)
        raise InvalidInput("app", f"syntax error at {where}: {e.msg}") from e
    except TypeError as e:
        site = _bad_call_site(e)
        if site is None:
            raise
        raise InvalidInput("app", f"{site}: {e}") from e


# What Python says of a call whose arguments do not fit the function (a typo'd keyword).
_BAD_CALL = re.compile(
    r"unexpected keyword argument|required (positional|keyword-only) argument|"
    r"takes (from )?\d+ (to \d+ )?positional arguments? but|multiple values for argument"
)


def _bad_call_site(err: TypeError) -> str | None:
    """``file:line`` of the call whose arguments did not fit, when that call is the user's
    own line (``sinks.files(..., fromat=...)`` was exit 1 with a bare
    TypeError): the innermost frame of the traceback, outside stoker. None otherwise."""
    if not _BAD_CALL.search(str(err)):
        return None
    tb = err.__traceback__
    last = None
    while tb is not None:
        last = tb
        tb = tb.tb_next
    if last is None:
        return None
    filename = last.tb_frame.f_code.co_filename
    package = str(Path(__file__).resolve().parents[1])
    if filename.startswith(package) or filename.startswith("<"):
        return None
    return f"{filename}:{last.tb_lineno}"


def _needs_session(err: BaseException) -> bool:
    """Whether ``err`` is PySpark's "create a SparkSession first", with none created yet."""
    if getattr(err, "getCondition", lambda: None)() != "SESSION_OR_CONTEXT_NOT_EXISTS":
        return False
    from pyspark import SparkContext

    return SparkContext._active_spark_context is None


def collect_pipeline(
    app: Path, argv: list[str] | None = None, pipeline_name: str | None = None
) -> Pipeline:
    """The Pipeline ``app`` would run, found without running it (no Spark is started).

    ``app`` runs as ``__main__`` (with ``sys.argv = [app, *argv]``), as a driver runs it, but in
    collect mode: its first ``stoker.run(p)`` hands ``p`` back and ends the file's main there.
    A file that does not call ``stoker.run`` gives the Pipeline it defines at module level.
    """
    from stoker.pipeline import Pipeline

    sys.path.insert(0, str(app.parent))
    sys.argv = [str(app), *(argv or [])]
    try:
        with launch.launched(launch.LaunchContext(collect=True)):
            namespace = runpy.run_path(str(app), run_name="__main__")
    except launch.Collected as handed:
        return _handed(handed, app)
    found = {k: v for k, v in namespace.items() if isinstance(v, Pipeline)}
    return _pick(found, app, pipeline_name)


def _handed(handed: launch.Collected, app: Path) -> Pipeline:
    """The Pipeline a file's ``stoker.run`` handed back in collect mode; anything else it was
    given is bad input, named."""
    from stoker.pipeline import Pipeline

    if not isinstance(handed.pipeline, Pipeline):
        raise InvalidInput(
            "app", f"{app} called stoker.run with a {type(handed.pipeline).__name__}"
        ) from None
    return handed.pipeline


def pipeline_name_of(app: Path) -> str:
    """The name of the Pipeline ``app`` runs, without running it (no Spark is started)."""
    return inspect_app(app)[0]


def inspect_pipeline(app: Path) -> Pipeline:
    """The Pipeline ``app`` runs, as a job manager sees it (its sinks checked by
    :meth:`~stoker.pipeline.Pipeline.check_managed`). Nothing runs.

    A Pipeline defined at module level is found by importing the file (its main does not run);
    a file that builds its pipeline in its main and calls ``stoker.run(p)`` is run in collect
    mode, where that call hands ``p`` back instead of running it. The import is in collect
    mode too: a file that calls ``stoker.run(p)`` at module level, with no main guard (as a
    script may), hands ``p`` back there rather than running the job in the process that reads
    it (a job manager's inspection, before the job is even recorded).
    """
    from stoker.pipeline import Pipeline

    sys.path.insert(0, str(app.parent))
    try:
        with launch.launched(launch.LaunchContext(collect=True)):
            namespace = runpy.run_path(str(app), run_name="stoker_inspect")
    except launch.Collected as handed:
        pipeline = _handed(handed, app)
        pipeline.check_managed()
        return pipeline
    finally:
        sys.path.remove(str(app.parent))
    found = [v for v in namespace.values() if isinstance(v, Pipeline)]
    if len(found) > 1:
        raise InvalidInput(
            "job_id",
            f"{app} defines {len(found)} module-level pipelines; give the job id explicitly",
        )
    pipeline = found[0] if found else collect_pipeline(app)
    # A job manager reads the file so (at submission): a sink that may not run under one
    # (sinks.console) is refused here, before the job is recorded.
    pipeline.check_managed()
    return pipeline


def inspect_app(app: Path, config: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    """The name of the Pipeline ``app`` runs and its config: the declared defaults with
    ``config`` on top (checked: :class:`InvalidInput` names a bad key). Nothing runs."""
    pipeline = inspect_pipeline(app)
    return pipeline.name, pipeline.check_config(config or {})
