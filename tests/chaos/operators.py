"""Who runs the job in a schedule, and what an operator does when something of it ends.

:class:`Local` is ``stoker run`` in a terminal: a driver that ends is started again with the
same command (``--restart`` when the job has FAILED, which a sink server down or a full disk
may cause). :class:`Managed` is a pair of job managers (``stoker server``) on one store, the
job submitted over REST with a restart strategy: the managers start and restart the drivers,
and a manager that ends is started again, as systemd would.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.chaos.checker import processes_of
from tests.chaos.nemesis import term_driver
from tests.chaos.schedule import CLOCK_MAX
from tests.support.core import REPO, stoker_cmd

if TYPE_CHECKING:
    from tests.chaos.runner import Run

# Two cores, a task may fail 8 times: task retries are real. A rescale switches between these
# (the job's parallelism, a Flink user would say); on a cluster between all its cores (two
# one-core executors) and one.
MASTERS = ("local[2,8]", "local[3,8]")
CLUSTER_CORES = (None, "1")
# The hosts of the two managers when the run has hosts (tests/chaos/netns.py): a partition
# cuts the first one (and its drivers) from PostgreSQL, the second keeps it.
MANAGER_HOSTS = ("mgr", "mgr2")
GRACEFUL_STOP = 300.0  # seconds a graceful stop (its epoch in flight commits) may take
MAX_STARTS = 40  # more driver (or manager) starts than this in one schedule: a restart loop
# The drivers' progress watchdog (stoker.progress_timeout): well inside the runner's 180 s
# without an epoch, so that a query that stalls is failed and restarted by stoker (the report
# counts how often) before the runner calls the schedule stuck.
PROGRESS_TIMEOUT = "60s"


# What a driver may exit with under the nemesis: done, refused (a lost checkpoint), the job
# failed (a task failed more often than local[2,8] retries: the worker kills hit one task), a
# signal's graceful stop, a sink or source failing (a server down, a full disk), a SIGKILL. 1 is
# "an error stoker did not expect": always a finding.
EXPECTED_EXITS = {0, 2, 8, 13, 16, -9}
# The exits that say something failed or was refused, and the faults that may explain each:
# one of them must have been injected while the driver lived (or up to EXPLAIN_SLACK seconds
# before it started: a server down as it started, a disk full before).
_KILLS = {"worker_kill", "executor_kill", "executor_stall", "spark_worker_kill", "crash_at"}
_STALLS = {"driver_stall", "jvm_stall", "zombie", "power_loss"}
# A partition cuts the driver off PostgreSQL as a crash of the server does (issue 39 item 8).
_SERVER_LOST = {"pg_down", "partition"}
EXPLAINED_BY: dict[int, set[str]] = {
    8: _KILLS | _STALLS | _SERVER_LOST | {"disk_full", "upgrade_bad", "clock_step", "clock_skew"},
    16: _SERVER_LOST | {"disk_full"},
    2: {"checkpoint_lost"},
}
EXPLAIN_SLACK = 60.0
UNEXPLAINED_STOP = 3  # driver exits no fault explains: the schedule stops (it has failed)
# With the store on PostgreSQL, whose server the nemesis crashes (pg_down) or cuts off: the store
# unavailable (StoreError), the attempt given up; the same command starts it again (run E,
# seed 35: three such exits, every id once).
STORE_DOWN_EXIT = 7


def cancel_and_wait(run: Run, seconds: float) -> str | None:
    """Cancel the job through its store (the epoch in flight commits), then wait until it has
    ended and its driver exited: the job's end state (None: nothing to cancel)."""
    from stoker.manager.jobs import cancel

    if run.read(lambda st: cancel(st, run.job)) is None:
        return None
    deadline = time.monotonic() + seconds
    while run.job_state() not in ("CANCELED", "FINISHED", "FAILED"):
        if time.monotonic() > deadline:
            raise Stuck(f"cancel did not end the job (state {run.job_state()})")
        # A local run's driver killed just before (seed 172: SIGKILLed 2 s earlier) carries
        # out no cancel: the same command again does, as an operator would run it. (Under
        # managers the leader carries it out.)
        if isinstance(run.op, Local):
            run.op.ensure()
        time.sleep(0.3)
    run.op.wait_exit(deadline)
    return run.job_state()


class Stuck(Exception):
    """The job made no progress, or its drivers kept ending: a failure of the schedule."""


def cli(run: Run, *args: str, timeout: float = 300.0) -> tuple[int, str]:
    """The stoker CLI once, in the run's environment: (exit code, what it printed)."""
    try:
        done = subprocess.run(
            stoker_cmd(*args),
            env={**os.environ, **run.env()},
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=str(REPO),
        )
    except subprocess.TimeoutExpired as e:
        said = [
            x.decode(errors="replace") if isinstance(x, bytes) else x or ""
            for x in (e.stdout, e.stderr)
        ]
        return -1, f"timed out after {timeout:g}s: {''.join(said)}"
    return done.returncode, done.stdout + done.stderr


class Local:
    def __init__(self, run: Run) -> None:
        self.run = run
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.exits: list[int] = []
        self.unexpected: list[str] = []
        self.level = 0  # which of MASTERS (CLUSTER_CORES on a cluster): a rescale moves it
        self.clock = ""  # the offset file of the driver started last
        # The next start's fault plan and settings (a protocol fault arms one driver's life).
        self.armed_env: dict[str, str] = {}
        self.armed_args: tuple[str, ...] = ()
        self.born = 0.0  # when the driver running now was started (the runner's clock)

    def arm(self, env: dict[str, str], args: tuple[str, ...] = ()) -> None:
        """The next driver started gets this environment and these arguments (once)."""
        self.armed_env, self.armed_args = dict(env), tuple(args)

    def detach(self) -> subprocess.Popen[bytes]:
        """Let go of the driver running now (a zombie the nemesis keeps): the runner starts
        the next one as if it had ended."""
        assert self.proc is not None
        p, self.proc = self.proc, None
        return p

    def settings(self) -> dict[str, str]:
        """The ``-D`` settings of the driver now: its state folder and where Spark runs."""
        run = self.run
        out = {"stoker.state_dir": str(run.state), "stoker.progress_timeout": PROGRESS_TIMEOUT}
        if run.cluster is None:
            return {**out, "stoker.master": MASTERS[self.level]}
        out.update(run.cluster.driver_conf(run.marker))
        cores = CLUSTER_CORES[self.level]
        return {**out, "spark.cores.max": cores} if cores else out

    def start(self) -> None:
        run = self.run
        if self.starts >= MAX_STARTS:
            raise Stuck(f"driver started {self.starts} times: a restart loop")
        state = run.job_state()
        args = [a for k, v in self.settings().items() for a in ("-D", f"{k}={v}")]
        args += self.armed_args
        armed, self.armed_env, self.armed_args = self.armed_env, {}, ()
        if run.job != run.schedule.workload.job:
            args += ["--job-id", run.job]
        if run.from_savepoint:
            # The same command each time: a state folder restored from this savepoint resumes.
            args += ["--from-savepoint", run.from_savepoint]
        if state in ("FAILED", "CANCELED"):
            args.append("--restart")  # a resubmission, or what an operator does after a failure
        log = run.base / f"driver-{self.starts + 1:02d}.log"
        # Each `stoker run` a wall clock of its own (a restart on another host), at 0.
        self.clock = f"driver-{self.starts + 1:02d}"
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                # In the driver's host when the run has hosts (nsenter execs: the same pid)
                run.on_driver_host(stoker_cmd("run", str(run.app), *args, "--quiet")),
                env={**os.environ, **run.env(), **run.clock_env(self.clock), **armed},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=str(REPO),
            )
        self.starts += 1
        self.born = time.monotonic() - run.t0
        more = f", armed {armed['STOKER_FAULT']}" if armed.get("STOKER_FAULT") else ""
        run.log(f"driver {self.starts} started (pid {self.proc.pid}, job {state or 'new'}{more})")

    def driver(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def run_once(self) -> tuple[int, str]:
        """The same command once more, to its end: (exit code, what it printed)."""
        self.start()
        assert self.proc is not None
        try:
            self.proc.wait(timeout=300)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        rc = self.proc.returncode
        self.reap()
        log = sorted(self.run.base.glob("driver-*.log"))[-1]
        return rc, log.read_text(errors="replace")

    def reap(self) -> int | None:
        return self._reap()

    def _reap(self) -> int | None:
        p = self.proc
        if p is None or p.poll() is None:
            return None
        from tests.support.drivers import wait_group_gone

        wait_group_gone(p.pid)
        self.exits.append(p.returncode)
        store_down = p.returncode == STORE_DOWN_EXIT and self.run.schedule.workload.pg_store
        termed_early = p.returncode == -signal.SIGTERM and p.pid in self.run.termed
        # Started for a cancel whose driver was gone: it ends the job CANCELED and is refused
        # as the start of an ended job (exit 5; runtime/attempt.py, seed 172).
        carried_cancel = p.returncode == 5 and self.run.job_state() == "CANCELED"
        expected = p.returncode in EXPECTED_EXITS or store_down or termed_early or carried_cancel
        if not expected:
            self.unexpected.append(f"rc {p.returncode}: {self.run.last_line()}")
        elif p.returncode in EXPLAINED_BY:
            # The code says something failed or was refused: a fault of the driver's life
            # (or one a little before it began) must say what (issue 40: an exit 16 with no
            # disk or server lost is a failure).
            why = EXPLAINED_BY[p.returncode]
            since = self.born - EXPLAIN_SLACK
            now = time.monotonic() - self.run.t0
            faulted = any(
                k in why and end >= since and begin <= now for begin, end, k in self.run.faults
            )
            # The progress watchdog failing a stalled attempt (a loaded machine) fails the job
            # when it keeps happening: stoker's own word, in the driver's log.
            watchdog = p.returncode == 8 and "stoker.progress_timeout)" in self.run.last_log()
            if not (faulted or watchdog):
                self.unexpected.append(
                    f"rc {p.returncode} with no fault that explains it ({sorted(why)}) in the "
                    f"driver's life ({self.born:.0f}s-{now:.0f}s): {self.run.last_line()}"
                )
        self.proc = None
        self.run.log(f"driver ended rc {p.returncode}, job {self.run.job_state()}")
        return p.returncode

    def ensure(self) -> bool:
        """Start the driver again if it ended and the job has not; False once the job ended
        and its driver exited."""
        rc = self._reap()
        if len(self.unexpected) >= UNEXPLAINED_STOP:
            # Every further start would end the same way (a sink's part lost, say): stop here
            # rather than after MAX_STARTS starts; the report names the exits.
            raise Stuck(f"{len(self.unexpected)} driver exits no fault explains: {self.unexpected}")
        if self.proc is not None:
            return True
        if self.run.job_state() in ("FINISHED", "CANCELED"):
            return False
        if rc == 2:
            raise Stuck(f"the driver refused to start (bad input, rc 2): {self.run.last_line()}")
        self.start()
        return True

    def wait_exit(self, deadline: float) -> None:
        while self.proc is not None and self.proc.poll() is None:
            if time.monotonic() > deadline:
                raise Stuck("the driver did not exit after a cancel or stop")
            time.sleep(0.2)

    def cli(self, *args: str) -> tuple[int, str]:
        return cli(self.run, *args, "--store", self.run.store_url)

    def restore(self) -> str:
        """The new job's first start, from the savepoint (``run`` names both)."""
        self.start()
        return f"stoker run {self.run.app.name} --job-id {self.run.job} --from-savepoint"

    def graceful_stop(self) -> str | None:
        """SIGTERM to the driver, as ``systemctl stop`` or Ctrl-C: its epoch in flight
        commits and the job is left SUSPENDED (exit 13). The job's state once it exited."""
        d = self.driver()
        if d is None or term_driver(d) is None:
            return None
        self.wait_exit(time.monotonic() + GRACEFUL_STOP)
        self._reap()
        return self.run.job_state()

    def repartition(self, partitions: int) -> tuple[int, str]:
        run = self.run
        return cli(
            run,
            "state",
            "repartition",
            run.job,
            str(partitions),
            "--store",
            run.store_url,
            "--state-dir",
            str(run.state),
            "--json",
            timeout=900.0,
        )

    def start_rescaled(self) -> str:
        """The same command with the other parallelism."""
        self.level = 1 - self.level
        self.start()
        if self.run.cluster is None:
            return f"started again on {MASTERS[self.level]}"
        return f"started again with spark.cores.max={CLUSTER_CORES[self.level] or 'all (2)'}"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def manager_fault(self, kind: str, seconds: float) -> str | None:
        return None

    def clock_fault(self, kind: str, seconds: float, scope: str) -> str | None:
        """A step of the live driver's wall clock (its Python processes: the driver, its
        zygote, Spark's Python workers); there is no second clock to skew against."""
        from tests.chaos.runner import live_driver

        if kind != "clock_step" or live_driver(self.run) is None:
            return None
        return f"wall clock stepped {seconds:+g}s: {self.run.step_clock(self.clock, seconds)}"

    def resubmit(self) -> str:
        self._reap()
        self.start()
        return "the same command again with --restart"


class Managed:
    """Two ``stoker server`` processes on the run's store; the job submitted to the leader."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.managers: list[Any] = [None, None]
        self.starts = 0
        self.exits: list[int] = []
        self.unexpected: list[str] = []
        self.submitted = False
        self.level = 0  # which of MASTERS: a rescale moves it
        self.upgrades = 0  # upgrades asked for (their files: chaos_app_u<n>.py)
        self.upgrade_ids: list[tuple[str, str]] = []  # (job, upgrade id) of those taken

    def _start_manager(self, i: int) -> None:
        from tests.support.manager import Manager

        if self.starts >= MAX_STARTS:
            raise Stuck(f"managers started {self.starts} times")
        run = self.run
        self.starts += 1
        where: dict[str, Any] = {}
        if run.hosts is not None:
            # On its host, listening on the host's address: off loopback, with a token.
            host = MANAGER_HOSTS[i]
            where = {
                "wrap": run.hosts.prefix_argv(host),
                "extra_args": ["--host", run.hosts.addr(host)],
                "token": run.token,
            }
        m = Manager(
            f"manager-{i}",
            run.store_url,
            run.base / f"managed-{i}",
            [run.base],
            run.base / f"manager-{i}.log",
            # A host's wall clock per manager, its drivers' too (they inherit the file).
            env={**run.env(), **run.clock_env(f"manager-{i}")},
            lease_ttl=5.0,
            leader_ttl=2.0,
            **where,
        )
        if run.hosts is not None:
            import httpx

            m.http.close()
            m.url = f"http://{run.hosts.addr(MANAGER_HOSTS[i])}:{m.port}"
            auth = {"Authorization": f"Bearer {run.token}"}
            m.http = httpx.Client(base_url=m.url, timeout=60.0, headers=auth)
        self.managers[i] = m
        m.wait_up()
        run.log(f"manager {i} started (pid {m.proc.pid})")

    def start(self) -> None:
        for i in range(2):
            self._start_manager(i)
        self._submit()

    def resubmit(self) -> str:
        self._submit(restart=True)
        return "submitted again with restart"

    def _submit(self, restart: bool = False) -> None:
        body: dict[str, Any] = {
            "restart": restart,
            "job_id": self.run.job,
            "entrypoint": str(self.run.app),
            "conf": {
                "stoker.master": MASTERS[self.level],
                "stoker.progress_timeout": PROGRESS_TIMEOUT,
            },
            "restart_strategy": {"strategy": "fixed-delay", "attempts": 1000, "delay": 1},
        }
        if self.run.schedule.workload.standby:
            body["standby"] = True
        if self.run.from_savepoint:
            body["from_savepoint"] = self.run.from_savepoint
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for m in self.managers:
                if m is None or m.proc.poll() is not None:
                    continue
                with contextlib.suppress(Exception):
                    r = m.http.post("/v1/jobs", json=body)
                    if r.status_code in (200, 201):
                        self.submitted = True
                        self.run.log(f"job submitted to {m.name}: {r.status_code}")
                        return
            time.sleep(0.5)
        raise Stuck("no manager took the submission")

    def leader(self) -> Any:
        for m in self.managers:
            if m is not None and m.proc.poll() is None and (m.health() or {}).get("leader"):
                return m
        return None

    def drivers(self) -> list[Any]:
        """The run's driver processes that lead their groups: the job's driver, and its
        standby when it has one."""
        from tests.support.procs import processes

        mine = set(processes_of(self.run.marker))
        return [
            p
            for p in processes()
            if p.pid in mine and p.pid == p.pgid and "stoker.runtime.driver" in p.argv
        ]

    def driver(self) -> int | None:
        """The live driver of the job: the current attempt's owner among the run's drivers;
        a standby (started with ``--standby``) only once it was handed the attempt."""
        found = self.drivers()
        if not found:
            return None
        owner = self.run.read(
            lambda st: st.get_attempt(self.run.job, st.get_job(self.run.job).current_attempt)
        )
        for p in found:
            if owner is not None and p.pid == owner.owner.pid:
                return int(p.pid)
        plain = [p for p in found if "--standby" not in p.argv]
        return int(plain[0].pid) if plain else None

    def standby(self) -> int | None:
        """The job's waiting standby driver (WARMING or READY), if its process is alive."""
        rec = self.run.read(lambda st: st.get_standby(self.run.job))
        if rec is None or str(rec.state) == "TAKEN":
            return None
        alive = {p.pid for p in self.drivers()}
        return rec.owner.pid if rec.owner.pid in alive else None

    def ensure(self) -> bool:
        for i, m in enumerate(self.managers):
            if m is not None and m.proc.poll() is not None:
                self.exits.append(m.proc.returncode)
                self.run.log(f"manager {i} ended rc {m.proc.returncode}: started again")
                self._start_manager(i)
        state = self.run.job_state()
        if state == "FAILED":
            raise Stuck(f"the job FAILED under the managers: {self.run.last_error()}")
        return state not in ("FINISHED", "CANCELED") or self.driver() is not None

    def wait_exit(self, deadline: float) -> None:
        # Every driver of the run: a standby too (the leader stops it once the job ended).
        while self.drivers():
            if time.monotonic() > deadline:
                raise Stuck("the driver did not exit after a cancel or stop")
            time.sleep(0.3)

    def reap(self) -> None:
        """The managers reap their drivers."""

    def live(self) -> list[Any]:
        return [m for m in self.managers if m is not None and m.proc.poll() is None]

    def cli(self, *args: str) -> tuple[int, str]:
        """The CLI against a job manager (``--server``): the leader, else the other."""
        rc, out = -1, "no manager answers"
        leader = self.leader()
        for m in sorted(self.live(), key=lambda m: m is not leader):
            rc, out = cli(self.run, *args, "--server", m.url)
            if rc == 0:
                break
        return rc, out

    def restore(self) -> str:
        """The new job submitted over REST with ``from_savepoint``."""
        self._submit()
        return f"submitted {self.run.job} from the savepoint over REST"

    def graceful_stop(self) -> str | None:
        """Cancel (the epoch in flight commits): the managers' way to stop a job and keep
        it restartable from its checkpoint. The job's state once its driver exited."""
        return cancel_and_wait(self.run, GRACEFUL_STOP)

    def repartition(self, partitions: int) -> tuple[int, str]:
        """``POST /v1/jobs/{id}/state/repartition`` (``stoker state repartition --server``)."""
        return self.cli("state", "repartition", self.run.job, str(partitions), "--json")

    def start_rescaled(self) -> str:
        """Submitted again (restart) with the other master: the job's spec takes it."""
        self.level = 1 - self.level
        self._submit(restart=True)
        return f"submitted again (restart) on {MASTERS[self.level]}"

    def upgrade(self, new: Path, bad: bool) -> str | None:
        """Ask for an upgrade of the job to ``new`` (issue 24): code that writes the same ids,
        or (``bad``) code that fails each epoch, to be rolled back. Not waited for: the steps
        after it land while it warms, swaps and is watched."""
        run = self.run
        self.upgrades += 1
        n = self.upgrades
        body_json = {"entrypoint": str(new), "watch_epochs": 2, "watch_seconds": 20}
        for m in self.managers:
            if m is None or m.proc.poll() is not None:
                continue
            with contextlib.suppress(Exception):
                r = m.http.post(f"/v1/jobs/{run.job}/upgrade", json=body_json, timeout=120)
                what = "bad" if bad else "good"
                if r.status_code == 202:
                    up = r.json()["upgrade_id"]
                    self.upgrade_ids.append((run.job, up))
                    return f"upgrade {n} ({what} code) asked: {up}"
                return f"upgrade {n} ({what} code) not taken: {r.status_code} {r.text[:200]}"
        return None

    def manager_fault(self, kind: str, seconds: float) -> str | None:
        m = self.leader()
        if m is None:
            return None
        if kind == "leader_kill":
            m.kill()  # its group only: the drivers it started lead groups of their own
            return f"SIGKILL leader {m.name} (pid {m.proc.pid})"
        os.killpg(m.proc.pid, signal.SIGSTOP)
        try:
            time.sleep(seconds)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(m.proc.pid, signal.SIGCONT)
        return f"SIGSTOP leader {m.name} for {seconds:g}s, SIGCONT"

    def clock_fault(self, kind: str, seconds: float, scope: str) -> str | None:
        """``clock_step``: the wall clock of the leading manager and its drivers (``leader``),
        or of every manager and driver (``all``), stepped by ``seconds``. ``clock_skew``: the
        leader's host set ``seconds`` off the other manager's (its drivers with it)."""
        leader = self.leader()
        if leader is None:
            return None
        i = self.managers.index(leader)
        name, other = f"manager-{i}", f"manager-{1 - i}"
        if kind == "clock_step":
            names = [name] if scope == "leader" else [name, other]
            done = "; ".join(self.run.step_clock(n, seconds) for n in names)
            return f"wall clock of {scope} (leader {leader.name}) stepped {seconds:+g}s: {done}"
        base = self.run.offset(other)
        want = base + seconds
        if abs(want) > CLOCK_MAX:
            want = base - seconds
        was = self.run.offset(name)
        self.run.set_offset(name, want)
        return (
            f"clock skew: leader {leader.name} {was:+g}s -> {want:+g}s, {other} stays at "
            f"{base:+g}s ({want - base:+g}s apart)"
        )

    def stop(self) -> None:
        from tests.support.manager import stop_all

        stop_all(m for m in self.managers if m is not None)
