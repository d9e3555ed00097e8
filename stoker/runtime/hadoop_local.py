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
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import zipfile
from collections.abc import MutableMapping
from pathlib import Path

from stoker.runtime.cachedir import cache_dir

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


def _javac() -> Path | None:
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "javac") if home else shutil.which("javac")
    if not found or not Path(found).is_file():
        return None
    return Path(found).resolve()


def _hadoop_api() -> Path | None:
    import pyspark

    jars = Path(pyspark.__file__).resolve().parent / "jars"
    found = sorted(jars.glob("hadoop-client-api-*.jar")) if jars.is_dir() else []
    return found[-1] if found else None


def jar_path() -> Path | None:
    """Where the jar for these sources, this ``javac`` and this Hadoop lives (None: no javac,
    no Hadoop jar, disabled)."""
    if not enabled():
        return None
    javac, api = _javac(), _hadoop_api()
    if javac is None or api is None:
        return None
    h = hashlib.sha256()
    for source in sorted(SOURCES.glob("*.java")):
        h.update(source.name.encode() + b"\0" + source.read_bytes() + b"\0")
    h.update(f"{javac}\0{api.name}".encode())
    return cache_dir() / f"stoker-hadoop-{h.hexdigest()[:16]}.jar"


def jar() -> Path | None:
    """The compiled jar, made now if missing (about a second, once per machine); None where it
    cannot be (see :func:`jar_path`), or its compile failed (remembered, not tried again)."""
    try:
        path = jar_path()
    except OSError as e:
        log.debug("no stoker Hadoop classes: %s", e)
        return None
    if path is None:
        return None
    if path.is_file():
        return path
    failed = path.with_suffix(".failed")
    if failed.exists():
        return None
    try:
        _compile(path)
    except (OSError, subprocess.SubprocessError) as e:
        log.warning("stoker's Hadoop classes did not compile (Hadoop's own in use): %s", e)
        with contextlib.suppress(OSError):
            failed.write_text(str(e)[:4000])
        return None
    return path


def _compile(path: Path) -> None:
    """Compile the sources into ``path``, whole or not at all (drivers that start together
    each compile their own copy; the last rename wins, and they are the same)."""
    javac, api = _javac(), _hadoop_api()
    assert javac is not None and api is not None
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=".hadoop-classes-") as tmp:
        out = Path(tmp) / "classes"
        out.mkdir()
        sources = [str(p) for p in sorted(SOURCES.glob("*.java"))]
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
