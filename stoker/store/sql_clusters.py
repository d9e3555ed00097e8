"""Clusters in SQL: created once per name, states by ``CLUSTER_TRANSITIONS``, their processes.

The record is what outlives the manager that started a cluster: the processes it lists (pid and
start marker per master and worker) are what the next leader stops.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from stoker.errors import (
    ApplicationNotFound,
    ClusterConflict,
    ClusterNotFound,
    InvalidInput,
    InvalidTransition,
)
from stoker.store._sqlbase import SqlBase
from stoker.store.fleet_records import ClusterProcess, ClusterRecord
from stoker.store.protocols.fleet import Admit
from stoker.store.records import JobRecord
from stoker.types import CLUSTERS, ClusterKind, ClusterState, JobId, JobKind


class ClustersMixin(SqlBase):
    """Implements :class:`stoker.store.protocols.fleet.ClusterStore`."""

    def create_cluster(
        self,
        name: str,
        kind: str,
        spec: dict[str, Any],
        owner_app: JobId | None = None,
        *,
        host: str | None = None,
        admit: Admit | None = None,
    ) -> tuple[ClusterRecord, bool]:
        _check_new_cluster(name, kind, owner_app)
        _check_budget_host(host, admit)
        now = self.clock.now()
        with self._tx() as cur:
            if owner_app is not None:
                row = self._x(cur, "get_job", job_id=owner_app).fetchone()
                if row is None or JobRecord.from_row(row).kind != JobKind.APPLICATION:
                    raise ApplicationNotFound(owner_app)
            if admit is not None:
                # 1. The budget's lock, then the host's clusters as they are now: no other
                #    check sees them until this transaction ends.
                live = self._budget_locked(cur, str(host))
                # 2. A cluster of that name already recorded is the caller's to judge (it
                #    is returned, not created): nothing is added to the budget.
                row = self._x(cur, "get_cluster", name=name).fetchone()
                if row is not None:
                    return ClusterRecord.from_row(row), False
                # 3. Over the budget: refused (the caller's error), nothing written.
                admit(live)
            # The primary key decides between two managers starting one cluster.
            created = (
                self._x(
                    cur,
                    "insert_cluster",
                    name=name,
                    kind=kind,
                    owner_app=owner_app,
                    spec=json.dumps(spec, sort_keys=True),
                    state=str(ClusterState.STARTING),
                    now=now,
                    host=host,
                ).rowcount
                == 1
            )
            row = self._x(cur, "get_cluster", name=name).fetchone()
        return ClusterRecord.from_row(row), created

    def host_clusters(self, host: str) -> list[ClusterRecord]:
        with self._tx(write=False) as cur:
            rows = self._x(cur, "host_clusters", host=host).fetchall()
        return [ClusterRecord.from_row(r) for r in rows]

    def _budget_locked(self, cur: Any, host: str) -> list[ClusterRecord]:
        """Take the budget's lock for this transaction (PostgreSQL: an advisory lock; SQLite:
        the write transaction holds the database already), then read what ``host``'s budget
        counts. Taken before any cluster's row lock."""
        self._x(cur, "lock_cluster_budget")
        return [ClusterRecord.from_row(r) for r in self._x(cur, "host_clusters", host=host)]

    def get_cluster(self, name: str) -> ClusterRecord:
        with self._tx(write=False) as cur:
            row = self._x(cur, "get_cluster", name=name).fetchone()
        if row is None:
            raise ClusterNotFound(name)
        return ClusterRecord.from_row(row)

    def list_clusters(self, include_stopped: bool = False) -> list[ClusterRecord]:
        with self._tx(write=False) as cur:
            rows = self._x(cur, "list_clusters", include_stopped=int(include_stopped)).fetchall()
        return [ClusterRecord.from_row(r) for r in rows]

    def update_cluster(
        self,
        name: str,
        *,
        state: ClusterState | None = None,
        master_url: str | None = None,
        web_url: str | None = None,
        processes: list[ClusterProcess] | None = None,
        error: str | None = None,
    ) -> ClusterRecord:
        now = self.clock.now()
        with self._tx() as cur:
            old = self._locked_cluster(cur, name)
            target = old.state if state is None else ClusterState(state)
            try:
                CLUSTERS.check(old.state, target)
            except InvalidTransition as e:
                raise InvalidTransition(f"cluster {name!r}: {e}") from None
            self._x(
                cur,
                "update_cluster",
                name=name,
                state=str(target),
                master_url=old.master_url if master_url is None else master_url,
                web_url=old.web_url if web_url is None else web_url,
                processes=json.dumps(
                    [p.to_json() for p in (old.processes if processes is None else processes)]
                ),
                error=old.error if error is None else error,
                now=now,
                from_state=str(old.state),
            )
            row = self._x(cur, "get_cluster", name=name).fetchone()
        return ClusterRecord.from_row(row)

    def change_cluster_processes(
        self,
        name: str,
        put: Sequence[ClusterProcess] = (),
        drop: Iterable[str] = (),
        *,
        host: str | None = None,
        admit: Admit | None = None,
    ) -> ClusterRecord:
        _check_budget_host(host, admit)
        now = self.clock.now()
        gone = set(drop)
        with self._tx() as cur:
            if admit is not None:
                # Checked and written in one transaction, under the budget's lock: no other
                # check sees the host's clusters between the two.
                admit(self._budget_locked(cur, str(host)))
            old = self._locked_cluster(cur, name)
            new = {p.id: p for p in put}
            for p in old.processes:
                mine = new.get(p.id)
                if mine is not None and p.pid and mine.pid and p.owner != mine.owner:
                    raise ClusterConflict(
                        f"cluster {name!r}: {p.id} was recorded meanwhile as another process "
                        f"(pid {p.pid}); {mine.id} of pid {mine.pid} is not recorded"
                    )
            kept = [new.pop(p.id, p) for p in old.processes if p.id not in gone]
            procs = kept + [p for p in new.values() if p.id not in gone]
            self._x(
                cur,
                "update_cluster",
                name=name,
                state=str(old.state),
                master_url=old.master_url,
                web_url=old.web_url,
                processes=json.dumps([p.to_json() for p in procs]),
                error=old.error,
                now=now,
                from_state=str(old.state),
            )
            row = self._x(cur, "get_cluster", name=name).fetchone()
        return ClusterRecord.from_row(row)

    def delete_cluster(self, name: str) -> None:
        with self._tx() as cur:
            old = self._locked_cluster(cur, name)
            if old.state != ClusterState.STOPPED:
                # Its processes may still run: forgetting them would leave them to no one.
                raise InvalidTransition(
                    f"cluster {name!r} is {old.state}: only a STOPPED cluster can be deleted"
                )
            self._x(cur, "delete_cluster", name=name)

    def _locked_cluster(self, cur: Any, name: str) -> ClusterRecord:
        """The cluster's row, locked for this transaction (FOR UPDATE on PostgreSQL)."""
        row = self._x(cur, "lock_cluster", name=name).fetchone()
        if row is None:
            raise ClusterNotFound(name)
        return ClusterRecord.from_row(row)


def _check_budget_host(host: str | None, admit: Admit | None) -> None:
    """A budget is a host's: checking one needs the host whose clusters it counts."""
    if admit is not None and (not isinstance(host, str) or not host.strip()):
        raise InvalidInput("host", "a budget check needs the host whose clusters it counts")


def _check_new_cluster(name: str, kind: str, owner_app: JobId | None) -> None:
    """Refuse a record no manager could tend: every field named, nothing written."""
    if not isinstance(name, str) or not name.strip():
        raise InvalidInput("name", "a cluster needs a name")
    if kind not in set(ClusterKind):
        raise InvalidInput("kind", f"{kind!r} is not one of {', '.join(ClusterKind)}")
    if kind == ClusterKind.APP and owner_app is None:
        raise InvalidInput("owner_app", "an 'app' cluster ends with its application: name it")
    if kind == ClusterKind.SESSION and owner_app is not None:
        raise InvalidInput("owner_app", "a 'session' cluster outlives applications: give none")
