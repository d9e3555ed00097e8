"""The scaler: one pass a second, while this manager leads, over every running owner of
executors (a lone job or an application) whose scaling mode is ``auto`` or ``reactive``.

``auto``: signals from the owner's jobs' recent epochs and its driver's resource report go to
the policy; a decided change is recorded (``add_rescale``, status ``decided``), becomes the
owner's executor target (its driver asks Spark for it) and goes to the resource provider
(workers started or removed). It is marked ``in_use`` once the driver reports the target
reached, ``superseded`` by a newer decision, ``failed`` if the provider could not make room.
``reactive`` and ``fixed``: executors that joined or left by themselves (workers added or
removed by hand, an executor lost) are recorded (``observed``).
``fixed`` (or back to it): the target is cleared.

Nothing here lives longer than the leadership: the policy's memory (stabilization) is lost
with it and a new leader re-stabilizes; the cooldown is taken from the last decision in the
store, so a failover does not shorten it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stoker.errors import InvalidInput, InvalidTransition, StokerError
from stoker.manager import clusters
from stoker.manager.cluster_records import app_cluster_name
from stoker.manager.clusters.budget import HostBudget
from stoker.scalespec import ScalingSpec, parse_scaling
from stoker.scaling.policy import (
    HOUR,
    Decision,
    DefaultPolicy,
    PolicyMemory,
    ScalingPolicy,
)
from stoker.scaling.policy_input import read_signals
from stoker.scaling.provider import ResourceProvider, SparkExecutorsOnly, StandaloneProvider
from stoker.store import JobRecord, Store
from stoker.store.fleet_records import RescaleRecord
from stoker.types import JobId, JobKind, JobState

log = logging.getLogger("stoker.scaling")

# Rescale records looked at for decisions still in flight.
_IN_FLIGHT_LOOKUP = 20
# A decision not in use after this long (a worker that never came) makes way for others.
_IN_FLIGHT_PATIENCE = 300.0

ProviderFor = Callable[[JobRecord], "ResourceProvider | None"]


@dataclass
class _OwnerState:
    """What the scaler keeps of one owner while it leads."""

    memory: PolicyMemory = field(default_factory=PolicyMemory)
    seeded: bool = False  # cooldown / last observed count taken from the store
    seen_executors: int | None = None  # reactive: the count last recorded
    seen_ids: list[str] = field(default_factory=list)
    seen_hosts: list[str] = field(default_factory=list)
    said: str | None = None  # the last "cannot scale" said in the log, said once
    ensuring: threading.Thread | None = None  # a provider call running (background mode)
    # Decisions whose provider call is done (a removal waiting for the driver is not): one
    # not done yet, skipped while another call ran or left by a leader that died, is asked
    # again on the next pass.
    ensured: set[int] = field(default_factory=set)


class Scaler:
    """Decides and applies executor targets; see the module. :meth:`tick` is one pass
    (testable); :meth:`start` runs it every ``tick_s`` seconds on a thread while
    ``is_leader()`` says so."""

    def __init__(
        self,
        store: Store,
        state_dir: Path,
        policy: ScalingPolicy | None = None,
        clock: Callable[[], float] = time.time,
        *,
        tick_s: float = 1.0,
        is_leader: Callable[[], bool] | None = None,
        providers: ProviderFor | None = None,
        background: bool = False,
        budget: HostBudget | None = None,
    ) -> None:
        self.store = store
        # The host's cluster budget: workers the scaler starts count against it, as the
        # REST API's do (None: the default budget).
        self.budget = budget
        self.state_dir = state_dir
        self.policy: ScalingPolicy = policy if policy is not None else DefaultPolicy()
        self.clock = clock
        self.tick_s = tick_s
        self._is_leader = is_leader
        self._providers = providers
        # Provider calls (a worker start takes seconds) on a thread per owner, so that one
        # owner's cluster change never delays another's decision; tests call them in line.
        self.background = background
        self._owners: dict[JobId, _OwnerState] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="stoker-scaler", daemon=True)
        self.ticks = 0

    # lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        for st in list(self._owners.values()):
            if st.ensuring is not None:
                st.ensuring.join(timeout)

    def _loop(self) -> None:
        while not self._stop.wait(self.tick_s):
            try:
                if self._is_leader is not None and not self._is_leader():
                    self._owners.clear()  # a leader again later re-stabilizes from scratch
                    continue
                self.tick()
            except Exception:  # the loop must survive a bad owner or a store hiccup
                log.exception("scaler tick failed")

    # one pass ------------------------------------------------------------------------------
    def tick(self) -> None:
        """One pass over every RUNNING owner; an owner's failure is logged, the pass goes on."""
        now = self.clock()
        self.ticks += 1
        live: set[JobId] = set()
        for owner in self.store.list_jobs(state=JobState.RUNNING, kind=None):
            if owner.app_id is not None:
                continue  # an application's job: its application is the owner
            live.add(owner.job_id)
            try:
                self._tend(owner, now)
            except Exception:
                log.exception("scaler: owner %s", owner.job_id)
        for gone in set(self._owners) - live:
            st = self._owners.pop(gone)
            if st.ensuring is not None and st.ensuring.is_alive():
                self._owners[gone] = st  # let its provider call finish first

    def provider_for(self, owner: JobRecord) -> ResourceProvider | None:
        """The provider of the owner's cluster; None where executors cannot change (Spark in
        the driver: ``local``)."""
        if self._providers is not None:
            return self._providers(owner)
        if owner.kind == JobKind.APPLICATION:
            try:
                spec = clusters.parse_cluster(str(owner.spec.get("cluster") or "local"))
            except InvalidInput:
                return None
            if spec.kind == "local":
                return None
            if spec.kind == "external":
                return SparkExecutorsOnly(spec.master_url)
            name = app_cluster_name(owner.job_id) if spec.kind == "standalone" else str(spec.name)
            return StandaloneProvider(
                self.store, name, self.state_dir / "clusters" / name, budget=self.budget
            )
        conf = owner.spec.get("conf") or {}
        master = str(conf.get("spark.master") or conf.get("stoker.master") or "local")
        if master.startswith("local"):
            return None
        return SparkExecutorsOnly(master)

    def _tend(self, owner: JobRecord, now: float) -> None:
        st = self._owners.setdefault(owner.job_id, _OwnerState())
        try:
            spec = parse_scaling(owner.scaling)
        except InvalidInput as e:
            self._say(st, owner, f"its scaling cannot be read ({e}): left alone")
            return
        res = owner.resources or {}
        if spec.mode != "auto":
            if owner.executor_target is not None:  # it was auto: the target goes
                self.store.set_executor_target(owner.job_id, None)
                self._supersede(owner, f"mode is {spec.mode} now")
            # Executors that joined or left without a decision (workers added or removed by
            # hand, an executor lost) are recorded in every mode but auto's: a user reading
            # `rescales` sees each change of size, not "no rescales yet".
            self._observe(owner, st, res, now, spec.mode)
            return
        st.seen_executors = None  # reactive again later starts from what it sees then
        provider = self.provider_for(owner)
        if provider is None:
            self._say(st, owner, "Spark runs inside its driver (local): no executors to scale")
            return
        if not st.seeded:
            self._seed(owner, st)
        in_flight = self._mark_in_use(owner, st, res, now)
        if (
            in_flight is not None
            and now - in_flight.at < max(spec.cooldown_s, _IN_FLIGHT_PATIENCE)
            and spec.min_executors <= int(in_flight.to_executors or 0)
            and (
                spec.max_executors is None or int(in_flight.to_executors or 0) <= spec.max_executors
            )
        ):
            # A decision on its way (workers starting, executors registering): its effect is
            # not in the epochs yet, so nothing new is decided on them; only bounds a user
            # changed, or a decision stuck for long, make way for another.
            decision = Decision(None, "a decision is on its way")
        else:
            decision = self.policy.decide(
                spec, read_signals(self.store, self.policy, owner, res, now), st.memory
            )
        if decision.target is None:
            if in_flight is not None and (
                in_flight.rescale_id not in st.ensured or in_flight.workers.get("waiting")
            ):
                # Not asked yet, or the provider left work for later (a removal waits for the
                # driver to ask Spark for fewer executors): ask it (again).
                self._provide(owner, st, provider, in_flight)
            return
        self._apply(
            owner, st, spec, provider, decision.target, decision.reason, decision.signals, res, now
        )

    # auto ----------------------------------------------------------------------------------
    def _apply(
        self,
        owner: JobRecord,
        st: _OwnerState,
        spec: ScalingSpec,
        provider: ResourceProvider,
        target: int,
        reason: str,
        signals: dict[str, Any],
        res: dict[str, Any],
        now: float,
    ) -> None:
        self._supersede(owner, f"a newer decision: {target} executors")
        executors = res.get("executors")
        rec = self.store.add_rescale(
            owner.job_id,
            kind="decision",
            policy=self.policy.name,
            mode=spec.mode,
            signals={**signals, "provider": provider.describe()},
            from_executors=None if executors is None else int(executors),
            to_executors=target,
            reason=reason,
            status="decided",
            at=now,
        )
        # Recorded first, then the target: a crash between the two leaves a decision that a
        # later one supersedes, never a target nobody decided.
        self.store.set_executor_target(owner.job_id, target)
        log.info("scaler: %s %s -> %s executors (%s)", owner.job_id, executors, target, reason)
        self._provide(owner, st, provider, rec)

    def _provide(
        self, owner: JobRecord, st: _OwnerState, provider: ResourceProvider, rec: RescaleRecord
    ) -> None:
        """Have the provider make room for the decision's target; what it did goes into the
        rescale record (``failed`` with the error when it could not)."""
        if st.ensuring is not None and st.ensuring.is_alive():
            return  # the previous call still runs; the next tick looks again
        target = int(rec.to_executors or 0)

        def run() -> None:
            fresh = self.store.get_job(owner.job_id)
            if fresh.executor_target != target:
                st.ensured.add(rec.rescale_id)
                return  # superseded or cleared meanwhile
            res = fresh.resources or {}
            cores = None
            if res.get("executors") and res.get("cores"):
                cores = max(1, int(res["cores"]) // int(res["executors"]))
            try:
                done = provider.ensure(fresh, target, cores)
            except Exception as e:
                # A StokerError says what a user can act on; anything else is a bug: logged.
                if not isinstance(e, StokerError):
                    log.exception("scaler: provider of %s", owner.job_id)
                st.ensured.add(rec.rescale_id)
                # Superseded while the provider worked: that status stands.
                with contextlib.suppress(InvalidTransition):
                    self.store.update_rescale(
                        rec.rescale_id, status="failed", error=f"{type(e).__name__}: {e}"
                    )
                return
            merged = _merge_workers(rec.workers, done)
            if merged != rec.workers:
                self.store.update_rescale(rec.rescale_id, workers=merged)
            if not done.get("waiting"):
                st.ensured.add(rec.rescale_id)

        if self.background:
            st.ensuring = threading.Thread(
                target=_logged(run, owner.job_id), name=f"stoker-scale-{owner.job_id}", daemon=True
            )
            st.ensuring.start()
        else:
            run()

    def _mark_in_use(
        self, owner: JobRecord, st: _OwnerState, res: dict[str, Any], now: float
    ) -> RescaleRecord | None:
        """Mark ``in_use`` the decision whose target the reported executors reached; return
        the decision still in flight (or None)."""
        executors = res.get("executors")
        if isinstance(executors, int) and isinstance(res.get("warming"), int):
            # An executor still starting its Python workers is not in use yet.
            executors -= int(res["warming"])
        in_flight = None
        for rec in self._decided(owner.job_id):
            to, frm = int(rec.to_executors or 0), rec.from_executors
            up = frm is None or to >= frm
            reached = executors is not None and (executors >= to if up else executors <= to)
            if not reached:
                in_flight = in_flight or rec
                continue
            at = res.get("at")
            when = float(at) if isinstance(at, int | float) and rec.at <= at <= now else now
            self.store.update_rescale(rec.rescale_id, status="in_use", in_use_at=when)
            # The cooldown runs from when the new size is in use, as Flink's stabilization
            # runs from the end of a rescale: epochs before then do not show it.
            st.memory.last_change_at = max(st.memory.last_change_at or when, when)
            log.info(
                "scaler: %s has %s executors in use, %.1f s after the decision",
                owner.job_id,
                executors,
                when - rec.at,
            )
        return in_flight

    def _supersede(self, owner: JobRecord, why: str) -> None:
        for rec in self._decided(owner.job_id):
            self.store.update_rescale(rec.rescale_id, status="superseded", error=why)

    def _decided(self, job_id: JobId) -> list[RescaleRecord]:
        """Decisions still in flight, newest first."""
        return [
            r
            for r in self.store.list_rescales(job_id, limit=_IN_FLIGHT_LOOKUP)
            if r.kind == "decision" and r.status == "decided"
        ]

    def _seed(self, owner: JobRecord, st: _OwnerState) -> None:
        """After a failover (or at start): the cooldown runs from the last decision stored, and
        the last hour's decisions count against the cap on rescales per hour."""
        st.seeded = True
        now = self.clock()
        decided = [
            r
            for r in self.store.list_rescales(owner.job_id, limit=_IN_FLIGHT_LOOKUP)
            if r.kind == "decision"
        ]
        if decided:
            newest = decided[0]
            st.memory.last_change_at = newest.in_use_at or newest.at
        # The cap on changes per hour counts the decisions made before the failover too.
        st.memory.changes = sorted(r.at for r in decided if now - r.at < HOUR)

    # reactive ------------------------------------------------------------------------------
    def _observe(
        self, owner: JobRecord, st: _OwnerState, res: dict[str, Any], now: float, mode: str
    ) -> None:
        """Record executors that joined or left by themselves (``mode``: the owner's, reactive
        or fixed)."""
        executors = res.get("executors")
        if executors is None:
            return
        ids = [str(i) for i in res.get("executor_ids") or []]
        hosts = [str(h) for h in res.get("hosts") or []]
        if st.seen_executors is None:
            st.seen_executors, st.seen_ids, st.seen_hosts = int(executors), ids, hosts
            last = self.store.list_rescales(owner.job_id, limit=1)
            if last and last[0].kind == "observed" and last[0].to_executors is not None:
                # A failover in between: what changed since the last record is still told.
                st.seen_executors = int(last[0].to_executors)
                st.seen_ids = [str(i) for i in last[0].signals.get("executor_ids") or []]
                st.seen_hosts = [str(h) for h in last[0].signals.get("hosts") or []]
            if st.seen_executors == int(executors):
                return
        if int(executors) == st.seen_executors:
            st.seen_ids, st.seen_hosts = ids, hosts
            return
        joined = [i for i in ids if i not in st.seen_ids]
        left = [i for i in st.seen_ids if i not in ids]
        before = st.seen_executors
        delta = int(executors) - before
        reason = (
            f"{delta} executor{'s' if delta != 1 else ''} joined"
            if delta > 0
            else f"{-delta} executor{'s' if delta != -1 else ''} left"
        )
        at = res.get("at")
        self.store.add_rescale(
            owner.job_id,
            kind="observed",
            policy=mode,
            mode=mode,
            signals={
                "executors": int(executors),
                "cores": res.get("cores"),
                "executor_ids": ids,
                "hosts": hosts,
                "joined": joined,
                "left": left,
            },
            from_executors=before,
            to_executors=int(executors),
            reason=reason,
            status="observed",
            workers={
                "added": [h for h in hosts if h not in st.seen_hosts],
                "removed": [h for h in st.seen_hosts if h not in hosts],
            },
            at=float(at) if isinstance(at, int | float) and at <= now else now,
        )
        log.info("scaler: %s (reactive): %s, %d -> %d", owner.job_id, reason, before, executors)
        st.seen_executors, st.seen_ids, st.seen_hosts = int(executors), ids, hosts

    def _say(self, st: _OwnerState, owner: JobRecord, what: str) -> None:
        if st.said != what:
            st.said = what
            log.info("scaler: %s: %s", owner.job_id, what)


def _merge_workers(before: dict[str, Any], done: dict[str, Any]) -> dict[str, Any]:
    """Worker ids added and removed so far for one decision (a provider may act in steps)."""
    out: dict[str, Any] = {
        "added": list(before.get("added") or []),
        "removed": list(before.get("removed") or []),
    }
    for key in ("added", "removed"):
        for wid in done.get(key) or []:
            if wid not in out[key]:
                out[key].append(wid)
    if done.get("waiting"):  # only while the provider still waits
        out["waiting"] = done["waiting"]
    return out


def _logged(fn: Callable[[], None], job_id: str) -> Callable[[], None]:
    def run() -> None:
        try:
            fn()
        except Exception:
            log.exception("scaler: provider call for %s failed", job_id)

    return run


__all__ = ["ProviderFor", "Scaler"]
