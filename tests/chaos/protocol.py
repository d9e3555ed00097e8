"""Faults inside the protocol (issue 40 item 2): where a random kill rarely lands.

A random SIGKILL falls between an epoch's decide and its commit about 5% of the time, and a
stalled driver's group is killed before it wakes, so the fences were never reached. These
faults aim at them with the fault points of :mod:`stoker.testing`, in a driver of ``stoker
run`` started for the purpose (the one running is SIGKILLed first):

- ``crash_at``: the driver kills itself at a chosen step of an epoch a little ahead
  (:data:`~tests.chaos.schedule.CRASH_POINTS`: before and after the decision, between the
  sinks' commits and the store's mark, in recovery, a task's worker after its PREPARE).
- ``zombie``: the driver freezes (SIGSTOP of its group, from inside) at a step of an epoch
  ahead (:data:`~tests.chaos.schedule.ZOMBIE_POINTS`: just before its decide, just after, after
  its commits); once its lease lapsed a second driver of the job is started and takes over;
  the zombie is woken (SIGCONT) as the new driver's attempt begins and must stop without
  deciding anything more: the checker reads the store for what it decided
  (:class:`Zombie`).
- ``power_loss``: the driver is killed right after a decide, then the files sink loses what
  was never fsynced (the writes left in the page cache): every file under its staging folder
  that no stoker process fsynced is emptied, as a power cut would leave it. The fsyncs are
  recorded by the harness's ``sitecustomize`` (tests/support/clockstep) in a ledger of the run:
  a documented equivalent of a disk that drops unsynced writes (a FUSE layer or a loop device
  with its cache dropped), blind to the JVM's own fsyncs (stoker's are all in Python).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tests.chaos import nemesis
from tests.chaos.schedule import ARMED_AHEAD, CRASH_POINTS, ZOMBIE_POINTS, Step

if TYPE_CHECKING:
    from tests.chaos.runner import Run

REACH_BY = 300.0  # seconds an armed driver gets to reach its fault point
ZOMBIE_TTL = "5s"  # the zombie's lease: it lapses while the zombie is frozen
WAKE_BY = 120.0  # seconds a woken zombie gets to stop
LEDGER_ENV = "STOKER_TEST_FSYNC_LEDGER"


@dataclass
class Zombie:
    """A driver of ``job`` frozen at ``point`` of ``epoch`` as attempt ``attempt``, woken
    after attempt ``by`` took over. ``rc``: how it ended (None: it did not)."""

    job: str
    pid: int
    attempt: int
    epoch: int
    point: str
    by: int | None = None
    rc: int | None = None
    woke: bool = False


def ledger(run: Run) -> Path:
    return run.base / "fsync-ledger"


def _newest(run: Run) -> int:
    """The newest epoch the store has of the current job (-1: none)."""
    jid = run.job
    n = run.read(lambda st: max((int(e.epoch) for e in st.list_epochs(jid, 5)), default=-1))
    return -1 if n is None else int(n)


def _rearm(run: Run, fault: str, args: tuple[str, ...] = ()) -> int | None:
    """SIGKILL the driver now and start the same command armed with ``fault``: its pid."""
    from tests.chaos.runner import live_driver

    d = live_driver(run)
    if d is None:
        return None
    nemesis.kill_driver(d)
    run.op.wait_exit(time.monotonic() + 60)
    run.op.reap()
    if run.job_state() in ("FINISHED", "CANCELED"):
        return None
    run.op.arm({"STOKER_FAULT": fault}, args)
    run.op.ensure()
    return run.op.driver()


def _log_of(run: Run) -> Path:
    return sorted(run.base.glob("driver-*.log"))[-1]


def _said(log: Path, what: str) -> bool:
    return log.exists() and what in log.read_text(errors="replace")


def crash_at(run: Run, step: Step) -> str | None:
    point = CRASH_POINTS[int(step.arg)]
    epoch = _newest(run) + ARMED_AHEAD
    if point == "task_after_prepare":
        if not run.schedule.workload.pg_sink:
            return None  # the fault point is in the PostgreSQL sink's task
        fault = f"{point}:{epoch}:0"
    elif point in ("in_recovery", "sink_recovery_at_start"):
        fault = point  # the armed driver's first recovery
    else:
        fault = f"{point}:{epoch}"
    pid = _rearm(run, fault)
    if pid is None:
        return None
    log = _log_of(run)
    deadline = time.monotonic() + REACH_BY
    while run.op.driver() == pid and time.monotonic() < deadline:
        # Said (a task's worker says it in the driver's log too), or the epoch went by.
        if _said(log, "stoker.testing: injected") or _newest(run) > epoch:
            break
        time.sleep(0.2)
    hit = _said(log, "stoker.testing: injected")
    return f"driver {pid} armed with {fault}: " + ("it crashed there" if hit else "not reached")


def power_loss(run: Run, step: Step) -> str | None:
    epoch = _newest(run) + ARMED_AHEAD
    pid = _rearm(run, f"after_decide:{epoch}")
    if pid is None:
        return None
    log = _log_of(run)
    run.op.wait_exit(time.monotonic() + REACH_BY)
    if not _said(log, "injected crash at after_decide"):
        return f"driver {pid} armed with after_decide:{epoch}: not reached, no power loss"
    run.op.reap()
    dropped = drop_unsynced(run.out / "_staging", ledger(run))
    return (
        f"driver {pid} killed after deciding epoch {epoch}; power loss of the files sink: "
        f"{len(dropped)} unsynced staged files emptied {sorted(p.name for p in dropped)[:4]}"
    )


def drop_unsynced(folder: Path, ledger_file: Path) -> list[Path]:
    """Empty every file under ``folder`` that the ledger has no fsync of: what a power loss
    leaves of data that never left the page cache."""
    synced = set()
    with contextlib.suppress(FileNotFoundError):
        synced = set(ledger_file.read_text(errors="replace").splitlines())
    dropped = []
    if folder.exists():
        for f in folder.rglob("*"):
            if f.is_file() and str(f) not in synced and f.stat().st_size > 0:
                os.truncate(f, 0)
                dropped.append(f)
    return dropped


def zombie(run: Run, step: Step, rng: random.Random) -> str | None:
    point = ZOMBIE_POINTS[int(step.arg)]
    epoch = _newest(run) + ARMED_AHEAD
    pid = _rearm(run, f"sigstop_{point}:{epoch}", ("-D", f"stoker.lease_ttl={ZOMBIE_TTL}"))
    if pid is None:
        return None
    log = _log_of(run)
    deadline = time.monotonic() + REACH_BY
    while not (_said(log, "injected sigstop") and _stopped(pid)):
        if run.op.driver() != pid or time.monotonic() > deadline:
            return f"driver {pid} armed with sigstop_{point}:{epoch}: not reached"
        time.sleep(0.2)
    jid = run.job
    attempt = run.read(lambda st: st.get_job(jid).current_attempt)
    z = Zombie(jid, pid, int(attempt or 0), epoch, point)
    proc = run.op.detach()  # the frozen driver is no longer the one the runner follows
    run.zombies.append(z)
    try:
        # Its lease lapses on the wall clock (a start finds it valid and is refused), then
        # the same command again takes the job over.
        while True:
            lease = run.read(lambda st: st.get_attempt(jid, z.attempt).lease_expires_at)
            if lease is not None and lease < time.time():
                break
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)
        run.op.ensure()
        # Woken as the new driver's attempt begins (its recovery, its Spark starting), or a
        # moment later: the window where a zombie without its fences writes.
        while True:
            now = run.read(lambda st: st.get_job(jid).current_attempt)
            if now is not None and int(now) > z.attempt:
                z.by = int(now)
                break
            if time.monotonic() > deadline or not run.op.ensure():
                break
            time.sleep(0.1)
        time.sleep(round(rng.uniform(0.0, 3.0), 1))
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGCONT)
        z.woke = True
    try:
        z.rc = proc.wait(timeout=WAKE_BY)
    except subprocess.TimeoutExpired:
        run.problems.append(
            f"zombie driver {pid} (attempt {z.attempt}) still runs {WAKE_BY:g}s after it woke"
        )
        nemesis.kill_driver(pid)
        proc.wait()
    from tests.support.drivers import wait_group_gone

    wait_group_gone(pid)
    return (
        f"driver {pid} (attempt {z.attempt}) frozen at {point} of epoch {epoch}; attempt "
        f"{z.by} took over; woken, it ended rc {z.rc}"
    )


def _stopped(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "T"
    except OSError:
        return False
