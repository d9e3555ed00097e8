"""The runtime in-process: ``stoker.run`` on real Spark (one shared local session), real SQLite.

Every test has its own state folder and job id; the SparkSession is created once for the module
(``spark=`` is handed to ``stoker.run``) because a cold session costs many seconds here.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import stoker
from stoker import (
    InvalidInput,
    InvalidPipeline,
    InvalidSink,
    InvalidSource,
    JobFailed,
    JobNotFound,
    JobState,
    JobTerminal,
    Pipeline,
    SinkError,
    StaleAttempt,
    sinks,
    sources,
)
from stoker.clock import ManualClock
from stoker.errors import exit_code
from stoker.runtime.attempt import LeaseKeeper, start_attempt
from stoker.runtime.epoch import EpochProcessor
from stoker.runtime.recovery import recover
from stoker.sinks.base import Recovered, SinkOwner
from stoker.store import Owner, Store, open_store
from stoker.types import AttemptNo, AttemptState, ControlVersion, Epoch, EpochState, job_id
from tests.support import exactly_once, file_sink_ids, wait_for
from tests.support.background import BackgroundRun

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from stoker.runtime.context import EpochContext

TRIGGER = "100ms"
SCHEMA = "id long, name string, score double"


# helpers ---------------------------------------------------------------------------------------


def _store(state: Path) -> Store:
    return open_store(state / "store.db")


def _epochs(state: Path, jid: str) -> dict[int, Any]:
    st = _store(state)
    try:
        return {e.epoch: e for e in st.list_epochs(job_id(jid), limit=1000)}
    finally:
        st.close()


def _job(state: Path, jid: str) -> Any:
    st = _store(state)
    try:
        return st.get_job(job_id(jid))
    finally:
        st.close()


def _attempts(state: Path, jid: str) -> list[Any]:
    st = _store(state)
    try:
        return st.list_attempts(job_id(jid))
    finally:
        st.close()


def _offsets(state: Path) -> dict[int, dict[str, dict[str, Any]]]:
    """Spark's offset log: epoch -> {sid: offset} for every stoker source line."""
    out: dict[int, dict[str, dict[str, Any]]] = {}
    folder = state / "checkpoint" / "offsets"
    if not folder.exists():
        return out
    for f in folder.iterdir():
        if f.name.isdigit():
            lines = f.read_text().splitlines()[2:]
            out[int(f.name)] = {o["sid"]: o for o in map(json.loads, lines)}
    return out


def _offset_files(state: Path) -> list[str]:
    folder = state / "checkpoint" / "offsets"
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def _rows(out: Path) -> dict[int, list[dict[str, Any]]]:
    """Committed rows of a files sink (parquet), by epoch."""
    found: dict[int, list[dict[str, Any]]] = {}
    for d in sorted(out.glob("epoch=*")):
        epoch = int(d.name.split("=")[1])
        found[epoch] = []
        for f in sorted(d.glob("*.parquet")):
            found[epoch].extend(pq.read_table(f).to_pylist())
    return found


def _listing(out: Path) -> list[str]:
    return sorted(str(p.relative_to(out)) for p in out.rglob("*"))


def _drop(folder: Path, name: str, write: Callable[[Path], None]) -> Path:
    """Write a file under a hidden name, then rename it into place (as the source asks)."""
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{name}.tmp"
    write(tmp)
    final = folder / name
    os.rename(tmp, final)
    return final


def _json_lines(folder: Path, name: str, rows: list[dict[str, Any]]) -> Path:
    return _drop(folder, name, lambda p: p.write_text("".join(json.dumps(r) + "\n" for r in rows)))


def _csv(folder: Path, name: str, text: str) -> Path:
    return _drop(folder, name, lambda p: p.write_text(text))


def _parquet(folder: Path, name: str, columns: dict[str, pa.Array]) -> Path:
    return _drop(folder, name, lambda p: pq.write_table(pa.table(columns), p))


def _wait(what: str, pred: Callable[[], bool], timeout: float = 120.0) -> None:
    wait_for(what, pred, timeout, every=0.1)


def _stop_query(spark: SparkSession, jid: str) -> None:
    for q in spark.streams.active:
        if q.name == f"stoker_{jid}".replace("-", "_").replace(".", "_"):
            q.stop()


# 1. a bounded job ------------------------------------------------------------------------------


def test_bounded_job_finishes_with_every_record_committed_once(
    spark: SparkSession, tmp_path: Path
) -> None:
    state, out = tmp_path / "state", tmp_path / "out"
    p = (
        Pipeline("bounded", config={"mod": 2})
        .source(sources.generator(total=5000, max_rows_per_epoch=1000))
        .transform(lambda df, ctx: df.where(df.id % ctx.config["mod"] == 0))
        .sink(sinks.files(str(out)))
    )

    result = stoker.run(p, state_dir=state, trigger=TRIGGER, spark=spark)

    assert (result.job_id, result.state, result.attempt) == ("bounded", JobState.FINISHED, 1)
    assert (result.epochs, result.rows, result.last_epoch) == (5, 2500, 4)
    assert (result.state_dir, result.store_url) == (state, f"sqlite:///{state / 'store.db'}")
    assert file_sink_ids(out) == Counter(range(0, 5000, 2))
    epochs = _epochs(state, "bounded")
    assert sorted(epochs) == [0, 1, 2, 3, 4]
    assert {e.state for e in epochs.values()} == {EpochState.COMMITTED}
    assert [(e.final, e.rows_in, e.decided_by) for _, e in sorted(epochs.items())] == [
        (False, 500, 1),
        (False, 500, 1),
        (False, 500, 1),
        (False, 500, 1),
        (True, 500, 1),
    ]
    # Each timed epoch also says how much of it its sinks' writes took (the scaler's work).
    timed = [e for e in epochs.values() if e.duration_ms is not None]
    assert timed and all(e.work_ms is not None and 0 < e.work_ms <= e.duration_ms for e in timed)
    assert sorted(d.name for d in out.iterdir()) == [
        "_staging",
        "_stoker_owner.json",
        "epoch=0",
        "epoch=1",
        "epoch=2",
        "epoch=3",
        "epoch=4",
    ]
    assert list((out / "_staging").iterdir()) == []
    for n in range(5):
        manifest = json.loads((out / f"epoch={n}" / "_manifest.json").read_text())
        assert (manifest["job_id"], manifest["epoch"], manifest["attempt"]) == ("bounded", n, 1)
    job = _job(state, "bounded")
    assert (job.state, job.current_attempt, job.last_error) == (JobState.FINISHED, 1, None)
    assert [(a.attempt, a.state) for a in _attempts(state, "bounded")] == [
        (1, AttemptState.FINISHED)
    ]

    # An ended job is not silently run again.
    before, offsets_before = _listing(out), _offset_files(state)
    with pytest.raises(JobTerminal) as info:
        stoker.run(p, state_dir=state, trigger=TRIGGER, spark=spark)
    assert str(info.value) == (
        "job 'bounded' has ended in state FINISHED; to run it again from its checkpoint ask "
        'for a restart: --restart (stoker run), "restart": true (REST), restart=True (stoker.run)'
    )
    assert _job(state, "bounded").current_attempt == 1

    # A restart of a finished job finds its final epoch committed: it reads nothing again.
    again = stoker.run(p, state_dir=state, trigger=TRIGGER, spark=spark, restart=True)
    assert (again.state, again.attempt, again.epochs, again.rows, again.last_epoch) == (
        JobState.FINISHED,
        2,
        0,
        0,
        None,
    )
    assert _listing(out) == before
    assert _offset_files(state) == offsets_before
    assert file_sink_ids(out) == Counter(range(0, 5000, 2))
    assert [(a.attempt, a.state) for a in _attempts(state, "bounded")] == [
        (1, AttemptState.FINISHED),
        (2, AttemptState.FINISHED),
    ]


# 2. bounded file sources -----------------------------------------------------------------------


def test_bounded_file_sources_read_their_snapshot_once_with_missing_columns_null(
    spark: SparkSession, tmp_path: Path
) -> None:
    state, out = tmp_path / "state", tmp_path / "out"
    jdir, cdir, pdir = tmp_path / "in-json", tmp_path / "in-csv", tmp_path / "in-parquet"
    _json_lines(
        jdir,
        "j1.json",
        [{"id": 1, "name": "a", "score": 1.5}, {"id": 2, "name": "b", "score": 2.5}],
    )
    _json_lines(jdir, "j2.json", [{"id": 3, "name": "c"}, {"id": 4, "name": "d", "extra": "x"}])
    _csv(cdir, "c1.csv", "id,name,score\n11,k,1.0\n")
    _csv(cdir, "c2.csv", "id,name\n12,l\n")
    _parquet(pdir, "p1.parquet", {"id": pa.array([21], pa.int64()), "name": ["p"], "score": [0.5]})
    _parquet(pdir, "p2.parquet", {"id": pa.array([22], pa.int32()), "score": [7.0]})

    late: list[int] = []

    def add_files_during_first_epoch(df: DataFrame, ctx: EpochContext) -> DataFrame:
        # The folders change after the job's first start: a bounded source must not see it.
        if ctx.epoch == 0:
            _json_lines(jdir, "j3.json", [{"id": 99, "name": "late", "score": 0.0}])
            _csv(cdir, "c3.csv", "id,name,score\n98,late,0.0\n")
            _parquet(pdir, "p3.parquet", {"id": pa.array([97], pa.int64())})
            late.extend([99, 98, 97])
        return df

    p = (
        Pipeline("files-bounded")
        .source(sources.files(str(jdir), "json", SCHEMA, bounded=True, max_files_per_epoch=1))
        .source(sources.files(str(cdir), "csv", SCHEMA, bounded=True, max_files_per_epoch=1))
        .source(sources.files(str(pdir), "parquet", SCHEMA, bounded=True, max_files_per_epoch=1))
        .transform(add_files_during_first_epoch)
        .sink(sinks.files(str(out)))
    )

    result = stoker.run(p, state_dir=state, trigger=TRIGGER, spark=spark)

    assert (result.state, result.epochs, result.rows) == (JobState.FINISHED, 2, 8)
    assert late == [99, 98, 97]
    rows = _rows(out)
    assert sorted(rows) == [0, 1]
    assert sorted((r["id"], r["name"], r["score"]) for r in rows[0]) == [
        (1, "a", 1.5),
        (2, "b", 2.5),
        (11, "k", 1.0),
        (21, "p", 0.5),
    ]
    assert sorted((r["id"], r["name"], r["score"]) for r in rows[1]) == [
        (3, "c", None),
        (4, "d", None),
        (12, "l", None),
        (22, None, 7.0),
    ]
    assert file_sink_ids(out) == Counter([1, 2, 3, 4, 11, 12, 21, 22])
    offsets = _offsets(state)
    assert {sid: (o["seq"], o["finished"]) for sid, o in offsets[1].items()} == {
        "s0": (2, True),
        "s1": (2, True),
        "s2": (2, True),
    }
    assert _epochs(state, "files-bounded")[1].final is True

    # Still sealed on a restart: more files, the same output.
    _json_lines(jdir, "j4.json", [{"id": 96}])
    before = _listing(out)
    again = stoker.run(p, state_dir=state, trigger=TRIGGER, spark=spark, restart=True)
    assert (again.state, again.epochs) == (JobState.FINISHED, 0)
    assert _listing(out) == before


# 3. bounded + unbounded ------------------------------------------------------------------------


def test_epochs_continue_after_the_bounded_source_of_a_mixed_job_ends(
    spark: SparkSession, tmp_path: Path
) -> None:
    state, out = tmp_path / "state", tmp_path / "out"
    bdir, udir = tmp_path / "bounded", tmp_path / "unbounded"
    _json_lines(bdir, "b1.json", [{"id": i} for i in range(0, 10)])
    _json_lines(bdir, "b2.json", [{"id": i} for i in range(10, 20)])
    udir.mkdir()
    p = (
        Pipeline("mixed")
        .source(sources.files(str(bdir), "json", "id long", bounded=True, max_files_per_epoch=1))
        .source(sources.files(str(udir), "json", "id long"))
        .sink(sinks.files(str(out)))
    )
    run = BackgroundRun(pipeline=p, state_dir=state, trigger=TRIGGER, spark=spark)
    try:
        _wait("the bounded source to be read", lambda: set(file_sink_ids(out)) == set(range(20)))
        offsets = _offsets(state)
        ended = min(n for n, o in offsets.items() if o["s0"]["finished"])
        assert ended == 1
        assert [offsets[n]["s1"]["finished"] for n in sorted(offsets)] == [False] * len(offsets)

        expected = set(range(20))
        for k in range(2):
            ids = range(100 * (k + 1), 100 * (k + 1) + 5)
            _json_lines(udir, f"u{k}.json", [{"id": i} for i in ids])
            expected |= set(ids)
            _wait(
                f"unbounded file {k} in the sink", lambda e=expected: set(file_sink_ids(out)) == e
            )
        assert run.result is None and run.error is None  # still running
    finally:
        _stop_query(spark, "mixed")
        run.wait()

    assert run.error is None, run.error
    assert run.result is not None
    assert run.result.state == JobState.CANCELED
    assert file_sink_ids(out) == Counter(expected)
    rows = _rows(out)
    later = [n for n in rows if n > ended]
    assert len(later) >= 2  # the two unbounded files came in epochs after the bounded end
    assert {r["id"] for n in later for r in rows[n]} == set(range(100, 105)) | set(range(200, 205))
    epochs = _epochs(state, "mixed")
    assert sorted(epochs) == sorted(rows)
    assert {e.state for e in epochs.values()} == {EpochState.COMMITTED}
    assert not any(e.final for e in epochs.values())
    assert _job(state, "mixed").state == JobState.CANCELED
    assert [(a.attempt, a.state) for a in _attempts(state, "mixed")] == [(1, AttemptState.CANCELED)]


# 4. several sources ----------------------------------------------------------------------------


def test_sources_of_one_schema_are_unioned(spark: SparkSession, tmp_path: Path) -> None:
    state, out = tmp_path / "state", tmp_path / "out"
    p = (
        Pipeline("union")
        .source(sources.generator(total=3000, max_rows_per_epoch=1000))
        .source(
            sources.generator(total=2000, max_rows_per_epoch=1000),
            map=lambda df: df.selectExpr("id + 1000000 as id"),
        )
        .sink(sinks.files(str(out)))
    )
    result = stoker.run(p, state_dir=state, trigger=TRIGGER, spark=spark)
    assert (result.state, result.epochs, result.rows) == (JobState.FINISHED, 3, 5000)
    assert file_sink_ids(out) == Counter([*range(3000), *range(1_000_000, 1_002_000)])
    assert [e.rows_in for _, e in sorted(_epochs(state, "union").items())] == [2000, 2000, 1000]


def _two_schemas(t: Path) -> Pipeline:
    _json_lines(t / "names", "n.json", [{"name": "x"}])
    return (
        Pipeline("late")
        .source(sources.generator(total=10))
        .source(sources.files(str(t / "names"), "json", "name string", bounded=True))
        .sink(sinks.files(str(t / "out")))
    )


def _unknown_column(df: DataFrame) -> DataFrame:
    return df.selectExpr("id", "nope + 1 AS x")  # the line the refusal must name


def _bad_column(t: Path) -> Pipeline:
    return (
        Pipeline("late")
        .source(sources.generator(total=10))
        .stream(_unknown_column)
        .sink(sinks.files(str(t / "out")))
    )


# Bad input that only Spark can see: found when the sources are opened, after the job record.
SEEN_BY_SPARK: dict[str, tuple[Callable[[Path], Pipeline], type[Exception], str, str]] = {
    "sources of different schemas": (
        _two_schemas,
        InvalidPipeline,
        "sources",
        "sources must share one schema to be unioned: ",
    ),
    "a column the sources lack": (
        _bad_column,
        InvalidPipeline,
        "stream",
        "Spark cannot analyse it on the sources' columns: [UNRESOLVED_COLUMN",
    ),
}


@pytest.mark.parametrize("case", sorted(SEEN_BY_SPARK))
def test_bad_input_seen_by_spark_fails_before_any_epoch(
    spark: SparkSession, tmp_path: Path, case: str
) -> None:
    build, exc, field, message = SEEN_BY_SPARK[case]
    state = tmp_path / "state"
    p = build(tmp_path)
    with pytest.raises(exc) as info:
        stoker.run(p, state_dir=state, trigger=TRIGGER, spark=spark)
    err = info.value
    assert isinstance(err, InvalidInput)
    assert err.field == field
    assert err.message.startswith(message), err.message
    if case == "a column the sources lack":  # the user's line, not only Spark's words
        assert err.message.endswith(
            f"(at {__file__}:{_unknown_column.__code__.co_firstlineno + 1} in _unknown_column: "
            'return df.selectExpr("id", "nope + 1 AS x")  # the line the refusal must name)'
        ), err.message
    assert _offset_files(state) == []
    assert _epochs(state, "late") == {}
    assert not list((tmp_path / "out").glob("epoch=*"))
    # Bad input changes nothing: not even a job record is left behind.
    with pytest.raises(JobNotFound):
        _job(state, "late")


# 5. fencing ------------------------------------------------------------------------------------

OTHER = Owner(host="elsewhere", pid=4242, pid_started="boot-1")


@pytest.mark.parametrize("how", ["superseded", "lapsed and replaced"])
def test_a_stale_attempt_cannot_decide_an_epoch(tmp_path: Path, how: str) -> None:
    clock = ManualClock()
    store = open_store(tmp_path / "store.db", clock)
    jid = job_id("stale")
    store.create_job(jid, "stale", {}, {})
    first = start_attempt(store, jid, lease_ttl=30.0)
    assert first.attempt == 1
    pinned = store.pin_epoch(jid, Epoch(0), first.attempt, ControlVersion(0))
    assert pinned.state == EpochState.PINNED

    if how == "superseded":
        # The first attempt's lease is live; a new one takes over because it saw it dead.
        second = store.start_attempt(jid, OTHER, 30.0, first.attempt, previous_dead=True)
        assert second.attempt == 2
    else:
        # Seen unrenewed for a whole TTL by the taker's monotonic clock (stoker.leases).
        clock.advance(31.0)
        second = store.start_attempt(jid, OTHER, 30.0, first.attempt, lapsed=first.lease_seen)
        assert second.attempt == 2

    with pytest.raises(StaleAttempt):
        store.decide_epoch(jid, Epoch(0), first.attempt, 10, False)
    rec = store.get_epoch(jid, Epoch(0))
    assert rec is not None
    assert (rec.state, rec.decided_by, rec.pinned_by) == (EpochState.PINNED, None, 1)
    assert store.renew_lease(jid, first.attempt, 30.0) is False
    store.close()


def test_an_attempt_whose_lease_lapsed_by_its_own_clock_fences_itself(tmp_path: Path) -> None:
    """Nobody took the job over, and a wall clock stepped past the lease's expiry would let
    the store decide: the holder itself stops once a TTL has passed on its monotonic clock
    since its last renewal (the store compares no wall clock, stoker.leases)."""
    clock = ManualClock()
    store = open_store(tmp_path / "store.db", clock)
    jid = job_id("lapsing")
    store.create_job(jid, "lapsing", {}, {})
    first = start_attempt(store, jid, lease_ttl=30.0)
    clock.step(3600.0)
    assert store.renew_lease(jid, first.attempt, 30.0) is True  # a step takes nothing away
    lease = LeaseKeeper(store, first, 0.0)  # no renewal for a whole TTL (of 0 s) by its clock
    with pytest.raises(StaleAttempt, match="lapsed without renewal"):
        lease.check()
    store.close()


def test_a_superseded_epoch_processor_prepares_but_cannot_decide(
    spark: SparkSession, tmp_path: Path
) -> None:
    store = open_store(tmp_path / "store.db")
    jid = job_id("stale-proc")
    out = tmp_path / "out"
    sink = sinks.files(str(out))
    p = Pipeline("stale-proc").source(sources.generator(total=5)).sink(sink)
    store.create_job(jid, "stale-proc", {}, {})
    first = start_attempt(store, jid, lease_ttl=30.0)
    sink.open(SinkOwner(jid, "test-uid"), tmp_path)
    lease = LeaseKeeper(store, first, 30.0)  # not started: no renewal behind the test's back
    proc = EpochProcessor(p, store, lease, tmp_path / "checkpoint")
    store.start_attempt(jid, OTHER, 30.0, first.attempt, previous_dead=True)

    with pytest.raises(StaleAttempt):
        proc(spark.range(5), 0)

    assert isinstance(proc.error, StaleAttempt)
    rec = store.get_epoch(jid, Epoch(0))
    assert rec is not None and (rec.state, rec.decided_by) == (EpochState.PINNED, None)
    assert not (out / "epoch=0").exists()
    assert [d.name for d in (out / "_staging").iterdir()] == ["epoch=0.attempt=1.owner=test-uid"]
    assert proc.final_epoch is None and not proc.timings

    # The lease keeper notices too; from then on the fence step stops an epoch before the pin.
    assert lease.renew() is False
    assert (
        lease.fenced
        == "attempt 1 of job 'stale-proc' lost its lease (a newer attempt owns the job)"
    )
    with pytest.raises(StaleAttempt):
        proc(spark.range(5), 1)
    assert store.get_epoch(jid, Epoch(1)) is None

    # The owner's recovery aborts what the stale attempt prepared.
    owner = store.get_job(jid).current_attempt
    assert recover(store, jid, [sink], up_to=owner) == {
        sink.name: Recovered(aborted=[(Epoch(0), AttemptNo(1))])
    }
    assert list((out / "_staging").iterdir()) == []
    store.close()


def test_a_job_superseded_mid_run_raises_stale_attempt_and_decides_nothing_more(
    spark: SparkSession, tmp_path: Path
) -> None:
    state, out = tmp_path / "state", tmp_path / "out"

    def supersede_at_epoch_2(df: DataFrame, ctx: EpochContext) -> DataFrame:
        if ctx.epoch == 2:
            st = _store(state)
            try:
                st.start_attempt(ctx.job_id, OTHER, 30.0, ctx.attempt, previous_dead=True)
            finally:
                st.close()
        return df

    p = (
        Pipeline("superseded")
        .source(sources.generator(total=5000, max_rows_per_epoch=1000))
        .transform(supersede_at_epoch_2)
        .sink(sinks.files(str(out)))
    )
    with pytest.raises(StaleAttempt):
        stoker.run(p, state_dir=state, trigger=TRIGGER, spark=spark)

    epochs = _epochs(state, "superseded")
    assert {n: (e.state, e.decided_by) for n, e in epochs.items()} == {
        0: (EpochState.COMMITTED, 1),
        1: (EpochState.COMMITTED, 1),
        2: (EpochState.PINNED, None),
    }
    assert file_sink_ids(out) == Counter(range(2000))
    assert sorted(d.name for d in out.glob("epoch=*")) == ["epoch=0", "epoch=1"]
    job = _job(state, "superseded")
    assert (job.state, job.current_attempt) == (JobState.RUNNING, 2)
    assert [(a.attempt, a.state) for a in _attempts(state, "superseded")] == [
        (1, AttemptState.SUPERSEDED),
        (2, AttemptState.RUNNING),
    ]


# 6. bad input ----------------------------------------------------------------------------------


def _gen() -> Any:
    return sources.generator(total=10)


def _out(tmp: Path) -> Any:
    return sinks.files(str(tmp / "out"))


def _unreadable(tmp: Path) -> Path:
    folder = tmp / "locked"
    folder.mkdir()
    folder.chmod(0)
    return folder


def _a_file(tmp: Path) -> Path:
    f = tmp / "plain.json"
    f.write_text("{}\n")
    return f


BAD: dict[str, tuple[Callable[[Path], Pipeline], dict[str, Any], type[Exception], str, str]] = {
    "no source": (
        lambda t: Pipeline("bad").sink(_out(t)),
        {},
        InvalidPipeline,
        "sources",
        "the pipeline has no source; add one with .source()",
    ),
    "no sink": (
        lambda t: Pipeline("bad").source(_gen()),
        {},
        InvalidPipeline,
        "sinks",
        "the pipeline has no sink; add one with .sink()",
    ),
    "unknown source format": (
        lambda t: Pipeline("bad").source(sources.files(str(t), "xml", "id long")).sink(_out(t)),
        {},
        InvalidSource,
        "files.format",
        "unknown format 'xml'; use one of json, csv, parquet",
    ),
    "unknown sink format": (
        lambda t: Pipeline("bad").source(_gen()).sink(sinks.files(str(t / "o"), "xml")),
        {},
        InvalidSink,
        "files.format",
        "unknown format 'xml'; use one of parquet, json, csv, orc",
    ),
    "missing input folder": (
        lambda t: (
            Pipeline("bad").source(sources.files(str(t / "nope"), "json", "id long")).sink(_out(t))
        ),
        {},
        InvalidSource,
        "files.path",
        "input folder '{tmp}/nope' does not exist",
    ),
    "input is a file": (
        lambda t: (
            Pipeline("bad").source(sources.files(str(_a_file(t)), "json", "id long")).sink(_out(t))
        ),
        {},
        InvalidSource,
        "files.path",
        "input path '{tmp}/plain.json' is not a folder",
    ),
    "unreadable input folder": (
        lambda t: (
            Pipeline("bad")
            .source(sources.files(str(_unreadable(t)), "json", "id long"))
            .sink(_out(t))
        ),
        {},
        InvalidSource,
        "files.path",
        "input folder '{tmp}/locked' is not readable",
    ),
    "bad max_files_per_epoch": (
        lambda t: (
            Pipeline("bad")
            .source(sources.files(str(t), "json", "id long", max_files_per_epoch=0))
            .sink(_out(t))
        ),
        {},
        InvalidSource,
        "files.max_files_per_epoch",
        "must be >= 1",
    ),
    "schema that does not parse": (
        lambda t: Pipeline("bad").source(sources.files(str(t), "json", "id lon")).sink(_out(t)),
        {},
        InvalidSource,
        "files.schema",
        "unknown type 'lon' of column 'id'",
    ),
    "bad generator": (
        lambda t: Pipeline("bad").source(sources.generator(total=-1)).sink(_out(t)),
        {},
        InvalidSource,
        "generator.total",
        "must be an integer >= 0, got -1",
    ),
    "bad postgres table": (
        lambda t: (
            Pipeline("bad")
            .source(_gen())
            .sink(sinks.postgres("postgresql://127.0.0.1:1/x", "t; drop"))
        ),
        {},
        InvalidSink,
        "postgres.table",
        "'t; drop' is not a plain table name",
    ),
    "bad job id": (
        lambda t: Pipeline("bad").source(_gen()).sink(_out(t)),
        {"job_id": "no/slashes"},
        InvalidInput,
        "job_id",
        "'no/slashes' is not a valid job id",
    ),
    "bad pipeline name": (
        lambda t: Pipeline("bad name").source(_gen()).sink(_out(t)),
        {},
        InvalidInput,
        "job_id",
        "'bad name' is not a valid job id",
    ),
    "bad -D setting": (
        lambda t: Pipeline("bad").source(_gen()).sink(_out(t)),
        {"conf": {"stoker.nope": "1"}},
        InvalidInput,
        "stoker.nope",
        "unknown stoker setting; known: ",
    ),
    "bad -D key": (
        lambda t: Pipeline("bad").source(_gen()).sink(_out(t)),
        {"conf": {"nope": "1"}},
        InvalidInput,
        "nope",
        "unknown setting: use spark.<conf> or stoker.<key>",
    ),
    "bad trigger": (
        lambda t: Pipeline("bad").source(_gen()).sink(_out(t)),
        {"trigger": "soon"},
        InvalidInput,
        "trigger",
        "'soon' is not a duration like '500ms', '2s', '5m', '1h' or '7d'",
    ),
    "bad store url": (
        lambda t: Pipeline("bad").source(_gen()).sink(_out(t)),
        {"store": "mysql://h/db"},
        InvalidInput,
        "store",
        "unsupported store URL 'mysql://h/db'",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_fails_clearly_before_anything_is_written(
    spark: SparkSession, tmp_path: Path, case: str
) -> None:
    build, kwargs, exc, field, message = BAD[case]
    if case == "unreadable input folder" and os.geteuid() == 0:
        pytest.skip("root can read a folder with mode 000")
    inputs, state = tmp_path / "in", tmp_path / "state"
    inputs.mkdir()
    pipeline = build(inputs)
    with pytest.raises(exc) as info:
        stoker.run(pipeline, state_dir=state, spark=spark, **{"trigger": TRIGGER, **kwargs})
    assert type(info.value) is exc
    err = info.value
    assert isinstance(err, InvalidInput)
    assert err.field == field
    assert err.message.startswith(message.format(tmp=inputs)), err.message
    assert not state.exists()  # no store (no job record), no checkpoint
    assert not (inputs / "out").exists()


def test_an_unreachable_sink_fails_before_anything_is_written_but_not_as_bad_input(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The server may be down rather than the DSN wrong: a SinkError (exit 16, HTTP 503), not
    InvalidInput (exit 2, 422); still nothing is written."""
    state = tmp_path / "state"
    p = Pipeline("bad").source(_gen()).sink(sinks.postgres("postgresql://127.0.0.1:1/x", "t"))
    with pytest.raises(SinkError) as info:
        stoker.run(p, state_dir=state, spark=spark, trigger=TRIGGER)
    err = info.value
    assert type(err) is SinkError and not isinstance(err, InvalidInput)
    assert err.field == "postgres.dsn"
    assert err.message.startswith("cannot connect to PostgreSQL: "), err.message
    assert exit_code(err) == 16
    assert not state.exists()


def _running_counts(df: DataFrame) -> DataFrame:
    """A running count per key: a streaming aggregation without a watermark."""
    return df.groupBy((df.id % 3).alias("k")).count()


def test_a_running_aggregation_runs_in_complete_mode_and_is_refused_in_append(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Spark refuses an aggregation without a watermark in append mode (the default): refused
    before the job is recorded, naming output_mode and the fix. In complete mode each epoch is
    the whole result, and the files sink's ``current`` snapshot holds each key's last count.
    (Update mode into files is refused: tests/unit/sinks/test_output_modes.py.)"""
    out = tmp_path / "out"

    def pipeline(**kwargs: Any) -> Pipeline:
        gen = sources.generator(total=300, max_rows_per_epoch=100)
        return (
            Pipeline("counts", **kwargs)
            .source(gen, map=_running_counts)
            .sink(sinks.files(str(out)))
        )

    refused = tmp_path / "refused"
    with pytest.raises(InvalidPipeline) as info:
        stoker.run(pipeline(), state_dir=refused, trigger=TRIGGER, spark=spark)
    assert info.value.field == "output_mode"
    assert "output_mode='update'" in info.value.message, info.value.message
    assert not out.exists()
    with pytest.raises(JobNotFound):
        _job(refused, "counts")

    state = tmp_path / "state"
    result = stoker.run(
        pipeline(output_mode="complete"), state_dir=state, trigger=TRIGGER, spark=spark
    )
    assert result.state == JobState.FINISHED
    current = pq.read_table(out / "current").to_pylist()
    assert {int(r["k"]): int(r["count"]) for r in current} == {0: 100, 1: 100, 2: 100}
    assert len(current) == 3
    assert _job(state, "counts").spec["output_mode"] == "complete"
    assert (state / "checkpoint" / "state").is_dir()


def test_an_unknown_output_mode_is_refused_when_the_pipeline_is_made() -> None:
    with pytest.raises(InvalidPipeline) as info:
        Pipeline("bad", output_mode="upsert")
    assert info.value.field == "output_mode"
    assert "append, update, complete" in info.value.message


def test_a_transform_that_is_not_callable_is_refused_when_set() -> None:
    with pytest.raises(InvalidPipeline) as info:
        Pipeline("bad").transform("df.where('id > 1')")  # type: ignore[arg-type]
    assert (info.value.field, info.value.message) == ("transform", "must be callable, got str")


def _local_postgres() -> str:
    psycopg = pytest.importorskip("psycopg")
    dsn = "postgresql://postgres@127.0.0.1:5432/test"
    try:
        with psycopg.connect(dsn, connect_timeout=3) as conn:
            row = conn.execute("SHOW max_prepared_transactions").fetchone()
    except psycopg.Error as e:
        pytest.skip(f"no PostgreSQL at {dsn}: {e}")
    if row is None or int(row[0]) != 0:
        pytest.skip("the local PostgreSQL allows prepared transactions")
    return dsn


def test_postgres_without_prepared_transactions_says_how_to_fix_it(
    spark: SparkSession, tmp_path: Path
) -> None:
    dsn = _local_postgres()
    state = tmp_path / "state"
    p = Pipeline("nopg").source(_gen()).sink(sinks.postgres(dsn, "stoker_never_created"))
    with pytest.raises(SinkError) as info:
        stoker.run(p, state_dir=state, trigger=TRIGGER, spark=spark)
    assert info.value.field == "postgres"
    assert info.value.message == (
        "the server has max_prepared_transactions = 0, so it cannot hold prepared "
        "transactions; set max_prepared_transactions to at least the number of parallel tasks "
        "(e.g. 64) in postgresql.conf (or ALTER SYSTEM SET max_prepared_transactions = 64) and "
        "restart the server"
    )
    assert not state.exists()


def test_a_transform_returning_no_dataframe_is_refused_before_the_job_exists(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Found by the check run on an empty batch (issue 23 item 3): bad input, exit 2, nothing
    recorded; it used to fail the job at its first epoch."""
    state, out = tmp_path / "state", tmp_path / "out"
    p = Pipeline("nodf").source(_gen()).transform(lambda df, ctx: 42).sink(sinks.files(str(out)))
    with pytest.raises(InvalidPipeline) as info:
        stoker.run(p, state_dir=state, trigger=TRIGGER, spark=spark)
    assert (info.value.field, info.value.message) == (
        "transform",
        "must return a DataFrame, returned int",
    )
    with pytest.raises(JobNotFound):
        _job(state, "nodf")
    assert not out.exists()


def test_config_is_pinned_per_epoch_and_new_defaults_make_a_new_version(
    spark: SparkSession, tmp_path: Path
) -> None:
    from pyspark.sql import functions as F

    state, out = tmp_path / "state", tmp_path / "out"
    seen: list[EpochContext] = []

    def pipeline(label: str, fail_at: int | None) -> Pipeline:
        def labelled(df: DataFrame, ctx: EpochContext) -> DataFrame:
            seen.append(ctx)
            if ctx.epoch == fail_at:
                raise RuntimeError(f"boom at epoch {ctx.epoch}")
            return df.withColumn("label", F.lit(ctx.config["label"]))

        return (
            Pipeline("pinned", config={"label": label})
            .source(sources.generator(total=4000, max_rows_per_epoch=1000))
            .transform(labelled)
            .sink(sinks.files(str(out)))
        )

    with pytest.raises(JobFailed) as info:
        stoker.run(pipeline("a", fail_at=2), state_dir=state, trigger=TRIGGER, spark=spark)
    assert "boom at epoch 2" in str(info.value)
    assert [(c.epoch, c.attempt, c.control_version, dict(c.config)) for c in seen] == [
        (-1, 0, 0, {"label": "a"}),  # the check before the job is recorded (issue 23 item 3)
        (0, 1, 0, {"label": "a"}),
        (1, 1, 0, {"label": "a"}),
        (2, 1, 0, {"label": "a"}),
    ]
    assert seen[1].job_id == "pinned"
    with pytest.raises(TypeError):
        seen[1].config["label"] = "z"  # type: ignore[index]
    assert _job(state, "pinned").state == JobState.FAILED

    # Later run, new declared defaults: a new control version. The epoch pinned before the
    # failure replays with its pinned version; only new epochs see the new one.
    seen.clear()
    result = stoker.run(
        pipeline("b", fail_at=None), state_dir=state, trigger=TRIGGER, spark=spark, restart=True
    )
    assert (result.state, result.attempt, result.epochs) == (JobState.FINISHED, 2, 2)
    assert [(c.epoch, c.attempt, c.control_version, dict(c.config)) for c in seen] == [
        (-1, 0, 0, {"label": "b"}),  # the check, with the config the new run declares
        (2, 2, 0, {"label": "a"}),
        (3, 2, 1, {"label": "b"}),
    ]
    epochs = _epochs(state, "pinned")
    assert {n: (e.control_version, e.state, e.decided_by) for n, e in epochs.items()} == {
        0: (0, EpochState.COMMITTED, 1),
        1: (0, EpochState.COMMITTED, 1),
        2: (0, EpochState.COMMITTED, 2),
        3: (1, EpochState.COMMITTED, 2),
    }
    st = _store(state)
    try:
        jid = job_id("pinned")
        assert st.get_job(jid).control_version == 1
        assert st.control_snapshot(jid, ControlVersion(0)).config == {"label": "a"}
        assert st.control_snapshot(jid, ControlVersion(1)).config == {"label": "b"}
    finally:
        st.close()
    labels = {n: {r["label"] for r in rows} for n, rows in _rows(out).items()}
    assert labels == {0: {"a"}, 1: {"a"}, 2: {"a"}, 3: {"b"}}
    exactly_once(file_sink_ids(out), 4000)

    # The same defaults again: no new version.
    seen.clear()
    stoker.run(pipeline("b", fail_at=None), state_dir=state, spark=spark, restart=True)
    assert _job(state, "pinned").control_version == 1
    assert [c.epoch for c in seen] == [-1]  # the check only: no epoch ran


def test_sparks_python_workers_import_the_installed_pyspark_not_its_zip(
    spark: SparkSession,
) -> None:
    """Spark puts its pyspark.zip first on its Python workers' path; with PySpark from PyPI
    that zip is a copy of the installed package that Python compiles again in every worker.
    The driver's JVM starts with stoker's worker site (runtime/workersite), which takes the
    copy off their path: a task's worker imports the installed, compiled package."""
    import pyspark
    from pyspark.sql import functions as F

    where = F.udf(lambda _: __import__("pyspark").__file__, "string")
    [row] = spark.range(1).select(where(F.col("id")).alias("f")).collect()
    assert ".zip" not in row["f"], row["f"]
    assert row["f"] == pyspark.__file__
