"""Crash tests: real drivers killed with SIGKILL, then exactly-once output checked after recovery.

Every driver is a ``stoker run`` subprocess leading its own process group, so a kill takes the
Spark JVM and its Python workers with it. The ids app writes to a files sink and a PostgreSQL
sink in one pipeline: one run checks both sinks and that they commit together.

Kills come from the fault points of :mod:`stoker.testing` (``STOKER_FAULT=<step>:<epoch>``: the
driver SIGKILLs its own group at that step) or from the test (``kill_group``) at random times.
The random schedule prints its seed; ``STOKER_CRASH_SEED=<seed>`` replays the same schedule.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import subprocess
import textwrap
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from stoker.store import EpochRecord, Store, open_store
from stoker.types import AttemptState, EpochState, JobState, TxnState, job_id
from tests import support
from tests.support import (
    APPS,
    exactly_once,
    file_sink_ids,
    kill_group,
    pg_ids,
    pg_prepared,
    start_driver,
    wait_group_gone,
)

# pytest-timeout's default (600 s) is too tight for two Spark start-ups on a busy machine.
pytestmark = [pytest.mark.spread, pytest.mark.timeout(1200)]

JOB = job_id("ids")
# Spark start-up alone takes 8-15 s on an idle 2-core machine and several times that when
# other work shares the CPU: every wait below is generous and polls instead of sleeping.
STARTUP = 240.0
RUN = 360.0


# helpers ---------------------------------------------------------------------------------------
def tail(log: Path, lines: int = 40) -> str:
    try:
        text = log.read_text(errors="replace").splitlines()
    except OSError:
        return f"(no log at {log})"
    return f"--- last {lines} lines of {log} ---\n" + "\n".join(text[-lines:])


@contextlib.contextmanager
def opened(state: Path) -> Iterator[Store]:
    st = open_store(state / "store.db")
    try:
        yield st
    finally:
        st.close()


def epochs(state: Path, job: str = JOB) -> dict[int, EpochRecord]:
    """The job's epoch records by number; empty while the driver has not created the store."""
    if not (state / "store.db").exists():
        return {}
    with opened(state) as st:
        return {int(e.epoch): e for e in st.list_epochs(job_id(job), limit=10_000)}


def committed(state: Path, job: str = JOB) -> int:
    return sum(e.state == EpochState.COMMITTED for e in epochs(state, job).values())


def wait_exit(proc: subprocess.Popen[bytes], log: Path, timeout: float = RUN) -> int:
    """The driver's return code once it ends by itself; fails (killing it) after ``timeout``."""
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        pytest.fail(f"driver still running after {timeout:.0f}s\n{tail(log)}")


def wait_for(
    cond: Callable[[], bool],
    what: str,
    proc: subprocess.Popen[bytes] | None,
    log: Path,
    timeout: float = STARTUP,
    every: float = 0.2,
) -> None:
    """Poll ``cond`` (:func:`tests.support.wait_for`); fail with the log tail on timeout or
    when ``proc`` ends first."""

    def check() -> bool:
        if cond():
            return True
        if proc is not None and proc.poll() is not None:
            rc = proc.returncode
            pytest.fail(f"driver ended (rc {rc}) while waiting for {what}\n{tail(log)}")
        return False

    try:
        support.wait_for(what, check, timeout, every)
    except AssertionError as timed_out:
        if proc is not None:
            kill_group(proc)
        pytest.fail(f"{timed_out}\n{tail(log)}")


def ids_env(out: Path, dsn: str, total: int, per_epoch: int) -> dict[str, str]:
    return {
        "IDS_OUT": str(out),
        "IDS_PG_DSN": dsn,
        "IDS_PG_TABLE": "ids",
        "IDS_JOB": JOB,
        "IDS_TOTAL": str(total),
        "IDS_PER_EPOCH": str(per_epoch),
        "STOKER_FAULT": "",  # never inherit a fault plan from the environment running pytest
    }


def start_ids(state: Path, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    return start_driver(APPS / "ids_app.py", "-D", f"stoker.state_dir={state}", env=env, log=log)


def staged_leftovers(out: Path) -> list[str]:
    staging = out / "_staging"
    return sorted(p.name for p in staging.iterdir()) if staging.exists() else []


def assert_finished_exactly_once(
    state: Path, out: Path, dsn: str, total: int, log: Path
) -> dict[int, EpochRecord]:
    """The end state every ids test wants: each id once in both sinks, nothing left open."""
    where = f"\n{tail(log)}"
    files, table = file_sink_ids(out), pg_ids(dsn, "ids")
    try:
        exactly_once(files, total)
    except AssertionError as e:
        raise AssertionError(f"files sink: {e}{where}") from None
    try:
        exactly_once(table, total)
    except AssertionError as e:
        raise AssertionError(f"postgres sink: {e}{where}") from None
    assert pg_prepared(dsn) == [], f"prepared transactions left in PostgreSQL{where}"
    assert staged_leftovers(out) == [], f"staged parts left in the files sink{where}"
    with opened(state) as st:
        job = st.get_job(JOB)
        assert job.state == JobState.FINISHED, f"job is {job.state}: {job.last_error}{where}"
        recs = {int(e.epoch): e for e in st.list_epochs(job.job_id, limit=10_000)}
        open_txns = st.list_txns(job.job_id, TxnState.PREPARED)
    assert open_txns == [], f"store still shows prepared sink parts: {open_txns}{where}"
    not_committed = {n: str(e.state) for n, e in recs.items() if e.state != EpochState.COMMITTED}
    assert not not_committed, f"epochs not COMMITTED: {not_committed}{where}"
    assert sorted(recs) == list(range(len(recs))), f"epochs not contiguous: {sorted(recs)}"
    assert sum(e.rows_in or 0 for e in recs.values()) == total, (
        f"rows per epoch do not add up to {total}: "
        f"{ {n: e.rows_in for n, e in sorted(recs.items())} }"
    )
    last = recs[max(recs)]
    assert last.final and not any(e.final for e in recs.values() if e is not last)
    return recs


# 1. a crash at each step of the epoch protocol --------------------------------------------------
# What the store and the sinks must show for the crashed epoch right after the injected kill:
# (epoch state, prepared in PostgreSQL, the epoch visible in the sinks, decided by on restart:
# 0 = the attempt that crashed, 1 = the next one).
STEP_EXPECT = {
    "after_pin": (EpochState.PINNED, False, False, 1),
    "after_prepare": (EpochState.PINNED, True, False, 1),
    "after_decide": (EpochState.DECIDED, True, False, 0),
    "after_commit": (EpochState.DECIDED, False, True, 0),
    "before_spark_commit": (EpochState.COMMITTED, False, True, 0),
}
# The fast lane crashes at the three steps where the sinks' state differs most (prepared and
# undecided, decided and uncommitted, committed in the sinks but not in Spark's log); the whole
# suite at all five.
FAST_STEPS = ("after_prepare", "after_decide", "before_spark_commit")


def test_a_crash_at_each_protocol_step_is_exactly_once(
    tmp_path: Path, pg_dsn: str, request: pytest.FixtureRequest
) -> None:
    """One job, one driver per step: attempt k is SIGKILLed by the fault point at its step of
    epoch 2k-1 (after committing epoch 2k-2), the next attempt recovers what it left and goes
    on to its own step; a last attempt runs to the end. Each crash is checked right after it
    (store, PostgreSQL's prepared transactions, the files sink's staging, the sinks' ids) and
    after the recovery that follows it (who decided the epoch, whether Spark replayed it):
    one driver start per step instead of two."""
    fast = bool(request.config.getoption("--fast"))
    steps = [s for s in STEP_EXPECT if not fast or s in FAST_STEPS]
    per_epoch = 1_000
    n_epochs = 2 * len(steps) + 2
    total = per_epoch * n_epochs
    state, out = tmp_path / "state", tmp_path / "out"
    env = ids_env(out, pg_dsn, total, per_epoch)
    logs: list[Path] = []
    for k, step in enumerate(steps, start=1):
        crash_epoch = 2 * k - 1
        log = tmp_path / f"driver-{k}-{step}.log"
        logs.append(log)
        p = start_ids(state, {**env, "STOKER_FAULT": f"{step}:{crash_epoch}"}, log)
        rc = wait_exit(p, log)
        wait_group_gone(p.pid)
        assert rc == -9, f"{step}: expected death by SIGKILL, got rc {rc}\n{tail(log)}"
        assert f"injected crash at {step} epoch {crash_epoch}" in log.read_text(errors="replace")
        if k > 1:
            _check_recovered(state, log, steps[k - 2], 2 * k - 3, k - 1)

        state_e, prepared, visible, _ = STEP_EXPECT[step]
        recs = epochs(state)
        assert sorted(recs) == list(range(crash_epoch + 1)), f"{step}: epochs {sorted(recs)}"
        for n in range(crash_epoch):
            assert recs[n].state == EpochState.COMMITTED, (step, n, recs[n])
        e = recs[crash_epoch]
        assert (e.state, e.pinned_by) == (state_e, k), f"{step}: epoch {crash_epoch}: {e}"
        assert e.decided_by == (None if state_e == EpochState.PINNED else k), (step, e)
        gids = pg_prepared(pg_dsn)
        if prepared:
            prefix = f"stoker:{JOB}:{crash_epoch}:{k}:"
            assert gids and all(g.startswith(prefix) for g in gids), (step, gids)
        else:
            assert gids == [], (step, gids)
        # The files sink's staged part of the epoch exists exactly while it is prepared and
        # not committed.
        staged = [n.partition(".owner=")[0] for n in staged_leftovers(out)]
        assert staged == ([f"epoch={crash_epoch}.attempt={k}"] if prepared else []), (step, staged)
        seen = (crash_epoch + visible) * per_epoch
        exactly_once(file_sink_ids(out), seen)
        exactly_once(pg_ids(pg_dsn, "ids"), seen)
        with opened(state) as st:
            job = st.get_job(JOB)
            assert (job.state, job.current_attempt) == (JobState.RUNNING, k), step

    # The last attempt, without a fault, recovers the last crash and runs to the end.
    last = len(steps) + 1
    log = tmp_path / "driver-final.log"
    p = start_ids(state, env, log)
    rc = wait_exit(p, log)
    wait_group_gone(p.pid)
    assert rc == 0, f"the last driver failed, rc {rc}\n{tail(log)}"
    _check_recovered(state, log, steps[-1], 2 * len(steps) - 1, len(steps))
    recs = assert_finished_exactly_once(state, out, pg_dsn, total, log)
    assert sorted(recs) == list(range(n_epochs))
    with opened(state) as st:
        assert st.get_job(JOB).current_attempt == last
        attempts = [(a.attempt, a.state) for a in st.list_attempts(JOB)]
    assert attempts == [
        *((n, AttemptState.SUPERSEDED) for n in range(1, last)),
        (last, AttemptState.FINISHED),
    ], attempts


def _check_recovered(state: Path, log: Path, step: str, epoch: int, crashed: int) -> None:
    """After the attempt that followed a crash at ``step`` of ``epoch`` by attempt ``crashed``:
    the epoch was decided by the attempt the step says, and Spark's replay of an epoch decided
    before the crash was skipped."""
    rec = epochs(state)[epoch]
    decider = crashed + STEP_EXPECT[step][3]
    assert rec.state == EpochState.COMMITTED, (step, rec)
    assert rec.decided_by == decider, (
        f"{step}: epoch {epoch} decided by attempt {rec.decided_by}, expected {decider}"
    )
    if decider == crashed:
        # Spark replays the epoch (no commit log for it); stoker finds it decided and skips it.
        assert f"epoch {epoch} replayed" in log.read_text(errors="replace"), (step, tail(log))


# 2. kills of the whole process group at random times --------------------------------------------
@dataclass
class Kill:
    run: int
    mode: str
    delay: float
    committed_before: int
    committed_after: int
    where: str  # what the attempt was doing when it died

    @property
    def inside(self) -> bool:
        return self.where.startswith("inside")

    def __str__(self) -> str:
        return (
            f"run {self.run:2d} kill {self.mode:<18} +{self.delay:4.1f}s: committed "
            f"{self.committed_before:2d} -> {self.committed_after:2d} "
            f"(+{self.committed_after - self.committed_before}) {self.where}"
        )


def attempt_progress(state: Path, pid: int) -> tuple[int | None, str]:
    """The attempt run by ``pid`` and how far it got: "" (not started), "starting" (recovery
    and Spark start-up), "busy" (working on its first epoch), "deciding" (decided one)."""
    if not (state / "store.db").exists():
        return None, ""
    with opened(state) as st:
        mine = [a.attempt for a in st.list_attempts(JOB) if a.owner.pid == pid]
        if not mine:
            return None, ""
        a = mine[-1]
        recs = st.list_epochs(JOB, limit=10_000)
        txns = st.list_txns(JOB)
    if any(e.decided_by == a for e in recs):
        return a, "deciding"
    if any(e.pinned_by == a for e in recs) or any(t.attempt == a for t in txns):
        return a, "busy"
    return a, "starting"


def spark_in_flight(state: Path) -> int | None:
    """The epoch Spark has planned (offsets written) but not committed, if any."""

    def last(kind: str) -> int:
        folder = state / "checkpoint" / kind
        names = (
            [int(p.name) for p in folder.iterdir() if p.name.isdigit()] if folder.exists() else []
        )
        return max(names, default=-1)

    n = last("offsets")
    return n if n > last("commits") else None


PROGRESS = ["", "starting", "busy", "deciding"]
ANCHOR = {"start-up": "starting", "first epoch": "busy", "epochs": "deciding"}
MAX_DELAY = {"start-up": 6.0, "first epoch": 4.0, "epochs": 8.0}


@pytest.mark.timeout(2400)
def test_random_kills_are_exactly_once(
    tmp_path: Path, pg_dsn: str, rounds: Callable[[int, int], int]
) -> None:
    state, out = tmp_path / "state", tmp_path / "out"
    # Six kills of the same kinds (start-up, first epoch, amid epochs) at random points: ten
    # cost the suite two more minutes and found nothing the six do not reach. The fast lane
    # kills three times: the first three kills are one of each kind, in a random order.
    kills = rounds(6, 3)
    total, per_epoch = 1_000 * kills, 200
    n_epochs = total // per_epoch
    env = ids_env(out, pg_dsn, total, per_epoch)
    seed = int(os.environ.get("STOKER_CRASH_SEED") or random.SystemRandom().randrange(2**31))
    rng = random.Random(seed)
    print(f"\nrandom kill schedule: seed {seed} (replay with STOKER_CRASH_SEED={seed})")

    first_kinds = rng.sample(["start-up", "first epoch", "epochs"], 3)
    history: list[Kill] = []
    for run in range(1, kills + 1):
        # Draw the run's schedule first, so that a seed gives the same schedule whatever the
        # timing. The clock of a kill starts when the attempt has reached one of three points:
        # it began (kills in recovery and Spark start-up), it began its first epoch (the first
        # epoch of a fresh JVM takes seconds), or it decided an epoch (kills amid a run of
        # epochs). Anchoring on the store rather than on the process start keeps the schedule
        # meaningful however slowly Spark starts on this machine.
        if run <= len(first_kinds):
            mode = first_kinds[run - 1]
        else:
            mode = rng.choice(["start-up", "first epoch", "epochs", "epochs"])
        delay = rng.uniform(0.0, MAX_DELAY[mode])
        want = ANCHOR[mode]
        # Leave epochs for the final run, so that the job does not finish between kills: once
        # `cap` epochs are committed, kill a moment later (not at once, which would always hit
        # the gap right after an epoch's commit).
        cap, jitter = 4 * run, rng.uniform(0.0, 0.8)
        log = tmp_path / f"driver-{run:02d}.log"
        before = committed(state)
        p = start_ids(state, env, log)

        def reached(p: subprocess.Popen[bytes] = p, want: str = want, cap: int = cap) -> bool:
            got = attempt_progress(state, p.pid)[1]
            return PROGRESS.index(got) >= PROGRESS.index(want) or committed(state) >= cap

        wait_for(reached, f"run {run} to reach {want!r}", p, log, every=0.1)
        deadline, capped = time.monotonic() + delay, False
        while time.monotonic() < deadline and p.poll() is None:
            if not capped and committed(state) >= cap:
                capped, deadline = True, min(deadline, time.monotonic() + jitter)
            time.sleep(0.1)
        attempt, progress = attempt_progress(state, p.pid)
        assert p.poll() is None, f"driver ended by itself, rc {p.returncode}\n{tail(log)}"
        kill_group(p)
        flight = spark_in_flight(state)
        rec = epochs(state).get(flight) if flight is not None else None
        if progress == "starting":
            where = f"attempt {attempt} in recovery or Spark start-up"
        elif flight is not None:
            where = f"inside epoch {flight} (store: {rec.state if rec else 'no record yet'})"
        else:
            where = f"attempt {attempt} between epochs"
        k = Kill(run, mode + " (cap)" * capped, delay, before, committed(state), where)
        history.append(k)
        print(k)

    log = tmp_path / "driver-final.log"
    p = start_ids(state, env, log)
    rc = wait_exit(p, log)
    wait_group_gone(p.pid)
    report = "\n".join(map(str, history))
    print(f"final run: rc {rc}, committed {history[-1].committed_after} -> {committed(state)}")
    assert rc == 0, f"final driver failed, rc {rc} (seed {seed})\n{report}\n{tail(log)}"

    assert_finished_exactly_once(state, out, pg_dsn, total, log)
    assert committed(state) == n_epochs
    # The schedule did real work: epochs were committed between kills, and kills landed inside
    # epochs (not only before the first one or between them).
    before_final = history[-1].committed_after
    assert before_final > 0, f"no epoch committed before the final run (seed {seed})\n{report}"
    inside = sum(k.inside for k in history)
    assert inside > 0, f"no kill landed inside an epoch (seed {seed})\n{report}"
    with opened(state) as st:
        attempts = st.list_attempts(JOB)
    assert len(attempts) == kills + 1 and attempts[-1].state == AttemptState.FINISHED
    assert all(a.state == AttemptState.SUPERSEDED for a in attempts[:-1]), [
        (a.attempt, str(a.state)) for a in attempts
    ]


# 3. a mixed job: bounded input is read once across kills ---------------------------------------
MIXED_APP = '''\
"""Bounded files + unbounded files -> files sink (a crash-test driver)."""
import os

import stoker
from stoker import Pipeline, sinks, sources

p = Pipeline("mixed")
p.source(sources.files(os.environ["MIX_BOUNDED"], "json", "id long", bounded=True))
p.source(sources.files(os.environ["MIX_UNBOUNDED"], "json", "id long"))
p.sink(sinks.files(os.environ["MIX_OUT"]))

if __name__ == "__main__":
    stoker.run(p, trigger="200ms")
'''


def put_json(folder: Path, name: str, ids: range) -> None:
    """Write a JSON-lines file and move it into ``folder`` in one rename (as writers should)."""
    tmp = folder / f".{name}.tmp"
    tmp.write_text("".join(json.dumps({"id": i}) + "\n" for i in ids))
    os.rename(tmp, folder / name)


def test_mixed_job_reads_bounded_input_once_across_kills(tmp_path: Path) -> None:
    app = tmp_path / "mixed_app.py"
    app.write_text(textwrap.dedent(MIXED_APP))
    bounded, unbounded = tmp_path / "bounded", tmp_path / "unbounded"
    out, state = tmp_path / "out", tmp_path / "state"
    bounded.mkdir()
    unbounded.mkdir()
    b_ids = [range(0, 100), range(100, 200), range(200, 300)]
    for i, r in enumerate(b_ids):
        put_json(bounded, f"b{i}.json", r)
    u_batches = [range(10_000 + 100 * i, 10_100 + 100 * i) for i in range(6)]
    put_json(unbounded, "u0.json", u_batches[0])
    env = {
        "MIX_BOUNDED": str(bounded),
        "MIX_UNBOUNDED": str(unbounded),
        "MIX_OUT": str(out),
        "STOKER_FAULT": "",
    }

    def start(log: Path) -> subprocess.Popen[bytes]:
        return start_driver(app, "-D", f"stoker.state_dir={state}", env=env, log=log)

    def holds(ranges: list[range]) -> Callable[[], bool]:
        want = {i for r in ranges for i in r}
        return lambda: want <= set(file_sink_ids(out))

    # Run 1: the bounded snapshot and the first unbounded file are committed.
    log1 = tmp_path / "driver-1.log"
    p = start(log1)
    wait_for(holds([*b_ids, u_batches[0]]), "bounded input in the sink", p, log1)
    assert any(e.state == EpochState.COMMITTED for e in epochs(state, "mixed").values())
    # A file that lands in the bounded folder after the first start is not part of the input.
    put_json(bounded, "late.json", range(5_000, 5_050))
    # New unbounded files; kill as soon as the epoch that reads them has begun, so that the
    # restart replays it (the same offsets of both sources) rather than planning a new one.
    done = {n for n, e in epochs(state, "mixed").items() if e.state == EpochState.COMMITTED}
    put_json(unbounded, "u1.json", u_batches[1])
    put_json(unbounded, "u2.json", u_batches[2])
    # Spark writes the epoch's offsets before it runs the epoch.
    nxt = state / "checkpoint" / "offsets" / str(max(done) + 1)
    wait_for(nxt.exists, "the next epoch", p, log1, every=0.02)
    kill_group(p)
    left = {n: str(e.state) for n, e in epochs(state, "mixed").items() if n not in done}
    print(f"\nkilled in epoch {nxt.name}; its store record then: {left or 'none yet'}")

    # Run 2 recovers, then reads the files that arrive while it runs; killed once they show.
    log2 = tmp_path / "driver-2.log"
    p = start(log2)
    put_json(unbounded, "u3.json", u_batches[3])
    wait_for(holds(u_batches[:4]), "unbounded files 1-3 in the sink", p, log2)
    put_json(unbounded, "u4.json", u_batches[4])
    put_json(unbounded, "u5.json", u_batches[5])
    wait_for(holds(u_batches), "unbounded files 4-5 in the sink", p, log2)
    kill_group(p)

    ids = file_sink_ids(out)
    expected = Counter(i for r in [*b_ids, *u_batches] for i in r)
    dupes = sorted(k for k, v in ids.items() if v > 1)
    missing = sorted(set(expected) - set(ids))
    extra = sorted(set(ids) - set(expected))
    assert not dupes and not missing and not extra, (
        f"duplicates {dupes[:10]} ({len(dupes)}), missing {missing[:10]} ({len(missing)}), "
        f"unexpected {extra[:10]} ({len(extra)})\n{tail(log1)}\n{tail(log2)}"
    )
    # The bounded source's file list is the sealed snapshot of the first start.
    lines = [json.loads(x) for x in (state / "sources" / "s0.files.jsonl").read_text().splitlines()]
    listed = sorted(Path(x["path"]).name for x in lines if "path" in x)
    assert listed == ["b0.json", "b1.json", "b2.json"] and {"sealed": True} in lines, lines
    with opened(state) as st:
        attempts = st.list_attempts(job_id("mixed"))
    assert [a.attempt for a in attempts] == [1, 2]
