"""Workers reserved in the host's cluster budget before their JVMs start.

A worker's process is recorded once it has started (``on_process``), seconds after the budget
was checked: two managers adding workers at once both passed the check and both started
theirs. So the room is taken first, in the store, in the transaction that checks the budget:
a placeholder per worker in the cluster's process list (a worker with no pid and no address,
its cores and memory as asked), which the budget counts as it counts a worker. Each JVM that
starts takes a placeholder's place in one write, so the count never moves while it starts.

What a crash at each step leaves:

1. :meth:`WorkerReservation.reserve`: refused (nothing written) or the placeholders recorded.
   A manager that dies after it leaves placeholders: they name no process (a stop has nothing
   to kill for them) and hold their room until the cluster stops, or until an operator takes
   one out as any worker (``stoker cluster remove-worker NAME reserved-...``).
2. :meth:`WorkerReservation.on_process` (a JVM started): its record replaces a placeholder.
3. :meth:`WorkerReservation.done` (every worker ALIVE) or :meth:`WorkerReservation.release`
   (the start failed and what started was stopped): no placeholder is left.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Sequence

from stoker import procs
from stoker.manager.clusters.budget import HostBudget
from stoker.manager.clusters.spec import normalize_memory
from stoker.store import ClusterProcess, ClusterRecord, Store

RESERVED_PREFIX = "reserved-"


def is_reserved(p: ClusterProcess) -> bool:
    """Whether ``p`` is a placeholder of a worker not started yet (no process)."""
    return p.role == "worker" and p.id.startswith(RESERVED_PREFIX) and not p.pid


def _placeholder(host: str, cores: int, memory: str) -> ClusterProcess:
    return ClusterProcess(
        role="worker",
        id=f"{RESERVED_PREFIX}{secrets.token_hex(4)}",
        host=host,
        address="",  # no loopback address taken: the next worker's is picked as before
        pid=0,
        pid_started=procs.UNKNOWN,
        port=0,
        web_port=0,
        log="",
        cores=cores,
        memory=memory,
    )


class WorkerReservation:
    """``count`` workers of ``cores`` and ``memory`` for RUNNING cluster ``cluster``, held in
    ``host``'s budget from :meth:`reserve` until each has started (:meth:`on_process`) or the
    start has failed (:meth:`release`). One object per start; not shared between threads."""

    def __init__(
        self,
        store: Store,
        cluster: str,
        *,
        host: str,
        budget: HostBudget,
        count: int,
        cores: int,
        memory: str,
        what: str,
    ) -> None:
        self.store = store
        self.cluster = cluster
        self.host = host
        self.budget = budget
        self.cores = cores
        self.memory = normalize_memory(memory, "memory")
        self.what = what
        self._free = [_placeholder(host, cores, self.memory) for _ in range(count)]
        self.started: list[str] = []  # ids of the JVMs that started, in order

    def reserve(self) -> ClusterRecord:
        """Check the budget and record the placeholders, in one transaction: the cluster's
        record with them. What the budget refuses (:class:`ClusterConflict`, its text) leaves
        nothing written, as does a cluster no longer RUNNING."""
        admit = self.budget.admit_workers(
            self.cluster,
            workers=len(self._free),
            cores=self.cores,
            memory=self.memory,
            what=self.what,
        )
        return self.store.change_cluster_processes(
            self.cluster, put=self._free, host=self.host, admit=admit
        )

    def on_process(self, info: ClusterProcess) -> None:
        """A worker's JVM started (its pid known): its record takes a placeholder's place,
        in one write. A JVM started again under the same id replaces its own earlier try."""
        drop = [] if info.id in self.started else [p.id for p in self._free[:1]]
        if info.id not in self.started:
            self.started.append(info.id)
            self._free = self._free[1:]
        self.store.change_cluster_processes(self.cluster, put=[info], drop=drop)

    def done(self, infos: Sequence[ClusterProcess]) -> ClusterRecord:
        """Every worker ALIVE: their final records (ports known), no placeholder left."""
        rec = self.store.change_cluster_processes(self.cluster, put=infos, drop=self._left([]))
        self._free = []
        return rec

    def release(self) -> ClusterRecord:
        """The start failed and what started was stopped: their records and the placeholders
        go (only theirs: another manager may have changed the list meanwhile)."""
        rec = self.store.change_cluster_processes(self.cluster, drop=self._left(self.started))
        self._free = []
        return rec

    def _left(self, started: Iterable[str]) -> list[str]:
        return [*started, *(p.id for p in self._free)]
