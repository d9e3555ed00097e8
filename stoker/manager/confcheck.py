"""What a submission's ``conf`` may set under a job manager: an allow-list of keys and of the
shapes of their values.

A token holder may run the entrypoints of ``--allow-dir`` and nothing else. Spark has many
settings that run a program, load a class or a jar, or read a file when it starts (a Python
executable or module, plugins, listeners, catalogs, class paths, JVM options such as
``-XX:OnOutOfMemoryError``), and every release adds some: a deny-list of them was passed twice
by an outside review (a quoted ``-XX:"OnOutOfMemoryError=..."``, which Spark's launcher
unquotes; ``spark.python.daemon.module``). So only what is listed here passes, each value in
the shape its key takes (a size, a number, a word: never a path, a class name or a program),
and JVM options are split as Spark's launcher splits them before each option is judged. The
operator allows more with ``stoker server --allow-conf KEY`` (``KEY``: the key and its
sub-keys; ``PREFIX*``: every key starting so; ``KEY=VALUE``: that key with that value only).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from stoker.errors import InvalidInput

# Shapes of values -----------------------------------------------------------------------------
_BOOL = re.compile(r"(?i)true|false")
_INT = re.compile(r"-?\d{1,18}")
_NUM = re.compile(r"-?\d{1,18}(?:\.\d{1,18})?(?:[eE][-+]?\d{1,3})?")
_SIZE = re.compile(r"(?i)\d{1,18}(?:\.\d{1,6})?\s?(?:[bkmgtp]i?b?)?")
_DURATION = re.compile(r"(?i)\d{1,18}(?:\.\d{1,6})?\s?(?:us|ms|s|m|min|h|d)?")
_WORD = re.compile(r"[A-Za-z0-9_-]{1,100}")  # no dot: never a class name, a path or a host
_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]{0,252}|\[?[0-9A-Fa-f:.]{2,45}\]?")
_ZONE = re.compile(r"[A-Za-z][A-Za-z0-9_+\-/]{0,60}|[+-]\d{1,2}(?::\d{2})?|UTC|GMT")


def _of(pattern: re.Pattern[str], what: str) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        return None if pattern.fullmatch(value.strip()) else what

    return check


def _one_of(*values: str) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        if value.strip() in values:
            return None
        return "one of " + ", ".join(values)

    return check


def _scalar(value: str) -> str | None:
    """A setting's plain value: true/false, a number, a size, a duration or a word."""
    v = value.strip()
    if any(p.fullmatch(v) for p in (_BOOL, _NUM, _SIZE, _DURATION, _WORD)):
        return None
    return "true/false, a number, a size (512m), a duration (30s) or a word"


def _text(value: str) -> str | None:
    # No ${...}: Spark (${env:NAME}) and Hadoop (${env.NAME}) expand it when they read a
    # setting, which would copy the manager's environment (a password) into the job's conf.
    if len(value) <= 1000 and value.isprintable() and "${" not in value:
        return None
    return "printable text of at most 1,000 characters, without ${...}"


_LOOPBACK_HOST = re.compile(r"(?i)localhost|127(?:\.\d{1,3}){3}|\[?::1\]?")


def _master(value: str) -> str | None:
    """Spark inside the driver (``local``, ``local[N]``, ``local[*]``, ``local[N,F]``) or a
    standalone master on this host's loopback (where stoker's own clusters listen). A master
    elsewhere would hand the driver's JVM to whatever answers there."""
    v = value.strip()
    if re.fullmatch(r"local(?:\[(?:\d{1,4}|\*)(?:,\d{1,4})?\])?", v):
        return None
    if v.startswith("spark://"):
        hosts = [h.rsplit(":", 1) for h in v[len("spark://") :].split(",")]
        if all(len(h) == 2 and _LOOPBACK_HOST.fullmatch(h[0]) and h[1].isdigit() for h in hosts):
            return None
    return (
        "local, local[N], local[*], local[N,F] or spark://HOST:PORT on loopback; the operator "
        "allows another master with stoker server --allow-conf spark.master=URL"
    )


# JVM options --------------------------------------------------------------------------------


def parse_java_options(text: str) -> list[str]:
    """Split ``text`` into options as Spark's launcher does
    (``org.apache.spark.launcher.CommandBuilderUtils.parseOptionString``): whitespace
    separates, single and double quotes group and are removed (``-XX:"On..."`` is
    ``-XX:On...``), a backslash outside single quotes escapes the next character. Unbalanced
    quotes or a trailing backslash: :class:`ValueError` (the launcher refuses them too)."""
    opts: list[str] = []
    cur: list[str] = []
    in_opt = single = double = escape = False
    for c in text:
        if escape:
            cur.append(c)
            escape = False
        elif single:
            if c == "'":
                single = False
            else:
                cur.append(c)
        elif double:
            if c == '"':
                double = False
            elif c == "\\":
                escape = True
            else:
                cur.append(c)
        elif c == "'":
            single = in_opt = True
        elif c == '"':
            double = in_opt = True
        elif c == "\\":
            escape = in_opt = True
        elif c.isspace():
            if in_opt:
                opts.append("".join(cur))
                cur, in_opt = [], False
        else:
            cur.append(c)
            in_opt = True
    if single or double or escape:
        raise ValueError("an unbalanced quote or a trailing backslash")
    if in_opt:
        opts.append("".join(cur))
    return opts


# -XX flags that only tune the VM (no file, program, library or class): +Flag / -Flag, or
# Flag=NUMBER / SIZE.
_XX_SWITCHES = frozenset(
    [
        "UseSerialGC",
        "UseParallelGC",
        "UseG1GC",
        "UseZGC",
        "UseShenandoahGC",
        "UseStringDeduplication",
        "TieredCompilation",
        "UseCompressedOops",
        "UseCompressedClassPointers",
        "AlwaysPreTouch",
        "ExitOnOutOfMemoryError",
        "CrashOnOutOfMemoryError",
        "UseContainerSupport",
        "UseNUMA",
        "OmitStackTraceInFastThrow",
        "ShowCodeDetailsInExceptionMessages",
        "UseAdaptiveSizePolicy",
        "ParallelRefProcEnabled",
        "UseCodeCacheFlushing",
        "ExplicitGCInvokesConcurrent",
        "DisableExplicitGC",
        "UseLargePages",
        "UseTLAB",
        "ResizeTLAB",
        "UnlockExperimentalVMOptions",
        "UnlockDiagnosticVMOptions",
        "UseStringCache",
        "PerfDisableSharedMem",
    ]
)
_XX_VALUES = frozenset(
    [
        "TieredStopAtLevel",
        "MaxGCPauseMillis",
        "ParallelGCThreads",
        "ConcGCThreads",
        "InitiatingHeapOccupancyPercent",
        "G1HeapRegionSize",
        "G1ReservePercent",
        "MaxMetaspaceSize",
        "MetaspaceSize",
        "MaxDirectMemorySize",
        "ReservedCodeCacheSize",
        "InitialCodeCacheSize",
        "MaxRAMPercentage",
        "InitialRAMPercentage",
        "MinRAMPercentage",
        "ActiveProcessorCount",
        "NewRatio",
        "SurvivorRatio",
        "MaxTenuringThreshold",
        "SoftRefLRUPolicyMSPerMB",
        "CICompilerCount",
        "NewSize",
        "MaxNewSize",
        "ThreadStackSize",
        "CompressedClassSpaceSize",
        "StringTableSize",
        "MaxInlineLevel",
        "FreqInlineSize",
        "GCTimeRatio",
        "MinHeapFreeRatio",
        "MaxHeapFreeRatio",
    ]
)
# System properties a job may set besides names without a dot (-Dmy_flag=1: no library reads
# those): the JVM's and libraries' dotted names may load a class, a native library, a file
# (log4j's configuration, JMX, a class loader), or, as -Dspark.*, any Spark setting.
_SAFE_PROPERTIES = frozenset(
    [
        "file.encoding",
        "sun.jnu.encoding",
        "user.timezone",
        "user.language",
        "user.country",
        "user.region",
        "java.net.preferIPv4Stack",
        "java.net.preferIPv6Addresses",
        "java.awt.headless",
        "io.netty.tryReflectionSetAccessible",
        "sun.net.inetaddr.ttl",
    ]
)
_JVM_VALUE = re.compile(r"(?i)\d{1,18}(?:\.\d{1,6})?[kmgt]?")
# No quote, backslash or space survives in an option: whatever splits them (the launcher, a
# standalone worker's splitter) sees the same options.
_PROPERTY_VALUE = re.compile(r"[\w.,:/@+=-]{0,1000}")


def _java_option(opt: str) -> bool:
    if m := re.fullmatch(r"-X(ss|ms|mn)(.+)", opt):
        return bool(_JVM_VALUE.fullmatch(m.group(2)))
    if m := re.fullmatch(r"-XX:[+-](\w+)", opt):
        return m.group(1) in _XX_SWITCHES
    if m := re.fullmatch(r"-XX:(\w+)=(.+)", opt):
        return m.group(1) in _XX_VALUES and bool(_JVM_VALUE.fullmatch(m.group(2)))
    if m := re.fullmatch(r"-D([^=]+)(?:=(.*))?", opt, re.S):
        name, value = m.group(1), m.group(2) or ""
        named = name in _SAFE_PROPERTIES or bool(re.fullmatch(r"[A-Za-z_][\w-]{0,100}", name))
        return named and bool(_PROPERTY_VALUE.fullmatch(value))
    return opt in ("-ea", "-da", "-esa", "-dsa", "-server", "-verbose:gc", "-Xshare:auto")


def _java_options(value: str) -> str | None:
    if not value.isprintable() or not value.isascii():
        return "JVM options of printable ASCII characters"
    try:
        opts = parse_java_options(value)
    except ValueError as e:
        return f"JVM options Spark's launcher can split ({e})"
    for opt in opts:
        if not _java_option(opt):
            shown = opt.split("=", 1)[0][:60]
            hint = (
                ": give the heap with spark.driver.memory / spark.executor.memory"
                if opt.startswith("-Xmx")
                else ""
            )
            return (
                "JVM options that only tune the VM (-Xss/-Xms/-Xmn, listed -XX flags, "
                f"-DNAME=VALUE for a NAME without a dot): {shown!r} is not one{hint}"
            )
    return None


# The allow-list ------------------------------------------------------------------------------
Check = Callable[[str], str | None]
_size = _of(_SIZE, "a size (512m, 2g)")
_int = _of(_INT, "a whole number")
_bool = _of(_BOOL, "true or false")
_duration = _of(_DURATION, "a duration (30s, 500ms)")

# Key (exact) -> the shape of its value.
KEYS: dict[str, Check] = {
    "spark.app.name": _text,
    "spark.master": _master,
    "stoker.master": _master,
    "spark.driver.memory": _size,
    "spark.executor.memory": _size,
    "spark.driver.memoryOverhead": _size,
    "spark.executor.memoryOverhead": _size,
    "spark.driver.maxResultSize": _size,
    "spark.executor.pyspark.memory": _size,
    "spark.python.worker.memory": _size,
    "spark.kryoserializer.buffer": _size,
    "spark.kryoserializer.buffer.max": _size,
    "spark.driver.cores": _int,
    "spark.executor.cores": _int,
    "spark.executor.instances": _int,
    "spark.cores.max": _int,
    "spark.default.parallelism": _int,
    "spark.task.cpus": _int,
    "spark.task.maxFailures": _int,
    "spark.stage.maxConsecutiveAttempts": _int,
    "spark.port.maxRetries": _int,
    "spark.driver.port": _int,
    "spark.blockManager.port": _int,
    "spark.driver.blockManager.port": _int,
    "spark.sql.shuffle.partitions": _int,
    "spark.ui.port": _int,
    "spark.ui.enabled": _bool,
    "spark.ui.killEnabled": _bool,
    "spark.ui.showConsoleProgress": _bool,
    "spark.ui.retainedJobs": _int,
    "spark.ui.retainedStages": _int,
    "spark.ui.retainedTasks": _int,
    "spark.sql.ui.retainedExecutions": _int,
    "spark.sql.streaming.ui.retainedQueries": _int,
    "spark.sql.streaming.ui.retainedProgressUpdates": _int,
    "spark.driver.host": _of(_HOST, "a host name or address"),
    "spark.driver.bindAddress": _of(_HOST, "a host name or address"),
    "spark.sql.session.timeZone": _of(_ZONE, "a time zone (UTC, Europe/Paris, +02:00)"),
    "spark.scheduler.mode": _one_of("FIFO", "FAIR"),
    "spark.serializer": _one_of(
        "org.apache.spark.serializer.KryoSerializer", "org.apache.spark.serializer.JavaSerializer"
    ),
    "spark.sql.streaming.stateStore.providerClass": _one_of(
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
    ),
    "spark.network.timeout": _duration,
    "spark.executor.heartbeatInterval": _duration,
    "spark.speculation": _bool,
    "spark.decommission.enabled": _bool,
    "spark.authenticate": _bool,
    "spark.network.crypto.enabled": _bool,
    "spark.io.encryption.enabled": _bool,
    "spark.logConf": _bool,
    "spark.log.level": _of(_WORD, "a log level (WARN, INFO, ...)"),
    "spark.rdd.compress": _bool,
    "spark.io.compression.codec": _one_of("lz4", "lzf", "snappy", "zstd"),
    "spark.python.worker.reuse": _bool,
    "spark.python.authenticate.socketTimeout": _duration,
    "spark.python.worker.faulthandler.enabled": _bool,
    "spark.sql.execution.pyspark.udf.faulthandler.enabled": _bool,
    "spark.sql.autoBroadcastJoinThreshold": _size,
    "spark.sql.broadcastTimeout": _duration,
    "spark.sql.caseSensitive": _bool,
    "spark.sql.ansi.enabled": _bool,
    "spark.sql.sources.partitionOverwriteMode": _one_of("static", "dynamic", "STATIC", "DYNAMIC"),
    "spark.driver.extraJavaOptions": _java_options,
    "spark.executor.extraJavaOptions": _java_options,
    "spark.driver.defaultJavaOptions": _java_options,
    "spark.executor.defaultJavaOptions": _java_options,
}

# Families (a key under the prefix) whose settings are plain values: tuning, never code. A key
# in one of them that names a class, a program or a file is still refused by its value's shape
# (a word has no dot or slash), or by name in _NOT_IN_FAMILIES.
FAMILIES: tuple[str, ...] = (
    "spark.sql.adaptive.",
    "spark.sql.streaming.",
    "spark.sql.execution.arrow.",
    "spark.sql.files.",
    "spark.sql.parquet.",
    "spark.sql.orc.",
    "spark.sql.legacy.",
    "spark.sql.codegen.",
    "spark.sql.inMemoryColumnarStorage.",
    "spark.sql.join.",
    "spark.sql.optimizer.",
    "spark.speculation.",
    "spark.storage.",
    "spark.memory.",
    "spark.shuffle.",
    "spark.locality.wait",
    "spark.dynamicAllocation.",
    "spark.excludeOnFailure.",
    "spark.cleaner.",
    "spark.rpc.",
    "spark.task.reaper.",
    "spark.io.compression.",
    "spark.hadoop.fs.s3a.",
    "spark.hadoop.fs.gs.",
    "spark.hadoop.fs.azure.",
)
# In those families, keys that name code or a file whatever their value looks like.
_NOT_IN_FAMILIES = re.compile(
    r"(?i).*(?:class(?:es)?|impl|provider|providers|factory|plugin|plugins|listeners?|"
    r"signers?|handler|command|script|path|dir|file|jars?|manager|location)$"
)
_SECRET_VALUE_FAMILIES = ("spark.hadoop.fs.",)  # credentials: any printable value


def _family_check(key: str) -> Check | None:
    for fam in FAMILIES:
        if key.startswith(fam) and not _NOT_IN_FAMILIES.fullmatch(key):
            if key.startswith(_SECRET_VALUE_FAMILIES):
                return _hadoop_value
            return _scalar
    return None


_CLASS_LIKE = re.compile(r"(?:[A-Za-z_$][\w$]*\.)+[A-Z][\w$]*")


def _hadoop_value(value: str) -> str | None:
    if any(_CLASS_LIKE.fullmatch(v.strip()) for v in value.split(",")):
        return "a value that is not a class name"
    return _text(value)


def _operator_allows(key: str, value: str, allowed: Sequence[str]) -> bool:
    for a in allowed:
        if "=" in a:
            k, v = a.split("=", 1)
            if key == k and value.strip() == v.strip():
                return True
        elif a.endswith("*"):
            if key.startswith(a[:-1]):
                return True
        elif key == a or key.startswith(a + "."):
            return True
    return False


def check_conf(conf: dict[str, str], allowed: Sequence[str] = ()) -> None:
    """:class:`InvalidInput` naming ``conf.<key>`` for the first entry that is neither on the
    allow-list in the shape its key takes nor allowed by the operator (``allowed``: the
    ``--allow-conf`` entries). Keys outside ``spark.*`` other than ``stoker.master`` are
    stoker's settings (or unknown), checked by :class:`~stoker.settings.Settings`."""
    for key, value in conf.items():
        if _operator_allows(key, value, allowed):
            continue
        if not key.startswith("spark.") and key not in KEYS:
            continue  # stoker's settings, or unknown: Settings names the problem
        check = KEYS.get(key) or _family_check(key)
        if check is None:
            raise InvalidInput(
                f"conf.{key}",
                "is not a setting a submission may give under a job manager (an allow-list "
                "of tuning settings: sizes, cores, partitions, UI, timeouts; never code, a "
                "class, a program or a file): its operator may allow it with stoker server "
                f"--allow-conf {key}",
            )
        problem = check(value)
        if problem is not None:
            raise InvalidInput(
                f"conf.{key}",
                f"expects {problem}; its operator may allow other values with stoker server "
                f"--allow-conf {key}",
            )
