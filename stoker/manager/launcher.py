"""Where a driver runs: the :class:`DriverLauncher` interface, and local processes behind it.

The supervisor decides *when* an attempt gets a driver and what its command line is (the same
``python -m stoker.runtime.driver|appdriver ...`` wherever it runs); a launcher decides *where*
it runs and how it is watched and stopped. :class:`LocalProcessLauncher` starts each driver as
a process group on the manager's host, today's only kind.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from stoker.manager import processes
from stoker.procs import host_id, is_this_host, owner_is_alive, reap_adopted
from stoker.store import Owner
from stoker.types import AttemptNo, JobId, StandbyRole

log = logging.getLogger("stoker.launcher")
# Seconds between looks for adopted zombies (a read of /proc per thread of the manager).
ADOPTED_EVERY = 2.0
EXITED_KEPT = 1000  # exit codes of reaped drivers remembered (the newest)
# A driver seen alive as its very process (its pid's start marker, read from /proc) is trusted
# for this long on its pid alone (one signal 0, no file read): the leader asks about every live
# driver every tick. A pid reused within it delays seeing the death by as much.
VERIFY_EVERY = 1.0


class DriverLauncher(Protocol):
    """Starts, watches and stops the driver of an attempt.

    This is where a Kubernetes or YARN launcher would go: ``start`` would create a pod (or
    submit a YARN application) running the same argv with the same environment, and return an
    :class:`Owner` naming it (e.g. the pod's name as ``host`` and its uid as ``pid_started``);
    ``exit_code`` would read the pod's phase, ``is_gone`` ask the API server, ``kill`` delete
    the pod. Every decision (restart, fail, cancel timeout) stays with the supervisor and the
    store: a launcher keeps nothing that matters, so a new leader with a fresh launcher adopts
    the drivers that run, judged by their owner records and attempt leases alone.
    """

    def start(
        self,
        job_id: JobId,
        attempt: AttemptNo,
        argv: list[str],
        env: dict[str, str],
        log_path: Path,
        cwd: Path,
    ) -> Owner:
        """Start the attempt's driver: ``argv`` with ``env`` added to the environment, its
        output to ``log_path``; who it is (recorded as the attempt's owner). ``OSError`` if
        it cannot start."""
        ...

    def launched(self, job_id: JobId, attempt: AttemptNo) -> bool:
        """Whether this launcher started the attempt's driver and still watches it."""
        ...

    def start_standby(
        self,
        job_id: JobId,
        argv: list[str],
        env: dict[str, str],
        log_path: Path,
        cwd: Path,
        role: StandbyRole = StandbyRole.STANDBY,
    ) -> Owner:
        """Start the job's ``role`` warm standby driver (no attempt yet); who it is.
        ``OSError`` if it cannot start."""
        ...

    def hand_over(
        self, job_id: JobId, attempt: AttemptNo, role: StandbyRole = StandbyRole.STANDBY
    ) -> None:
        """The job's ``role`` standby started here is ``attempt``'s driver now: watched as
        such (``exit_code``, ``launched``). Nothing when it was started elsewhere."""
        ...

    def terminate(self, owner: Owner) -> None:
        """Ask the driver recorded as ``owner`` to stop gracefully (SIGTERM to the driver
        alone: its epoch in flight commits and its attempt ends SUSPENDED), if it is provably
        the attempt's. Nothing when it cannot be reached from here."""
        ...

    def exit_code(self, job_id: JobId, attempt: AttemptNo) -> int | None:
        """The exit code of a driver this launcher started and that has exited; None while it
        runs, or if it was not started here."""
        ...

    def is_gone(self, owner: Owner) -> bool:
        """Whether the driver recorded as ``owner`` is provably gone (started anywhere: False
        when it cannot be told)."""
        ...

    def sees_alive(self, owner: Owner) -> bool:
        """Whether the driver recorded as ``owner`` provably runs (started anywhere: False when
        it cannot be told, e.g. on another host: its lease's renewals tell there)."""
        ...

    def still_running(self, owner: Owner) -> bool:
        """Whether anything of the driver recorded as ``owner`` still runs where this launcher
        can see: the driver, or what it started (its JVM, Spark's workers) after the driver
        itself died. False when it cannot be seen (another host): the attempt's lease and
        its fencing token decide there."""
        ...

    def kill(self, owner: Owner) -> None:
        """Stop the driver recorded as ``owner`` and all it started, if it is provably the
        attempt's (a driver gone long ago may have left its name to something else)."""
        ...

    def reap(self, watched: Callable[[JobId, AttemptNo], bool]) -> None:
        """Forget the drivers started here that have exited and whose attempt ``watched``
        says has ended (until then their exit stays visible to ``exit_code``)."""
        ...


def _group_of(owner: Owner) -> list[int]:
    """The live processes of the driver's process group (its pid is the group's id: drivers
    start a session of their own) that started no earlier than the driver did; a group id
    reused by a later process is not the driver's."""
    from stoker.procs import group_pids

    if not owner.pid_started.isdigit():
        return [] if processes.is_dead(owner) else [owner.pid]
    return group_pids(owner.pid, started_since=int(owner.pid_started))


def this_host() -> str:
    """The host a driver started here records as its owner's (:func:`stoker.procs.host_id`)."""
    return host_id()


# The keys standby drivers are watched under until handed an attempt (attempts are >= 1).
STANDBY = AttemptNo(0)
UPGRADE_STANDBY = AttemptNo(-1)
STANDBY_KEYS = {StandbyRole.STANDBY: STANDBY, StandbyRole.UPGRADE: UPGRADE_STANDBY}


class LocalProcessLauncher:
    """Each driver a process group on this host (its JVM and Spark's workers join it), its
    output appended to the attempt's log file."""

    def __init__(self) -> None:
        self._children: dict[tuple[JobId, AttemptNo], subprocess.Popen[bytes]] = {}
        self._pids: dict[int, subprocess.Popen[bytes]] = {}  # the same children, by pid
        self._verified: dict[Owner, float] = {}  # time.monotonic() its start marker matched
        self._adopted_at = float("-inf")
        self._exited: dict[tuple[JobId, AttemptNo], int] = {}  # reaped drivers' exit codes

    def start(
        self,
        job_id: JobId,
        attempt: AttemptNo,
        argv: list[str],
        env: dict[str, str],
        log_path: Path,
        cwd: Path,
    ) -> Owner:
        proc = processes.spawn(processes.DriverArgv(argv, env), log_path, cwd=cwd)
        self._forget_pid(self._children.get((job_id, attempt)))
        self._children[(job_id, attempt)] = proc
        self._pids[proc.pid] = proc
        from stoker.procs import process_start_marker

        return Owner(host=this_host(), pid=proc.pid, pid_started=process_start_marker(proc.pid))

    def launched(self, job_id: JobId, attempt: AttemptNo) -> bool:
        return (job_id, attempt) in self._children

    def start_standby(
        self,
        job_id: JobId,
        argv: list[str],
        env: dict[str, str],
        log_path: Path,
        cwd: Path,
        role: StandbyRole = StandbyRole.STANDBY,
    ) -> Owner:
        key = STANDBY_KEYS[role]
        old = self._children.get((job_id, key))
        if old is not None and old.poll() is None:
            processes.kill_group(old.pid)  # never two standbys of one role started here
        return self.start(job_id, key, argv, env, log_path, cwd)

    def hand_over(
        self, job_id: JobId, attempt: AttemptNo, role: StandbyRole = StandbyRole.STANDBY
    ) -> None:
        proc = self._children.pop((job_id, STANDBY_KEYS[role]), None)
        if proc is not None:
            self._children[(job_id, attempt)] = proc

    def terminate(self, owner: Owner) -> None:
        if owner.pid and is_this_host(owner.host) and not processes.is_dead(owner):
            with contextlib.suppress(ProcessLookupError):
                os.kill(owner.pid, signal.SIGTERM)

    def exit_code(self, job_id: JobId, attempt: AttemptNo) -> int | None:
        child = self._children.get((job_id, attempt))
        if child is None:
            return self._exited.get((job_id, attempt))
        return child.poll()

    def sees_alive(self, owner: Owner) -> bool:
        proc = self._pids.get(owner.pid) if owner.pid else None
        if proc is not None and proc.poll() is not None:
            return False  # our child, exited
        return owner_is_alive(owner)

    def is_gone(self, owner: Owner) -> bool:
        if not owner.pid:
            return False
        proc = self._pids.get(owner.pid)
        if proc is not None and proc.poll() is not None:
            return True  # our child, exited (a zombie until collected: not dead to /proc)
        now = time.monotonic()
        if now - self._verified.get(owner, float("-inf")) < VERIFY_EVERY:
            try:
                os.kill(owner.pid, 0)
            except ProcessLookupError:
                del self._verified[owner]
                return True
            except PermissionError:
                pass
            return False
        if processes.is_dead(owner):
            self._verified.pop(owner, None)
            return True
        if is_this_host(owner.host):
            self._verified[owner] = now
        return False

    def _forget_pid(self, proc: subprocess.Popen[bytes] | None) -> None:
        if proc is not None and self._pids.get(proc.pid) is proc:
            del self._pids[proc.pid]

    def still_running(self, owner: Owner) -> bool:
        return bool(owner.pid) and is_this_host(owner.host) and bool(_group_of(owner))

    def kill(self, owner: Owner) -> None:
        # Only processes that are provably the attempt's: the driver's process group, members
        # started no earlier than the driver (same host, same pid start time).
        if self.still_running(owner):
            processes.kill_group(owner.pid)

    def reap(self, watched: Callable[[JobId, AttemptNo], bool]) -> None:
        for key, proc in list(self._children.items()):
            code = proc.poll()
            if code is not None and not watched(*key):
                del self._children[key]
                self._forget_pid(proc)
                if key[1] in (STANDBY, UPGRADE_STANDBY):
                    continue  # a standby's exit decides nothing; its process is seen gone
                # Kept a while: whether the job restarts may depend on it (exit 2: no).
                self._exited[key] = code
                while len(self._exited) > EXITED_KEPT:
                    del self._exited[next(iter(self._exited))]
        # A driver's JVM outlives its Python by a moment; if the kernel hands it to us (the
        # manager is PID 1 in a container, or a subreaper), nobody else collects it.
        now = time.monotonic()
        if now - self._adopted_at >= ADOPTED_EVERY:
            self._adopted_at = now
            for owner, at in list(self._verified.items()):
                if now - at > 10 * VERIFY_EVERY:
                    del self._verified[owner]  # not asked about any more (its attempt ended)
            for pid in reap_adopted():
                log.debug("collected adopted process %d", pid)

    def wait(self, timeout: float) -> None:
        """Wait for every driver started here to exit (tests)."""
        for proc in list(self._children.values()):
            proc.wait(timeout=timeout)
