"""Spark standalone clusters that stoker starts, changes and stops; no Spark imported here.

One module per concept: :mod:`.spec` (the ``cluster`` text and the shape of a cluster),
:mod:`.jvm` (one JVM: its record, its process group, its signals), :mod:`.start`,
:mod:`.workers` (adding and removing workers), :mod:`.stop` and :mod:`.status` (what the
master says). Callers use the names listed here.
"""

from __future__ import annotations

from stoker.manager.clusters.jvm import OnProcess, spark_home
from stoker.manager.clusters.spec import (
    DECOMMISSION_CONF,
    DEFAULT_CORES,
    DEFAULT_MEMORY,
    ClusterSpec,
    app_conf,
    check_worker_shape,
    machine_memory_mb,
    memory_mb,
    normalize_memory,
    parse_cluster,
)
from stoker.manager.clusters.start import StartedCluster, start_standalone
from stoker.manager.clusters.status import alive_addresses, master_status
from stoker.manager.clusters.stop import stop_processes
from stoker.manager.clusters.workers import (
    add_worker,
    add_workers,
    cluster_lock,
    find_worker,
    gone_ids,
    remove_worker,
)

__all__ = [
    "DECOMMISSION_CONF",
    "DEFAULT_CORES",
    "DEFAULT_MEMORY",
    "ClusterSpec",
    "OnProcess",
    "StartedCluster",
    "add_worker",
    "add_workers",
    "alive_addresses",
    "app_conf",
    "check_worker_shape",
    "cluster_lock",
    "find_worker",
    "gone_ids",
    "machine_memory_mb",
    "master_status",
    "memory_mb",
    "normalize_memory",
    "parse_cluster",
    "remove_worker",
    "spark_home",
    "start_standalone",
    "stop_processes",
]
