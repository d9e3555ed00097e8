"""The Kafka source (issue 42 item 2) against a real Apache Kafka broker (tests/kafka.py).

Jobs read JSON ids from topics into a files sink and the sink must hold each id once: with
transactions aborted and left open between committed ones (never read under read_committed,
and an epoch never waits for them), across a driver SIGKILLed at steps of the epoch protocol
(its epoch replayed from the logged offsets), with a partition added mid-run (read from its
beginning). A missing topic and records deleted by retention end the job with exit 2 naming
them; ``fail_on_data_loss=False`` skips the deleted records instead.
"""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import Producer

from stoker import JobState, Pipeline, sinks, sources
from stoker.errors import InvalidSource, exit_code
from stoker.store import open_store
from stoker.types import EpochState, job_id
from tests.support import (
    APPS,
    exactly_once,
    file_sink_ids,
    kill_group,
    start_driver,
    wait_for,
    wait_group_gone,
)
from tests.support.background import BackgroundRun

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from tests.kafka import ThrowawayKafka

pytestmark = [pytest.mark.timeout(1200)]

TRIGGER = "100ms"
RUN = 420.0  # a cold Spark driver on two shared cores


# helpers ---------------------------------------------------------------------------------------
def produce(bootstrap: str, topic: str, ids: Iterable[int], partitions: int = 1) -> None:
    """``{"id": n}`` for each id, round robin over the partitions, acknowledged."""
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for n in ids:
        p.produce(
            topic, json.dumps({"id": n}).encode(), key=str(n).encode(), partition=n % partitions
        )
    assert p.flush(60) == 0


def transactional(bootstrap: str, name: str) -> Any:
    # Open for minutes while a cold Spark starts: the default timeout (60 s) would abort it.
    p = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": name, "transaction.timeout.ms": 600000}
    )
    p.init_transactions(60)
    return p


def in_txn(p: Any, topic: str, ids: Iterable[int], partitions: int, commit: bool | None) -> None:
    """Produce ids in one transaction: committed (True), aborted (False) or left open (None)."""
    p.begin_transaction()
    for n in ids:
        p.produce(topic, json.dumps({"id": n}).encode(), partition=n % partitions)
    p.flush(60)
    if commit is True:
        p.commit_transaction(60)
    elif commit is False:
        p.abort_transaction(60)


def pipeline(jid: str, bootstrap: str, topic: str | None, out: Path, **kw: Any) -> Pipeline:
    src = sources.kafka(bootstrap, topics=[topic] if topic else None, **kw)
    return (
        Pipeline(jid)
        .source(src)
        .transform(lambda df: sources.decode_json(df, "id long", keep=("partition", "offset")))
        .sink(sinks.files(str(out)))
    )


def _stop_query(spark: SparkSession, jid: str) -> None:
    for q in spark.streams.active:
        if q.name == f"stoker_{jid}":
            q.stop()


def holds(out: Path, ids: Iterable[int]) -> bool:
    return set(file_sink_ids(out)) >= set(ids)


# in the test's process -------------------------------------------------------------------------
def test_rows_like_sparks_and_aborted_or_open_transactions_never_read(
    spark: SparkSession, kafka_server: ThrowawayKafka, kafka_topic: Any, tmp_path: Path
) -> None:
    """Committed records are read once each, with Spark's Kafka columns; records of aborted
    transactions never, and an open transaction holds back nothing before it (the epoch ends
    at the last stable offset), its records read once it commits."""
    boot = kafka_server.bootstrap
    topic = kafka_topic(partitions=3)
    out, state = tmp_path / "out", tmp_path / "state"
    produce(boot, topic, range(0, 30), partitions=3)
    tx = transactional(boot, f"{topic}-tx")
    in_txn(tx, topic, range(1000, 1030), 3, commit=False)  # aborted: never read
    in_txn(tx, topic, range(30, 60), 3, commit=True)
    in_txn(tx, topic, range(2000, 2030), 3, commit=None)  # open while the job runs
    jid = "ksrc_txn"
    rows: list[dict[str, Any]] = []

    def grab(df: Any, ctx: Any) -> Any:
        rows.extend(r.asDict() for r in df.limit(3).collect())
        return sources.decode_json(df, "id long", keep=("partition", "offset"))

    src = sources.kafka(boot, topics=topic, max_records_per_epoch=25)
    p = Pipeline(jid).source(src).transform(grab).sink(sinks.files(str(out)))
    run = BackgroundRun(pipeline=p, state_dir=state, trigger=TRIGGER, spark=spark)
    try:
        wait_for("ids 0..59 in the sink", lambda: holds(out, range(60)) or run.ended(), RUN)
        assert not run.ended(), run.error
        # Everything before the open transaction is read (the epoch ended at the last stable
        # offset, not waiting for it); nothing of it, nothing twice.
        exactly_once(file_sink_ids(out), 60)
        for n in range(3000, 3003):  # more in the open transaction, then it commits
            tx.produce(topic, json.dumps({"id": n}).encode(), partition=n % 3)
        tx.commit_transaction(60)
        later = set(range(2000, 2030)) | set(range(3000, 3003))
        wait_for("the transaction's ids", lambda: holds(out, later) or run.ended(), RUN)
        got = file_sink_ids(out)
        assert all(v == 1 for v in got.values()), {k: v for k, v in got.items() if v > 1}
        assert set(got) == set(range(60)) | later
    finally:
        _stop_query(spark, jid)
        run.wait()
    row = rows[0]
    assert set(row) == {
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
        "headers",
    }
    assert row["topic"] == topic and isinstance(row["value"], bytearray | bytes)
    assert json.loads(bytes(row["value"]))["id"] >= 0
    assert row["timestampType"] == 0 and row["timestamp"] is not None
    assert row["headers"] == []
    st = open_store(state / "store.db")
    try:
        recs = st.list_epochs(job_id(jid), limit=1000)
        assert all(e.state == EpochState.COMMITTED for e in recs)
        # max_records_per_epoch=25: the 60 first ids took at least three epochs.
        assert max((e.rows_in or 0) for e in recs) <= 25
        assert any(e.backlog for e in recs), [e.backlog for e in recs]
        # Where the backlog is: each partition's, kept with the epoch (stoker status, /metrics).
        behind = [e for e in recs if e.backlog and e.progress]
        assert behind, [(e.epoch, e.backlog, e.progress) for e in recs]
        (src,) = behind[0].progress["sources"]
        assert src["backlog"] == behind[0].backlog
        assert set(src["partitions"]) <= {f"{topic}/{n}" for n in range(8)}
        assert sum(src["partitions"].values()) == src["backlog"]
    finally:
        st.close()


def test_a_partition_added_mid_run_is_read_from_its_beginning(
    spark: SparkSession, kafka_server: ThrowawayKafka, kafka_topic: Any, tmp_path: Path
) -> None:
    boot = kafka_server.bootstrap
    topic = kafka_topic(partitions=2)
    out, state = tmp_path / "out", tmp_path / "state"
    produce(boot, topic, range(0, 40), partitions=2)
    jid = "ksrc_added"
    p = pipeline(jid, boot, topic, out)
    run = BackgroundRun(pipeline=p, state_dir=state, trigger=TRIGGER, spark=spark)
    try:
        wait_for("ids 0..39", lambda: holds(out, range(40)) or run.ended(), RUN)
        assert not run.ended(), run.error
        kafka_server.add_partitions(topic, 2)
        # Written into the new partitions (2 and 3) before the job has seen them.
        produce(boot, topic, range(40, 80), partitions=4)
        wait_for("ids 40..79", lambda: holds(out, range(80)) or run.ended(), RUN)
        assert not run.ended(), run.error
        exactly_once(file_sink_ids(out), 80)
    finally:
        _stop_query(spark, jid)
        run.wait()


def test_a_missing_topic_is_bad_input_not_a_hang(
    spark: SparkSession, kafka_server: ThrowawayKafka, tmp_path: Path
) -> None:
    p = pipeline("ksrc_missing", kafka_server.bootstrap, "no_such_topic", tmp_path / "out")
    run = BackgroundRun(pipeline=p, state_dir=tmp_path / "state", trigger=TRIGGER, spark=spark)
    run.wait(RUN)
    err = run.error
    assert isinstance(err, InvalidSource), repr(err)
    assert exit_code(err) == 2
    assert "'no_such_topic' does not exist" in str(err) and kafka_server.bootstrap in str(err)


def _delete_before(server: ThrowawayKafka, topic: str, partition: int, offset: int) -> None:
    """Move the partition's log start to ``offset``, as retention does."""
    from confluent_kafka import TopicPartition

    admin = server.admin()
    futures = admin.delete_records([TopicPartition(topic, partition, offset)])
    for f in futures.values():
        f.result(timeout=30)


def test_records_deleted_before_they_were_read_fail_the_job_naming_them(
    spark: SparkSession, kafka_server: ThrowawayKafka, kafka_topic: Any, tmp_path: Path
) -> None:
    boot = kafka_server.bootstrap
    topic = kafka_topic(partitions=1)
    produce(boot, topic, range(30))
    _delete_before(kafka_server, topic, 0, 20)
    # The job starts at offset 5 (as one that read 0..4 and stopped): 5..19 are gone.
    src = {"starting_offsets": {topic: {0: 5}}}
    p = pipeline("ksrc_lost", boot, topic, tmp_path / "out", **src)
    run = BackgroundRun(pipeline=p, state_dir=tmp_path / "state", trigger=TRIGGER, spark=spark)
    run.wait(RUN)
    err = run.error
    assert isinstance(err, InvalidSource), repr(err)
    assert exit_code(err) == 2
    assert f"topic '{topic}' partition 0: offsets 5..19 were deleted" in str(err), str(err)
    assert file_sink_ids(tmp_path / "out") == {}

    # fail_on_data_loss=False: skipped ahead, with what was skipped counted in the offset.
    out2, state2 = tmp_path / "out2", tmp_path / "state2"
    jid = "ksrc_skip"
    p = pipeline(jid, boot, topic, out2, fail_on_data_loss=False, **src)
    run = BackgroundRun(pipeline=p, state_dir=state2, trigger=TRIGGER, spark=spark)
    try:
        wait_for("ids 20..29", lambda: holds(out2, range(20, 30)) or run.ended(), RUN)
        assert not run.ended(), run.error
        assert set(file_sink_ids(out2)) == set(range(20, 30))
        offsets = [f for f in (state2 / "checkpoint" / "offsets").iterdir() if f.name.isdigit()]
        assert any('"skipped": 15' in f.read_text() for f in offsets)
    finally:
        _stop_query(spark, jid)
        run.wait()


# drivers killed ---------------------------------------------------------------------------------
def tail(log: Path, lines: int = 40) -> str:
    try:
        text = log.read_text(errors="replace").splitlines()
    except OSError:
        return f"(no log at {log})"
    return f"--- last {lines} lines of {log} ---\n" + "\n".join(text[-lines:])


def test_a_driver_killed_at_protocol_steps_reads_each_record_once(
    kafka_server: ThrowawayKafka, kafka_topic: Any, tmp_path: Path
) -> None:
    """``stoker run`` drivers SIGKILLed by the fault points after epoch 1's prepare and
    before epoch 2's Spark commit (committed in the sinks, not in Spark's log): the next
    driver replays each from the logged offsets, and the sink holds every id once, aborted
    transactions' never."""
    boot = kafka_server.bootstrap
    topic = kafka_topic(partitions=3)
    produce(boot, topic, range(0, 600), partitions=3)
    tx = transactional(boot, f"{topic}-tx")
    in_txn(tx, topic, range(5000, 5100), 3, commit=False)
    produce(boot, topic, range(600, 1200), partitions=3)
    state, out = tmp_path / "state", tmp_path / "out"
    env = {
        "KSRC_BOOTSTRAP": boot,
        "KSRC_TOPIC": topic,
        "KSRC_OUT": str(out),
        "KSRC_PER_EPOCH": "200",
        "KSRC_JOB": "ksrc",
        "STOKER_FAULT": "",
    }
    args = ("-D", f"stoker.state_dir={state}")
    for k, fault in enumerate(("after_prepare:1", "before_spark_commit:2")):
        log = tmp_path / f"driver-{k}.log"
        proc = start_driver(
            APPS / "kafka_source_app.py", *args, env={**env, "STOKER_FAULT": fault}, log=log
        )
        try:
            rc = proc.wait(timeout=RUN)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            pytest.fail(f"driver with {fault} still running\n{tail(log)}")
        wait_group_gone(proc.pid)
        assert rc == -9, f"{fault}: rc {rc}\n{tail(log)}"
        step, _, epoch = fault.partition(":")
        assert f"injected crash at {step} epoch {epoch}" in log.read_text(errors="replace")

    log = tmp_path / "driver-last.log"
    proc = start_driver(APPS / "kafka_source_app.py", *args, env=env, log=log)
    try:
        produce(boot, topic, range(1200, 1500), partitions=3)  # while it runs

        def done() -> bool:
            if proc.poll() is not None:
                pytest.fail(f"driver ended (rc {proc.returncode})\n{tail(log)}")
            return holds(out, range(1500))

        wait_for(lambda: f"every id in the sink\n{tail(log)}", done, RUN)
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=RUN)
    finally:
        if proc.poll() is None:
            kill_group(proc)
    wait_group_gone(proc.pid)
    assert rc == 13, f"a SIGTERM suspends the job: rc {rc}\n{tail(log)}"
    exactly_once(file_sink_ids(out), 1500)
    assert not (out / "_staging").exists() or not list((out / "_staging").iterdir())
    st = open_store(state / "store.db")
    try:
        job = st.get_job(job_id("ksrc"))
        assert job.state == JobState.SUSPENDED, job
        recs = st.list_epochs(job.job_id, limit=10_000)
        assert all(e.state == EpochState.COMMITTED for e in recs), recs
        assert sum(e.rows_in or 0 for e in recs) == 1500
    finally:
        st.close()


def test_the_broker_killed_and_back_mid_run_loses_and_repeats_nothing(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The broker SIGKILLed while the job runs and started again on its log: the reader's
    requests and the tasks' fetches wait for it (within their bounds), nothing is lost or
    read twice."""
    from tests.kafka import ThrowawayKafka

    out, state = tmp_path / "out", tmp_path / "state"
    with ThrowawayKafka() as broker:
        boot = broker.bootstrap
        broker.create_topic("down", 2)
        produce(boot, "down", range(0, 200), partitions=2)
        jid = "ksrc_down"
        p = pipeline(jid, boot, "down", out, max_records_per_epoch=50)
        run = BackgroundRun(pipeline=p, state_dir=state, trigger=TRIGGER, spark=spark)
        try:
            wait_for("the first ids", lambda: file_sink_ids(out) or run.ended(), RUN)
            assert not run.ended(), run.error
            broker.stop(kill=True)
            broker.start()
            produce(boot, "down", range(200, 400), partitions=2)
            wait_for("ids 0..399", lambda: holds(out, range(400)) or run.ended(), RUN)
            assert not run.ended(), run.error
            exactly_once(file_sink_ids(out), 400)
        finally:
            _stop_query(spark, jid)
            run.wait()


def test_a_value_that_is_not_json_is_bad_input_naming_the_record(
    spark: SparkSession, kafka_server: ThrowawayKafka, kafka_topic: Any, tmp_path: Path
) -> None:
    boot = kafka_server.bootstrap
    topic = kafka_topic(partitions=1)
    produce(boot, topic, range(3))
    prod = Producer({"bootstrap.servers": boot})
    prod.produce(topic, b"not json {", partition=0)
    assert prod.flush(30) == 0
    p = pipeline("ksrc_badjson", boot, topic, tmp_path / "out")
    run = BackgroundRun(pipeline=p, state_dir=tmp_path / "state", trigger=TRIGGER, spark=spark)
    run.wait(RUN)
    err = run.error
    assert isinstance(err, InvalidSource), repr(err)
    assert exit_code(err) == 2
    want = f"kafka.value: topic '{topic}' partition 0 offset 3 holds no JSON: not json {{"
    assert str(err) == want, str(err)
