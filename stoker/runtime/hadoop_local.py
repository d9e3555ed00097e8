"""Hadoop's local file system without the processes it forks: a driver in local mode writes
its checkpoint, state and files-sink output through four small classes of stoker's own
(``runtime/java/stoker/hadoop``) instead of Hadoop's.

Without Hadoop's native library, which PySpark does not ship, Hadoop's ``RawLocalFileSystem``
starts a ``chmod`` process for the mode of every file and folder it creates and a ``readlink``
process for every link status it reads (a checkpoint log's rename asks for its destination's).
Measured here (a plain Structured Streaming job at trigger 0, one row per epoch into Parquet,
local[2]): 28 such processes per epoch, each a spawn from a JVM of several hundred MiB, and a
median epoch of 189 ms; with these classes 0 and 101 ms (docs/benchmarks.md 25). Each class
overrides only those two calls, with the same system calls made through ``java.nio``; every
other behaviour, the checksum files included, is Hadoop's own.

- The classes are compiled once per machine and Hadoop version with the JDK's ``javac`` into
  the cache of :func:`stoker.runtime.cachedir.cache_dir` (a second, a few KiB); without a
  ``javac`` (a JRE alone) or when it fails, drivers run with Hadoop's classes as before.
- Only ``local`` masters get them: a cluster's executors may run on hosts where the jar's path
  is not, and a job on HDFS or S3 never touches the local file system's code. The jar is on
  every driver's class path all the same, so that one JVM class archive serves both.
- A user's own ``fs.file.impl`` or ``fs.AbstractFileSystem.file.impl`` wins;
  ``STOKER_HADOOP_NIO=0`` turns it all off.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import subprocess
import tempfile
import zipfile
from collections.abc import MutableMapping
from pathlib import Path

from stoker.runtime.cachedir import cache_dir, jdk_tool

log = logging.getLogger("stoker.hadoop_local")

ENV_SWITCH = "STOKER_HADOOP_NIO"
SOURCES = Path(__file__).resolve().parent / "java" / "stoker" / "hadoop"
CLASS_PATH_KEY = "spark.driver.extraClassPath"
FS_CLASSES = {
    "spark.hadoop.fs.file.impl": "stoker.hadoop.NioLocalFileSystem",
    "spark.hadoop.fs.AbstractFileSystem.file.impl": "stoker.hadoop.NioLocalFs",
}
COMPILE_TIMEOUT_S = 120.0


def enabled() -> bool:
    return os.environ.get(ENV_SWITCH, "1").strip().lower() not in ("0", "false", "no", "off")


def add_to(conf: MutableMapping[str, str], master: str) -> None:
    """Put the classes into a driver's Spark settings: the jar on its class path, and where
    the executors are the driver's JVM (``local``, ``local[...]``; not ``local-cluster``, whose
    executors have a class path of their own) the two Hadoop settings that use them, unless
    the user set their own."""
    path = jar()
    if path is None:
        return
    given = conf.get(CLASS_PATH_KEY, "")
    if str(path) not in given.split(os.pathsep):
        conf[CLASS_PATH_KEY] = os.pathsep.join(p for p in (str(path), given) if p)
    if master == "local" or master.startswith("local["):
        for key, cls in FS_CLASSES.items():
            conf.setdefault(key, cls)


def _tools() -> tuple[Path, Path] | None:
    """The ``javac`` and Hadoop API jar the classes compile with; None when either is missing."""
    import pyspark

    javac = jdk_tool("javac")
    jars = Path(pyspark.__file__).resolve().parent / "jars"
    api = sorted(jars.glob("hadoop-client-api-*.jar")) if jars.is_dir() else []
    if javac is None or not javac.is_file() or not api:
        return None
    return javac, api[-1]


@functools.cache
def _sources() -> tuple[tuple[Path, ...], str]:
    """The Java sources and the digest of their text: read once per process (a driver asks
    for the jar's path at its start, for its settings and for its class archive's name)."""
    paths = tuple(sorted(SOURCES.glob("*.java")))
    h = hashlib.sha256()
    for source in paths:
        h.update(source.name.encode() + b"\0" + source.read_bytes() + b"\0")
    return paths, h.hexdigest()


def _jar_path(javac: Path, api: Path) -> Path:
    """Where the jar for these sources, this ``javac`` and this Hadoop lives."""
    key = f"{_sources()[1]}\0{javac}\0{api.name}"
    return cache_dir() / f"stoker-hadoop-{hashlib.sha256(key.encode()).hexdigest()[:16]}.jar"


def jar() -> Path | None:
    """The compiled jar, made now if missing (about a second, once per machine); None where it
    cannot be (disabled, no ``javac`` or no Hadoop jar), or its compile failed (remembered, not
    tried again)."""
    if not enabled():
        return None
    try:
        tools = _tools()
        if tools is None:
            return None
        path = _jar_path(*tools)
    except OSError as e:
        log.debug("no stoker Hadoop classes: %s", e)
        return None
    if path.is_file():
        return path
    failed = path.with_suffix(".failed")
    if failed.exists():
        return None
    try:
        _compile(path, *tools)
    except (OSError, subprocess.SubprocessError) as e:
        log.warning("stoker's Hadoop classes did not compile (Hadoop's own in use): %s", e)
        with contextlib.suppress(OSError):
            failed.write_text(str(e)[:4000])
        return None
    return path


def _compile(path: Path, javac: Path, api: Path) -> None:
    """Compile the sources into ``path``, whole or not at all (drivers that start together
    each compile their own copy; the last rename wins, and they are the same)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=".hadoop-classes-") as tmp:
        out = Path(tmp) / "classes"
        out.mkdir()
        sources = [str(p) for p in _sources()[0]]
        done = subprocess.run(  # our own sources and fixed arguments: no user input
            [str(javac), "--release", "17", "-nowarn", "-cp", str(api), "-d", str(out), *sources],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=COMPILE_TIMEOUT_S,
        )
        if done.returncode != 0:
            raise OSError(f"javac exited {done.returncode}: {done.stderr.strip()[-2000:]}")
        staged = Path(tmp) / "classes.jar"
        with zipfile.ZipFile(staged, "w", zipfile.ZIP_DEFLATED) as zf:
            zf.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\n\r\n")
            for cls in sorted(out.rglob("*.class")):
                zf.write(cls, cls.relative_to(out).as_posix())
        os.replace(staged, path)
