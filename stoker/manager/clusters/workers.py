"""Changing a running cluster's workers: add them on the next loopback addresses, remove one
at once or gracefully (decommissioned through the master)."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from stoker.errors import ClusterError, InvalidInput
from stoker.manager.clusters.jvm import (
    POLL,
    OnProcess,
    Recorder,
    check_gone,
    group_left,
    note,
    reap_exited,
    signal_group,
    spark_home,
    terminate,
    wait_gone,
)
from stoker.manager.clusters.spec import (
    FIRST_WORKER_OCTET,
    LAST_WORKER_OCTET,
    check_worker_shape,
    normalize_memory,
)
from stoker.manager.clusters.start import await_workers, fill_worker_ports, spawn_worker
from stoker.manager.clusters.status import HTTP, HTTP_TIMEOUT, try_status
from stoker.manager.clusters.stop import stop_quietly
from stoker.store import ClusterProcess

log = logging.getLogger("stoker.clusters")


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
    processes: list[ClusterProcess],
    folder: Path,
    cores: int,
    memory: str,
    *,
    timeout: float = 120.0,
    on_process: OnProcess | None = None,
) -> ClusterProcess:
    """Start one more worker on the next loopback address past those this cluster uses or
    its master still lists, and return its record once the master lists it ALIVE (on failure
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
    processes: list[ClusterProcess],
    folder: Path,
    cores: int,
    memory: str,
    count: int,
    *,
    timeout: float = 120.0,
    on_process: OnProcess | None = None,
) -> list[ClusterProcess]:
    """Start ``count`` more workers at once, on the next loopback addresses (see
    :func:`add_worker`), and return their records once the master lists every one ALIVE. They
    start side by side: a JVM takes seconds to start, and a scale-up of several workers
    waits for the slowest one, not for their sum. On any failure all of them are stopped
    (ClusterError)."""
    if count < 1:
        raise ClusterError(f"{count} workers asked for: at least 1")
    reap_exited()
    check_worker_shape(cores, memory, field="worker")
    memory = normalize_memory(memory, "worker")
    status = try_status(web_url)
    if status is None:
        raise ClusterError(f"the master at {web_url} does not answer: no worker was started")
    first = _next_octet(processes, status)
    if first + count - 1 > LAST_WORKER_OCTET:
        raise ClusterError(
            f"no loopback address left for {count} workers (127.0.0.{first + count - 1})"
        )
    folder = folder.resolve()
    folder.mkdir(parents=True, exist_ok=True)
    record = Recorder(on_process)

    try:
        home = spark_home()
        launches = [
            spawn_worker(home, folder, master_url, octet, cores, memory, record)
            for octet in range(first, first + count)
        ]
        deadline = time.monotonic() + timeout
        await_workers(master_url, home, folder, master_url, web_url, launches, record, deadline)
        fill_worker_ports(web_url, launches)
        for launch in launches:
            log.info("cluster at %s: %s ALIVE", master_url, launch.info.id)
        return [launch.info for launch in launches]
    except BaseException:
        stop_quietly(record.processes(), "the new workers did not start")
        raise


def _next_octet(processes: list[ClusterProcess], status: dict[str, Any] | None) -> int:
    """Past every address this cluster's workers use or the master still lists (a worker
    removed a moment ago), so that a new worker is never mistaken for an old one."""
    hosts = [str(p.address) for p in processes if p.role == "worker"]
    hosts += [str(w.get("host")) for w in (status or {}).get("workers", [])]
    prefix = "127.0.0."
    octets = [
        int(h[len(prefix) :]) for h in hosts if h.startswith(prefix) and h[len(prefix) :].isdigit()
    ]
    return max([FIRST_WORKER_OCTET - 1, *octets]) + 1


def gone_ids(before: list[ClusterProcess], left: list[ClusterProcess]) -> list[str]:
    """The ids of ``before`` that ``left`` no longer has (what :func:`remove_worker` took
    out): what the store drops from the cluster's list as it is now."""
    kept = {p.id for p in left}
    return [p.id for p in before if p.id not in kept]


def remove_worker(
    web_url: str,
    processes: list[ClusterProcess],
    worker: str,
    graceful: bool,
    *,
    timeout: float = 120.0,
) -> list[ClusterProcess]:
    """Take one worker (its id or address) out; return the processes left.

    Graceful: the master decommissions the worker's host (``POST /workers/kill/``): it stops
    giving it work and tells the applications, whose executors there migrate their blocks
    and exit. Once the master lists it not ALIVE and its executors have exited (or the
    process is gone), its group gets SIGTERM; at ``timeout`` it is killed (SIGKILL), which
    the worker's log and ours say. Measured here: 0.6 s for an idle worker, 3-4.5 s for one
    running an executor of a streaming query (which went on without a failed batch).

    Not graceful: SIGKILL to its group at once (its executors with it).
    """
    reap_exited()
    target = find_worker(processes, worker)
    rest = [p for p in processes if p is not target]
    if not group_left(target):
        return rest
    if not graceful:
        signal_group(target, signal.SIGKILL)
        wait_gone([target], 30.0)
        check_gone([target], f"worker {target.id}")
        log.info("worker %s (%s) killed", target.id, target.address)
        return rest
    deadline = time.monotonic() + timeout
    started = time.monotonic()
    _decommission(web_url, target)
    while group_left(target) and not (_drained(web_url, target) and _acknowledged(target, started)):
        if time.monotonic() > deadline:
            note(target, f"graceful removal timed out after {timeout:.0f} s: SIGKILL")
            signal_group(target, signal.SIGKILL)
            break
        time.sleep(POLL)
    terminate([target], max(5.0, deadline - time.monotonic()))
    check_gone([target], f"worker {target.id}")
    log.info(
        "worker %s (%s) removed gracefully in %.1f s",
        target.id,
        target.address,
        time.monotonic() - started,
    )
    return rest


def find_worker(processes: list[ClusterProcess], worker: str) -> ClusterProcess:
    """The worker ``worker`` names (its id or address); InvalidInput naming the workers."""
    for p in processes:
        if p.role == "worker" and worker in (p.id, p.address):
            return p
    known = ", ".join(f"{p.id} ({p.address})" for p in processes if p.role == "worker")
    raise InvalidInput(
        "worker", f"no worker {worker!r} in this cluster; workers: {known or 'none'}"
    )


def _decommission(web_url: str, target: ClusterProcess) -> None:
    """Ask the master to decommission the worker's host; a host it no longer knows (404) is
    fine: the worker left already."""
    query = urllib.parse.urlencode({"host": target.address})
    request = urllib.request.Request(f"{web_url}/workers/kill/?{query}", data=b"", method="POST")
    try:
        with HTTP.open(request, timeout=HTTP_TIMEOUT):
            return
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return
        raise ClusterError(
            f"the master at {web_url} refused to decommission {target.id} "
            f"({target.address}): HTTP {exc.code}"
        ) from exc
    except OSError as exc:
        raise ClusterError(
            f"the master at {web_url} does not answer ({exc}); remove {target.id} "
            "without graceful=true"
        ) from exc


def _drained(web_url: str, target: ClusterProcess) -> bool:
    """The master lists no ALIVE worker at the target's address, and the worker's process
    group holds only the worker itself: its executors have exited.

    Not the master's ``coresused``: it keeps counting the cores of a decommissioned worker
    after the executors there have gone (measured with Spark 4.3).
    """
    status = try_status(web_url)
    if status is None:
        return False
    address = target.address
    workers = status.get("workers", [])
    if any(w.get("host") == address and w.get("state") == "ALIVE" for w in workers):
        return False
    return set(group_left(target)) <= {int(target.pid)}


_ACK_WAIT_S = 10.0
_ACK_LINE = "Decommission worker"


def _acknowledged(target: ClusterProcess, since: float) -> bool:
    """The worker has logged that it is decommissioning (or ``_ACK_WAIT_S`` have passed).

    The master lists a worker DECOMMISSIONED as soon as it sends the message, before the
    worker has read it; an idle worker, with no executor to watch leave, would get SIGTERM
    in that gap (seen under load) and skip Spark's decommission. Its log line is the worker's
    own word that it has begun."""
    if time.monotonic() - since > _ACK_WAIT_S:
        return True
    path = target.log
    if not path:
        return True
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - 65_536))  # the line is new: the tail
            return _ACK_LINE.encode() in fh.read()
    except OSError:
        return True
