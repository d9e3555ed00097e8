"""Run one schedule: start the workload's driver, inject each step's fault, bring the job to
its end the way an operator would, then hand the world to the checker.

The operator's moves are fixed, so that what is checked is stoker's, not the runner's: a
driver that ends is started again with the same command (``--restart`` when the job has
FAILED, which a sink server down or a full disk may cause); a pause is followed by a resume;
at the end the rate limit is lifted, and a job with an unbounded source is cancelled once
every input id is committed.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.chaos import nemesis, operators
from tests.chaos.checker import Verdict, check
from tests.chaos.operators import Stuck
from tests.chaos.schedule import Schedule, Step, fmt_step
from tests.support import APPS

APP = APPS / "chaos_app.py"
NO_PROGRESS = 180.0  # seconds without a committed epoch while the driver lives: stuck
END_BY = 420.0  # seconds the job gets to end after the last fault
# Seconds without an epoch after which the runner looks whether the job has anything left to
# read (and then at most this often).
DRAINED_AFTER = 15.0
FILE_ID_BASE = 1_000_000


@dataclass
class Event:
    at: float  # seconds since the schedule began
    what: str

    def __str__(self) -> str:
        return f"{self.at:7.1f}s {self.what}"


@dataclass
class Run:
    """One schedule's world and history."""

    schedule: Schedule
    base: Path
    pg: nemesis.BouncingPostgres | None
    t0: float = field(default_factory=time.monotonic)
    history: list[Event] = field(default_factory=list)
    injected: dict[str, int] = field(default_factory=dict)
    op: Any = None  # operators.Local or operators.Managed
    paused: bool = False
    files_put: int = 0
    disk: nemesis.SmallDisk | None = None
    sink_dsn: str = ""
    store_url: str = ""
    marker: str = ""

    # the world -------------------------------------------------------------------------------
    @property
    def state(self) -> Path:
        return self.base / "state"

    @property
    def out(self) -> Path:
        return self.base / "out" / "sink"

    @property
    def files_in(self) -> Path:
        return self.base / "in"

    @property
    def app(self) -> Path:
        return self.base / "app" / "chaos_app.py"

    def log(self, what: str) -> None:
        e = Event(time.monotonic() - self.t0, what)
        self.history.append(e)
        if os.environ.get("CHAOS_VERBOSE"):
            print(f"  {e}", flush=True)

    def expected_ids(self) -> set[int]:
        return self._ids(self.schedule.workload.files)

    def offered_ids(self) -> set[int]:
        """The ids the job's input holds so far: the generator's and the files put."""
        return self._ids(self.files_put)

    def _ids(self, files: int) -> set[int]:
        w = self.schedule.workload
        ids = set(range(w.gen))
        for n in range(files):
            ids |= set(range(FILE_ID_BASE + n * w.per_file, FILE_ID_BASE + (n + 1) * w.per_file))
        return ids

    def env(self) -> dict[str, str]:
        w = self.schedule.workload
        env = {
            "CHAOS_JOB": w.job,
            "CHAOS_GEN": str(w.gen),
            "CHAOS_PER_EPOCH": str(w.per_epoch),
            "CHAOS_STATEFUL": "1" if w.stateful else "",
            "CHAOS_OUT": str(self.out),
            "CHAOS_FILES_IN": str(self.files_in) if w.files else "",
            "CHAOS_PG_DSN": self.sink_dsn,
            "CHAOS_PG_TABLE": "ids",
            "STOKER_FAULT": "",
            "STOKER_STORE": self.store_url,
            "STOKER_CHAOS_RUN": self.marker,  # every process of the run carries it
        }
        return env

    # the store -------------------------------------------------------------------------------
    def read(self, fn: Callable[[Any], Any]) -> Any:
        """``fn(store)`` on a fresh connection; None when the store cannot be read now."""
        from stoker.store import open_store

        try:
            st = open_store(self.store_url)
        except Exception:
            return None
        try:
            return fn(st)
        except Exception:
            return None
        finally:
            with contextlib.suppress(Exception):
                st.close()

    def committed(self) -> int:
        from stoker.types import EpochState

        jid = self.schedule.workload.job
        n = self.read(
            lambda st: sum(e.state == EpochState.COMMITTED for e in st.list_epochs(jid, 100_000))
        )
        return -1 if n is None else int(n)

    def job_state(self) -> str | None:
        jid = self.schedule.workload.job
        return self.read(lambda st: str(st.get_job(jid).state))

    def last_line(self) -> str:
        logs = sorted(self.base.glob("driver-*.log"))
        if not logs:
            return ""
        lines = logs[-1].read_text(errors="replace").strip().splitlines()
        return lines[-1] if lines else ""

    def last_error(self) -> str | None:
        jid = self.schedule.workload.job
        return self.read(lambda st: st.get_job(jid).last_error)


# faults ------------------------------------------------------------------------------------------
def _control(run: Run, body: dict[str, Any]) -> str | None:
    from stoker.manager.control import submit_control

    def send(st: Any) -> str:
        ev, _ = submit_control(st, run.schedule.workload.job, body, sender="chaos")
        return f"control {body} -> version {ev.version}"

    return run.read(send)


def put_file(run: Run) -> str | None:
    w = run.schedule.workload
    if run.files_put >= w.files:
        return None
    n = run.files_put
    ids = range(FILE_ID_BASE + n * w.per_file, FILE_ID_BASE + (n + 1) * w.per_file)
    tmp = run.files_in / f".part-{n:04d}.tmp"
    tmp.write_text("".join(json.dumps({"id": i}) + "\n" for i in ids))
    os.rename(tmp, run.files_in / f"part-{n:04d}.json")
    run.files_put += 1
    return f"file {n} arrived ({w.per_file} ids)"


def inject(run: Run, step: Step, rng: random.Random) -> str | None:
    k = step.kind
    if k in ("leader_kill", "manager_stall"):
        return run.op.manager_fault(k, step.arg)
    if k in ("worker_kill", "driver_stall", "jvm_stall", "driver_kill", "driver_term"):
        d = live_driver(run)
        if d is None:
            return None
        if k == "worker_kill":
            return nemesis.kill_worker(d, rng)
        if k == "driver_stall":
            return nemesis.stall(d, step.arg, "driver")
        if k == "jvm_stall":
            jvm = nemesis.jvm_of(d)
            return None if jvm is None else nemesis.stall(jvm.pid, step.arg, "driver JVM")
        if k == "driver_kill":
            return nemesis.kill_driver(d)
        return nemesis.term_driver(d)
    if k == "pg_down":
        assert run.pg is not None
        return nemesis.pg_down(run.pg, step.arg)
    if k == "disk_full":
        assert run.disk is not None
        return run.disk.fill(step.arg)
    if k == "files_arrive":
        return put_file(run)
    if run.job_state() is None:
        return None  # not registered yet: no control
    if k == "cancel_resubmit":
        return cancel_and_resubmit(run)
    if k == "checkpoint_lost":
        return lose_checkpoint(run)
    if k == "pause":
        done = _control(run, {"kind": "pause"})
        if done is None:
            return None
        time.sleep(step.arg)
        resumed = _control(run, {"kind": "resume"})
        if resumed is None:
            run.paused = True  # the resume is sent again at the end
        return f"{done}; {step.arg:g}s later {resumed or 'resume not sent (store down)'}"
    body: dict[str, Any] = {
        "config": {"kind": "config", "set": {"chaos": int(step.arg)}},
        "rate_limit": {"kind": "rate_limit", "max_rows_per_epoch": int(step.arg)},
        "trigger": {"kind": "trigger", "interval": f"{int(step.arg)}ms"},
        "log_level": {"kind": "log_level", "level": rng.choice(["INFO", "WARN", "DEBUG"])},
        "checkpoint": {"kind": "checkpoint"},
        "event": {"kind": "event", "name": "poke", "payload": {"n": step.index}},
        "savepoint": {"kind": "savepoint"},
    }[k]
    return _control(run, body)


def live_driver(run: Run, timeout: float = 120.0) -> int | None:
    """The driver's pid, waiting (and starting it again) while it is between two lives: a
    fault meant for a driver is not lost because the one before it killed the driver."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not run.op.ensure():
            return None  # the job has ended
        d = run.op.driver()
        if d is not None:
            return int(d)
        time.sleep(0.2)
    return None


def cancel_and_resubmit(run: Run) -> str | None:
    """Cancel the job (its epoch in flight commits), wait until it is CANCELED and its driver
    gone, then submit it again from its checkpoint: no id may be lost or written twice."""
    from stoker.manager.jobs import cancel

    if run.read(lambda st: cancel(st, run.schedule.workload.job)) is None:
        return None
    deadline = time.monotonic() + END_BY
    while run.job_state() not in ("CANCELED", "FINISHED", "FAILED"):
        if time.monotonic() > deadline:
            raise Stuck(f"cancel did not end the job (state {run.job_state()})")
        time.sleep(0.3)
    run.op.wait_exit(deadline)
    ended = run.job_state()
    if ended == "FINISHED":
        return "cancel: the job had finished"
    return f"cancel: job {ended}; {run.op.resubmit()}"


def lose_checkpoint(run: Run) -> str | None:
    """The driver dies and its checkpoint folder is gone when it comes back (a failover to a
    host without the shared disk): the start must refuse, naming the store's epochs and the
    ways out, and change nothing. Then the folder comes back from the operator's backup."""
    d = run.op.driver()
    if d is None or not (run.state / "checkpoint").exists():
        return None
    nemesis.kill_driver(d)
    run.op.wait_exit(time.monotonic() + 60)
    run.op.reap()
    before = run.committed()
    aside = run.state / "checkpoint.lost"
    os.rename(run.state / "checkpoint", aside)
    try:
        rc, text = run.op.run_once()
    finally:
        shutil.rmtree(run.state / "checkpoint", ignore_errors=True)
        os.rename(aside, run.state / "checkpoint")
    if rc != 2 or "checkpoint" not in text:
        raise Stuck(f"a start without its checkpoint was not refused (rc {rc}): {text[-500:]}")
    if run.committed() != before:
        raise Stuck("a start without its checkpoint committed epochs")
    return "checkpoint folder lost: start refused (rc 2), nothing written; folder restored"


# the schedule ------------------------------------------------------------------------------------
def wait_epochs(run: Run, target: int) -> None:
    """Until ``target`` epochs are committed (or the job ended), restarting ended drivers.

    A job with an unbounded source whose input is all written (the generator drained, every
    file put so far committed) runs no epoch until more input comes: it is idle, not stuck
    (seed 7's "stuck" job was this: it waited for files the runner had not put yet). Then
    the next file arrives, as the workload's ``files_arrive`` would put it; with none left
    the step does not wait for epochs that cannot come."""
    last, since = run.committed(), time.monotonic()
    looked = since
    while True:
        if not run.op.ensure():
            return
        n = run.committed()
        if n >= target:
            return
        if n > last:
            last, since = n, time.monotonic()
        now = time.monotonic()
        if (
            not run.schedule.workload.bounded
            and min(now - since, now - looked) > DRAINED_AFTER
            and not run.paused
        ):
            looked = now
            if set(_sink_ids(run)) >= run.offered_ids():
                arrived = put_file(run)
                if arrived is None:
                    run.log(f"input drained at {n} epochs, no file left: the step goes on")
                    return
                run.log(f"input drained at {n} epochs: {arrived}")
                since = time.monotonic()
        if time.monotonic() - since > NO_PROGRESS:
            raise Stuck(
                f"no epoch committed for {NO_PROGRESS:g}s (at {last}, waiting for {target})"
            )
        time.sleep(0.2)


def finish(run: Run) -> None:
    """Bring the job to its end as an operator would, within END_BY seconds."""
    w = run.schedule.workload
    while run.files_put < w.files:
        put_file(run)
    deadline = time.monotonic() + END_BY
    lifted = False
    want = run.expected_ids()
    last, since = run.committed(), time.monotonic()
    while run.op.ensure():
        if not lifted and run.job_state() is not None:
            lifted = bool(
                _control(run, {"kind": "rate_limit", "max_rows_per_epoch": None})
                and (not run.paused or _control(run, {"kind": "resume"}))
            )
            run.paused = run.paused and not lifted
        if not w.bounded and lifted and set(_sink_ids(run)) >= want:
            from stoker.manager.jobs import cancel

            if run.read(lambda st: cancel(st, w.job)) is not None:
                run.log("every input id committed: cancel")
                run.op.wait_exit(deadline)
                continue
        n = run.committed()
        if n > last:
            last, since = n, time.monotonic()
        if time.monotonic() > deadline or time.monotonic() - since > NO_PROGRESS:
            raise Stuck(f"the job did not end (state {run.job_state()}, {n} epochs committed)")
        time.sleep(0.3)


def _sink_ids(run: Run) -> list[int]:
    from tests.support.sinks import file_sink_ids

    return list(file_sink_ids(run.out))


@dataclass
class Result:
    schedule: Schedule
    verdict: Verdict | None
    error: str | None
    history: list[Event]
    injected: dict[str, int]
    seconds: float
    starts: int
    stalls: int = 0  # attempts the progress watchdog failed (stoker kept its promise)

    @property
    def ok(self) -> bool:
        return self.error is None and self.verdict is not None and self.verdict.ok

    def faults(self) -> int:
        return sum(self.injected.values())

    def report(self) -> str:
        head = f"seed {self.schedule.seed}: {'ok' if self.ok else 'FAILED'}"
        lines = [
            f"{head} ({self.faults()} faults injected, {self.starts} driver starts, "
            f"{self.seconds:.0f}s"
            + (f", {self.stalls} stalled attempts failed by the watchdog" if self.stalls else "")
            + ")"
        ]
        if not self.ok:
            lines.append(self.schedule.describe())
            lines += [f"  {e}" for e in self.history]
            if self.error:
                lines.append(f"  error: {self.error}")
            if self.verdict is not None:
                lines += [f"  violated: {v}" for v in self.verdict.violations]
            lines.append(f"  replay: python -m tests.chaos --seed {self.schedule.seed}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "seed": self.schedule.seed,
            "ok": self.ok,
            "faults": self.faults(),
            "injected": self.injected,
            "starts": self.starts,
            "stalls": self.stalls,
            "seconds": round(self.seconds, 1),
            "error": self.error,
            "violations": [] if self.verdict is None else self.verdict.violations,
            "steps": len(self.schedule.steps),
            "workload": self.schedule.to_json()["workload"],
        }


def run_schedule(
    schedule: Schedule, base: Path, pg: nemesis.BouncingPostgres | None, keep: bool = False
) -> Result:
    """Run ``schedule`` in the folder ``base`` (made here) against the server ``pg``."""
    w = schedule.workload
    base.mkdir(parents=True)
    run = Run(schedule, base, pg, marker=f"{w.job}-{os.getpid()}-{time.time_ns()}")
    rng = random.Random(schedule.seed * 7919 + 1)
    error: str | None = None
    verdict: Verdict | None = None
    dbs: list[str] = []
    try:
        run.files_in.mkdir()
        (base / "out").mkdir()
        run.app.parent.mkdir()
        shutil.copy(APP, run.app)
        if w.disk:
            run.disk = nemesis.SmallDisk(base / "out")
        if w.pg_sink or w.pg_store:
            assert pg is not None, "a PostgreSQL workload needs the server"
            for name in (f"{w.job}_sink", f"{w.job}_store"):
                pg.drop_database(name)
            run.sink_dsn = pg.create_database(f"{w.job}_sink") if w.pg_sink else ""
            dbs.append(f"{w.job}_sink")
            if w.pg_store:
                run.store_url = pg.create_database(f"{w.job}_store")
                dbs.append(f"{w.job}_store")
        if not run.store_url:
            run.store_url = f"sqlite:///{run.state / 'store.db'}"
        run.op = (operators.Managed if w.managed else operators.Local)(run)
        run.op.start()
        for step in schedule.steps:
            wait_epochs(run, max(run.committed(), 0) + step.after_epochs)
            if run.job_state() in ("FINISHED", "CANCELED"):
                run.log(f"{fmt_step(step)}: skipped, the job has ended")
                continue
            time.sleep(step.delay)
            done = inject(run, step, rng)
            if done is None:
                run.log(f"{fmt_step(step)}: nothing to do it to")
                continue
            run.injected[step.kind] = run.injected.get(step.kind, 0) + 1
            run.log(f"{fmt_step(step)}: {done}")
        finish(run)
        # The job has ended: what is left of it now (managers included) must go with a stop.
        run.op.stop()
        verdict = check(run)
    except Stuck as e:
        error = f"stuck: {e}"
    except Exception as e:  # the harness's own failure is a failure too, with its history
        error = f"{type(e).__name__}: {e}"
    finally:
        if run.op is not None:
            run.op.stop()
        if run.disk is not None:
            run.disk.close()
        n_stalls = stalls(base)
        if pg is not None and error is None and not keep:
            for name in dbs:
                with contextlib.suppress(Exception):
                    pg.drop_database(name)
        if error is None and verdict is not None and verdict.ok and not keep:
            shutil.rmtree(base, ignore_errors=True)
    return Result(
        schedule,
        verdict,
        error,
        run.history,
        run.injected,
        time.monotonic() - run.t0,
        0 if run.op is None else run.op.starts,
        n_stalls,
    )


def stalls(base: Path) -> int:
    """How often a driver of the run said its progress watchdog failed its attempt."""
    n = 0
    for log in base.rglob("*.log"):
        with contextlib.suppress(OSError):
            n += sum(
                "stoker.progress_timeout)" in line and "failing the attempt" in line
                for line in log.read_text(errors="replace").splitlines()
            )
    return n
