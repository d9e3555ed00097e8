"""The ``cluster`` text of an application: what parses, what is refused and why, and the
Spark conf an application needs on a standalone cluster of a spec's shape.

A cluster is one master on 127.0.0.1 and workers on 127.0.0.2, .3, ...: distinct loopback
addresses make one machine look like several hosts to Spark (it never runs a speculative copy
of a task on the original's host, and the master decommissions workers by host).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from stoker import procs
from stoker.errors import InvalidInput

FIELD = "cluster"
KINDS = ("local", "standalone", "external", "session")
MASTER_ADDRESS = "127.0.0.1"
# Workers take 127.0.0.2 .. 127.0.0.254: one loopback "host" each.
FIRST_WORKER_OCTET = 2
LAST_WORKER_OCTET = 254
MAX_WORKERS = LAST_WORKER_OCTET - FIRST_WORKER_OCTET + 1
# Spark refuses an executor with less than 450 MiB of heap; a worker smaller than this could
# never run one, so the application would wait for resources for ever.
MIN_WORKER_MEMORY_MB = 512
DEFAULT_WORKERS = 2
DEFAULT_CORES = 1
DEFAULT_MEMORY = "1g"

# Graceful removal: executors of a decommissioned worker migrate their blocks and exit. The
# retry interval default (30 s) keeps an idle executor alive that long after migrating; 1 s
# lets a graceful removal end in seconds. An application's driver and executors read these
# from the application's conf (see app_conf); the daemons read them from their own options.
DECOMMISSION_CONF: dict[str, str] = {
    "spark.decommission.enabled": "true",
    "spark.storage.decommission.enabled": "true",
    "spark.storage.decommission.replicationReattemptInterval": "1s",
}
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}")
_MEMORY = re.compile(r"([1-9][0-9]{0,9})([kmgt])b?", re.IGNORECASE)
_HOST_PORT = re.compile(r"(?P<host>[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252}))?:(?P<port>[0-9]{1,5})")
_UNIT_MB = {"k": 1 / 1024, "m": 1, "g": 1024, "t": 1024 * 1024}


@dataclass(frozen=True)
class ClusterSpec:
    """Where an application's Spark runs: parsed from the user's ``cluster`` text.

    ``local``: ``local[*]`` inside the driver. ``standalone``: a master and ``workers``
    workers that stoker starts for the application and stops when it ends. ``external``: the
    user's ``spark://`` master, used and left alone. ``session``: a cluster started with
    ``stoker cluster start`` under ``name``, used and left alone.
    """

    kind: str
    workers: int = DEFAULT_WORKERS
    cores: int = DEFAULT_CORES
    memory: str = DEFAULT_MEMORY
    master_url: str | None = None
    name: str | None = None

    def text(self) -> str:
        """The canonical text of this spec: what is stored, and parses back to an equal spec."""
        if self.kind == "standalone":
            return f"standalone:workers={self.workers},cores={self.cores},memory={self.memory}"
        if self.kind == "external":
            return str(self.master_url)
        if self.kind == "session":
            return str(self.name)
        return "local"


def parse_cluster(text: str | None) -> ClusterSpec:
    """The spec a user wrote: ``local`` (also for None), ``standalone[:workers=N,cores=C,
    memory=M]``, ``spark://host:port`` or a session cluster's name.

    Every refusal is ``InvalidInput("cluster", ...)`` saying what is wrong and what is allowed;
    a standalone spec is checked against this machine (cores per worker, total memory), since
    its workers run here.
    """
    if text is None:
        return ClusterSpec("local")
    if not isinstance(text, str):
        raise InvalidInput(FIELD, f"must be text, not {type(text).__name__}")
    spec = text.strip()
    head, sep, rest = spec.partition(":")
    kind = head.lower()
    if not spec:
        raise InvalidInput(FIELD, f"is empty; {_ALLOWED}")
    if spec.lower().startswith("spark://"):
        return ClusterSpec("external", master_url=_parse_master_url(spec))
    if "://" in spec:
        scheme = spec.split("://", 1)[0]
        raise InvalidInput(FIELD, f"unknown master URL scheme {scheme!r}; {_ALLOWED}")
    if kind == "local":
        if sep:
            raise InvalidInput(FIELD, f"local takes no settings ({text!r}); {_ALLOWED}")
        return ClusterSpec("local")
    if kind == "standalone":
        return _parse_standalone(rest if sep else None)
    if not sep and _NAME.fullmatch(spec):
        return ClusterSpec("session", name=spec)
    raise InvalidInput(FIELD, f"unknown cluster kind {head!r} in {text!r}; {_ALLOWED}")


_ALLOWED = (
    "use local, standalone:workers=N,cores=C,memory=M, spark://host:port or the name of a "
    "session cluster (letters, digits, - and _)"
)


def _parse_standalone(settings: str | None) -> ClusterSpec:
    values: dict[str, str] = {}
    for item in [] if settings is None else settings.split(","):
        key, eq, value = (s.strip() for s in item.partition("="))
        if not eq or not key or not value:
            raise InvalidInput(FIELD, f"standalone setting {item.strip()!r} is not key=value")
        if key not in ("workers", "cores", "memory"):
            raise InvalidInput(
                FIELD, f"unknown standalone setting {key!r}; allowed: workers, cores, memory"
            )
        if key in values:
            raise InvalidInput(FIELD, f"standalone setting {key!r} is given twice")
        values[key] = value
    workers = _whole("workers", values.get("workers", str(DEFAULT_WORKERS)))
    cores = _whole("cores", values.get("cores", str(DEFAULT_CORES)))
    memory = normalize_memory(values.get("memory", DEFAULT_MEMORY))
    check_worker_shape(cores, memory, workers=workers)
    return ClusterSpec("standalone", workers=workers, cores=cores, memory=memory)


def _whole(key: str, value: str) -> int:
    if not re.fullmatch(r"[0-9]{1,6}", value):
        raise InvalidInput(FIELD, f"{key}={value!r} is not a whole number")
    return int(value)


def normalize_memory(text: str, field: str = FIELD) -> str:
    """``"2G"`` -> ``"2g"``: a size in Spark's own notation (k, m, g, t; binary units).

    A bare number is refused: Spark would read it as bytes.
    """
    m = _MEMORY.fullmatch(text.strip()) if isinstance(text, str) else None
    if m is None:
        raise InvalidInput(field, f"memory {text!r} is not a size like 512m or 2g")
    return f"{int(m.group(1))}{m.group(2).lower()}"


def memory_mb(text: str, field: str = FIELD) -> int:
    """A memory size (``512m``, ``2g``) in MiB, rounded down."""
    norm = normalize_memory(text, field)
    return int(int(norm[:-1]) * _UNIT_MB[norm[-1]])


def machine_memory_mb() -> int:
    """This machine's MemTotal in MiB (a large figure where /proc is missing)."""
    total = procs.memory_total_mb()
    return 1 << 40 if total is None else total


def check_worker_shape(cores: int, memory: str, *, workers: int = 1, field: str = FIELD) -> None:
    """Refuse workers this machine cannot hold: ``workers`` of ``cores`` x ``memory`` each."""
    if workers < 1:
        raise InvalidInput(field, f"workers={workers}: a cluster needs at least 1 worker")
    if workers > MAX_WORKERS:
        raise InvalidInput(field, f"workers={workers} is above {MAX_WORKERS} (loopback hosts)")
    cpus = os.cpu_count() or 1
    if cores < 1:
        raise InvalidInput(field, f"cores={cores}: a worker needs at least 1 core")
    if cores > cpus:
        raise InvalidInput(field, f"cores={cores} is above this machine's {cpus} CPUs")
    mb = memory_mb(memory, field)
    if mb < MIN_WORKER_MEMORY_MB:
        raise InvalidInput(
            field,
            f"memory={memory} is below {MIN_WORKER_MEMORY_MB}m: a Spark executor needs "
            "at least 450 MiB of heap",
        )
    total = machine_memory_mb()
    if workers * mb > total:
        raise InvalidInput(
            field,
            f"workers x memory = {workers} x {memory} = {workers * mb} MiB is above this "
            f"machine's memory ({total} MiB)",
        )


def _parse_master_url(text: str) -> str:
    """``spark://host:port[,host:port...]`` (several masters: Spark's ZooKeeper HA form)."""
    body = text[len("spark://") :]
    parts = body.split(",")
    for part in parts:
        m = _HOST_PORT.fullmatch(part)
        if m is None or not m.group("host"):
            raise InvalidInput(
                FIELD, f"master URL {text!r}: {part!r} is not host:port (spark://host:port)"
            )
        port = int(m.group("port"))
        if not 1 <= port <= 65535:
            raise InvalidInput(FIELD, f"master URL {text!r}: port {port} is not in 1..65535")
    return "spark://" + ",".join(parts)


def app_conf(spec: ClusterSpec) -> dict[str, str]:
    """Spark conf an application needs on a standalone cluster of ``spec``'s shape.

    Executors as large as a worker (Spark's default, 1g, never fits a 512m worker: the
    application would wait for resources for ever) and decommissioning, so that a graceful
    worker removal migrates blocks and lets the executors exit within seconds.
    """
    return {
        **DECOMMISSION_CONF,
        "spark.executor.memory": spec.memory,
        "spark.executor.cores": str(spec.cores),
    }
