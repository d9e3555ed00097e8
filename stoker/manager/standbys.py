"""Warm standby drivers: for a job submitted with ``standby``, the leader keeps a
second driver process warm (the app imported, Spark up, the sources' stream analyzed,
holding no attempt: ``runtime/job/standby.py``) and hands it the job's next attempt when the
running driver dies, is fenced or stops.

The store's ``standbys`` row is the standby's one record (WARMING -> READY -> TAKEN). The
leader, each tick:

- starts a standby for a job that wants one, once its current attempt runs and has committed
  an epoch (not beside a driver that is still starting or taking over: two Spark starts at
  once slow both), and not while an earlier standby of the job failed lately (``BACKOFF``,
  doubling);
- replaces a standby whose process is gone or whose lease lapsed (frozen);
- forgets a TAKEN standby once its attempt was claimed or ended (the process is that
  attempt's driver now, watched as any driver); the next tick starts a new standby;
- stops the standby of a job that ended or no longer wants one.

The handover is two writes, attempt first: the next attempt is recorded STARTING (no driver
yet, the standby's log as its log), then the row becomes TAKEN with that attempt (only if it
was READY with its lease valid); the standby then holds the attempt itself, as a new driver
does. If the row cannot be taken (the standby died or froze meanwhile), a new driver is
started for the attempt at once (``Dispatcher``). A leader that dies between the two writes
leaves a STARTING attempt nobody launched: the next leader replaces it after the launch grace
without counting a failure, and hands the new one to the standby, still READY.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from stoker import procs
from stoker.driverargs import DriverArgs, DriverRole
from stoker.leases import LeaseWatch
from stoker.manager import processes
from stoker.manager.launcher import DriverLauncher
from stoker.manager.submit import ASSIGNED_STATE_DIR, job_folder
from stoker.restart import FailureCause
from stoker.store import JobRecord, Owner, Store
from stoker.store.fleet_records import StandbyRecord, UpgradeRecord
from stoker.types import (
    AttemptNo,
    AttemptState,
    JobId,
    JobKind,
    JobState,
    SpecKind,
    StandbyRole,
    StandbyState,
    UpgradeState,
)

log = logging.getLogger("stoker.standby")

BACKOFF = 5.0  # s before a job's standby is started again after one failed; doubles
# A new standby waits for the running attempt's first committed epoch (its Spark start would
# take the CPU that attempt's first epochs need: a takeover is only done once it commits), or
# this long after the attempt started when it commits nothing (an idle or paused job).
SETTLE = 30.0
BACKOFF_MAX = 300.0
# A WARMING standby's lease: it renews it from its first second, but a start on a loaded
# host can take long before Python runs at all.
START_TTL = 120.0
HANDOVER_LOST = "its standby was handed the attempt and did not hold it (frozen or cut off)"


def wants_standby(job: JobRecord) -> bool:
    """Whether the job (submitted alone) or the application was submitted with a warm
    standby."""
    kind = job.spec.get("kind")
    return kind in (SpecKind.MANAGED, SpecKind.APPLICATION) and bool(job.spec.get("standby"))


@dataclass
class _Failures:
    count: int = 0
    not_before: float = 0.0  # time.monotonic()


def spec_key(spec: dict[str, Any]) -> str:
    """A short name for the code a job's spec runs (file, arguments, settings, config): a
    standby started for one spec is not handed an attempt of another."""
    code = {k: spec.get(k) for k in ("entrypoint", "args", "conf", "config")}
    return hashlib.sha256(json.dumps(code, sort_keys=True, default=str).encode()).hexdigest()[:16]


class StandbyKeeper:
    """The leader's standbys: started, replaced, handed over, stopped."""

    def __init__(
        self, store: Store, launcher: DriverLauncher, state_dir: Path, store_url: str, ttl: float
    ) -> None:
        self.store = store
        self.launcher = launcher
        self.state_dir = state_dir
        self.store_url = store_url
        self.ttl = ttl  # the standbys' lease (the drivers' attempt lease)
        # Their leases as this manager saw them: each renewal writes a new expiry, so a value
        # that stays the same for a whole TTL on this manager's monotonic clock is a lapsed
        # lease, whatever the wall clocks say (stoker.leases).
        self._leases = LeaseWatch(store.clock.monotonic)
        self._failures: dict[tuple[JobId, StandbyRole], _Failures] = {}
        self.started = 0  # standbys started by this manager
        self.handed = 0  # attempts handed to a standby by this manager
        self.owners: frozenset[Owner] = frozenset()  # the standbys recorded at the last step

    # what is wanted ------------------------------------------------------------------------
    @staticmethod
    def wanted(
        job: JobRecord | None, role: StandbyRole, up: UpgradeRecord | None
    ) -> dict[str, Any] | None:
        """The spec the job's ``role`` standby is to run now, or None for no standby.

        The job's own standby runs the job's code; while an upgrade is live it is kept (started
        if the job has none) as the way back: the old code, also once the new one runs. An
        upgrade's standby runs the new code until it is handed the swap's attempt."""
        if job is not None and job.spec.get("kind") == SpecKind.APPLICATION:
            # An application's own standby only (applications have no upgrade).
            return job.spec if role == StandbyRole.STANDBY and wants_standby(job) else None
        if job is None or job.spec.get("kind") != SpecKind.MANAGED:
            return None
        if role == StandbyRole.UPGRADE:
            if up is None:
                return None
            waiting = up.state == UpgradeState.PENDING or up.handover_due
            return up.new_spec if waiting else None
        if up is not None and up.state == UpgradeState.SWAPPED:
            return up.old_spec
        if wants_standby(job) or up is not None:
            return job.spec
        if job.state in (JobState.RESTARTING, JobState.SUSPENDED):
            # Between attempts: one left from an upgrade (rolled back just now) is the next
            # attempt's; it goes once that attempt runs.
            return job.spec
        return None

    # the leader's step ---------------------------------------------------------------------
    def tend(self, live: list[JobRecord], upgrades: list[UpgradeRecord]) -> None:
        """One step over every standby recorded and every live job that wants one
        (``upgrades``: the live ones, read once for the leader's step)."""
        jobs = {j.job_id: j for j in live}
        ups = {u.job_id: u for u in upgrades}
        recorded = {(s.job_id, s.role): s for s in self.store.list_standbys()}
        self.owners = frozenset(s.owner for s in recorded.values())
        for (jid, role), sb in recorded.items():
            job = jobs.get(jid)
            up = ups.get(jid)
            if sb.state == StandbyState.TAKEN and job is not None:
                self._watch_taken(job, sb)  # until its attempt is held, whatever is wanted
                continue
            want = self.wanted(job, role, up)
            if want is None:
                why = "its job ended" if job is None else f"its job wants no {role} standby now"
                self._stop(sb, why, kill=sb.state != StandbyState.TAKEN)
                continue
            assert job is not None
            self._watch(job, sb, want, up)
        for job in live:
            for role in StandbyRole:
                up = ups.get(job.job_id)
                want = self.wanted(job, role, up)
                if want is None or (job.job_id, role) in recorded:
                    continue
                if role == StandbyRole.UPGRADE and (up is None or up.state != UpgradeState.PENDING):
                    continue  # the new code is started once, before its swap
                self._maybe_start(job, role, want, up)

    def _watch(
        self,
        job: JobRecord,
        sb: StandbyRecord,
        want: dict[str, Any],
        up: UpgradeRecord | None,
    ) -> None:
        if sb.spec_key and sb.spec_key != spec_key(want):
            # It runs other code than the job's now (an upgrade was confirmed): replaced.
            self._stop(sb, "it runs the job's code before its upgrade", kill=True)
            return
        why = None
        if self.launcher.is_gone(sb.owner):
            why = f"the {sb.role} standby (pid {sb.owner.pid}) is gone"
        elif self._lapsed(sb):
            why = (
                f"the {sb.role} standby (pid {sb.owner.pid}) let its lease lapse "
                "(frozen or cut off)"
            )
        if why is None:
            return
        if sb.role == StandbyRole.UPGRADE and up is not None:
            # The new code could not be kept warm (an import that fails, a check that
            # crashed, a kill): the upgrade is refused with what its log said last; the old
            # code runs on. Not retried: the same code would fail the same way.
            words = _last_words(sb.log_path)
            if self.store.end_upgrade(up.upgrade_id, UpgradeState.REFUSED, why + words):
                log.warning("job %s: upgrade %s refused: %s", job.job_id, up.upgrade_id, why)
        else:
            self._failed(job.job_id, sb.role)
        self._stop(sb, why, kill=True)

    def _watch_taken(self, job: JobRecord, sb: StandbyRecord) -> None:
        """A standby handed an attempt: its row stays until it holds that attempt (then it is
        the attempt's driver, watched as any), or is given up if it never does."""
        now = self.store.clock.now()
        att = self.store.get_attempt(job.job_id, sb.attempt) if sb.attempt else None
        held = att is not None and att.owner == sb.owner  # the standby holds it itself
        if att is not None and att.state == AttemptState.STARTING and not held:
            if now - att.started_at > self.ttl:
                # Handed over, never held: the standby froze (or was cut off) right after
                # its last renewal. The attempt is given up now, without a failure
                # counted, not after the start lease (minutes); the next starts cold.
                self._failed(job.job_id, sb.role)
                self.store.attempt_failed(
                    job.job_id, att.attempt, HANDOVER_LOST, now, FailureCause.HANDOVER_LOST
                )
                self._stop(sb, f"it did not hold attempt {att.attempt}", kill=True)
            return
        # Its attempt was claimed or ended: a driver like any other if it held it, else
        # a process that runs nothing of the job (the attempt went on without it).
        self._stop(sb, f"attempt {sb.attempt} went on without it", kill=not held)

    def _stop(self, sb: StandbyRecord, why: str, kill: bool) -> None:
        """Forget the standby; ``kill`` its process too (not one that runs an attempt now)."""
        if kill:
            log.info("job %s: %s standby pid %d stopped: %s", sb.job_id, sb.role, sb.owner.pid, why)
            self.launcher.kill(sb.owner)
        self.store.remove_standby(sb.job_id, sb.owner, sb.role)

    def _failed(self, jid: JobId, role: StandbyRole) -> None:
        f = self._failures.setdefault((jid, role), _Failures())
        f.count += 1
        wait = min(BACKOFF * 2 ** (f.count - 1), BACKOFF_MAX)
        f.not_before = time.monotonic() + wait
        log.warning(
            "job %s: its standby failed (%d in a row); next one in %.0f s", jid, f.count, wait
        )

    def _maybe_start(
        self,
        job: JobRecord,
        role: StandbyRole,
        want: dict[str, Any],
        up: UpgradeRecord | None,
    ) -> None:
        f = self._failures.get((job.job_id, role))
        if f is not None and time.monotonic() < f.not_before:
            return
        if not job.current_attempt:
            return
        att = self.store.get_attempt(job.job_id, job.current_attempt)
        if att is None or att.state != AttemptState.RUNNING:
            return  # the running driver first: not two Spark starts at once
        if self.store.clock.now() - att.started_at < SETTLE and not self._settled(job):
            return  # not before the attempt has committed once (SETTLE)
        self.start(job, role, want, up)

    def _settled(self, job: JobRecord) -> bool:
        """Whether the job's running attempt has committed an epoch; for an application,
        every live job of it under that job's current attempt (its driver's Spark start and
        each job's first epochs are done)."""
        if job.kind == JobKind.APPLICATION:
            jobs = [
                j
                for j in self.store.list_jobs(kind=JobKind.JOB, app_id=job.job_id)
                if not j.state.terminal
            ]
            return bool(jobs) and all(self._committed(j) for j in jobs)
        return self._committed(job)

    def _committed(self, job: JobRecord) -> bool:
        last = self.store.list_epochs(job.job_id, limit=1)
        return bool(
            last
            and job.current_attempt
            and last[0].decided_by == job.current_attempt
            and last[0].committed_at is not None
        )

    def start(
        self,
        job: JobRecord,
        role: StandbyRole = StandbyRole.STANDBY,
        want: dict[str, Any] | None = None,
        up: UpgradeRecord | None = None,
    ) -> StandbyRecord | None:
        """Start the job's ``role`` standby running ``want`` (default: the job's spec) and
        record it WARMING; None if it could not start."""
        spec = want if want is not None else job.spec
        upgrade = up.upgrade_id if role == StandbyRole.UPGRADE and up is not None else None
        if spec.get("kind") == SpecKind.APPLICATION:
            argv = app_driver_argv(job, None, self.store_url, self.state_dir, self.ttl)
        else:
            argv = job_driver_argv(
                replace(job, spec=spec), None, self.store_url, self.state_dir, self.ttl, upgrade
            )
        self.started += 1
        name = "standby" if role == StandbyRole.STANDBY else f"upgrade-{upgrade}"
        log_path = self.state_dir / "logs" / job.job_id / f"{name}-{_stamp()}.log"
        try:
            owner = self.launcher.start_standby(
                job.job_id,
                list(argv),
                dict(argv.env),
                log_path,
                Path(spec["entrypoint"]).parent,
                role,
            )
        except OSError as e:
            log.warning("job %s: cannot start a %s standby: %s", job.job_id, role, e)
            if up is not None and role == StandbyRole.UPGRADE:
                self.store.end_upgrade(
                    up.upgrade_id, UpgradeState.REFUSED, f"the new code cannot start: {e}"
                )
            else:
                self._failed(job.job_id, role)
            return None
        try:
            rec = self.store.add_standby(
                job.job_id, owner, str(log_path), START_TTL, role, spec_key(spec)
            )
        except Exception:
            self.launcher.kill(owner)
            raise
        log.info("job %s: %s standby started as pid %d", job.job_id, role, owner.pid)
        return rec

    def _lapsed(self, sb: StandbyRecord) -> bool:
        key = (sb.job_id, str(sb.role), sb.owner.pid, sb.owner.pid_started)
        return self._leases.lapsed(key, sb.lease_expires_at, self.ttl)

    # the handover --------------------------------------------------------------------------
    def ready(
        self,
        jid: JobId,
        role: StandbyRole = StandbyRole.STANDBY,
        spec: dict[str, Any] | None = None,
    ) -> StandbyRecord | None:
        """The job's ``role`` standby if it can take an attempt now: READY, its lease valid,
        its process not seen gone, and (``spec`` given) running that spec's code."""
        sb = self.store.get_standby(jid, role)
        if sb is None or sb.state != StandbyState.READY:
            return None
        if self._lapsed(sb) or self.launcher.is_gone(sb.owner):
            return None
        if spec is not None and sb.spec_key and sb.spec_key != spec_key(spec):
            return None
        return sb

    def hand(
        self, jid: JobId, attempt: AttemptNo, role: StandbyRole = StandbyRole.STANDBY
    ) -> StandbyRecord | None:
        """Hand ``attempt`` (recorded STARTING, owned by the standby) to the job's ``role``
        standby; the record, or None if it was not READY any more."""
        taken = self.store.take_standby(jid, attempt, role)
        if taken is None:
            return None
        self.launcher.hand_over(jid, attempt, role)
        self._failures.pop((jid, role), None)
        self.handed += 1
        return taken


def job_driver_argv(
    job: JobRecord,
    attempt: int | None,
    store_url: str,
    state_dir: Path,
    lease_ttl: float,
    upgrade: str | None = None,
) -> processes.DriverArgv:
    """The driver command line of a job submitted alone, from its spec: for ``attempt``, or
    (None) its warm standby. Its folder is the one the job was given when it was created (its
    checkpoint), whichever manager launches it; jobs stored without one run under
    ``state_dir``."""
    spec = job.spec
    return processes.DriverArgv.of(
        DriverArgs(
            role=DriverRole.JOB,
            name=job.job_id,
            attempt=attempt,
            store=store_url,
            state_dir=Path(job_folder(job, state_dir)),
            lease_ttl=lease_ttl,
            entrypoint=Path(spec["entrypoint"]),
            args=tuple(spec.get("args", [])),
            conf=dict(spec.get("conf", {})),
            upgrade=upgrade,
            from_savepoint=spec.get("from_savepoint"),
            rewrite_output=bool(spec.get("rewrite_output_after_savepoint")),
        )
    )


def app_driver_argv(
    app: JobRecord,
    attempt: int | None,
    store_url: str,
    state_dir: Path,
    lease_ttl: float,
    master: str | None = None,
    cluster_conf: dict[str, str] | None = None,
) -> processes.DriverArgv:
    """The driver command line of an application, from its spec: for ``attempt``, or (None)
    its warm standby (on ``local`` only: ``master`` None). ``master``: the ``spark://`` URL
    of the cluster it runs on; ``cluster_conf``: that cluster's needs, under the
    application's own settings, which win."""
    spec = app.spec
    conf = {**(cluster_conf or {}), **spec.get("conf", {})}
    if master is not None:
        conf["spark.master"] = master
        if procs.is_loopback(urlsplit(master).hostname or ""):
            # Executors on the loopback "hosts" reach the driver there, whatever this
            # host's name resolves to.
            conf.setdefault("spark.driver.host", "127.0.0.1")
    app_dir = spec.get(ASSIGNED_STATE_DIR) or state_dir / "apps" / app.job_id
    return processes.DriverArgv.of(
        DriverArgs(
            role=DriverRole.APP,
            name=app.job_id,
            attempt=attempt,
            store=store_url,
            state_dir=Path(app_dir),
            lease_ttl=lease_ttl,
            entrypoint=Path(spec["entrypoint"]),
            args=tuple(spec.get("args", [])),
            conf=conf,
        )
    )


def _last_words(log_path: str, max_bytes: int = 2048) -> str:
    """The end of a standby's log (what its code said as it failed), for a refusal."""
    try:
        with open(log_path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - max_bytes))
            tail = f.read().decode(errors="replace").strip().splitlines()
    except OSError:
        return ""
    lines = [ln for ln in tail if ln.strip()][-6:]
    return (": " + " | ".join(lines)) if lines else ""


def _stamp() -> str:
    return time.strftime("%Y%m%dT%H%M%S") + f"-{time.monotonic_ns() % 1_000_000:06d}"
