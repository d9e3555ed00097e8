"""Starting a standalone cluster: a master, then its workers, until the master lists every
worker ALIVE.

The cluster's daemons bind to loopback only, refuse the master's REST submission server (it
runs arbitrary code for anyone who can reach it) and fail rather than drift to another port
when theirs is taken (``spark.port.maxRetries=0``), so that the ports recorded are the ports
used; a JVM that loses a port race is started once more on fresh ports.
"""

from __future__ import annotations

import logging
import socket
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from stoker.errors import ClusterError, InvalidInput
from stoker.manager.clusters.jvm import (
    POLL,
    Launch,
    OnProcess,
    Recorder,
    daemon_env,
    process_info,
    reap_exited,
    spark_home,
    spawn,
)
from stoker.manager.clusters.spec import DECOMMISSION_CONF, FIELD, FIRST_WORKER_OCTET, ClusterSpec
from stoker.manager.clusters.status import try_status
from stoker.manager.clusters.stop import stop_quietly
from stoker.store import ClusterProcess

log = logging.getLogger("stoker.clusters")


MASTER_ADDRESS = "127.0.0.1"
_DAEMON_CONF: dict[str, str] = {**DECOMMISSION_CONF, "spark.port.maxRetries": "0"}
_MASTER_CONF: dict[str, str] = {**_DAEMON_CONF, "spark.master.rest.enabled": "false"}

_MASTER_CLASS = "org.apache.spark.deploy.master.Master"
_WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


@dataclass(frozen=True)
class StartedCluster:
    """A standalone cluster whose master lists every worker ALIVE."""

    master_url: str
    web_url: str
    processes: list[ClusterProcess]


def start_standalone(
    name: str,
    spec: ClusterSpec,
    folder: Path,
    timeout: float = 180.0,
    on_process: OnProcess | None = None,
) -> StartedCluster:
    """Start a master and ``spec.workers`` workers; return once the master lists them ALIVE.

    Logs go to ``folder/<id>.log``, work and local folders under ``folder``. ``on_process``
    is called with each process's record as soon as it is started, before any waiting, so the
    caller can record it (a JVM that lost a port race is started again under the same id: the
    later record replaces the earlier). On any failure, or after ``timeout`` seconds, everything
    started is stopped and :class:`ClusterError` says which process failed and why.
    """
    if spec.kind != "standalone":
        raise InvalidInput(FIELD, f"cluster {name!r}: {spec.text()!r} is not a standalone spec")
    reap_exited()
    folder = folder.resolve()
    folder.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout
    record = Recorder(on_process)

    try:
        home = spark_home()
        master = _start_master(name, home, folder, record, deadline)
        master_url = f"spark://{MASTER_ADDRESS}:{master.info.port}"
        web_url = f"http://{MASTER_ADDRESS}:{master.info.web_port}"
        launches = [
            spawn_worker(home, folder, master_url, octet, spec.cores, spec.memory, record)
            for octet in range(FIRST_WORKER_OCTET, FIRST_WORKER_OCTET + spec.workers)
        ]
        await_workers(name, home, folder, master_url, web_url, launches, record, deadline, master)
        fill_worker_ports(web_url, launches)
        processes = [master.info, *(launch.info for launch in launches)]
        log.info("cluster %s: master %s, %d workers ALIVE", name, master_url, spec.workers)
        return StartedCluster(master_url, web_url, processes)
    except BaseException:
        stop_quietly(record.processes(), f"cluster {name!r} did not start")
        raise


def _start_master(
    name: str, home: Path, folder: Path, record: OnProcess, deadline: float
) -> Launch:
    """The master, answering on its web UI (its RPC port is bound before that)."""
    launch: Launch | None = None
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
        info = process_info("master", "master", MASTER_ADDRESS, port, web_port, folder, 0, "")
        launch = spawn(
            argv, info, daemon_env(home, folder, info, "SPARK_MASTER_OPTS", _MASTER_CONF)
        )
        launch.tries = tries
        record(launch.info)
        web_url = f"http://{MASTER_ADDRESS}:{web_port}"
        while launch.exited() is None and time.monotonic() < deadline:
            if try_status(web_url) is not None:
                return launch
            time.sleep(POLL)
        if launch.exited() is None:
            raise ClusterError(
                f"cluster {name!r}: the master did not answer in time; {_logs(folder)}"
            )
        if tries == 1 and launch.bind_failed():
            log.info("cluster %s: the master lost a port race; starting it on other ports", name)
            continue
        raise _exited_error(name, launch, folder)
    raise AssertionError("unreachable")  # pragma: no cover


def spawn_worker(
    home: Path,
    folder: Path,
    master_url: str,
    octet: int,
    cores: int,
    memory: str,
    record: OnProcess,
    tries: int = 1,
) -> Launch:
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
    info = process_info("worker", worker_id, address, 0, web_port, folder, cores, memory)
    launch = spawn(argv, info, daemon_env(home, folder, info, "SPARK_WORKER_OPTS", _DAEMON_CONF))
    launch.tries = tries
    record(launch.info)
    return launch


def await_workers(
    name: str,
    home: Path,
    folder: Path,
    master_url: str,
    web_url: str,
    launches: list[Launch],
    record: OnProcess,
    deadline: float,
    master: Launch | None = None,
) -> None:
    """Wait until the master lists a worker ALIVE at each launch's address; a worker that
    lost a port race is started once more (``launches`` is updated in place)."""
    while True:
        status = try_status(web_url)
        if all(_registered(status, launch.info) for launch in launches):
            return
        if master is not None and master.exited() is not None:
            raise _exited_error(name, master, folder)
        for i, launch in enumerate(launches):
            if launch.exited() is None:
                continue
            if launch.tries == 1 and launch.bind_failed():
                log.info("cluster %s: %s lost a port race; again", name, launch.info.id)
                octet = int(launch.info.address.rsplit(".", 1)[1])
                info = launch.info
                launches[i] = spawn_worker(
                    home, folder, master_url, octet, info.cores, info.memory, record, 2
                )
                continue
            raise _exited_error(name, launch, folder)
        if time.monotonic() > deadline:
            late = [ln.info.id for ln in launches if not _registered(status, ln.info)]
            raise ClusterError(
                f"cluster {name!r}: {', '.join(late)} not ALIVE on the master in time; "
                f"{_logs(folder)}"
            )
        time.sleep(POLL)


def _registered(status: dict[str, Any] | None, info: ClusterProcess) -> dict[str, Any] | None:
    """The master's ALIVE entry of this very worker: its address and the web UI port we gave
    it (an earlier worker on the same address, gone now, may still be listed)."""
    for entry in (status or {}).get("workers", []):
        if (
            entry.get("host") == info.address
            and entry.get("state") == "ALIVE"
            and str(entry.get("webuiaddress", "")).endswith(f":{info.web_port}")
        ):
            return dict(entry)
    return None


def fill_worker_ports(web_url: str, launches: list[Launch]) -> None:
    """The RPC port Spark picked for each worker, as the master reports it."""
    status = try_status(web_url)
    for launch in launches:
        entry = _registered(status, launch.info) or {}
        launch.info = replace(launch.info, port=int(entry.get("port") or 0))


def _exited_error(name: str, launch: Launch, folder: Path) -> ClusterError:
    code = launch.exited()
    what = f"{launch.info.id} ({launch.info.address})"
    return ClusterError(
        f"cluster {name!r}: {what} exited with code {code}: {launch.why()}; {_logs(folder)}"
    )


def _logs(folder: Path) -> str:
    return f"logs in {folder}"


def _free_port(address: str) -> int:
    """A port nobody listens on at ``address`` now (the JVM binds it a moment later: a race
    that a port-bound failure and one retry cover)."""
    with socket.socket() as s:
        s.bind((address, 0))
        return int(s.getsockname()[1])
