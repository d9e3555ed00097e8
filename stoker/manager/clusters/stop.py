"""Stopping a cluster's recorded processes: workers first (their executors with them), then
the master; only processes still provably the recorded ones."""

from __future__ import annotations

import logging
import urllib.parse
import urllib.request

from stoker import procs
from stoker.errors import ClusterError
from stoker.manager.clusters.jvm import check_gone, group_left, reap_exited, terminate
from stoker.manager.clusters.status import HTTP, HTTP_TIMEOUT
from stoker.store import ClusterProcess

log = logging.getLogger("stoker.clusters")


def stop_processes(processes: list[ClusterProcess], timeout: float = 30.0) -> None:
    """Stop every recorded process still provably the one recorded; workers first (their
    executors with them), then the master.

    Each group gets SIGTERM, then SIGKILL once ``timeout`` seconds have passed (per stage);
    returns when none is left. A process recorded on another host cannot be seen from here:
    :class:`ClusterError` names it (after the local ones are stopped), as it does for a
    process that survived SIGKILL.
    """
    reap_exited()
    here = procs.host_id()
    foreign = [p for p in processes if not procs.is_this_host(p.host)]
    local = [p for p in processes if procs.is_this_host(p.host)]
    workers = [p for p in local if p.role != "master"]
    masters = [p for p in local if p.role == "master"]
    _quiesce(masters, workers)
    for stage in (workers, masters):
        terminate(stage, timeout)
    check_gone(local, "cluster processes")
    if foreign:
        names = ", ".join(f"{p.id} on {p.host}" for p in foreign)
        raise ClusterError(f"cannot stop processes of another host from {here}: {names}")


def _quiesce(masters: list[ClusterProcess], workers: list[ClusterProcess]) -> None:
    """Decommission every worker before any gets SIGTERM (best effort).

    A worker shutting down under a live application loses its executors; the master then
    asks the workers for replacements, and a worker asked while in its shutdown starts one
    and then hangs until SIGKILL (measured here: 30 s). Decommissioned workers get no new
    executors.
    """
    hosts = [p.address for p in workers if p.address and group_left(p)]
    master = next((p for p in masters if p.web_port and group_left(p)), None)
    if master is None or not hosts:
        return
    query = urllib.parse.urlencode([("host", h) for h in hosts])
    url = f"http://{master.address}:{master.web_port}/workers/kill/?{query}"
    request = urllib.request.Request(url, data=b"", method="POST")
    try:
        with HTTP.open(request, timeout=HTTP_TIMEOUT):
            pass
    except OSError as exc:
        log.info("decommissioning %s before the stop: %s (going on)", hosts, exc)


def stop_quietly(processes: list[ClusterProcess], why: str) -> None:
    """Stop what a failed start left; its own failure is logged, the first error raised."""
    try:
        stop_processes(processes)
    except Exception:
        log.exception("%s, and stopping what it started failed", why)
