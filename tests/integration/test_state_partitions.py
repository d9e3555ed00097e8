"""State partitions: fixed when a job is created (its maximum parallelism), changed only offline
with ``stoker state repartition JOB N`` on a stopped job.

Real drivers (``stoker run`` in their own process groups, local Spark), real SQLite, real
crashes (``STOKER_FAULT``: the driver SIGKILLs its group), real SIGTERM. The job counts ids per
key with Spark's keyed state (``applyInPandasWithState``, a running count per key emitted each
epoch) into a files sink: state lost would restart a count, input read twice would overshoot
it, so the last count of every key must be exactly the number of its ids.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from stoker.checkpoint_layout import HDFS_PROVIDER, ROCKSDB_PROVIDER, inspect, state_partitions
from stoker.errors import InvalidInput, JobNotFound
from stoker.runtime.repartition import Refusal, check
from stoker.store import open_store
from tests import support
from tests.support import REPO, kill_group, start_driver, stoker_cmd, wait_group_gone

pytestmark = [pytest.mark.spread, pytest.mark.timeout(900), pytest.mark.scenario]

KEYS = 5
PER_EPOCH = 10

APP = '''\
"""Running counts per key in Spark's state store (tests/integration/test_state_partitions.py)."""
import os

from stoker import Pipeline, sinks, sources


def _count(key, frames, state):
    import pandas as pd

    n = state.get[0] if state.exists else 0
    for frame in frames:
        n += len(frame)
    state.update((n,))
    yield pd.DataFrame({"k": [int(key[0])], "n": [int(n)]})


def _keyed_counts(df):
    from pyspark.sql import functions as F

    return (
        df.withColumn("k", F.col("id") % __KEYS__)
        .groupBy("k")
        .applyInPandasWithState(_count, "k long, n long", "n long", "append", "NoTimeout")
    )


total = os.environ.get("ST_TOTAL")
rate = os.environ.get("ST_RATE")
gen = sources.generator(
    total=int(total) if total else None,
    rows_per_second=float(rate) if rate else None,
    max_rows_per_epoch=__PER_EPOCH__,
)
p = Pipeline(os.environ["ST_JOB"])
p.source(gen, map=_keyed_counts)
p.sink(sinks.files(os.environ["ST_OUT"]))
'''.replace("__KEYS__", str(KEYS)).replace("__PER_EPOCH__", str(PER_EPOCH))

PROVIDER = "spark.sql.streaming.stateStore.providerClass"


# helpers ---------------------------------------------------------------------------------------
class Job:
    """One job of the app above: its folders, its runs, its store."""

    def __init__(self, tmp: Path, jid: str) -> None:
        self.jid = jid
        self.root = tmp / jid
        self.state = self.root / "state"
        self.out = self.root / "out"
        self.app = self.root / "app.py"
        self.root.mkdir(parents=True)
        self.app.write_text(APP)
        self.runs = 0

    @property
    def checkpoint(self) -> Path:
        return self.state / "checkpoint"

    def start(self, *defines: str, **env: str) -> subprocess.Popen[bytes]:
        self.runs += 1
        args = ["-D", f"stoker.state_dir={self.state}", "-D", "stoker.trigger=100ms", "--quiet"]
        for d in defines:
            args += ["-D", d]
        full = {"ST_JOB": self.jid, "ST_OUT": str(self.out), "STOKER_FAULT": "", **env}
        return start_driver(self.app, *args, env=full, log=self.root / f"run{self.runs}.log")

    def stoker(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            stoker_cmd(*args),
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "STOKER_FAULT": ""},
        )

    def repartition(self, n: str) -> subprocess.CompletedProcess[str]:
        return self.stoker(
            "state", "repartition", self.jid, n, "--state-dir", str(self.state), "--json"
        )

    def record(self) -> Any:
        st = open_store(self.state / "store.db")
        try:
            return st.get_job(self.jid)
        finally:
            st.close()

    def attempt_state(self) -> str | None:
        st = open_store(self.state / "store.db")
        try:
            job = st.get_job(self.jid)
            att = st.get_attempt(job.job_id, job.current_attempt) if job.current_attempt else None
            return None if att is None else str(att.state)
        finally:
            st.close()

    def committed_epochs(self) -> int:
        if not (self.state / "store.db").exists():
            return 0
        st = open_store(self.state / "store.db")
        try:
            return sum(
                1 for e in st.list_epochs(self.jid, limit=1000) if str(e.state) == "COMMITTED"
            )
        except Exception:  # the driver has not made the job's record yet
            return 0
        finally:
            st.close()

    def counts(self) -> dict[int, list[int]]:
        """Key -> the running counts the committed epochs emitted, in order."""
        import pyarrow.parquet as pq

        out: dict[int, list[int]] = defaultdict(list)
        dirs = sorted(self.out.glob("epoch=*"), key=lambda d: int(d.name.split("=")[1]))
        for d in dirs:
            for f in sorted(d.glob("*.parquet")):
                t = pq.read_table(f).to_pydict()
                for k, n in zip(t["k"], t["n"], strict=True):
                    out[int(k)].append(int(n))
        return out

    def ids_read(self) -> int:
        """How many ids the committed epochs counted (the next id to read)."""
        return sum(max(ns) for ns in self.counts().values())

    def pinned(self) -> set[str]:
        """``spark.sql.shuffle.partitions`` as each offset log entry of the query records it."""
        found = set()
        for f in (self.checkpoint / "offsets").iterdir():
            if f.name.isdigit():
                meta = json.loads(f.read_text().splitlines()[1])
                found.add(meta["conf"]["spark.sql.shuffle.partitions"])
        return found


def wait_for(cond: Any, what: str, timeout: float = 300.0) -> None:
    support.wait_for(what, cond, timeout, every=0.2)


def wait_exit(proc: subprocess.Popen[bytes], timeout: float = 300.0) -> int:
    try:
        rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        raise
    wait_group_gone(proc.pid)  # the JVM and Python workers die with the driver
    return rc


def assert_exact_counts(job: Job, total: int) -> None:
    """Every key's running count rose one epoch at a time, never repeated a value (no input
    read twice) and ends at exactly the number of its ids below ``total`` (no state lost)."""
    counts = job.counts()
    assert sorted(counts) == list(range(KEYS))
    for k, ns in counts.items():
        expected = len(range(k, total, KEYS))
        assert ns == sorted(set(ns)), f"key {k}: counts repeat or go back: {ns}"
        assert ns[-1] == expected, f"key {k}: ends at {ns[-1]}, expected {expected}: {ns}"


# tests -----------------------------------------------------------------------------------------
def test_repartition_a_stopped_job_and_resume_it(tmp_path: Path) -> None:
    """Created with 3 state partitions; crashes, one of them after stoker decided an epoch
    Spark did not log (refused), one mid-epoch (its epoch skipped); repartitioned to 5 while a
    later -D asks for 7; resumed: 5 partitions, every count exact."""
    job = Job(tmp_path, "st-counts")

    # 1. Created with -D 3; the driver dies right after stoker decided epoch 2.
    run = job.start("spark.sql.shuffle.partitions=3", ST_RATE="40", STOKER_FAULT="after_decide:2")
    assert wait_exit(run) != 0
    assert job.record().spec["max_parallelism"] == 3
    assert job.pinned() == {"3"}
    assert inspect(job.checkpoint).provider == ROCKSDB_PROVIDER  # stoker's default
    assert inspect(job.checkpoint).last_committed == 1  # epoch 2: decided, not in Spark's log
    before = sorted(p.name for p in job.checkpoint.rglob("*"))
    refused = job.repartition("5")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "epoch 2" in refused.stderr and "decided" in refused.stderr
    assert sorted(p.name for p in job.checkpoint.rglob("*")) == before  # nothing changed

    # 2. Resumed with a later -D 7: the job keeps 3 (the spec, and Spark's checkpoint); it
    #    dies mid-epoch 5, its parts prepared and its state updated, nothing decided.
    run = job.start("spark.sql.shuffle.partitions=7", ST_RATE="40", STOKER_FAULT="after_prepare:5")
    assert wait_exit(run) != 0
    assert job.record().spec["max_parallelism"] == 3
    assert job.pinned() == {"3"}
    assert state_partitions(job.checkpoint) == {0: 3}

    # Bad N, and N the job has already: refused, nothing changed.
    for bad, words in (("0", "at least 1"), ("abc", "at least 1"), ("-2", "at least 1")):
        res = job.repartition(bad)
        assert res.returncode == 2, res.stdout + res.stderr
        assert "N: must be a whole number" in res.stderr and words in res.stderr
    same = job.repartition("3")
    assert same.returncode == 2 and "3 state partitions already" in same.stderr, same.stderr
    missing = job.stoker("state", "repartition", "nope", "4", "--state-dir", str(job.state))
    assert missing.returncode == 3 and "not found" in missing.stderr

    # 3. Repartition to 5: Spark skips the planned epoch 5 (undecided), rewrites the state.
    res = job.repartition("5")
    assert res.returncode == 0, res.stdout + res.stderr
    out = json.loads(res.stdout)
    assert out["from"] == 3 and out["to"] == 5 and out["max_parallelism"] == 5
    assert 5 in out["skipped"]
    assert job.record().spec["max_parallelism"] == 5
    assert inspect(job.checkpoint).partitions == 5
    assert state_partitions(job.checkpoint) == {0: 5}
    read = job.ids_read()

    # 4. Resumed (paced, so it is still running when the repartition below is tried) with
    #    -D 7 again: 5 partitions, and the counts carry on from the state exactly.
    total = read + 60
    before_run = job.record().current_attempt
    run = job.start("spark.sql.shuffle.partitions=7", ST_TOTAL=str(total), ST_RATE="20")
    try:
        wait_for(
            lambda: job.record().current_attempt > before_run and job.attempt_state() == "RUNNING",
            "the new attempt",
        )
        live = job.repartition("4")
        assert live.returncode == 2 and "is live" in live.stderr, live.stderr
        assert wait_exit(run) == 0, (job.root / "run3.log").read_text()[-3000:]
    finally:
        if run.poll() is None:
            kill_group(run)
    assert str(job.record().state) == "FINISHED"
    assert job.record().spec["max_parallelism"] == 5
    newest = max(int(p.name) for p in (job.checkpoint / "offsets").iterdir() if p.name.isdigit())
    assert inspect(job.checkpoint).last_committed == newest
    assert (
        (
            json.loads((job.checkpoint / "offsets" / str(newest)).read_text().splitlines()[1])[
                "conf"
            ]["spark.sql.shuffle.partitions"]
        )
        == "5"
    )
    assert state_partitions(job.checkpoint) == {0: 5}
    assert_exact_counts(job, total)


def test_an_hdfs_backed_state_is_refused_and_kept(tmp_path: Path) -> None:
    """Spark cannot repartition the HDFS-backed state store (and would leave a batch behind
    that stops the query from starting): refused up front, naming the provider. The job then
    resumes on it although stoker's default is RocksDB."""
    job = Job(tmp_path, "st-hdfs")
    run = job.start(f"{PROVIDER}={HDFS_PROVIDER}", ST_RATE="40")
    try:
        wait_for(lambda: job.committed_epochs() >= 2, "two committed epochs")
        os.killpg(run.pid, signal.SIGTERM)  # a graceful stop: SUSPENDED
        wait_exit(run)
    finally:
        if run.poll() is None:
            kill_group(run)
    assert str(job.record().state) == "SUSPENDED"
    assert job.record().spec["max_parallelism"] == 8  # stoker's default
    before = sorted(str(p) for p in job.checkpoint.rglob("*"))
    res = job.repartition("4")
    assert res.returncode == 2, res.stdout + res.stderr
    assert "HDFSBackedStateStoreProvider" in res.stderr and "does not support" in res.stderr
    assert sorted(str(p) for p in job.checkpoint.rglob("*")) == before
    assert job.record().spec["max_parallelism"] == 8

    # Resumed without the -D: stoker's default is RocksDB now, but the checkpoint keeps the
    # store it was made with (Spark pins it in the offset log), and its counts carry on.
    total = job.ids_read() + 30
    run = job.start(ST_TOTAL=str(total))
    assert wait_exit(run) == 0, (job.root / f"run{job.runs}.log").read_text()[-3000:]
    assert str(job.record().state) == "FINISHED"
    providers = {
        json.loads(f.read_text().splitlines()[1])["conf"][PROVIDER]
        for f in (job.checkpoint / "offsets").iterdir()
        if f.name.isdigit()
    }
    assert providers == {HDFS_PROVIDER}
    assert_exact_counts(job, total)


# the checks, on checkpoints written here and a real SQLite store (no Spark) -------------------
def _checkpoint(
    root: Path,
    batches: int,
    committed: int | None,
    operators: dict[int, str] | None = None,
    conf: dict[str, str] | None = None,
    partitions: dict[int, int] | None = None,
) -> Path:
    """A checkpoint laid out as Spark 4.3 writes one: ``offsets/<b>`` (version line, metadata
    with the SQL settings, one offset per source), ``commits/<b>``, each stateful operator's
    ``state/<op>/_metadata/metadata``. ``partitions``: batch -> shuffle partitions."""
    ck = root / "checkpoint"
    (ck / "offsets").mkdir(parents=True)
    (ck / "commits").mkdir()
    for b in range(batches):
        c = {
            "spark.sql.shuffle.partitions": str((partitions or {}).get(b, 8)),
            PROVIDER: ROCKSDB_PROVIDER,
            **(conf or {}),
        }
        meta = {"batchWatermarkMs": 0, "batchTimestampMs": 0, "conf": c}
        (ck / "offsets" / str(b)).write_text(f"v1\n{json.dumps(meta)}\n{{}}\n")
        if committed is not None and b <= committed:
            (ck / "commits" / str(b)).write_text('v1\n{"nextBatchWatermarkMs":0}\n')
    for op, name in (operators if operators is not None else {0: "stateStoreSave"}).items():
        (ck / "state" / str(op) / "_metadata").mkdir(parents=True)
        info = {"operatorInfo": {"operatorId": op, "operatorName": name}, "stateStoreInfo": []}
        (ck / "state" / str(op) / "_metadata" / "metadata").write_text(f"v1\n{json.dumps(info)}\n")
    return ck


def _refusal(ck: Path, n: int, skip: tuple[int, ...] = ()) -> Refusal:
    with pytest.raises(Refusal) as err:
        check(inspect(ck), n, skip)
    return err.value


def test_the_checkpoint_checks_refuse_what_spark_cannot_do(tmp_path: Path) -> None:
    ok = _checkpoint(tmp_path / "ok", batches=3, committed=2)
    check(inspect(ok), 5)  # a RocksDB aggregation, drained: fine
    assert inspect(ok).partitions == 8 and inspect(ok).uncommitted == []

    hdfs = _checkpoint(tmp_path / "hdfs", 3, 2, conf={PROVIDER: HDFS_PROVIDER})
    assert "HDFSBackedStateStoreProvider" in _refusal(hdfs, 5).message
    old = _checkpoint(tmp_path / "old", 3, 2, conf={PROVIDER: ""})  # Spark's default then
    assert "HDFSBackedStateStoreProvider" in _refusal(old, 5).message
    stateless = _checkpoint(tmp_path / "stateless", 3, 2, operators={})
    assert "keeps no state" in _refusal(stateless, 5).message
    newer = _checkpoint(tmp_path / "newer", 3, 2, operators={0: "StatefulStreamlineAggregate"})
    assert "StatefulStreamlineAggregate" in _refusal(newer, 5).message
    v2 = _checkpoint(
        tmp_path / "v2", 3, 2, conf={"spark.sql.streaming.stateStore.checkpointFormatVersion": "2"}
    )
    assert "format version 2" in _refusal(v2, 5).message
    assert "already" in _refusal(ok, 8).message
    assert _refusal(ok, 0).field == "partitions"
    empty = tmp_path / "empty" / "checkpoint"
    (empty / "offsets").mkdir(parents=True)
    assert "no epoch yet" in _refusal(empty, 5).message
    never = _checkpoint(tmp_path / "never", 1, None)
    assert "no epoch of it has committed" in _refusal(never, 5).message

    # Planned, not committed: skipped only when the caller (who read the store) allows it.
    planned = _checkpoint(tmp_path / "planned", 5, 2)
    assert inspect(planned).uncommitted == [3, 4]
    assert "3-4" in _refusal(planned, 5).message
    assert "4" in _refusal(planned, 5, skip=(3,)).message
    check(inspect(planned), 5, skip=(3, 4))

    # A repartition to 6 that did not finish: only 6 may be asked for (Spark retries it).
    pending = _checkpoint(tmp_path / "pending", 4, 2, partitions={3: 6})
    assert "repartition to 6 that did not finish" in _refusal(pending, 5, skip=(3,)).message
    check(inspect(pending), 6, skip=(3,))


def test_max_parallelism_comes_from_the_conf_and_stays_with_the_job() -> None:
    from stoker.manager.state import keep_max_parallelism, max_parallelism_of
    from stoker.runtime.session import job_max_parallelism, max_parallelism
    from stoker.settings import Settings

    assert max_parallelism_of({}) == 8
    assert max_parallelism_of({"spark.sql.shuffle.partitions": "12"}) == 12
    with pytest.raises(InvalidInput) as err:
        max_parallelism_of({"spark.sql.shuffle.partitions": "0"})
    assert err.value.field == "conf.spark.sql.shuffle.partitions"
    later = Settings(spark_conf={"spark.sql.shuffle.partitions": "7"})
    assert max_parallelism(Settings()) == 8 and max_parallelism(later) == 7
    assert job_max_parallelism(None, later) == 7  # created now: the -D value
    assert job_max_parallelism({"max_parallelism": 3}, later) == 3  # recorded: it wins
    assert keep_max_parallelism({"conf": {}, "max_parallelism": 7}, {"max_parallelism": 3}) == {
        "conf": {},
        "max_parallelism": 3,
    }


def test_the_checkpoint_pins_max_parallelism_over_the_spec(tmp_path: Path) -> None:
    from stoker.runtime.session import job_max_parallelism
    from stoker.settings import Settings

    ck = _checkpoint(tmp_path, batches=2, committed=1, partitions={0: 4, 1: 4})
    assert job_max_parallelism({"max_parallelism": 3}, Settings(), ck) == 4


def test_live_jobs_and_held_locks_are_refused(tmp_path: Path) -> None:
    from stoker.manager.state import LOCK_NAME, repartition
    from stoker.procs import this_owner
    from stoker.runtime.repartition import repartitioning
    from stoker.types import AttemptNo, AttemptState, JobKind, JobState, job_id

    st = open_store(tmp_path / "store.db")
    try:
        state = tmp_path / "job"
        _checkpoint(state, batches=2, committed=1)
        jid = job_id("live")
        st.create_job(jid, "live", {"state_dir": str(state)}, {})
        att = st.start_attempt(jid, this_owner(), 30.0, AttemptNo(0))
        with pytest.raises(InvalidInput) as err:
            repartition(st, "live", 4)
        assert "is live" in str(err.value) and str(os.getpid()) in str(err.value)
        st.finish_attempt(jid, att.attempt, AttemptState.SUSPENDED, JobState.SUSPENDED)

        # Another repartition holds the lock (this process: alive): refused; a driver sees it.
        me = this_owner()
        lock = state / LOCK_NAME
        lock.write_text(
            json.dumps(
                {"host": me.host, "pid": me.pid, "pid_started": me.pid_started, "partitions": 6}
            )
        )
        with pytest.raises(InvalidInput) as err:
            repartition(st, "live", 4)
        assert "being repartitioned already" in str(err.value)
        assert "to 6 partitions" in (repartitioning(state) or "")
        # Left by a process that is gone: nobody is held up by it.
        lock.write_text(
            json.dumps({"host": me.host, "pid": 2**22 + 7, "pid_started": "1", "partitions": 6})
        )
        assert repartitioning(state) is None
        lock.unlink()

        # A job of an application that is running: refused, naming the application.
        app = job_id("app")
        st.create_job(app, "app", {}, {}, kind=JobKind.APPLICATION)
        st.start_attempt(app, this_owner(), 30.0, AttemptNo(0))
        inapp = job_id("inapp")
        st.create_job(inapp, "inapp", {"state_dir": str(state)}, {}, app_id=app)
        with pytest.raises(InvalidInput) as err:
            repartition(st, "inapp", 4)
        assert "application 'app'" in str(err.value)
        with pytest.raises(InvalidInput) as err:
            repartition(st, "app", 4)
        assert err.value.field == "job" and "is an application" in err.value.message
        with pytest.raises(JobNotFound):
            repartition(st, "nope", 4)
    finally:
        st.close()


def test_an_epoch_decided_but_not_in_sparks_commit_log_is_refused(tmp_path: Path) -> None:
    from stoker.manager.state import repartition
    from stoker.procs import this_owner
    from stoker.types import AttemptNo, AttemptState, ControlVersion, Epoch, JobState, job_id

    st = open_store(tmp_path / "store.db")
    try:
        state = tmp_path / "job"
        ck = _checkpoint(state, batches=4, committed=1)  # epochs 2 and 3 planned only
        jid = job_id("decided")
        st.create_job(jid, "decided", {"state_dir": str(state)}, {})
        att = st.start_attempt(jid, this_owner(), 30.0, AttemptNo(0))
        for e in (2, 3):
            st.pin_epoch(jid, Epoch(e), att.attempt, ControlVersion(0))
        st.decide_epoch(jid, Epoch(2), att.attempt, 10, False)
        st.finish_attempt(jid, att.attempt, AttemptState.SUSPENDED, JobState.SUSPENDED)
        before = sorted(str(p) for p in ck.rglob("*"))
        with pytest.raises(InvalidInput) as err:
            repartition(st, "decided", 4)
        assert "epoch 2 of job 'decided' was decided" in str(err.value)
        assert sorted(str(p) for p in ck.rglob("*")) == before
        assert "max_parallelism" not in st.get_job(jid).spec
    finally:
        st.close()
