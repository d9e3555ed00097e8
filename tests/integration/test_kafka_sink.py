"""The Kafka sink (issue 42 item 3) against a real Apache Kafka broker (tests/kafka.py).

The first tests drive the sink's protocol directly, without Spark: parts staged as a Spark
task stages them (:func:`stoker.sinks._kafka_stage.write_part`), then committed, committed
again, recovered, fenced. The later ones run real ``stoker run`` drivers (generator -> Kafka
sink) SIGKILLed at the steps of the epoch protocol and of the sink's commit, with a task
retried, and with the broker SIGKILLed and started again in the middle of a commit. Every
test reads the topic back with a ``read_committed`` consumer: each id exactly once, in the
partition Kafka's Java client would have chosen for its key.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from stoker.errors import InvalidSink, SinkError
from stoker.sinks import descriptor_of, from_descriptor, kafka
from stoker.sinks._kafka_stage import StageTask, staged_files, write_part
from stoker.sinks.base import PreparedPart, SinkOwner
from stoker.store import open_store
from stoker.types import AttemptNo, Epoch, EpochState, JobId, JobState, TxnState, job_id
from tests.kafka import ThrowawayKafka
from tests.support import APPS, exactly_once, kill_group, start_driver, wait_for, wait_group_gone

pytestmark = [pytest.mark.timeout(1500)]

OWNER = SinkOwner(JobId("kjob"), "uid1")
RUN = 420.0  # a cold Spark driver on two shared cores


# helpers ---------------------------------------------------------------------------------------
def murmur2(data: bytes) -> int:
    """Kafka's Java ``Utils.murmur2`` (what its default partitioner hashes a key with)."""
    m, r = 0x5BD1E995, 24
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(length // 4):
        k = int.from_bytes(data[i * 4 : i * 4 + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    rest, at = length % 4, length & ~3
    if rest == 3:
        h ^= data[at + 2] << 16
    if rest >= 2:
        h ^= data[at + 1] << 8
    if rest >= 1:
        h ^= data[at]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h


def java_partition(key: bytes, partitions: int) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def read_all(bootstrap: str, topic: str, partitions: int, expected: int) -> list[Any]:
    """Every record a ``read_committed`` consumer sees in ``topic``: polled until ``expected``
    came and every partition reported its end (its last stable offset)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{topic}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    from confluent_kafka import OFFSET_BEGINNING

    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    seen: list[Any] = []
    at_end: set[int] = set()

    def drained() -> bool:
        msg = consumer.poll(0.2)
        while msg is not None:
            err = msg.error()
            if err is not None:
                assert err.code() == err._PARTITION_EOF, err
                at_end.add(int(msg.partition()))
            else:
                at_end.discard(int(msg.partition()))
                seen.append(msg)
            msg = consumer.poll(0)
        return len(seen) >= expected and len(at_end) == partitions

    try:
        wait_for(lambda: f"{expected} records in {topic} (got {len(seen)})", drained, 60, 0)
    finally:
        consumer.close()
    return seen


def check_records(msgs: list[Any], total: int, partitions: int) -> None:
    """Ids 0..total-1 each once, each in its key's Java-default partition."""
    ids = Counter(int(m.key()) for m in msgs)
    exactly_once(ids, total)
    wrong = [
        (m.key(), m.partition())
        for m in msgs
        if m.partition() != java_partition(m.key(), partitions)
    ]
    assert not wrong, f"records not in their key's murmur2 partition: {wrong[:5]}"
    assert all(m.value() == b"v" + m.key() for m in msgs)


def stage(sink_dir: Path, epoch: int, attempt: int, parts: list[range], task0: int = 0) -> dict:
    """Stage ``parts`` (ids of each partition) as Spark's tasks would: the recorded detail."""
    t = StageTask(str(sink_dir), OWNER.uid, epoch, attempt)
    recorded = []
    for i, ids in enumerate(parts):
        batch = pa.RecordBatch.from_pydict(
            {
                "key": pa.array([str(x).encode() for x in ids], pa.binary()),
                "value": pa.array([b"v%d" % x for x in ids], pa.binary()),
            }
        )
        name, rows, _ = write_part(t, i, task0 + i, iter([batch]))
        recorded.append(
            PreparedPart(name, i, task0 + i, 0, rows).to_json()  # type: ignore[arg-type]
        )
    return {"parts": recorded}


def opened_sink(bootstrap: str, topic: str, state: Path, **kw: Any) -> Any:
    sink = kafka(bootstrap, topic, **kw)
    sink.validate(OWNER)
    sink.open(OWNER, state)
    return sink


def folder_of(sink: Any) -> Path:
    return Path(sink._bound()[1])


# the protocol without Spark ------------------------------------------------------------------
def test_commit_publishes_once_and_again_publishes_nothing(
    kafka_server: ThrowawayKafka, kafka_topic: Callable[..., str], tmp_path: Path
) -> None:
    """Epoch 0 (three parts, one empty) and epoch 1 (two transactions: the transaction size is
    small) committed; each committed again, as a commit retried after a crash between Kafka's
    commit and the store's record is: nothing twice, the staging emptied, the marker read
    back as the newest epoch."""
    topic = kafka_topic(partitions=3)
    sink = opened_sink(kafka_server.bootstrap, topic, tmp_path)
    folder = folder_of(sink)
    d0 = stage(folder, 0, 1, [range(0, 40), range(40, 40), range(40, 100)])
    assert len(staged_files(folder, OWNER.uid)) == 2  # no file for the empty part
    sink.commit(Epoch(0), AttemptNo(1), d0)
    sink.commit(Epoch(0), AttemptNo(1), d0)
    assert staged_files(folder, OWNER.uid) == []
    sink.max_transaction_bytes = 1  # one transaction per part from here on
    sink._publisher = None
    d1 = stage(folder, 1, 1, [range(100, 150), range(150, 200)], task0=10)
    sink.commit(Epoch(1), AttemptNo(1), d1)
    sink.commit(Epoch(1), AttemptNo(1), d1)
    check_records(read_all(kafka_server.bootstrap, topic, 3, 200), 200, 3)
    assert sink.committed_epochs(OWNER) == [1]
    assert sink.committed_epochs(SinkOwner(JobId("kjob"), "other")) == []


def test_a_lost_part_is_an_error_and_recovery_removes_what_will_never_be_published(
    kafka_server: ThrowawayKafka, kafka_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = kafka_topic(partitions=2)
    sink = opened_sink(kafka_server.bootstrap, topic, tmp_path)
    folder = folder_of(sink)
    d0 = stage(folder, 0, 1, [range(0, 10), range(10, 20)])
    lost = folder / d0["parts"][1]["id"]
    lost.unlink()
    with pytest.raises(SinkError, match=r"parts \[1\] are gone"):
        sink.commit(Epoch(0), AttemptNo(1), d0)
    # Leftovers: epoch 0 decided for attempt 1 (its staged part stays: not published), a
    # stray copy of it by attempt 2, epoch 1 undecided, and attempt 3's part in flight.
    stage(folder, 0, 2, [range(0, 10)], task0=50)
    stage(folder, 1, 2, [range(20, 30)], task0=60)
    stage(folder, 2, 3, [range(30, 40)], task0=70)
    decided = {0: 1}
    done = sink.recover(lambda e: decided.get(int(e)), up_to=AttemptNo(2))  # type: ignore[arg-type,return-value]
    left = sorted((s.epoch, s.attempt) for s in staged_files(folder, OWNER.uid))
    assert left == [(0, 1), (2, 3)], left
    assert sorted(done.aborted) == [(0, 2), (1, 2)]


def test_a_zombie_producer_is_fenced(
    kafka_server: ThrowawayKafka, kafka_topic: Callable[..., str], tmp_path: Path
) -> None:
    """A producer of the sink's transactional id with a transaction open (a zombie attempt
    publishing late): the next commit fences it, its transaction never becomes visible, and
    its own commit fails."""
    topic = kafka_topic(partitions=2)
    sink = opened_sink(kafka_server.bootstrap, topic, tmp_path)
    zombie = Producer(
        {"bootstrap.servers": kafka_server.bootstrap, "transactional.id": sink.transactional_id}
    )
    zombie.init_transactions(30)
    zombie.begin_transaction()
    for i in range(1000, 1010):
        zombie.produce(topic, key=str(i).encode(), value=b"zombie")
    zombie.flush(30)
    sink.commit(Epoch(0), AttemptNo(2), stage(folder_of(sink), 0, 2, [range(0, 30)]))
    with pytest.raises(KafkaException) as fenced:
        zombie.commit_transaction(30)
    assert fenced.value.args[0].fatal(), fenced.value.args[0]
    check_records(read_all(kafka_server.bootstrap, topic, 2, 30), 30, 2)
    # The sink fenced in its turn (a newer producer of the id took over) stops committing.
    newer = Producer(
        {"bootstrap.servers": kafka_server.bootstrap, "transactional.id": sink.transactional_id}
    )
    newer.init_transactions(30)
    with pytest.raises(SinkError, match="fenced by a newer one"):
        sink.commit(Epoch(1), AttemptNo(2), stage(folder_of(sink), 1, 2, [range(30, 40)]))


def test_an_offset_of_someone_else_in_the_sink_group_publishes_nothing(
    kafka_server: ThrowawayKafka, kafka_topic: Callable[..., str], tmp_path: Path
) -> None:
    """Something else committed an offset to the sink's marker group: stoker cannot tell what
    it published, so it publishes nothing and says why (never "nothing published yet")."""
    topic = kafka_topic(partitions=1)
    sink = opened_sink(kafka_server.bootstrap, topic, tmp_path)
    other = Consumer(
        {"bootstrap.servers": kafka_server.bootstrap, "group.id": sink.transactional_id}
    )
    other.commit(offsets=[TopicPartition(topic, 0, 3, "not a marker")], asynchronous=False)
    other.close()
    with pytest.raises(SinkError, match="not this sink's marker"):
        sink.commit(Epoch(0), AttemptNo(1), stage(folder_of(sink), 0, 1, [range(0, 5)]))
    assert staged_files(folder_of(sink), OWNER.uid) != []  # kept for a commit once it is sorted


def test_secret_options_stay_out_of_the_descriptor_and_the_rebuilt_sink_commits(
    kafka_server: ThrowawayKafka, kafka_topic: Callable[..., str], tmp_path: Path
) -> None:
    """The janitor's way: the sink rebuilt from its descriptor (which holds no secret) gets
    them back from the 0600 file in the staging folder, and commits what was decided."""
    topic = kafka_topic(partitions=1)
    secret = "s3cr3t-Pa55"
    opts = {"sasl.password": secret, "client.id": "stoker-test"}
    sink = opened_sink(kafka_server.bootstrap, topic, tmp_path, options=opts)
    d = descriptor_of(sink)
    text = json.dumps(d)
    assert secret not in text and secret not in repr(sink) and secret not in sink.describe()
    assert d["secret_options"] == ["sasl.password"] and d["options"] == {"client.id": "stoker-test"}
    kept = folder_of(sink) / "client.secrets.json"
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    detail = stage(folder_of(sink), 0, 1, [range(0, 5)])
    rebuilt = from_descriptor(d)
    rebuilt.open(OWNER, tmp_path)
    assert rebuilt.options["sasl.password"] == secret  # type: ignore[attr-defined]
    rebuilt.commit(Epoch(0), AttemptNo(1), detail)
    check_records(read_all(kafka_server.bootstrap, topic, 1, 5), 5, 1)
    # The job run again without secrets keeps none; a sink rebuilt then cannot get them.
    opened_sink(kafka_server.bootstrap, topic, tmp_path, options={"client.id": "stoker-test"})
    assert not kept.exists()
    with pytest.raises(SinkError, match=r"sasl\.password") as gone:
        from_descriptor(d).open(OWNER, tmp_path)
    assert secret not in str(gone.value)


def test_bad_input_is_named(kafka_server: ThrowawayKafka, tmp_path: Path) -> None:
    with pytest.raises(InvalidSink, match="topic 'nope_missing' does not exist"):
        kafka(kafka_server.bootstrap, "nope_missing").validate(OWNER)
    with pytest.raises(InvalidSink, match=r"transactional\.id cannot be set"):
        kafka(kafka_server.bootstrap, "t", options={"transactional.id": "x"}).validate(OWNER)
    with pytest.raises(InvalidSink, match="not a Kafka topic name"):
        kafka(kafka_server.bootstrap, "a topic").validate(OWNER)
    with pytest.raises(InvalidSink, match="appends"):
        kafka(kafka_server.bootstrap, "t").accept_output_mode("complete")
    from tests.support import free_port

    with pytest.raises(SinkError, match=r"no Kafka broker answered at '127.0.0.1:\d+'"):
        kafka(f"127.0.0.1:{free_port()}", "t").validate(OWNER)


# real drivers ----------------------------------------------------------------------------------
JOB = "kids"


def kids_env(
    bootstrap: str, topic: str, total: int, per_epoch: int, **extra: str
) -> dict[str, str]:
    return {
        "KIDS_BOOTSTRAP": bootstrap,
        "KIDS_TOPIC": topic,
        "KIDS_TOTAL": str(total),
        "KIDS_PER_EPOCH": str(per_epoch),
        "KIDS_JOB": JOB,
        "STOKER_FAULT": "",  # never inherit a fault plan from the environment running pytest
        **extra,
    }


def tail(log: Path, lines: int = 40) -> str:
    try:
        text = log.read_text(errors="replace").splitlines()
    except OSError:
        return f"(no log at {log})"
    return f"--- last {lines} lines of {log} ---\n" + "\n".join(text[-lines:])


def start_kids(state: Path, env: dict[str, str], log: Path, *args: str) -> subprocess.Popen[bytes]:
    return start_driver(
        APPS / "kafka_ids_app.py", "-D", f"stoker.state_dir={state}", *args, env=env, log=log
    )


def finish(proc: subprocess.Popen[bytes], log: Path, expect: int) -> None:
    """Wait for the driver to end by itself with ``expect`` (-9: the injected SIGKILL)."""
    try:
        rc = proc.wait(timeout=RUN)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        pytest.fail(f"driver still running after {RUN:.0f}s\n{tail(log)}")
    wait_group_gone(proc.pid)
    assert rc == expect, f"driver ended with rc {rc}, expected {expect}\n{tail(log)}"


def staged_left(state: Path) -> list[str]:
    return sorted(p.name for p in (state / "kafka").glob("*/*.arrow"))


def assert_done(
    state: Path, bootstrap: str, topic: str, partitions: int, total: int, log: Path
) -> None:
    """Each id once for a read_committed consumer, in its key's partition, with its header;
    the job FINISHED, every epoch COMMITTED, no sink part PREPARED, nothing staged."""
    msgs = read_all(bootstrap, topic, partitions, total)
    try:
        check_records(msgs, total, partitions)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{tail(log)}") from None
    assert all(m.headers() == [("src", b"gen")] for m in msgs), msgs[0].headers()
    st = open_store(state / "store.db")
    try:
        job = st.get_job(job_id(JOB))
        assert job.state == JobState.FINISHED, f"{job.state}: {job.last_error}\n{tail(log)}"
        recs = st.list_epochs(job.job_id, limit=10_000)
        assert all(e.state == EpochState.COMMITTED for e in recs), recs
        assert st.list_txns(job.job_id, TxnState.PREPARED) == []
    finally:
        st.close()
    assert staged_left(state) == [], staged_left(state)


def test_generator_to_kafka_exactly_once_across_driver_kills(
    kafka_server: ThrowawayKafka, kafka_topic: Callable[..., str], tmp_path: Path
) -> None:
    """One job, one driver per step, each SIGKILLed (its whole process group) at its step of
    the next epoch: prepared and undecided; decided, nothing in Kafka; a transaction open in
    Kafka (its producer dies with it, the next one's fence aborts it); Kafka's transaction
    committed but not the store's record of it; the store's record written, the epoch not
    marked. A last driver runs to the end: every id once for a read_committed consumer."""
    topic = kafka_topic(partitions=3)
    state = tmp_path / "state"
    env = kids_env(kafka_server.bootstrap, topic, total=1400, per_epoch=200)
    steps = ["after_prepare", "after_decide", "kafka_in_txn", "kafka_after_txn", "after_commit"]
    for i, step in enumerate(steps, start=1):
        log = tmp_path / f"driver-{i}.log"
        finish(start_kids(state, {**env, "STOKER_FAULT": f"{step}:{i}"}, log), log, -9)
        assert f"injected crash at {step} epoch {i}" in log.read_text(errors="replace"), tail(log)
    log = tmp_path / "driver-last.log"
    finish(start_kids(state, env, log), log, 0)
    assert_done(state, kafka_server.bootstrap, topic, 3, 1400, log)


def kept_part(state: Path, sink: str, epoch: int, partition: int) -> dict[str, Any]:
    """The part of ``partition`` the store recorded for the decided attempt of ``epoch``."""
    st = open_store(state / "store.db")
    try:
        rec = st.get_epoch(job_id(JOB), Epoch(epoch))
        assert rec is not None and rec.decided_by is not None
        txn = st.get_txn(job_id(JOB), Epoch(epoch), sink, rec.decided_by)
        assert txn is not None
        parts = {int(p["partition"]): p for p in txn.detail["parts"]}
        return dict(parts[partition])
    finally:
        st.close()


def test_a_retried_task_and_a_commit_cut_between_transactions(
    kafka_server: ThrowawayKafka, kafka_topic: Callable[..., str], tmp_path: Path
) -> None:
    """``local[2,8]``: the first attempt of a task dies right after staging its part (its file
    stays, a stray); Spark's retry stages its own, which is the one published. One
    transaction per part: the driver is SIGKILLed after the first transaction of epoch 2, and
    the next attempt's recovery publishes only the parts after the marker."""
    topic = kafka_topic(partitions=2)
    state = tmp_path / "state"
    env = kids_env(kafka_server.bootstrap, topic, total=800, per_epoch=200, KIDS_MAX_TXN_BYTES="1")
    master = ("-D", "stoker.master=local[2,8]")
    log1, log2 = tmp_path / "driver-1.log", tmp_path / "driver-2.log"
    fault = "task_after_prepare:1:0,kafka_after_txn:2"
    finish(start_kids(state, {**env, "STOKER_FAULT": fault}, log1, *master), log1, -9)
    text = log1.read_text(errors="replace")
    assert "injected worker death after staging" in text, tail(log1)
    assert kept_part(state, f"kafka:{topic}", 1, 0)["task_attempt_number"] == 1
    assert all(kept_part(state, f"kafka:{topic}", 2, p)["rows"] > 0 for p in (0, 1)), (
        "epoch 2 should have two parts with rows, so that the kill cuts its commit in two"
    )
    finish(start_kids(state, env, log2, *master), log2, 0)
    assert_done(state, kafka_server.bootstrap, topic, 2, 800, log2)


def stopped(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] == "T"
    except OSError:
        return False


def test_the_broker_killed_and_started_again_in_the_middle_of_a_commit(
    tmp_path: Path,
) -> None:
    """A broker of the test's own: the driver is frozen (SIGSTOP of its group) inside epoch
    2's Kafka transaction, the broker SIGKILLed, the driver let go: its commit fails, it
    waits and retries with a new producer until the broker is back (started again on the
    same log), and publishes the epoch once."""
    with ThrowawayKafka(base_dir=tmp_path) as broker:
        broker.create_topic("events", 2)
        state = tmp_path / "state"
        # librdkafka waits for a dead transaction coordinator as long as the transaction may
        # last (the sink's default: 120 s), whatever timeout the call was given: 20 s here, so
        # that the failure and the retry come sooner; the path they take is the same.
        env = kids_env(
            broker.bootstrap, "events", total=1000, per_epoch=200, KIDS_TXN_TIMEOUT_MS="20000"
        )
        log = tmp_path / "driver.log"
        proc = start_kids(state, {**env, "STOKER_FAULT": "sigstop_kafka_in_txn:2"}, log)
        try:
            wait_for(
                lambda: f"the driver frozen in epoch 2's transaction\n{tail(log)}",
                lambda: (
                    "injected sigstop at kafka_in_txn epoch 2" in log.read_text(errors="replace")
                    and stopped(proc.pid)
                ),
                RUN,
                0.2,
            )
            broker.stop(kill=True)
            os.killpg(proc.pid, signal.SIGCONT)
            wait_for(
                lambda: f"the commit to fail and retry\n{tail(log)}",
                lambda: "publishing epoch 2 failed" in log.read_text(errors="replace"),
                RUN,
                0.5,
            )
            assert proc.poll() is None, tail(log)
            broker.start()
            finish(proc, log, 0)
        finally:
            if proc.poll() is None:
                kill_group(proc)
        assert_done(state, broker.bootstrap, "events", 2, 1000, log)


def test_output_columns_are_checked_before_anything_runs(spark: Any) -> None:
    """What ``check_output`` refuses (the job's check run, before it is recorded), naming the
    column and what to do; and what it takes: strings, binary, no key column."""
    df = spark.sql(
        "SELECT 1 AS n, 'a' AS s, CAST('b' AS BINARY) AS b, "
        "array(named_struct('key', 'h', 'value', 'x')) AS h, array(1) AS bad"
    )
    with pytest.raises(InvalidSink, match=r"column 'n' is int; the value must be string or binary"):
        kafka("x:1", "t", value="n").check_output(df)
    with pytest.raises(InvalidSink, match=r"no column 'k' for the records' keys \(columns: n, s"):
        kafka("x:1", "t", key="k", value="s").check_output(df)
    with pytest.raises(InvalidSink, match=r"headers must be array<struct<key:string"):
        kafka("x:1", "t", value="s", headers="bad").check_output(df)
    kafka("x:1", "t", value="s", headers="h").check_output(df)  # no 'key' column: no keys
    kafka("x:1", "t", key="s", value="b", headers="h").check_output(df)


def test_a_zombie_driver_is_fenced_in_kafka_by_the_attempt_that_took_over(
    kafka_server: ThrowawayKafka, kafka_topic: Callable[..., str], tmp_path: Path
) -> None:
    """Driver A is frozen (SIGSTOP of its group) inside epoch 2's Kafka transaction, the
    epoch decided; its lease lapses and driver B takes the job over: B's recovery publishes
    epoch 2 with a new producer of the sink's transactional id, which aborts A's open
    transaction. A, woken, is fenced (by the store's lease or by Kafka, whichever it meets
    first): it publishes nothing and ends. B runs to the end; every id once."""
    topic = kafka_topic(partitions=2)
    state = tmp_path / "state"
    env = kids_env(kafka_server.bootstrap, topic, total=1000, per_epoch=200)
    ttl = ("-D", "stoker.lease_ttl=5s")
    log_a, log_b = tmp_path / "driver-a.log", tmp_path / "driver-b.log"
    a = start_kids(state, {**env, "STOKER_FAULT": "sigstop_kafka_in_txn:2"}, log_a, *ttl)
    b: subprocess.Popen[bytes] | None = None
    try:
        wait_for(
            lambda: f"driver A frozen in epoch 2's transaction\n{tail(log_a)}",
            lambda: (
                "injected sigstop at kafka_in_txn epoch 2" in log_a.read_text(errors="replace")
                and stopped(a.pid)
            ),
            RUN,
            0.2,
        )
        st = open_store(state / "store.db")
        try:
            attempt_a = st.get_job(job_id(JOB)).current_attempt

            def lapsed() -> bool:
                lease = st.get_attempt(job_id(JOB), attempt_a).lease_expires_at
                return lease is not None and lease < time.time()

            wait_for("driver A's lease to lapse", lapsed, 120, 0.2)
            b = start_kids(state, env, log_b, *ttl)

            def b_published_epoch_2() -> bool:
                rec = st.get_epoch(job_id(JOB), Epoch(2))
                return (
                    st.get_job(job_id(JOB)).current_attempt > attempt_a
                    and rec is not None
                    and rec.state == EpochState.COMMITTED
                )

            wait_for(lambda: f"B to commit epoch 2\n{tail(log_b)}", b_published_epoch_2, RUN, 0.5)
        finally:
            st.close()
        os.killpg(a.pid, signal.SIGCONT)
        try:
            rc_a = a.wait(timeout=RUN)
        except subprocess.TimeoutExpired:
            pytest.fail(f"driver A still runs after it woke\n{tail(log_a)}")
        wait_group_gone(a.pid)
        assert rc_a not in (0, -9), f"driver A ended rc {rc_a}\n{tail(log_a)}"
        # Fenced twice over: whichever A meets first, the store (its lease is B's) or Kafka
        # (its producer's commit), it stops; nothing of its transaction is ever read (below).
        said = log_a.read_text(errors="replace")
        assert "fenced by a newer one" in said or "lost its lease" in said, tail(log_a, 80)
        finish(b, log_b, 0)
    finally:
        for proc in (a, b):
            if proc is not None and proc.poll() is None:
                kill_group(proc)
    assert_done(state, kafka_server.bootstrap, topic, 2, 1000, log_b)
