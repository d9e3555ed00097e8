"""Spark standalone clusters that stoker starts, changes and stops; no Spark imported here.

A cluster is one master on 127.0.0.1 and workers on 127.0.0.2, .3, ...: distinct loopback
addresses make one machine look like several hosts to Spark (it never runs a speculative copy
of a task on the original's host, and the master decommissions workers by host). Every JVM
is started with pyspark's own ``bin/spark-class`` (it execs java, so the pid we get is the
JVM's) as the leader of a new process group, so its executors and their Python workers go
with it when the group is signalled.

Each process is described by a plain dict (the shape of ``ClusterRecord.processes``) that
carries its identity: host, pid and the kernel's start marker of that pid. The caller stores
these dicts; a different process (a new leader after a failover) can then stop exactly these
JVMs and never a process that happens to reuse one of their pids.

The cluster's daemons bind to loopback only, refuse the master's REST submission server (it
runs arbitrary code for anyone who can reach it) and fail rather than drift to another port
when theirs is taken (``spark.port.maxRetries=0``), so that the ports recorded are the ports
used; a JVM that loses a port race is started once more on fresh ports.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stoker.errors import ClusterError, InvalidInput
from stoker.procs import process_start_marker
from stoker.redact import is_secret_key, redact_text

log = logging.getLogger("stoker.clusters")

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
_DAEMON_CONF: dict[str, str] = {**DECOMMISSION_CONF, "spark.port.maxRetries": "0"}
_MASTER_CONF: dict[str, str] = {**_DAEMON_CONF, "spark.master.rest.enabled": "false"}

_MASTER_CLASS = "org.apache.spark.deploy.master.Master"
_WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}")
_MEMORY = re.compile(r"([1-9][0-9]{0,9})([kmgt])b?", re.IGNORECASE)
_HOST_PORT = re.compile(r"(?P<host>[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252}))?:(?P<port>[0-9]{1,5})")
_UNIT_MB = {"k": 1 / 1024, "m": 1, "g": 1024, "t": 1024 * 1024}
_BIND_FAILURE = ("BindException", "Address already in use", "Failed to bind", "could not bind")
_POLL = 0.25
_HTTP_TIMEOUT = 3.0
# The master is on loopback: never through a proxy the environment names.
_HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))
# JVMs this process started, by pid: kept so that their exit is collected (no zombies) and
# Popen does not warn that it was dropped while its child ran.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}

ProcessInfo = dict[str, Any]
OnProcess = Callable[[ProcessInfo], None]


# The spec ----------------------------------------------------------------------------------
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
    with contextlib.suppress(OSError, ValueError, IndexError), open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    return 1 << 40


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


# Starting ----------------------------------------------------------------------------------
def spark_home() -> Path:
    """pyspark's folder (its ``bin/spark-class`` starts the JVMs), found without importing
    pyspark: the manager must stay Spark-free, and the cluster must run the driver's Spark."""
    found = importlib.util.find_spec("pyspark")
    locations = list(found.submodule_search_locations or []) if found else []
    for location in locations:
        home = Path(location).resolve()
        if (home / "bin" / "spark-class").is_file():
            return home
    raise ClusterError(
        "pyspark with bin/spark-class is not installed for this Python "
        f"(looked in {locations or 'nowhere: no pyspark package'})"
    )


@dataclass(frozen=True)
class StartedCluster:
    """A standalone cluster whose master lists every worker ALIVE."""

    master_url: str
    web_url: str
    processes: list[ProcessInfo]


@dataclass
class _Launch:
    """One JVM being started: its Popen (while we are its parent), record and log offset."""

    popen: subprocess.Popen[bytes]
    info: ProcessInfo
    log_from: int
    tries: int = 1

    def exited(self) -> int | None:
        return self.popen.poll()

    def new_log(self) -> str:
        """What this JVM wrote to its log (not what an earlier try wrote)."""
        try:
            with open(self.info["log"], "rb") as fh:
                fh.seek(self.log_from)
                return fh.read().decode("utf-8", errors="replace")
        except OSError:
            return ""

    def bind_failed(self) -> bool:
        text = self.new_log()
        return any(marker in text for marker in _BIND_FAILURE)

    def why(self) -> str:
        """The last error line of its log: the reason a user can act on."""
        lines = [ln.strip() for ln in self.new_log().splitlines() if ln.strip()]
        lines = [ln for ln in lines if not ln.startswith(("at ", "..."))]  # no stack frames
        thrown = [ln for ln in lines if re.search(r"(Exception|Error)\b:", ln)]
        logged = [ln for ln in lines if " ERROR " in ln]
        last = (thrown or logged or lines or ["(no output)"])[-1]
        return redact_text(last[:400])


class _Recorder:
    """Every process a start launched, by id (a JVM started again after a lost port race
    replaces its earlier dict), each passed on to ``on_process`` as soon as it is known."""

    def __init__(self, on_process: OnProcess | None) -> None:
        self._started: dict[str, ProcessInfo] = {}
        self._on_process = on_process

    def __call__(self, info: ProcessInfo) -> None:
        self._started[info["id"]] = info
        if self._on_process is not None:
            self._on_process(dict(info))

    def processes(self) -> list[ProcessInfo]:
        return list(self._started.values())


def start_standalone(
    name: str,
    spec: ClusterSpec,
    folder: Path,
    timeout: float = 180.0,
    on_process: OnProcess | None = None,
) -> StartedCluster:
    """Start a master and ``spec.workers`` workers; return once the master lists them ALIVE.

    Logs go to ``folder/<id>.log``, work and local folders under ``folder``. ``on_process``
    is called with each process's dict as soon as it is started, before any waiting, so the
    caller can record it (a JVM that lost a port race is started again under the same id: the
    later dict replaces the earlier). On any failure, or after ``timeout`` seconds, everything
    started is stopped and :class:`ClusterError` says which process failed and why.
    """
    if spec.kind != "standalone":
        raise InvalidInput(FIELD, f"cluster {name!r}: {spec.text()!r} is not a standalone spec")
    _reap_exited()
    folder = folder.resolve()
    folder.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout
    record = _Recorder(on_process)

    try:
        home = spark_home()
        master = _start_master(name, home, folder, record, deadline)
        master_url = f"spark://{MASTER_ADDRESS}:{master.info['port']}"
        web_url = f"http://{MASTER_ADDRESS}:{master.info['web_port']}"
        launches = [
            _spawn_worker(home, folder, master_url, octet, spec.cores, spec.memory, record)
            for octet in range(FIRST_WORKER_OCTET, FIRST_WORKER_OCTET + spec.workers)
        ]
        _await_workers(name, home, folder, master_url, web_url, launches, record, deadline, master)
        _fill_worker_ports(web_url, launches)
        processes = [master.info, *(launch.info for launch in launches)]
        log.info("cluster %s: master %s, %d workers ALIVE", name, master_url, spec.workers)
        return StartedCluster(master_url, web_url, [dict(p) for p in processes])
    except BaseException:
        _stop_quietly(record.processes(), f"cluster {name!r} did not start")
        raise


def _start_master(
    name: str, home: Path, folder: Path, record: OnProcess, deadline: float
) -> _Launch:
    """The master, answering on its web UI (its RPC port is bound before that)."""
    launch: _Launch | None = None
    for tries in (1, 2):
        port, web_port = _free_port(MASTER_ADDRESS), _free_port(MASTER_ADDRESS)
        argv = [
            str(home / "bin" / "spark-class"),
            _MASTER_CLASS,
            "--host",
            MASTER_ADDRESS,
            "--port",
            str(port),
            "--webui-port",
            str(web_port),
        ]
        info = _info("master", "master", MASTER_ADDRESS, port, web_port, folder, 0, "")
        launch = _spawn(argv, info, _env(home, folder, info, "SPARK_MASTER_OPTS", _MASTER_CONF))
        launch.tries = tries
        record(launch.info)
        web_url = f"http://{MASTER_ADDRESS}:{web_port}"
        while launch.exited() is None and time.monotonic() < deadline:
            if _try_status(web_url) is not None:
                return launch
            time.sleep(_POLL)
        if launch.exited() is None:
            raise ClusterError(
                f"cluster {name!r}: the master did not answer in time; {_logs(folder)}"
            )
        if tries == 1 and launch.bind_failed():
            log.info("cluster %s: the master lost a port race; starting it on other ports", name)
            continue
        raise _exited_error(name, launch, folder)
    raise AssertionError("unreachable")  # pragma: no cover


def _spawn_worker(
    home: Path,
    folder: Path,
    master_url: str,
    octet: int,
    cores: int,
    memory: str,
    record: OnProcess,
    tries: int = 1,
) -> _Launch:
    """Start one worker on 127.0.0.<octet> (its id: ``worker-<octet - 1>``)."""
    number = octet - FIRST_WORKER_OCTET + 1
    worker_id = f"worker-{number}"
    address = f"127.0.0.{octet}"
    web_port = _free_port(address)
    work = folder / f"work-{number}"
    work.mkdir(parents=True, exist_ok=True)
    argv = [
        str(home / "bin" / "spark-class"),
        _WORKER_CLASS,
        master_url,
        "--host",
        address,
        "--cores",
        str(cores),
        "--memory",
        memory,
        "--webui-port",
        str(web_port),
        "--work-dir",
        str(work),
    ]
    # The worker's RPC port is Spark's pick (port 0): known once it registers.
    info = _info("worker", worker_id, address, 0, web_port, folder, cores, memory)
    launch = _spawn(argv, info, _env(home, folder, info, "SPARK_WORKER_OPTS", _DAEMON_CONF))
    launch.tries = tries
    record(launch.info)
    return launch


def _await_workers(
    name: str,
    home: Path,
    folder: Path,
    master_url: str,
    web_url: str,
    launches: list[_Launch],
    record: OnProcess,
    deadline: float,
    master: _Launch | None = None,
) -> None:
    """Wait until the master lists a worker ALIVE at each launch's address; a worker that
    lost a port race is started once more (``launches`` is updated in place)."""
    while True:
        status = _try_status(web_url)
        if all(_registered(status, launch.info) for launch in launches):
            return
        if master is not None and master.exited() is not None:
            raise _exited_error(name, master, folder)
        for i, launch in enumerate(launches):
            if launch.exited() is None:
                continue
            if launch.tries == 1 and launch.bind_failed():
                log.info("cluster %s: %s lost a port race; again", name, launch.info["id"])
                octet = int(launch.info["address"].rsplit(".", 1)[1])
                info = launch.info
                launches[i] = _spawn_worker(
                    home, folder, master_url, octet, info["cores"], info["memory"], record, 2
                )
                continue
            raise _exited_error(name, launch, folder)
        if time.monotonic() > deadline:
            late = [ln.info["id"] for ln in launches if not _registered(status, ln.info)]
            raise ClusterError(
                f"cluster {name!r}: {', '.join(late)} not ALIVE on the master in time; "
                f"{_logs(folder)}"
            )
        time.sleep(_POLL)


def _registered(status: dict[str, Any] | None, info: ProcessInfo) -> dict[str, Any] | None:
    """The master's ALIVE entry of this very worker: its address and the web UI port we gave
    it (an earlier worker on the same address, gone now, may still be listed)."""
    for entry in (status or {}).get("workers", []):
        if (
            entry.get("host") == info["address"]
            and entry.get("state") == "ALIVE"
            and str(entry.get("webuiaddress", "")).endswith(f":{info['web_port']}")
        ):
            return dict(entry)
    return None


def _fill_worker_ports(web_url: str, launches: list[_Launch]) -> None:
    """The RPC port Spark picked for each worker, as the master reports it."""
    status = _try_status(web_url)
    for launch in launches:
        entry = _registered(status, launch.info) or {}
        launch.info["port"] = int(entry.get("port") or 0)


def _exited_error(name: str, launch: _Launch, folder: Path) -> ClusterError:
    code = launch.exited()
    what = f"{launch.info['id']} ({launch.info['address']})"
    return ClusterError(
        f"cluster {name!r}: {what} exited with code {code}: {launch.why()}; {_logs(folder)}"
    )


def _logs(folder: Path) -> str:
    return f"logs in {folder}"


def _info(
    role: str,
    pid_id: str,
    address: str,
    port: int,
    web_port: int,
    folder: Path,
    cores: int,
    memory: str,
) -> ProcessInfo:
    """A process's dict before it runs (pid and start marker are filled by _spawn)."""
    return {
        "role": role,
        "id": pid_id,
        "host": socket.gethostname(),
        "address": address,
        "pid": 0,
        "pid_started": "unknown",
        "port": port,
        "web_port": web_port,
        "log": str(folder / f"{pid_id}.log"),
        "cores": cores,
        "memory": memory,
    }


def _env(
    home: Path, folder: Path, info: ProcessInfo, opts_var: str, conf: dict[str, str]
) -> dict[str, str]:
    """A daemon's environment: ours without stoker's variables and secret-looking ones (the
    executors under a worker run user code: the manager's store password and API tokens are
    not theirs), plus Spark's settings for this daemon."""
    env = {k: v for k, v in os.environ.items() if not _scrubbed(k)}
    local = folder / "local" / info["id"]
    local.mkdir(parents=True, exist_ok=True)
    env.update(
        {
            "SPARK_HOME": str(home),
            "SPARK_NO_DAEMONIZE": "1",
            # Web UIs bind SPARK_LOCAL_IP (else every interface): loopback only.
            "SPARK_LOCAL_IP": info["address"],
            "SPARK_LOCAL_DIRS": str(local),
            opts_var: " ".join(f"-D{k}={v}" for k, v in sorted(conf.items())),
        }
    )
    return env


def _scrubbed(key: str) -> bool:
    return key.startswith("STOKER_") or is_secret_key(key)


def _spawn(argv: list[str], info: ProcessInfo, env: dict[str, str]) -> _Launch:
    """Start one JVM as a new process group's leader, its output appended to its log."""
    log_path = Path(info["log"])
    try:
        with open(log_path, "ab") as out:
            log_from = out.tell()
            popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=str(log_path.parent),
                env=env,
                start_new_session=True,
            )
    except OSError as exc:
        raise ClusterError(f"cannot start {info['id']} ({argv[0]}): {exc}") from exc
    info["pid"] = popen.pid
    info["pid_started"] = process_start_marker(popen.pid)
    _CHILDREN[popen.pid] = popen
    return _Launch(popen, info, log_from)


def _free_port(address: str) -> int:
    """A port nobody listens on at ``address`` now (the JVM binds it a moment later: a race
    that a port-bound failure and one retry cover)."""
    with socket.socket() as s:
        s.bind((address, 0))
        return int(s.getsockname()[1])


# Changing ----------------------------------------------------------------------------------
# One change at a time per cluster in this process (the job manager's REST calls and its
# scaler alike): two workers started at once would pick the same loopback address.
_LOCKS: dict[str, threading.Lock] = {}
_LOCKS_GUARD = threading.Lock()


def cluster_lock(name: str) -> threading.Lock:
    """The lock that serializes worker changes of cluster ``name`` in this process."""
    with _LOCKS_GUARD:
        return _LOCKS.setdefault(name, threading.Lock())


def add_worker(
    master_url: str,
    web_url: str,
    processes: list[ProcessInfo],
    folder: Path,
    cores: int,
    memory: str,
    *,
    timeout: float = 120.0,
    on_process: OnProcess | None = None,
) -> ProcessInfo:
    """Start one more worker on the next loopback address past those this cluster uses or
    its master still lists, and return its dict once the master lists it ALIVE (on failure
    it is stopped: ClusterError).

    ``on_process`` as in :func:`start_standalone`: called before the wait, so the caller can
    record the JVM before it registers.
    """
    return add_workers(
        master_url,
        web_url,
        processes,
        folder,
        cores,
        memory,
        1,
        timeout=timeout,
        on_process=on_process,
    )[0]


def add_workers(
    master_url: str,
    web_url: str,
    processes: list[ProcessInfo],
    folder: Path,
    cores: int,
    memory: str,
    count: int,
    *,
    timeout: float = 120.0,
    on_process: OnProcess | None = None,
) -> list[ProcessInfo]:
    """Start ``count`` more workers at once, on the next loopback addresses (see
    :func:`add_worker`), and return their dicts once the master lists every one ALIVE. They
    start side by side: a JVM takes seconds to start, and a scale-up of several workers
    waits for the slowest one, not for their sum. On any failure all of them are stopped
    (ClusterError)."""
    if count < 1:
        raise ClusterError(f"{count} workers asked for: at least 1")
    _reap_exited()
    check_worker_shape(cores, memory, field="worker")
    memory = normalize_memory(memory, "worker")
    status = _try_status(web_url)
    if status is None:
        raise ClusterError(f"the master at {web_url} does not answer: no worker was started")
    first = _next_octet(processes, status)
    if first + count - 1 > LAST_WORKER_OCTET:
        raise ClusterError(
            f"no loopback address left for {count} workers (127.0.0.{first + count - 1})"
        )
    folder = folder.resolve()
    folder.mkdir(parents=True, exist_ok=True)
    record = _Recorder(on_process)

    try:
        home = spark_home()
        launches = [
            _spawn_worker(home, folder, master_url, octet, cores, memory, record)
            for octet in range(first, first + count)
        ]
        deadline = time.monotonic() + timeout
        _await_workers(master_url, home, folder, master_url, web_url, launches, record, deadline)
        _fill_worker_ports(web_url, launches)
        for launch in launches:
            log.info("cluster at %s: %s ALIVE", master_url, launch.info["id"])
        return [dict(launch.info) for launch in launches]
    except BaseException:
        _stop_quietly(record.processes(), "the new workers did not start")
        raise


def _next_octet(processes: list[ProcessInfo], status: dict[str, Any] | None) -> int:
    """Past every address this cluster's workers use or the master still lists (a worker
    removed a moment ago), so that a new worker is never mistaken for an old one."""
    hosts = [str(p.get("address")) for p in processes if p.get("role") == "worker"]
    hosts += [str(w.get("host")) for w in (status or {}).get("workers", [])]
    prefix = "127.0.0."
    octets = [
        int(h[len(prefix) :]) for h in hosts if h.startswith(prefix) and h[len(prefix) :].isdigit()
    ]
    return max([FIRST_WORKER_OCTET - 1, *octets]) + 1


def remove_worker(
    web_url: str,
    processes: list[ProcessInfo],
    worker: str,
    graceful: bool,
    *,
    timeout: float = 120.0,
) -> list[ProcessInfo]:
    """Take one worker (its id or address) out; return the processes left.

    Graceful: the master decommissions the worker's host (``POST /workers/kill/``): it stops
    giving it work and tells the applications, whose executors there migrate their blocks
    and exit. Once the master lists it not ALIVE and its executors have exited (or the
    process is gone), its group gets SIGTERM; at ``timeout`` it is killed (SIGKILL), which
    the worker's log and ours say. Measured here: 0.6 s for an idle worker, 3-4.5 s for one
    running an executor of a streaming query (which went on without a failed batch).

    Not graceful: SIGKILL to its group at once (its executors with it).
    """
    _reap_exited()
    target = _find_worker(processes, worker)
    rest = [p for p in processes if p is not target]
    if not _group_left(target):
        return rest
    if not graceful:
        _signal_group(target, signal.SIGKILL)
        _wait_gone([target], 30.0)
        _check_gone([target], f"worker {target['id']}")
        log.info("worker %s (%s) killed", target["id"], target["address"])
        return rest
    deadline = time.monotonic() + timeout
    started = time.monotonic()
    _decommission(web_url, target)
    while _group_left(target) and not (
        _drained(web_url, target) and _acknowledged(target, started)
    ):
        if time.monotonic() > deadline:
            _note(target, f"graceful removal timed out after {timeout:.0f} s: SIGKILL")
            _signal_group(target, signal.SIGKILL)
            break
        time.sleep(_POLL)
    _terminate([target], max(5.0, deadline - time.monotonic()))
    _check_gone([target], f"worker {target['id']}")
    log.info(
        "worker %s (%s) removed gracefully in %.1f s",
        target["id"],
        target["address"],
        time.monotonic() - started,
    )
    return rest


def _find_worker(processes: list[ProcessInfo], worker: str) -> ProcessInfo:
    for p in processes:
        if p.get("role") == "worker" and worker in (p.get("id"), p.get("address")):
            return p
    known = ", ".join(f"{p['id']} ({p['address']})" for p in processes if p["role"] == "worker")
    raise InvalidInput(
        "worker", f"no worker {worker!r} in this cluster; workers: {known or 'none'}"
    )


def _decommission(web_url: str, target: ProcessInfo) -> None:
    """Ask the master to decommission the worker's host; a host it no longer knows (404) is
    fine: the worker left already."""
    query = urllib.parse.urlencode({"host": target["address"]})
    request = urllib.request.Request(f"{web_url}/workers/kill/?{query}", data=b"", method="POST")
    try:
        with _HTTP.open(request, timeout=_HTTP_TIMEOUT):
            return
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return
        raise ClusterError(
            f"the master at {web_url} refused to decommission {target['id']} "
            f"({target['address']}): HTTP {exc.code}"
        ) from exc
    except OSError as exc:
        raise ClusterError(
            f"the master at {web_url} does not answer ({exc}); remove {target['id']} "
            "without graceful=true"
        ) from exc


def _drained(web_url: str, target: ProcessInfo) -> bool:
    """The master lists no ALIVE worker at the target's address, and the worker's process
    group holds only the worker itself: its executors have exited.

    Not the master's ``coresused``: it keeps counting the cores of a decommissioned worker
    after the executors there have gone (measured with Spark 4.3).
    """
    status = _try_status(web_url)
    if status is None:
        return False
    address = target["address"]
    workers = status.get("workers", [])
    if any(w.get("host") == address and w.get("state") == "ALIVE" for w in workers):
        return False
    return set(_group_left(target)) <= {int(target["pid"])}


_ACK_WAIT_S = 10.0
_ACK_LINE = "Decommission worker"


def _acknowledged(target: ProcessInfo, since: float) -> bool:
    """The worker has logged that it is decommissioning (or ``_ACK_WAIT_S`` have passed).

    The master lists a worker DECOMMISSIONED as soon as it sends the message, before the
    worker has read it; an idle worker, with no executor to watch leave, would get SIGTERM
    in that gap (seen under load) and skip Spark's decommission. Its log line is the worker's
    own word that it has begun."""
    if time.monotonic() - since > _ACK_WAIT_S:
        return True
    path = target.get("log")
    if not path:
        return True
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - 65_536))  # the line is new: the tail
            return _ACK_LINE.encode() in fh.read()
    except OSError:
        return True


def _note(target: ProcessInfo, message: str) -> None:
    """Say it in our log and in the worker's own log (where a user reading it will look)."""
    log.warning("worker %s (%s): %s", target["id"], target["address"], message)
    path = target.get("log")
    if not path:
        return
    with contextlib.suppress(OSError), open(path, "a", encoding="utf-8") as fh:
        fh.write(f"stoker: {time.strftime('%Y-%m-%d %H:%M:%S')} {message}\n")


# Stopping ----------------------------------------------------------------------------------
def stop_processes(processes: list[ProcessInfo], timeout: float = 30.0) -> None:
    """Stop every recorded process still provably the one recorded; workers first (their
    executors with them), then the master.

    Each group gets SIGTERM, then SIGKILL once ``timeout`` seconds have passed (per stage);
    returns when none is left. A process recorded on another host cannot be seen from here:
    :class:`ClusterError` names it (after the local ones are stopped), as it does for a
    process that survived SIGKILL.
    """
    _reap_exited()
    here = socket.gethostname()
    foreign = [p for p in processes if p.get("host") != here]
    local = [p for p in processes if p.get("host") == here]
    workers = [p for p in local if p.get("role") != "master"]
    masters = [p for p in local if p.get("role") == "master"]
    _quiesce(masters, workers)
    for stage in (workers, masters):
        _terminate(stage, timeout)
    _check_gone(local, "cluster processes")
    if foreign:
        names = ", ".join(f"{p.get('id')} on {p.get('host')}" for p in foreign)
        raise ClusterError(f"cannot stop processes of another host from {here}: {names}")


def _quiesce(masters: list[ProcessInfo], workers: list[ProcessInfo]) -> None:
    """Decommission every worker before any gets SIGTERM (best effort).

    A worker shutting down under a live application loses its executors; the master then
    asks the workers for replacements, and a worker asked while in its shutdown starts one
    and then hangs until SIGKILL (measured here: 30 s). Decommissioned workers get no new
    executors.
    """
    hosts = [p["address"] for p in workers if p.get("address") and _group_left(p)]
    master = next((p for p in masters if p.get("web_port") and _group_left(p)), None)
    if master is None or not hosts:
        return
    query = urllib.parse.urlencode([("host", h) for h in hosts])
    url = f"http://{master['address']}:{master['web_port']}/workers/kill/?{query}"
    request = urllib.request.Request(url, data=b"", method="POST")
    try:
        with _HTTP.open(request, timeout=_HTTP_TIMEOUT):
            pass
    except OSError as exc:
        log.info("decommissioning %s before the stop: %s (going on)", hosts, exc)


def _terminate(batch: list[ProcessInfo], timeout: float) -> None:
    """SIGTERM each group, wait up to ``timeout``, SIGKILL what is left, wait until gone."""
    for p in batch:
        _signal_group(p, signal.SIGTERM)
    left = _wait_gone(batch, timeout)
    for p in left:
        _note(p, f"still running {timeout:.0f} s after SIGTERM: SIGKILL")
        _signal_group(p, signal.SIGKILL)
    _wait_gone(left, 30.0)


def _wait_gone(batch: list[ProcessInfo], timeout: float) -> list[ProcessInfo]:
    """Wait until no process of the batch's groups is left; return those still there."""
    deadline = time.monotonic() + timeout
    while True:
        for p in batch:
            _reap(p)
        left = [p for p in batch if _group_left(p)]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(_POLL)


def _check_gone(batch: list[ProcessInfo], what: str) -> None:
    left = [p for p in batch if _group_left(p)]
    if left:
        pids = ", ".join(f"{p['id']}: {_group_left(p)}" for p in left)
        raise ClusterError(f"{what} still running after SIGKILL: {pids}")


def _signal_group(p: ProcessInfo, sig: int) -> None:
    """Signal the process's group, only while it is provably the recorded one's."""
    if _group_left(p):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(int(p["pid"]), sig)


def _reap(p: ProcessInfo) -> None:
    """Collect the exit status of a JVM this process started (else it stays a zombie)."""
    pid = int(p.get("pid") or 0)
    popen = _CHILDREN.get(pid)
    if popen is not None and popen.poll() is not None:
        _CHILDREN.pop(pid, None)


def _reap_exited() -> None:
    """Collect every JVM of ours that exited by itself (a crashed worker): no zombies pile up
    in a long-lived manager."""
    for pid, popen in list(_CHILDREN.items()):
        if popen.poll() is not None:
            _CHILDREN.pop(pid, None)


def _group_left(p: ProcessInfo) -> list[int]:
    """Live (non-zombie) pids of the recorded process's group, on this host.

    The group's id is the leader's pid. A live process at that pid with another start marker
    means the pid was reused, which Linux does only once no process uses it as a group id:
    nothing of ours is left. Otherwise every member started no earlier than our leader is
    ours (the leader itself, its executors, their Python workers).
    """
    if p.get("host") != socket.gethostname():
        return []
    pgid = int(p.get("pid") or 0)
    marker = str(p.get("pid_started"))
    if pgid <= 1 or not marker.isdigit():
        return []
    leader = _stat(pgid)
    if leader is not None and leader[3] != marker:
        return []
    since = int(marker)
    return [
        pid
        for pid, (state, _ppid, pgrp, started) in _processes()
        if pgrp == pgid and state != "Z" and int(started) >= since
    ]


def _stat(pid: int) -> tuple[str, int, int, str] | None:
    """(state, ppid, process group, start marker) of ``pid``, or None when there is none."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return fields[0], int(fields[1]), int(fields[2]), fields[19]
    except (OSError, IndexError, ValueError):
        return None


def _processes() -> Iterable[tuple[int, tuple[str, int, int, str]]]:
    for name in os.listdir("/proc"):
        if name.isdigit():
            stat = _stat(int(name))
            if stat is not None:
                yield int(name), stat


def _stop_quietly(processes: list[ProcessInfo], why: str) -> None:
    """Stop what a failed start left; its own failure is logged, the first error raised."""
    try:
        stop_processes(processes)
    except Exception:
        log.exception("%s, and stopping what it started failed", why)


# Status ------------------------------------------------------------------------------------
def master_status(web_url: str, timeout: float = _HTTP_TIMEOUT) -> dict[str, Any]:
    """The master's ``/json/``: ``workers`` (id, host, port, state, cores, coresused, memory,
    ...), ``activeapps``, ``completedapps``, ``aliveworkers``, ``status``. ``timeout``: the
    web UI's shorter one keeps a page quick when a master hangs."""
    try:
        with _HTTP.open(f"{web_url}/json/", timeout=timeout) as answer:
            data = json.load(answer)
    except (OSError, ValueError) as exc:
        raise ClusterError(f"the master at {web_url} does not answer: {exc}") from exc
    if not isinstance(data, dict):
        raise ClusterError(f"the master at {web_url} answered {type(data).__name__}, not JSON")
    return data


def _try_status(web_url: str) -> dict[str, Any] | None:
    try:
        return master_status(web_url)
    except ClusterError:
        return None


def alive_addresses(status: dict[str, Any] | None) -> set[str]:
    """Hosts of the workers the master lists ALIVE."""
    workers = (status or {}).get("workers", [])
    return {str(w.get("host")) for w in workers if w.get("state") == "ALIVE"}


__all__ = [
    "DECOMMISSION_CONF",
    "ClusterSpec",
    "StartedCluster",
    "add_worker",
    "add_workers",
    "alive_addresses",
    "app_conf",
    "check_worker_shape",
    "master_status",
    "memory_mb",
    "normalize_memory",
    "parse_cluster",
    "remove_worker",
    "spark_home",
    "start_standalone",
    "stop_processes",
]
