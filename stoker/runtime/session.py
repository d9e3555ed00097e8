"""The SparkSession of a driver, with stoker's sources registered and Spark's logging quieted."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stoker import procs
from stoker.checkpoint_layout import (
    PROVIDER_KEY,
    ROCKSDB_PROVIDER,
    SHUFFLE_PARTITIONS,
    checkpoint_partitions,
)
from stoker.durations import parse_partitions
from stoker.errors import DriverLost, InvalidInput
from stoker.redact import is_secret_entry
from stoker.runtime import hadoop_local, jvmcache, zygote
from stoker.runtime.jvmlaunch import jvm_launch
from stoker.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Chosen for a job manager's drivers, each overridable with -D spark.<key>=... (the driver's
# Java options are merged: see jvmcache.driver_java_options).
DEFAULT_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "8",
    "spark.driver.extraJavaOptions": jvmcache.driver_java_options(None),
    "spark.sql.streaming.stopTimeout": "30s",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # The Python data source runners connect back to the JVM; on a loaded machine the default
    # socket timeout was seen to expire.
    "spark.python.authenticate.socketTimeout": "120s",
    # A log_level control event calls setLogLevel on the driver; with this, Spark passes the
    # level on to the executors' JVMs too (off by default: they would stay at INFO).
    "spark.executor.syncLogLevel.enabled": "true",
    # State in RocksDB, not Spark's default HDFS-backed store: only RocksDB state can be
    # repartitioned (stoker state repartition), and it keeps large state off the JVM heap.
    # Spark pins the provider in a checkpoint's offset log, so a job created with the HDFS
    # store keeps it. With changelog checkpointing an epoch writes its changes, not a copy of
    # the store. Measured here (1000 rows into 1000 keys per epoch, 8 partitions, local[2],
    # two runs each): median epoch 1.02x and 1.19x of the HDFS store's (475 ms), 1.38x and
    # 1.51x without changelog checkpointing. A -D setting of either key wins, as always.
    PROVIDER_KEY: ROCKSDB_PROVIDER,
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
}


# A job's maximum parallelism is Spark's number of shuffle partitions, which is also the number
# of partitions of its state: Spark pins it in the checkpoint's offset log at the first epoch
# and ignores a later value.
DEFAULT_MAX_PARALLELISM = int(DEFAULT_CONF[SHUFFLE_PARTITIONS])


def max_parallelism(settings: Settings) -> int:
    """The maximum parallelism a job records when it is created: its ``-D
    spark.sql.shuffle.partitions``, else 8. :class:`InvalidInput` naming the setting when it
    is not a whole number of at least 1."""
    given = settings.spark_conf.get(SHUFFLE_PARTITIONS)
    if given is None:
        return DEFAULT_MAX_PARALLELISM
    return parse_partitions(given, f"-D {SHUFFLE_PARTITIONS}")


def job_max_parallelism(
    recorded: Mapping[str, Any] | None, settings: Settings, checkpoint: Path | None = None
) -> int:
    """A job's maximum parallelism: the number of its state partitions and of the shuffle
    partitions every attempt runs with.

    In this order: what the job's checkpoint pins (Spark runs with that whatever the session
    says: a checkpoint repartitioned offline, or made before stoker recorded the value);
    what the job's spec records (``recorded["max_parallelism"]``; it wins over a ``-D`` given
    later); for a job created now, :func:`max_parallelism` of ``settings``.
    """
    if checkpoint is not None:
        pinned = checkpoint_partitions(checkpoint)
        if pinned is not None:
            return pinned
    value = (recorded or {}).get("max_parallelism")
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    return max_parallelism(settings)


@contextlib.contextmanager
def query_partitions(spark: SparkSession, partitions: int | None) -> Iterator[None]:
    """Start a streaming query (``writer.start()`` inside the block) with ``partitions``
    shuffle partitions, the job's maximum parallelism.

    Spark copies the session's SQL settings into the query when it starts; the query's first
    epoch records the value in the checkpoint, which pins it from then on. The session's own
    value is put back after the start, so that the jobs of an application, which share one
    session, each start with their own; the lock makes concurrent starts take turns.
    ``None`` changes nothing.
    """
    if partitions is None:
        yield
        return
    with _start_lock:
        before = spark.conf.get(SHUFFLE_PARTITIONS, None)
        spark.conf.set(SHUFFLE_PARTITIONS, str(partitions))
        try:
            yield
        finally:
            if before is None:
                spark.conf.unset(SHUFFLE_PARTITIONS)
            else:
                spark.conf.set(SHUFFLE_PARTITIONS, before)


_start_lock = threading.Lock()


def spark_conf(settings: Settings) -> dict[str, str]:
    """The Spark settings a driver starts with: stoker's defaults, then the user's."""
    conf = {**DEFAULT_CONF, **settings.spark_conf}
    conf["spark.driver.extraJavaOptions"] = jvmcache.driver_java_options(
        settings.spark_conf.get("spark.driver.extraJavaOptions")
    )
    # Spark inside the driver: its RPC and block manager listen on loopback, not on the host's
    # address (Spark's default, without spark.authenticate), where any host could reach them.
    # A driver on a cluster master must be reachable by its executors: left to the user.
    master = (conf.get("spark.master") or settings.master or "").strip()
    if master.startswith("local"):
        for key in LOOPBACK_KEYS:
            conf.setdefault(key, LOOPBACK)
    hadoop_local.add_to(conf, master)  # Hadoop's local file system, less its forks
    # Hadoop writes the checkpoint (and what a sink writes through it) with the modes of its
    # own umask setting, 022 by default, whatever the process's: give it the process's, so a
    # driver of `stoker server` (umask 077) writes files its user alone can read.
    conf.setdefault(UMASK_KEY, f"{process_umask():03o}")
    return conf


LOOPBACK = "127.0.0.1"
LOOPBACK_KEYS = ("spark.driver.bindAddress", "spark.driver.host")
UMASK_KEY = "spark.hadoop.fs.permissions.umask-mode"


def process_umask() -> int:
    """This process's umask, read from /proc (changing it to read it would race with the
    threads that create files); 0o022 where /proc does not say."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def get_session(settings: Settings, app_name: str) -> SparkSession:
    """Create (or reuse) the session for ``settings`` and register stoker's data sources.

    A Spark setting Spark refuses (``-D spark.sql.shuffle.partitions=abc``) is bad input:
    :class:`InvalidInput` naming it, with Spark's one-line reason.

    Thread-safe: the jobs of an application start on threads of their own, and the first
    one to get here starts the one SparkSession they all share.
    """
    with _lock:
        return _get_session(settings, app_name)


_lock = threading.Lock()


def _get_session(settings: Settings, app_name: str) -> SparkSession:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    gone = jvm_gone()
    if gone is not None:
        raise DriverLost(gone)  # its SparkSession would fail every call: a new driver is due
    if _started and SparkContext._active_spark_context is not None:
        # Started by stoker already (for an app that needed it at import, or an earlier run
        # in this process): reuse it quietly, with the runtime settings asked for now.
        return _reuse(_started[0], settings)
    # py4j logs every command between Python and the JVM at INFO (one per epoch and more).
    logging.getLogger("py4j").setLevel(logging.WARNING)
    _quiet_query_context_loggers()
    _pin_worker_python(settings)
    builder = SparkSession.builder.appName(app_name).master(settings.master)
    conf = spark_conf(settings)
    java = conf["spark.driver.extraJavaOptions"]
    # The driver JVM's classes from an archive when this machine has one (half the start).
    conf["spark.driver.extraJavaOptions"] = " ".join([java, *jvmcache.driver_options(java)])
    secret = {k: v for k, v in conf.items() if is_secret_entry(k, v)}
    for k, v in conf.items():
        if k not in secret:
            builder = builder.config(k, v)
    try:
        with jvm_launch(), _worker_site(), _secret_properties(secret), _local_ip(conf):
            spark = builder.getOrCreate()
        register_sources(spark)  # the first use of the session state: bad SQL settings fail here
    except Exception as e:
        bad = _refused_setting(e)
        if bad is None:
            raise
        _stop_quietly()
        raise bad from e
    _started[:] = [spark]
    return spark


_started: list[SparkSession] = []


def _quiet_query_context_loggers() -> None:
    """PySpark logs an analysis error's whole query context as one JSON line (11.5 KB seen)
    before stoker's own one-line error; stoker reports the error itself (the whole exception
    with --debug). Its loggers are made here, as PySpark makes them, and disabled."""
    try:
        from pyspark.logger import PySparkLogger
    except ImportError:  # an older PySpark: no such logging
        return
    for name in ("DataFrameQueryContextLogger", "SQLQueryContextLogger"):
        PySparkLogger.getLogger(name).disabled = True


EXIT_WAIT_S = 10.0  # how long a dying JVM is given to be collected, for its exit code


def jvm_gone() -> str | None:
    """Why the Spark driver JVM this process started is gone ("the driver's JVM exited
    (killed by SIGKILL)"); None while it runs, and when this process started none.

    PySpark keeps the JVM's process (``SparkContext._gateway.proc``, a child of this one);
    polling it is cheap and, unlike a call into the JVM, cannot hang. A JVM that died takes
    the SparkSession with it: every later call fails, so an in-process restart of a job is
    pointless and only a new driver process helps."""
    if "pyspark" not in sys.modules:
        return None  # nothing here started a JVM
    from pyspark import SparkContext

    proc = getattr(SparkContext._gateway, "proc", None)
    if proc is None:
        return None
    try:
        code = proc.poll()
        if code is None:
            # Killed, its exit may still be under way: its sockets close (and the job's calls
            # fail) before it can be collected. Dying is dead; wait for its code.
            st = procs.stat(proc.pid)
            if st is None or not st.exiting:
                return None
            code = proc.wait(timeout=EXIT_WAIT_S)
    except subprocess.TimeoutExpired:
        return "the driver's JVM is exiting"
    except Exception:  # a process object in a state we cannot read: no proof it died
        return None
    if code >= 0:
        return f"the driver's JVM exited (exit code {code})"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    return f"the driver's JVM exited (killed by {name})"


def _pin_worker_python(settings: Settings) -> None:
    """Spark's Python workers and Python data source runners run this interpreter.

    Spark starts them with ``PYSPARK_PYTHON``, else ``python3`` from ``PATH``: under a venv
    that is not activated (``.venv/bin/stoker``, as services and cron run it) that is another
    Python, without stoker or pyspark, and the first source failed with a traceback from the
    worker. The JVM inherits this process's environment, so setting it here, before the JVM
    starts, reaches every worker it starts. A user's own
    ``PYSPARK_PYTHON`` or ``spark.pyspark.python`` is left alone."""
    if "spark.pyspark.python" in settings.spark_conf:
        return
    given = os.environ.get("PYSPARK_PYTHON")
    if given is not None and not _this_python(given):
        return
    script = None
    if _zygote_wanted and settings.master.startswith("local") and zygote.enabled():
        script = zygote.python_for_spark()  # warm source runners (runtime/zygote.py)
    os.environ["PYSPARK_PYTHON"] = script or sys.executable


def _this_python(path: str) -> bool:
    """Whether ``path`` is this interpreter (a ``PYSPARK_PYTHON`` inherited from a stoker
    process before), or the zygote script of one: not a user's own choice."""
    if os.path.basename(os.path.dirname(path)).startswith(zygote.PREFIX):
        return True
    try:
        return os.path.realpath(path) == os.path.realpath(sys.executable)
    except OSError:
        return False


_zygote_wanted = False


def want_source_zygote() -> None:
    """This process is a driver stoker started (a job manager's driver or standby, or the
    CLI's local run): its Spark's worker daemons and source runners come from a warm zygote
    (``runtime/zygote.py``). A manager's query starts are what a takeover and an upgrade wait
    for; a local run starts sooner and spends about a tenth less CPU (docs/benchmarks.md
    16.1). A program that calls ``stoker.run`` from its own Python process does not get one:
    that process is the user's, not stoker's."""
    global _zygote_wanted
    _zygote_wanted = True


_PROPERTY_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\f": "\\f"}


def _java_properties_escape(text: str, key: bool) -> str:
    """``text`` as a key or value of a Java properties file (read as UTF-8 by Spark)."""
    out = []
    for i, ch in enumerate(text):
        if ch in _PROPERTY_ESCAPES:
            out.append(_PROPERTY_ESCAPES[ch])
        elif ch in "=:#!" or (ch == " " and (key or i == 0)):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


@contextlib.contextmanager
def _secret_properties(secret: Mapping[str, str]) -> Iterator[None]:
    """Hand ``secret`` conf entries to the driver's JVM in a properties file only this user
    can read, not as ``--conf k=v`` arguments, which PySpark puts on the JVM's command line
    for anyone on the host to read in ``/proc``. spark-submit reads the
    file (``--extra-properties-file``, on top of the defaults file) while the JVM starts; it
    is deleted once the SparkSession is up, and the environment is as it was."""
    if not secret:
        yield
        return
    fd, name = tempfile.mkstemp(prefix="stoker-conf-", suffix=".properties")  # 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            for k, v in secret.items():
                fh.write(
                    f"{_java_properties_escape(k, True)}={_java_properties_escape(v, False)}\n"
                )
        rest = os.environ.get("PYSPARK_SUBMIT_ARGS", "pyspark-shell")
        args = f"--extra-properties-file {shlex.quote(name)} {rest}"
        with _environ_while("PYSPARK_SUBMIT_ARGS", args):
            yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(name)


@contextlib.contextmanager
def _local_ip(conf: Mapping[str, str]) -> Iterator[None]:
    """The JVM started with ``SPARK_LOCAL_IP`` on loopback when the driver binds there: Spark's
    web UI (off by default) takes its address from it, not from spark.driver.bindAddress."""
    if conf.get("spark.driver.bindAddress") != LOOPBACK or os.environ.get("SPARK_LOCAL_IP"):
        yield
        return
    with _environ_while("SPARK_LOCAL_IP", LOOPBACK):
        yield


@contextlib.contextmanager
def _environ_while(name: str, value: str) -> Iterator[None]:
    """``os.environ[name]`` is ``value`` inside the block (a JVM started in it keeps that
    copy), and as it was after."""
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


# The folder whose sitecustomize.py takes PySpark's zip copy off the path of Spark's Python
# processes (see that file). STOKER_WORKER_SITE=0 leaves their path as Spark makes it.
WORKER_SITE = Path(__file__).resolve().parent / "workersite"


@contextlib.contextmanager
def _worker_site() -> Iterator[None]:
    """Start the driver's JVM with :data:`WORKER_SITE` last on its ``PYTHONPATH``, which Spark
    hands on, after its own entries, to every Python process it starts; this process's own
    environment is as it was once the JVM runs (the JVM read its copy at its start)."""
    off = os.environ.get("STOKER_WORKER_SITE", "1").strip().lower() in ("0", "false", "off", "no")
    if off or not (WORKER_SITE / "sitecustomize.py").is_file():
        yield
        return
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    with _environ_while("PYTHONPATH", os.pathsep.join([*parts, str(WORKER_SITE)])):
        yield


def _reuse(spark: SparkSession, settings: Settings) -> SparkSession:
    wanted = spark_conf(settings)
    for k in settings.spark_conf:
        v = wanted[k]
        now = spark.conf.get(k, None)
        if k == "spark.driver.extraJavaOptions" and now is not None:
            now = jvmcache.without_archive(now)
        if now == v:
            continue
        if spark.conf.isModifiable(k):
            spark.conf.set(k, v)
        else:
            logging.getLogger("stoker.session").warning(
                "%s=%s comes too late: Spark was started already (give it with -D)", k, v
            )
    return spark


def _refused_setting(err: BaseException) -> InvalidInput | None:
    """Spark's refusal of a setting as InvalidInput naming it; None for any other error."""
    text = str(err)
    m = re.search(r"\[INVALID_CONF_VALUE[.\w]*\]\s*(.*?)(?:\s*SQLSTATE:|\n|$)", text)
    if m is None:
        return None
    reason = m.group(1).strip()
    key = re.search(r'config "([^"]+)"', reason)
    return InvalidInput(f"-D {key.group(1)}" if key else "-D spark", reason)


def _stop_quietly() -> None:
    from pyspark import SparkContext

    sc = SparkContext._active_spark_context
    if sc is not None:
        try:
            sc.stop()
        except Exception:  # the error being reported matters more than this one
            logging.getLogger("stoker.session").debug("stopping Spark failed", exc_info=True)


def register_sources(spark: SparkSession) -> None:
    from stoker.sources import data_sources

    for source in data_sources():
        _register(spark, source)


def _register(spark: SparkSession, source: type) -> None:
    """``spark.dataSource.register(source)``, with the function's environment in a
    ``ConcurrentHashMap`` instead of a ``HashMap``.

    Every streaming query of a registered Python data source shares that one map, and Spark's
    driver-side streaming runner puts its keys into it (``PythonStreamingSourceRunner.init``:
    ``SPARK_LOCAL_DIRS``, ``SPARK_BUFFER_SIZE``, ...) without a lock. Two queries starting at
    once (the jobs of an application, a resumed application above all) can corrupt it: seen
    here as a map whose size counts one entry more than it holds, after which every task of
    every query of that source fails to deserialize (``java.io.OptionalDataException``) until
    the process ends. A concurrent map survives concurrent puts and is serialized whole.
    PySpark's own register does the same steps with a plain map; if its internals moved, that
    is used (with a warning: several queries must then not start at once).
    """
    try:
        from pyspark.core.rdd import _prepare_for_python_RDD

        sc = spark.sparkContext
        jvm = sc._jvm
        assert jvm is not None
        pickled, broadcast_vars, env, includes = _prepare_for_python_RDD(sc, source)
        func = jvm.SimplePythonFunction(
            bytearray(pickled),
            jvm.java.util.concurrent.ConcurrentHashMap(env),
            includes,
            sc.pythonExec,
            sc.pythonVer,
            broadcast_vars,
            sc._javaAccumulator,
        )
        cls = "org.apache.spark.sql.execution.datasources.v2.python.UserDefinedPythonDataSource"
        spark._jsparkSession.dataSource().registerPython(
            source.name(),  # type: ignore[attr-defined]
            getattr(jvm, cls)(func),
        )
    except (ImportError, AttributeError, TypeError) as e:
        logging.getLogger("stoker.session").warning(
            "registering %s with a concurrent environment map failed (%s): registered as "
            "PySpark does; queries of it must not start at the same time",
            source.__name__,
            e,
        )
        spark.dataSource.register(source)
