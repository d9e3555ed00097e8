"""The host's budget for the Spark standalone clusters stoker starts: how many clusters, how
many workers, and how much worker memory and how many worker cores in all.

Without one, anything that may start a cluster could start them until the host swapped (a
fuzzer against the API started 11 session clusters, 42 JVMs and about 10 GB, in 9 minutes).
Every start is checked against what the store says runs now on this host (clusters STARTING,
RUNNING or STOPPING, of every manager on it: the store is the one place that knows them all),
and recorded in the transaction that checks it (``admit_new``, ``admit_workers``: the store
runs such transactions one at a time), so two managers, or the REST API and the leader, never
both take the last room: a session cluster, a worker added to one (``reserve.py``), an
application's own cluster. Clusters another host's managers recorded on a shared store are
that host's; those recorded with no host (by stoker before the host was recorded) count
against every host's. A start over the budget is refused before any process starts, naming
the budget, what it allows, what runs, and the ``stoker server`` option that sets it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from stoker.errors import ClusterConflict
from stoker.manager.clusters.spec import ClusterSpec, memory_mb
from stoker.store.fleet_records import ClusterRecord
from stoker.store.protocols.fleet import Admit
from stoker.types import ClusterState

# Clusters whose processes run, or may: a FAILED one's were stopped when it failed.
_LIVE = (ClusterState.STARTING, ClusterState.RUNNING, ClusterState.STOPPING)


@dataclass(frozen=True)
class HostBudget:
    """What the clusters stoker starts on this host may take in all. The defaults fit a
    machine of 24 GB and a few cores: four clusters, eight workers, 16 GiB of worker memory,
    sixteen worker cores (cores are Spark's slots, which may outnumber the CPUs)."""

    clusters: int = 4
    workers: int = 8
    memory_mb: int = 16 * 1024
    cores: int = 16

    def check(
        self,
        running: Iterable[ClusterRecord],
        *,
        clusters: int,
        workers: int,
        cores: int,
        memory: str,
        what: str,
    ) -> None:
        """Refuse (:class:`ClusterConflict`, 409) ``what`` (e.g. "cluster 'c'") when it adds
        ``clusters`` clusters and ``workers`` workers of ``cores`` cores and ``memory`` each to
        those ``running`` now and that would go over the budget."""
        use = usage(running)
        mb = memory_mb(memory)
        over = [
            (name, limit, now, add, option)
            for name, limit, now, add, option in (
                ("clusters", self.clusters, use.clusters, clusters, "--max-clusters"),
                ("workers", self.workers, use.workers, workers, "--max-workers"),
                ("worker cores", self.cores, use.cores, workers * cores, "--max-worker-cores"),
                (
                    "worker memory (MiB)",
                    self.memory_mb,
                    use.memory_mb,
                    workers * mb,
                    "--max-worker-memory",
                ),
            )
            if add > 0 and now + add > limit
        ]
        if over:
            said = "; ".join(
                f"{name}: {now} in use + {add} asked > {limit} allowed ({option})"
                for name, limit, now, add, option in over
            )
            raise ClusterConflict(
                f"{what} would go over this host's cluster budget: {said}. Stop a cluster "
                "(stoker cluster stop NAME), or raise the budget with stoker server's option"
            )

    def check_new(self, running: Iterable[ClusterRecord], spec: ClusterSpec, what: str) -> None:
        """:meth:`check` for a new cluster of ``spec``'s workers."""
        self.check(
            running,
            clusters=1,
            workers=spec.workers,
            cores=spec.cores,
            memory=spec.memory,
            what=what,
        )

    def admit_new(self, spec: ClusterSpec, what: str) -> Admit:
        """:meth:`check_new` as the store runs it, on the host's clusters read in the
        transaction that records the new one (``Store.create_cluster``'s ``admit``)."""

        def admit(live: list[ClusterRecord]) -> None:
            self.check_new(live, spec, what)

        return admit

    def admit_workers(
        self, cluster: str, *, workers: int, cores: int, memory: str, what: str
    ) -> Admit:
        """:meth:`check` of ``workers`` more workers for RUNNING ``cluster``, as the store runs
        it in the transaction that reserves them (``Store.change_cluster_processes``'s
        ``admit``); a cluster no longer RUNNING on this host is :class:`ClusterConflict` too."""

        def admit(live: list[ClusterRecord]) -> None:
            rec = next((c for c in live if c.name == cluster), None)
            if rec is None or rec.state != ClusterState.RUNNING:
                now = "not live on this host" if rec is None else str(rec.state)
                raise ClusterConflict(
                    f"cluster {cluster!r} is {now}: workers change on a RUNNING one"
                )
            self.check(live, clusters=0, workers=workers, cores=cores, memory=memory, what=what)

        return admit


@dataclass(frozen=True)
class Usage:
    """What the live clusters take now."""

    clusters: int
    workers: int
    cores: int
    memory_mb: int


def usage(records: Iterable[ClusterRecord]) -> Usage:
    """The live clusters' count and their workers' number, cores and memory: the workers they
    recorded, and for a cluster still starting those its spec will start too (a running
    cluster's spec may name more than run: a worker removed)."""
    n = workers = cores = mb = 0
    for rec in records:
        if rec.state not in _LIVE:
            continue
        n += 1
        started = [p for p in rec.processes if p.role == "worker"]
        for p in started:
            workers += 1
            cores += max(0, p.cores)
            mb += memory_mb(p.memory) if p.memory else 0
        missing = 0
        if rec.state == ClusterState.STARTING:  # a running one's workers are all recorded
            missing = max(0, int(rec.spec.get("workers", 0) or 0) - len(started))
        if missing:
            workers += missing
            cores += missing * int(rec.spec.get("cores", 1) or 1)
            mb += missing * memory_mb(str(rec.spec.get("memory") or "1g"))
    return Usage(n, workers, cores, mb)
