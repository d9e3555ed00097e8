"""Run one schedule: start the workload's driver, inject each step's fault, bring the job to
its end the way an operator would, then hand the world to the checker.

The operator's moves are fixed, so that what is checked is stoker's, not the runner's: a
driver that ends is started again with the same command (``--restart`` when the job has
FAILED, which a sink server down or a full disk may cause); a pause is followed by a resume;
at the end the rate limit is lifted, and a job with an unbounded source is cancelled once
every input id is committed.

A ``savepoint_restore`` changes the job's id: the job is stopped with a savepoint and a job
``<job>-r<k>`` started from it with changed code (the k-th version of the app, written into
the run's folder). From then on the runner follows the new job (its own state folder, the
same store and sinks); :attr:`Run.jobs` lists every id in order and :attr:`Run.switches`
each switch, which the checker verifies across.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import shutil
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.chaos import lineage, nemesis, operators, protocol
from tests.chaos.checker import Verdict, check, check_zombies
from tests.chaos.operators import Stuck
from tests.chaos.schedule import CLOCK_MAX, LINEAGE_ONLY, Schedule, Step, fmt_step
from tests.support import APPS

if TYPE_CHECKING:
    from tests.chaos.netns import Hosts

APP = APPS / "chaos_app.py"
# Put first on a process's PYTHONPATH, it adds the seconds its offset file holds to
# time.time()/time.time_ns() in that Python process and its Python children (the clock faults).
CLOCKSTEP = Path(__file__).resolve().parents[1] / "support" / "clockstep"
# Where a restored job's changed code goes into the app's text (before the control handler).
CHANGE_AT = '@p.on_control("poke")'
# Seconds without a committed epoch while the job lives: stuck. Two restart cycles on a loaded
# machine and a margin: the watchdog's bound (PROGRESS_TIMEOUT, 60 s), a Spark start (up to 90 s
# measured under load), a first epoch. At 180 s a job restarted by its watchdog under a load
# average of ten was taken for stuck (run E, seed 28).
NO_PROGRESS = 420.0
END_BY = 420.0  # seconds the job gets to end after the last fault
RESOLVE_BY = 120.0  # seconds the managers get to resolve an ended job's sinks (janitor)
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


@dataclass(frozen=True)
class Switch:
    """A stop-with-savepoint of ``old`` at epoch ``cut`` and ``new`` started from it."""

    old: str
    new: str
    cut: int
    savepoint: str


@dataclass
class Run:
    """One schedule's world and history."""

    schedule: Schedule
    base: Path
    pg: nemesis.BouncingPostgres | None
    t0: float = field(default_factory=time.monotonic)
    history: list[Event] = field(default_factory=list)
    injected: dict[str, int] = field(default_factory=dict)
    upgrades: dict[str, int] = field(default_factory=dict)  # ended upgrades by their end
    op: Any = None  # operators.Local or operators.Managed
    paused: bool = False
    files_put: int = 0
    disk: nemesis.SmallDisk | None = None
    sink_dsn: str = ""
    store_url: str = ""
    marker: str = ""
    cluster: nemesis.SparkCluster | None = None
    job: str = ""  # the job the runner follows now (a restore from a savepoint changes it)
    jobs: list[str] = field(default_factory=list)  # every job id of the run, in order
    switches: list[Switch] = field(default_factory=list)
    from_savepoint: str | None = None  # the folder the current job starts from, if any
    problems: list[str] = field(default_factory=list)  # what the checker reports as found
    # Drivers the nemesis sent SIGTERM: one that gets it before Python has installed its
    # handler (just started) ends by the signal's default action, rc -15 (run J, seed 80).
    termed: set[int] = field(default_factory=set)
    # job id -> the checkpoint batches a state repartition took (no stoker epoch has them)
    repartition_batches: dict[str, list[int]] = field(default_factory=dict)
    # (began, ended, kind) of every fault injected, on the run's clock (seconds since t0); the
    # one being injected ends at infinity until it is done
    faults: list[tuple[float, float, str]] = field(default_factory=list)
    zombies: list[Any] = field(default_factory=list)  # protocol.Zombie, each woken
    # Hosts in network namespaces (``--netns``): the driver runs in "mgr", PostgreSQL in
    # "data", the runner in neither (it sees the store whatever the partition).
    hosts: Hosts | None = None
    token: str = ""  # the managers' API token, when they listen off loopback (hosts)

    def __post_init__(self) -> None:
        self.job = self.job or self.schedule.workload.job
        self.jobs = self.jobs or [self.job]

    # the world -------------------------------------------------------------------------------
    @property
    def state(self) -> Path:
        """The current job's state folder (a restored job has one of its own)."""
        k = len(self.switches)
        return self.base / ("state" if k == 0 else f"state-r{k}")

    @property
    def out(self) -> Path:
        return self.base / "out" / "sink"

    @property
    def files_in(self) -> Path:
        return self.base / "in"

    @property
    def app(self) -> Path:
        """The current job's code: the app as it is, or its k-th changed version."""
        k = len(self.switches)
        return self.base / "app" / ("chaos_app.py" if k == 0 else f"chaos_app_r{k}.py")

    def on_driver_host(self, argv: list[str]) -> list[str]:
        """``argv`` as run on the driver's host: in the "mgr" namespace when there are hosts."""
        return argv if self.hosts is None else [*self.hosts.prefix_argv("mgr"), *argv]

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
            # Every fsync of a stoker process, for the power loss (tests/chaos/protocol.py).
            "STOKER_TEST_FSYNC_LEDGER": str(self.base / "fsync-ledger"),
        }
        if self.token:
            env["STOKER_TOKEN"] = self.token  # the CLI's `--server` calls send it
        return env

    # the wall clocks ---------------------------------------------------------------------------
    def clock_file(self, name: str) -> Path:
        return self.base / "clock" / name

    def clock_env(self, name: str) -> dict[str, str]:
        """The environment that gives a process (and its Python children) the wall clock of
        offset file ``name``: the real clock plus the seconds the file holds, 0 to begin with
        (a manager started again keeps its file: the host's clock stays where it was)."""
        f = self.clock_file(name)
        if not f.exists():
            self.set_offset(name, 0.0)
        path = [
            str(CLOCKSTEP),
            *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p],
        ]
        return {"PYTHONPATH": os.pathsep.join(path), "STOKER_TEST_CLOCK_OFFSET_FILE": str(f)}

    def offset(self, name: str) -> float:
        try:
            return float(self.clock_file(name).read_text().strip() or 0)
        except (OSError, ValueError):
            return 0.0

    def set_offset(self, name: str, seconds: float) -> None:
        """Step the clock of file ``name`` to ``seconds`` off the real one, atomically: a
        reader never sees the file half written (an empty file would read as 0, a step)."""
        f = self.clock_file(name)
        f.parent.mkdir(exist_ok=True)
        tmp = f.with_name(f".{f.name}.tmp")
        tmp.write_text(f"{seconds:g}\n")
        os.replace(tmp, f)

    def step_clock(self, name: str, seconds: float) -> str:
        """Step clock ``name`` by ``seconds`` (back the other way if that would put it more
        than CLOCK_MAX off): 'name a -> b'."""
        old = self.offset(name)
        new = old + seconds
        if abs(new) > CLOCK_MAX:
            new = old - seconds
        self.set_offset(name, new)
        return f"{name} {old:+g}s -> {new:+g}s"

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

        jid = self.job
        n = self.read(
            lambda st: sum(e.state == EpochState.COMMITTED for e in st.list_epochs(jid, 100_000))
        )
        return -1 if n is None else int(n)

    def job_state(self) -> str | None:
        jid = self.job
        return self.read(lambda st: str(st.get_job(jid).state))

    def last_line(self) -> str:
        logs = sorted(self.base.glob("driver-*.log"))
        if not logs:
            return ""
        lines = logs[-1].read_text(errors="replace").strip().splitlines()
        return lines[-1] if lines else ""

    def last_log(self) -> str:
        """The newest driver log, whole ('' when there is none)."""
        logs = sorted(self.base.glob("driver-*.log"))
        return logs[-1].read_text(errors="replace") if logs else ""

    def last_error(self) -> str | None:
        jid = self.job
        return self.read(lambda st: st.get_job(jid).last_error)


# faults ------------------------------------------------------------------------------------------
def _control(run: Run, body: dict[str, Any]) -> str | None:
    from stoker.manager.control import submit_control

    def send(st: Any) -> str:
        ev, _ = submit_control(st, run.job, body, sender="chaos")
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


def _stall(run: Run, pid: int, step: Step, what: str) -> str | None:
    """A stall of ``pid`` for ``step.arg`` seconds; scope "in_write": frozen while it holds the
    SQLite store's write lock (schedule.IN_WRITE_KINDS)."""
    if step.scope == "in_write" and run.store_url.startswith("sqlite:///"):
        from stoker.store import open_store

        st = open_store(run.store_url)
        try:
            return nemesis.stall_in_write(pid, step.arg, what, st.write_lock)
        finally:
            st.close()
    return nemesis.stall(pid, step.arg, what)


def inject(run: Run, step: Step, rng: random.Random) -> str | None:
    k = step.kind
    if k in LINEAGE_ONLY:
        return lineage.probe(run, k)
    if k in ("crash_at", "zombie", "power_loss"):
        if not isinstance(run.op, operators.Local):
            return None
        if k == "zombie":
            return protocol.zombie(run, step, rng)
        return protocol.crash_at(run, step) if k == "crash_at" else protocol.power_loss(run, step)
    if k in ("partition", "heal"):
        if run.hosts is None:
            return None
        return run.hosts.heal() if k == "heal" else run.hosts.partition_for(step.scope, step.arg)
    if k in ("clock_step", "clock_skew"):
        return run.op.clock_fault(k, step.arg, step.scope)
    if k in ("leader_kill", "manager_stall"):
        return run.op.manager_fault(k, step.arg)
    if k in ("upgrade", "upgrade_bad"):
        if not isinstance(run.op, operators.Managed) or live_driver(run) is None:
            return None
        return run.op.upgrade(write_upgraded_app(run, bad=k == "upgrade_bad"), k == "upgrade_bad")
    if k in ("standby_kill", "standby_stall"):
        sb = run.op.standby()
        if sb is None:
            return None  # none waits now (warming not started, just taken over)
        if k == "standby_kill":
            return nemesis.kill_driver(sb, what="standby")
        return _stall(run, sb, step, "standby")
    if k in ("executor_kill", "executor_stall", "spark_worker_kill"):
        assert run.cluster is not None
        if live_driver(run) is None:
            return None
        if k == "executor_kill":
            return run.cluster.kill_executor(rng)
        if k == "executor_stall":
            return run.cluster.stall_executor(rng, step.arg)
        return run.cluster.kill_worker(rng, step.arg)
    if k in ("worker_kill", "driver_stall", "jvm_stall", "driver_kill", "driver_term"):
        d = live_driver(run)
        if d is None:
            return None
        if k == "worker_kill":
            return nemesis.kill_worker(d, rng, run.cluster)
        if k == "driver_stall":
            return _stall(run, d, step, "driver")
        if k == "jvm_stall":
            jvm = nemesis.jvm_of(d)
            return None if jvm is None else nemesis.stall(jvm.pid, step.arg, "driver JVM")
        if k == "driver_kill":
            return nemesis.kill_driver(d)
        run.termed.add(d)
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
    if k == "savepoint_restore":
        return savepoint_restore(run)
    if k == "rescale":
        return rescale(run, int(step.arg))
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
    ended = operators.cancel_and_wait(run, END_BY)
    if ended is None:
        return None
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
    if run.job_state() == "FINISHED":
        # The kill came as the job ended: a start of an ended job is refused as ended (exit
        # 5) before any checkpoint is looked at; there is nothing to lose.
        return "the job had finished before the kill"
    decided = run.read(
        lambda st: any(
            str(e.state) in ("DECIDED", "COMMITTED") for e in st.list_epochs(run.job, limit=5)
        )
    )
    if decided is False:
        # Killed before the store decided any epoch (run J, seed 78: epoch 0 pinned, not
        # decided): the checkpoint holds nothing the store relies on, and a start without it
        # is rightly a fresh start, not a refusal. Nothing is removed; the driver comes back.
        return "killed before any epoch was decided: a lost checkpoint would lose nothing"
    before = run.committed()
    aside = run.state / "checkpoint.lost"
    os.rename(run.state / "checkpoint", aside)
    try:
        rc, text = run.op.run_once()
    finally:
        shutil.rmtree(run.state / "checkpoint", ignore_errors=True)
        os.rename(aside, run.state / "checkpoint")
    if rc != 2 or "decided, but its checkpoint folder" not in text:  # the lost checkpoint's
        raise Stuck(f"a start without its checkpoint was not refused (rc {rc}): {text[-500:]}")
    if run.committed() != before:
        raise Stuck("a start without its checkpoint committed epochs")
    return "checkpoint folder lost: start refused (rc 2), nothing written; folder restored"


def savepoint_restore(run: Run) -> str | None:
    """Stop the job with a savepoint (``stoker savepoint JOB --stop``, over REST under the
    managers), then start job ``<job>-r<k>`` from it with changed code: a filter that keeps
    every id and a column of its own (the PostgreSQL table gets it first, as a user's
    migration would). Every id must still be written exactly once across the switch."""
    from stoker.types import ControlStatus

    if live_driver(run) is None:
        return None  # the job has ended
    if run.paused and _control(run, {"kind": "resume"}) is not None:
        run.paused = False  # an operator resumes before stopping: a pause is not carried
    old, k = run.job, len(run.switches) + 1
    folder = run.base / "savepoints" / f"sp-{k}"
    rc, out = run.op.cli("savepoint", old, "--stop", "--dir", str(folder), "--json")
    if rc != 0 and run.job_state() in ("FINISHED", "CANCELED"):
        return f"savepoint --stop refused, the job has ended (rc {rc}): no restore"
    if rc != 0:
        raise Stuck(f"stoker savepoint {old} --stop failed (rc {rc}): {out[-500:]}")
    cid = str(json.loads(out)["control_id"])

    def event() -> Any:
        return run.read(lambda st: st.get_control(old, cid))

    taken = (ControlStatus.COMMITTED, ControlStatus.REJECTED)
    deadline = time.monotonic() + END_BY
    while (ev := event()) is None or ev.status not in taken:
        run.op.ensure()  # a driver that ended before taking it is started again
        if time.monotonic() > deadline:
            raise Stuck(f"the savepoint of {old} was not taken (event {cid}: {ev})")
        time.sleep(0.3)
    if ev.status == ControlStatus.REJECTED:
        return f"savepoint --stop of {old} rejected ({ev.reason}): the job goes on"
    run.op.wait_exit(deadline)
    run.op.reap()
    if run.job_state() != "FINISHED":
        run.problems.append(
            f"stop-with-savepoint {cid} of {old} COMMITTED but the job is {run.job_state()}"
        )
        return f"savepoint --stop of {old}: committed, job {run.job_state()}: no restore"
    cut, path = int(ev.result["epoch"]), str(ev.result["path"])
    new = f"{run.schedule.workload.job}-r{k}"
    run.switches.append(Switch(old, new, cut, path))
    run.job, run.from_savepoint = new, path
    run.jobs.append(new)
    write_changed_app(run, k)
    if run.sink_dsn:
        _add_column(run.sink_dsn)
    started = run.op.restore()
    return f"savepoint --stop of {old} at epoch {cut}; {new} from it, code r{k}: {started}"


def write_changed_app(run: Run, k: int) -> None:
    """The app's k-th changed version, beside the first (``run.app`` names it from now)."""
    text = APP.read_text()
    assert text.count(CHANGE_AT) == 1, f"{APP} has no {CHANGE_AT!r} to put changed code before"
    changed = (
        f"# Restore {k}'s changed code (tests/chaos/runner.py): a filter that keeps every id,\n"
        "# and a column of its own.\n"
        "def _changed(df):\n"
        "    from pyspark.sql import functions as F\n\n"
        f'    return df.where(F.col("id") >= 0).withColumn("v", F.lit("r{k}"))\n\n\n'
        "p.transform(_changed)\n\n\n"
    )
    run.app.write_text(text.replace(CHANGE_AT, changed + CHANGE_AT))


def write_upgraded_app(run: Run, bad: bool) -> Path:
    """A new file for an upgrade (issue 24), beside the app: the current job's code with a
    transform that keeps every id, or (``bad``) one that fails each epoch."""
    n = len(list((run.base / "app").glob("chaos_app_u*.py"))) + 1
    new = run.base / "app" / f"chaos_app_u{n}.py"
    text = run.app.read_text()
    body = (
        '    raise RuntimeError("chaos: the new code fails its epochs")\n'
        if bad
        else '    return df.where(F.col("id") >= 0)\n'
    )
    code = (
        f"# Upgrade {n}'s code (tests/chaos/runner.py).\n"
        "def _upgraded(df, ctx):\n"
        "    from pyspark.sql import functions as F\n\n"
        "    if ctx.epoch < 0:\n"
        "        return df\n"
        f"{body}\n\n"
        "p.transform(_upgraded)\n\n\n"
    )
    assert text.count(CHANGE_AT) == 1, f"{run.app} has no {CHANGE_AT!r} to put new code before"
    new.write_text(text.replace(CHANGE_AT, code + CHANGE_AT))
    return new


def _add_column(dsn: str) -> None:
    """The sink table's migration for the changed code (if the table exists already); a
    lock held by a part left prepared would make it wait: 30 s at most, then it fails."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET lock_timeout = '30s'")
        conn.execute("ALTER TABLE IF EXISTS ids ADD COLUMN IF NOT EXISTS v text")


def rescale(run: Run, partitions: int) -> str | None:
    """What a Flink user calls a rescale: stop the job gracefully and start it again with
    another parallelism (local[2,8] <-> local[3,8]; on a cluster, two executors <-> one).
    A stateful job's state is repartitioned while it is stopped (``stoker state
    repartition``: its maximum parallelism, which Flink cannot change in place)."""
    if live_driver(run) is None:
        return None
    ended = run.op.graceful_stop()
    if ended in (None, "FINISHED"):
        return None if ended is None else "rescale: the job had finished"
    done = [f"stopped gracefully ({ended})"]
    if run.schedule.workload.stateful:
        current = run.read(lambda st: st.get_job(run.job).spec.get("max_parallelism"))
        if current == partitions:
            partitions = 8  # the arg is never 8: back to the default
        rc, out = run.op.repartition(partitions)
        done.append(f"state repartition {current} -> {partitions}: rc {rc} {_said(out)}")
        batch = _batch(out) if rc == 0 else None
        if batch is not None:
            run.repartition_batches.setdefault(run.job, []).append(batch)
        if rc not in (0, 2):  # 2: refused, nothing changed, and said why
            run.problems.append(f"stoker state repartition {run.job} {partitions}: rc {rc}: {out}")
    done.append(run.op.start_rescaled())
    return "rescale: " + "; ".join(done)


def _batch(out: str) -> int | None:
    """The checkpoint batch a repartition's ``--json`` answer names, if any."""
    try:
        batch = json.loads(out).get("batch")
    except (ValueError, AttributeError):
        return None
    return int(batch) if isinstance(batch, int) else None


def _said(out: str) -> str:
    """What a ``--json`` command answered, in short: its JSON's fields, or its last line."""
    try:
        answer = json.loads(out)
    except ValueError:
        return (out.strip().splitlines() or ["(no output)"])[-1][:300]
    keys = ("from", "to", "batch", "skipped", "seconds")
    return ", ".join(f"{k} {answer[k]}" for k in keys if k in answer)


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

            if run.read(lambda st: cancel(st, run.job)) is not None:
                run.log("every input id committed: cancel")
                run.op.wait_exit(deadline)
                continue
        n = run.committed()
        if n > last:
            last, since = n, time.monotonic()
        if time.monotonic() > deadline or time.monotonic() - since > NO_PROGRESS:
            raise Stuck(f"the job did not end (state {run.job_state()}, {n} epochs committed)")
        time.sleep(0.3)
    if w.managed:
        resolved(run, time.monotonic() + RESOLVE_BY)


def resolved(run: Run, deadline: float) -> None:
    """Under the managers, an ended job's sinks are resolved by its driver at its end or, when
    no driver ended it (killed just before a cancel), by the leader's janitor a moment later
    (stoker/manager/janitor.py): the store's ``resolved_at`` says when. The managers stop
    only after it (before, a check could find the staged part the cleanup was about to roll
    back: finding 7); a job never resolved is stuck."""
    jid = run.job
    while run.read(lambda st: st.get_job(jid).resolved_at) is None:
        if time.monotonic() > deadline:
            raise Stuck(f"job {jid} ended ({run.job_state()}) but its sinks were never resolved")
        time.sleep(0.3)


def _sink_ids(run: Run) -> list[int]:
    from tests.support.sinks import file_sink_ids

    try:
        return list(file_sink_ids(run.out))
    except Exception as e:
        # A committed epoch's file that cannot be read (empty, torn: a power loss after an
        # unsynced prepare) never heals: waiting for its ids would only end as stuck.
        raise Stuck(f"files sink: a committed file cannot be read: {type(e).__name__}: {e}") from e


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
    upgrades: dict[str, int] = field(default_factory=dict)  # how the upgrades ended, counted

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
            **({"upgrades": self.upgrades} if self.upgrades else {}),
        }


def run_schedule(
    schedule: Schedule,
    base: Path,
    pg: nemesis.BouncingPostgres | None,
    keep: bool = False,
    hosts: Hosts | None = None,
) -> Result:
    """Run ``schedule`` in the folder ``base`` (made here) against the server ``pg``.

    With ``hosts`` (tests/chaos/netns.py; ``pg`` then a NetnsPostgres in its "data" host)
    the driver runs in the "mgr" host (under managers: the first manager there, the second
    in "mgr2", each with the drivers it starts) and the partitions cut "mgr" from "data"."""
    w = schedule.workload
    if hosts is not None and w.cluster:
        raise ValueError("hosts in namespaces: no cluster workloads yet")
    base.mkdir(parents=True)
    run = Run(schedule, base, pg, marker=f"{w.job}-{os.getpid()}-{time.time_ns()}", hosts=hosts)
    if hosts is not None and w.managed:
        import secrets

        run.token = secrets.token_hex(16)
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
        if w.cluster:
            run.cluster = nemesis.SparkCluster(base / "cluster")
            run.cluster.start()
            run.log(f"standalone cluster up: {run.cluster.master_url}, workers 127.0.0.2-3")
        run.op = (operators.Managed if w.managed else operators.Local)(run)
        run.op.start()
        for step in schedule.steps:
            wait_epochs(run, max(run.committed(), 0) + step.after_epochs)
            if run.job_state() in ("FINISHED", "CANCELED"):
                run.log(f"{fmt_step(step)}: skipped, the job has ended")
                continue
            time.sleep(step.delay)
            began = time.monotonic() - run.t0
            run.faults.append((began, math.inf, step.kind))
            done = inject(run, step, rng)
            run.faults.pop()
            if done is None:
                run.log(f"{fmt_step(step)}: nothing to do it to")
                continue
            # A partition goes on after its step: it ends when it heals (at the latest).
            lasts = step.arg if step.kind == "partition" else 0.0
            run.faults.append((began, time.monotonic() - run.t0 + lasts, step.kind))
            run.injected[step.kind] = run.injected.get(step.kind, 0) + 1
            run.log(f"{fmt_step(step)}: {done}")
        finish(run)
        if w.upgrades:
            # Every upgrade the managers took ends with the job (CONFIRMED, ROLLED_BACK or
            # REFUSED): none is left PENDING or SWAPPED, none waits for ever.
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                live = run.read(lambda st: [u.upgrade_id for u in st.live_upgrades()])
                if not live:
                    break
                time.sleep(0.5)
            else:
                run.problems.append(f"upgrades left live after the job ended: {live}")
            ended = run.read(lambda st: [u for j in run.jobs for u in st.list_upgrades(j)])
            for u in ended:
                run.upgrades[str(u.state)] = run.upgrades.get(str(u.state), 0) + 1
            shown = [f"{u.upgrade_id} {u.state}: {u.detail}" for u in ended]
            run.log(f"upgrades: {'; '.join(shown) or 'none taken'}")
        if w.standby or w.upgrades:
            # The leader stops an ended job's standby by itself: none may outlive the job.
            deadline = time.monotonic() + 60
            while run.op.drivers() and time.monotonic() < deadline:
                time.sleep(0.5)
            if run.op.drivers():
                run.problems.append(
                    f"drivers of the ended job left under the managers: {run.op.drivers()}"
                )
        # The job has ended: what is left of it now (managers included) must go with a stop.
        run.op.stop()
        verdict = check(run)
        if run.cluster is not None:
            run.cluster.stop()
            left = run.cluster.left()
            if left:
                verdict.add(f"cluster: processes left after its stop {left}")
    except Stuck as e:
        error = f"stuck: {e}"
        # What a zombie did is in the store already: said even when the run could not end.
        verdict = Verdict()
        check_zombies(run, verdict)
    except Exception as e:  # the harness's own failure is a failure too, with its history
        error = f"{type(e).__name__}: {e}"
    finally:
        if hosts is not None:
            with contextlib.suppress(Exception):
                hosts.heal()  # a partition still on ends with its schedule
        for z in run.zombies:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(z.pid, signal.SIGKILL)
        if run.op is not None:
            run.op.stop()
        if run.cluster is not None:
            with contextlib.suppress(Exception):
                run.cluster.stop()
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
        run.upgrades,
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
