"""The Kafka examples as a user runs them (issue 42 item 6, issue 43 item 5): ``stoker run
examples/kafka_to_files.py``, ``kafka_to_postgres.py`` and ``kafka_to_delta.py`` against a real
broker, with
the settings the examples read from the environment. Each is killed with SIGKILL (its whole
process group) once epochs have committed, more orders are produced while it is down, and the
same command runs again: every order reaches the sink once. Then SIGTERM stops it gracefully
(exit 13, SUSPENDED)."""

from __future__ import annotations

import json
import os
import signal
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from tests.support import (
    REPO,
    exactly_once,
    file_sink_ids,
    kill_group,
    pg_ids,
    pg_prepared,
    stoker_cmd,
)
from tests.support.cli_runs import (
    LIGHT,
    RUN_TIMEOUT,
    SUSPENDED_EXIT,
    committed,
    driver,
    log_tail,
    wait_running,
)
from tests.support.sinks import delta_ids, delta_txn_versions

pytestmark = [pytest.mark.scenario, pytest.mark.timeout(1200)]

BEFORE, AFTER = 300, 200  # orders produced before the first run, and while the job is down


def produce(bootstrap: str, topic: str, ids: Iterable[int], partitions: int) -> None:
    """Orders ``{"order_id": n, "amount": n / 2}``, round robin over the partitions, acked."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for n in ids:
        value = json.dumps({"order_id": n, "amount": n / 2}).encode()
        p.produce(topic, value, key=str(n).encode(), partition=n % partitions)
    assert p.flush(60) == 0


def run_killed_and_again(
    example: str,
    job: str,
    env: dict[str, str],
    tmp_path: Path,
    produce_more: Callable[[], None],
    ids: Callable[[], Counter[int]],
) -> None:
    """Run 1 is SIGKILLed once an epoch has committed (the orders produced before it may take
    one epoch: the source then idles); more orders while it is down; run 2 goes
    on from the checkpoint until every order is in the sink, then stops on SIGTERM."""
    argv = stoker_cmd("run", str(REPO / "examples" / example), *LIGHT)
    state = tmp_path / ".stoker" / job  # the default state folder, under the cwd
    log = tmp_path / "driver.log"
    with driver(argv, tmp_path, log, env) as proc:
        wait_running(proc, "a committed epoch", lambda: committed(state, job) >= 1, log)
        kill_group(proc)
        assert proc.returncode == -signal.SIGKILL
    produce_more()
    total = BEFORE + AFTER
    with driver(argv, tmp_path, log, env) as proc:
        wait_running(
            proc,
            lambda: f"{total} orders in the sink (now {len(ids())})",
            lambda: len(ids()) >= total,
            log,
        )
        proc.send_signal(signal.SIGTERM)  # the driver only: a graceful stop
        assert proc.wait(RUN_TIMEOUT) == SUSPENDED_EXIT, log_tail(log)
    exactly_once(ids(), total)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STOKER_")}
    env.update(extra)
    return env


def test_kafka_to_files_killed_mid_run_writes_each_order_once(
    kafka_server: Any, kafka_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = kafka_topic(partitions=3)
    boot = kafka_server.bootstrap
    produce(boot, topic, range(BEFORE), 3)
    out = tmp_path / "out"
    env = _env(KAFKA=boot, TOPIC=topic, OUT=str(out))
    run_killed_and_again(
        "kafka_to_files.py",
        "kafka_to_files",
        env,
        tmp_path,
        lambda: produce(boot, topic, range(BEFORE, BEFORE + AFTER), 3),
        lambda: file_sink_ids(out, "order_id"),
    )


def test_kafka_to_postgres_killed_mid_run_writes_each_order_once(
    kafka_server: Any, kafka_topic: Callable[..., str], pg_dsn: str, tmp_path: Path
) -> None:
    topic = kafka_topic(partitions=3)
    boot = kafka_server.bootstrap
    produce(boot, topic, range(BEFORE), 3)
    env = _env(KAFKA=boot, TOPIC=topic, PG_DSN=pg_dsn, TABLE="orders")
    run_killed_and_again(
        "kafka_to_postgres.py",
        "kafka_to_postgres",
        env,
        tmp_path,
        lambda: produce(boot, topic, range(BEFORE, BEFORE + AFTER), 3),
        lambda: pg_ids(pg_dsn, "orders", "order_id"),
    )
    assert pg_prepared(pg_dsn) == []  # nothing left prepared


def test_kafka_to_delta_killed_mid_run_commits_each_epoch_once(
    kafka_server: Any, kafka_topic: Callable[..., str], tmp_path: Path
) -> None:
    """The table MERGEs on order_id, which would hide an epoch written twice in its rows: the
    Delta log is read too, each epoch's ``txn`` in exactly one commit."""
    topic = kafka_topic(partitions=3)
    boot = kafka_server.bootstrap
    produce(boot, topic, range(BEFORE), 3)
    table = tmp_path / "orders_delta"
    env = _env(KAFKA=boot, TOPIC=topic, TABLE=str(table))
    run_killed_and_again(
        "kafka_to_delta.py",
        "kafka_to_delta",
        env,
        tmp_path,
        lambda: produce(boot, topic, range(BEFORE, BEFORE + AFTER), 3),
        lambda: delta_ids(table, "order_id"),
    )
    epochs = delta_txn_versions(table)
    assert epochs and epochs == sorted(set(epochs)), epochs  # each epoch once, in order
    assert not list(table.glob("**/_stoker_*")), "staged files left"
