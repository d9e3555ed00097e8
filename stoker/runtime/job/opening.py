"""What an attempt opens around the query: Spark, the sources' stream, the watch of the
driver's executors, the progress watchdog and its signals, the savepoint writer."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stoker.errors import InvalidPipeline, InvalidSink, JobFailed, JobNotFound, JobTerminal
from stoker.runtime import savepoint
from stoker.runtime.job.plan import JobScope, spark_master
from stoker.runtime.job.query import Savepointer, check_output_mode, first_line
from stoker.runtime.job.spark_signals import TaskProbe, idle_interval_s, listen
from stoker.runtime.job.watchdog import ProgressWatchdog
from stoker.runtime.resources import ResourceWatch
from stoker.runtime.session import get_session
from stoker.settings import Settings
from stoker.sinks.base import SinkOwner
from stoker.sources.base import SourceContext
from stoker.store import Store
from stoker.store.records import ControlEvent
from stoker.types import Epoch, JobId

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from stoker.pipeline import Pipeline

log = logging.getLogger("stoker.runner")


def start_spark(settings: Settings, jid: JobId, app_name: str) -> SparkSession:
    from pyspark import SparkContext

    if SparkContext._active_spark_context is None:
        log.info("job %s: starting Spark (%s)", jid, spark_master(settings))
    t0 = time.monotonic()
    session = get_session(settings, f"stoker:{app_name}")
    if time.monotonic() - t0 > 1.0:
        log.info("job %s: Spark started in %.1f s", jid, time.monotonic() - t0)
    return session


# What Spark's JVM says of a failed task, in one line per event even under stoker's log4j2
# configuration (runtime/conf/log4j2.properties): "Aborting task", the writer's aborted job and
# task, the executor's exception, "Lost task", "failed 1 times; aborting job", the committer's
# "Could not delete" of the aborted part. A run in a terminal printed ten of them before the
# one line that says what failed and where (a newcomer walk): that line is stoker's, and the
# whole error is in `stoker status JOB --verbose`. A job manager's driver keeps them (its log
# is the attempt's record, read later); --debug (STOKER_DEBUG=1) keeps them here too.
TASK_FAILURE_LOGGERS = (
    "org.apache.spark.util.Utils",
    "org.apache.spark.sql.execution.datasources.FileFormatWriter",
    "org.apache.spark.executor.Executor",
    "org.apache.spark.scheduler.TaskSetManager",
    "org.apache.hadoop.mapreduce.lib.output.FileOutputCommitter",
)


def quiet_task_failures(session: SparkSession) -> None:
    """Silence :data:`TASK_FAILURE_LOGGERS` in this driver's JVM (a local ``stoker run``),
    unless STOKER_DEBUG asks for everything; best effort."""
    from stoker.errortext import debug_requested

    if debug_requested():
        return
    try:
        jvm = session.sparkContext._jvm
        assert jvm is not None
        off = jvm.org.apache.logging.log4j.Level.OFF
        for name in TASK_FAILURE_LOGGERS:
            jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, off)
    except Exception:
        log.debug("could not quiet Spark's task-failure loggers", exc_info=True)


def refuse_if_ended(store: Store, jid: JobId) -> None:
    try:
        job = store.get_job(jid)
    except JobNotFound:
        return
    if job.state.terminal:
        raise JobTerminal(jid, str(job.state))


def nothing() -> None:
    return None


def no_resources() -> dict[str, Any] | None:
    return None


def progress_watchdog(settings: Settings, stream: DataFrame) -> ProgressWatchdog:
    """The attempt's progress watchdog (runtime/job/watchdog.py): ``stoker.progress_timeout``,
    and the session's idle-event interval, below two of which its bound never goes."""
    return ProgressWatchdog(
        settings.progress_timeout,
        idle_interval_s=idle_interval_s(stream.sparkSession),
        adaptive=settings.progress_adaptive,
    )


def listen_progress(
    stream: DataFrame, query: StreamingQuery, watchdog: ProgressWatchdog
) -> tuple[Callable[[StreamingQuery], bool], Callable[[], None]]:
    """Feed ``watchdog`` the query's progress and idle events: (whether a task of the epoch
    running completed since the last call, the call that stops the feed)."""
    session = stream.sparkSession
    return TaskProbe(session).moved, listen(session, query, watchdog)


def watch_resources(
    store: Store, jid: JobId, stream: DataFrame, scope: JobScope | None
) -> tuple[ResourceWatch | None, Callable[[], None]]:
    """The watch of this driver's executors the job reports through, and how to let it go: a
    lone job starts its own (the job owns the executors); a job of an application joins the
    application's. A failure here is logged: the job runs without it."""
    try:
        spark = stream.sparkSession
        if scope is not None and scope.resources is not None:
            shared = scope.resources(spark)
            if shared is None:
                return None, nothing
            shared.add_job(jid)
            return shared, functools.partial(shared.remove_job, jid)
        own = ResourceWatch(store, jid, spark)
        own.start()
        return own, own.stop
    except Exception as e:
        log.warning("job %s: its executors are not watched (scaling cannot act): %s", jid, e)
        return None, nothing


def paced(settings: Settings, pipeline: Pipeline) -> bool:
    """Whether the readers pace the epochs (the query at trigger 0): every source is stoker's
    and ``stoker.paced_trigger`` is left on."""
    return settings.paced_trigger and stoker_sources_only(pipeline)


def stoker_sources_only(pipeline: Pipeline) -> bool:
    """Whether every source is one of stoker's own (they pause and rate-limit themselves)."""
    from stoker.sources.spark import SparkSource

    return not any(isinstance(i.source, SparkSource) for i in pipeline.inputs)


def savepointer(
    store: Store,
    jid: JobId,
    root: Path,
    pipeline: Pipeline,
    owner: SinkOwner,
    spec: Mapping[str, Any],
) -> Savepointer:
    def take(event: ControlEvent, epoch: Epoch | None) -> dict[str, object]:
        return savepoint.take(store, jid, root, pipeline, owner, event, epoch, spec=spec)

    return take


def java_message(err: Any, limit: int = 500) -> str:
    """What the Java exception behind a Py4J error says, in a line: its class and message;
    for a Python process's failure that Spark passes on with its traceback, that traceback's
    last line (the error itself), not "Traceback (most recent call last):"."""
    try:
        text = str(err.java_exception.toString())
    except Exception:  # the gateway is gone: Py4J's own words
        text = str(err)
    return one_line(text, type(err).__name__)[:limit]


def one_line(text: str, default: str) -> str:
    """The line of an exception's text that says what went wrong (see java_message)."""
    lines = [ln.rstrip() for ln in text.strip().splitlines()]
    lines = [ln for ln in lines if ln.strip() and not ln.lstrip().startswith("at ")]
    if not lines:
        return default
    if any("Traceback (most recent call last):" in ln for ln in lines):
        tail = [ln for ln in lines if ln[:1] not in (" ", "\t") and "Traceback" not in ln]
        if tail:
            return f"{lines[0].split(':')[0]}: {tail[-1].strip()}"
    first = lines[0]
    if first.endswith(":") and len(lines) > 1:
        return f"{first} {lines[1].strip()}"
    return first


def open_sources(
    spark: SparkSession, pipeline: Pipeline, root: Path, context: SourceContext
) -> DataFrame:
    """The union of the pipeline's sources (each shaped by its map) as one streaming frame."""
    from py4j.protocol import Py4JJavaError

    frames: list[DataFrame] = []
    for i, inp in enumerate(pipeline.inputs):
        try:
            df = inp.source.open(spark, f"s{i}", root, context)
        except Py4JJavaError as e:
            # Not bad input (pyspark raises those as AnalysisException and the like): Spark
            # itself failed, e.g. the Python process that plans a Python data source was
            # killed or could not start on a loaded host. The run fails (exit 8) with what
            # Spark said, not as an unexpected error (exit 1) with a Py4J object's name.
            raise JobFailed(
                f"source s{i} could not be opened, Spark failed: {java_message(e)}"
            ) from e
        if inp.map is not None:
            df = inp.map(df)
        frames.append(df)
    try:
        stream = functools.reduce(lambda a, b: a.unionByName(b), frames)
    except Exception as e:  # AnalysisException: sources of different schemas
        raise InvalidPipeline("sources", f"sources must share one schema to be unioned: {e}") from e
    if pipeline.stream_fn is not None:
        stream = _streaming_part(pipeline.stream_fn, stream)
    check_output_mode(stream, pipeline.output_mode)
    return stream


def _unanalysable(field: str, e: BaseException) -> InvalidPipeline:
    """Spark's refusal to analyse the pipeline's ``field`` (a column the sources do not have,
    a function on the wrong type), as the pipeline's mistake: bad input, with the line of the
    user's code that asked for it."""
    where = user_line(e)
    return InvalidPipeline(
        field,
        f"Spark cannot analyse it on the sources' columns: {first_line(e)[:400]}"
        + (f" (at {where})" if where else ""),
    )


def user_line(e: BaseException) -> str | None:
    """``file:line in function: source`` of the innermost frame of the user's own code in
    ``e``'s traceback (not pyspark's, py4j's or stoker's); None when there is none."""
    import traceback

    from stoker.errortext import is_library

    mine = [f for f in traceback.extract_tb(e.__traceback__) if not is_library(f.filename)]
    if not mine:
        return None
    f = mine[-1]
    source = f": {f.line.strip()}" if f.line else ""
    return f"{f.filename}:{f.lineno} in {f.name}{source}"


def _streaming_part(fn: Callable[[DataFrame], DataFrame], stream: DataFrame) -> DataFrame:
    """The pipeline's stream(fn) on the sources' union; what Spark cannot analyse there is
    the pipeline's mistake (exit 2), as for the transform."""
    from pyspark.errors import AnalysisException
    from pyspark.sql import DataFrame as _DF

    try:
        out = fn(stream)
    except AnalysisException as e:
        raise _unanalysable("stream", e) from e
    if not isinstance(out, _DF):
        raise InvalidPipeline("stream", f"must return a DataFrame, returned {type(out).__name__}")
    return out


# The epoch number the transform sees in the check run (check_transform): none is ever this.
CHECK_EPOCH = Epoch(-1)

# Plan nodes that make a per-epoch transform aggregate or deduplicate within its epoch only.
_PER_EPOCH_STATE = ("Aggregate", "Deduplicate", "Distinct", "Window")


def check_transform(
    stream: DataFrame, pipeline: Pipeline, jid: JobId, config: Mapping[str, Any]
) -> None:
    """Run the per-epoch transform once on an empty batch of the stream's schema, before the
    job is recorded and before the first epoch, with ``ctx.epoch`` -1 and
    ``ctx.attempt`` 0 (a transform can tell this call from an epoch's): what Spark cannot analyse
    (a column that does not exist, a function on the wrong type) is the pipeline's mistake,
    :class:`InvalidPipeline` on ``transform`` (exit 2, nothing recorded, the fixed file runs
    again as it is), not a job failure after its first epoch. Any other error of the user's
    code on an empty batch is left to the epochs (it may not happen on real rows).

    A transform whose plan aggregates or deduplicates does so per epoch:
    said once, with what to write instead."""
    from pyspark.errors import AnalysisException

    from stoker.runtime.context import EpochContext
    from stoker.types import AttemptNo, ControlVersion

    spark = getattr(stream, "sparkSession", None)
    if spark is None:
        return  # not a Spark DataFrame (a test's stand-in): nothing to analyse
    try:
        empty = spark.createDataFrame(spark.sparkContext.emptyRDD(), stream.schema)
    except Exception:
        log.debug(
            "no empty batch of the stream's schema: the transform is not checked", exc_info=True
        )
        return
    ctx = EpochContext(
        job_id=jid,
        epoch=CHECK_EPOCH,  # no epoch has it: a transform keyed on its epoch does nothing
        attempt=AttemptNo(0),
        control_version=ControlVersion(0),
        config=EpochContext.frozen(dict(config)),
        spark=spark,
    )
    try:
        out = pipeline.apply(empty, ctx)
        out.schema  # noqa: B018 (analysis is what is asked for)
    except AnalysisException as e:
        raise _unanalysable("transform", e) from e
    except InvalidPipeline:
        raise
    except Exception:
        log.debug("the transform failed on an empty batch; left to the epochs", exc_info=True)
        return
    check_sinks(pipeline, out)
    try:
        plan = str(out._jdf.queryExecution().analyzed().toString())
    except Exception:
        return
    found = sorted({n for n in _PER_EPOCH_STATE if f"{n} " in plan or f"{n}[" in plan})
    if found:
        log.warning(
            "job %s: the transform %s within each epoch only (%s in its plan): each epoch's "
            "output covers that epoch's rows, not a running total. For state across epochs, "
            "do it in the stream: p.stream(fn) with fn(df) = df.groupBy(...).agg(...) and "
            "Pipeline(..., output_mode='update') (README: Stateful pipelines)",
            jid,
            "deduplicates" if found == ["Deduplicate"] else "aggregates",
            ", ".join(found),
        )


def check_sinks(pipeline: Pipeline, out: DataFrame) -> None:
    """Each sink's optional ``check_output(df)`` on the transform's output of the check run:
    an output a sink cannot write (a column name PostgreSQL would cut; a plan Spark cannot
    analyse for the sink) is bad input before the job is recorded, not a
    failure of its first epoch."""
    from pyspark.errors import AnalysisException

    for i, sink in enumerate(pipeline.sinks):
        check = getattr(sink, "check_output", None)
        if not callable(check):
            continue
        try:
            check(out)
        except AnalysisException as e:
            raise InvalidSink(
                f"sinks[{i}]",
                f"sink {sink.name!r} cannot write the pipeline's output: {first_line(e)[:400]}",
            ) from e
